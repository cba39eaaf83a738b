package db

import (
	"fmt"
	"slices"

	"github.com/vmihailenco/msgpack/v5"
)

// A job record is encoded at every change and decoded at every read, most of
// them inside the shared write transaction, where msgpack's reflection (its
// omitempty walk above all) was a fifth of the commit loop's time in a drain
// (docs/performance.md). These two methods write and read exactly what the
// reflective codec does for jobRecord's tags — a map of the set fields in
// declaration order, omitempty fields left out when empty, integers at their
// fixed width — so the stored format is unchanged: the v1 golden file and
// TestJobRecordCodecMatchesReflection hold them to it byte for byte.

// EncodeMsgpack implements msgpack.CustomEncoder.
func (r *jobRecord) EncodeMsgpack(enc *msgpack.Encoder) error {
	n := 10 // v id q s a ma bu ra ca ua: always written
	for _, set := range [...]bool{r.Kind != "", len(r.Payload) > 0, r.Priority != 0,
		r.ClaimedBy != "", r.LeaseExpiresAt != 0, r.CompletedAt != 0, r.LastError != "",
		len(r.Errors) > 0, len(r.Result) > 0, len(r.Attestation) > 0, r.IdempotencyKey != ""} {
		if set {
			n++
		}
	}
	w := recordWriter{enc: enc}
	w.err = enc.EncodeMapLen(n)
	w.uint8("v", r.V)
	w.uint64("id", r.ID)
	w.string("q", r.Queue)
	if r.Kind != "" {
		w.string("k", r.Kind)
	}
	if len(r.Payload) > 0 {
		w.bytes("p", r.Payload)
	}
	if r.Priority != 0 {
		w.int64("pr", r.Priority)
	}
	w.string("s", string(r.State))
	w.uint64("a", r.Attempts)
	w.uint64("ma", r.MaxAttempts)
	w.uint64("bu", r.Budget)
	if r.ClaimedBy != "" {
		w.string("cb", r.ClaimedBy)
	}
	if r.LeaseExpiresAt != 0 {
		w.int64("lx", r.LeaseExpiresAt)
	}
	w.int64("ra", r.RunAt)
	w.int64("ca", r.CreatedAt)
	w.int64("ua", r.UpdatedAt)
	if r.CompletedAt != 0 {
		w.int64("co", r.CompletedAt)
	}
	if r.LastError != "" {
		w.string("le", r.LastError)
	}
	if len(r.Errors) > 0 {
		w.key("er")
		if w.err == nil {
			w.err = enc.EncodeArrayLen(len(r.Errors))
		}
		for i := range r.Errors {
			e := &r.Errors[i]
			if w.err == nil {
				w.err = enc.EncodeMapLen(3)
			}
			w.uint64("a", e.Attempt)
			w.int64("t", e.At)
			w.string("e", e.Error)
		}
	}
	if len(r.Result) > 0 {
		w.bytes("r", r.Result)
	}
	if len(r.Attestation) > 0 {
		w.bytes("at", r.Attestation)
	}
	if r.IdempotencyKey != "" {
		w.string("ik", r.IdempotencyKey)
	}
	return w.err
}

// recordWriter writes map entries and keeps the first error.
type recordWriter struct {
	enc *msgpack.Encoder
	err error
}

func (w *recordWriter) key(k string) {
	if w.err == nil {
		w.err = w.enc.EncodeString(k)
	}
}

func (w *recordWriter) string(k, v string) {
	if w.key(k); w.err == nil {
		w.err = w.enc.EncodeString(v)
	}
}

func (w *recordWriter) bytes(k string, v []byte) {
	if w.key(k); w.err == nil {
		w.err = w.enc.EncodeBytes(v)
	}
}

func (w *recordWriter) uint8(k string, v uint8) {
	if w.key(k); w.err == nil {
		w.err = w.enc.EncodeUint8(v)
	}
}

func (w *recordWriter) uint64(k string, v uint64) {
	if w.key(k); w.err == nil {
		w.err = w.enc.EncodeUint64(v)
	}
}

func (w *recordWriter) int64(k string, v int64) {
	if w.key(k); w.err == nil {
		w.err = w.enc.EncodeInt64(v)
	}
}

// DecodeMsgpack implements msgpack.CustomDecoder. Like the reflective
// decoder it takes the fields in any order, skips keys it does not know and
// reads nil as the zero record; unlike it, it refuses a version above 255
// instead of truncating it.
//
// It allocates nothing a corrupt header can inflate (see unmarshalRecord):
// strings are read by msgpack in pieces of at most 1 MiB, bytes by
// readRecordBytes, and the error list grows as its elements are read, so
// a false length fails at the end of the input.
func (r *jobRecord) DecodeMsgpack(dec *msgpack.Decoder) error {
	*r = jobRecord{}
	n, err := dec.DecodeMapLen()
	if err != nil {
		return err
	}
	var keyBuf [recordKeyMax]byte
	for range n {
		k, err := readRecordKey(dec, &keyBuf)
		if err != nil {
			return err
		}
		switch string(k) {
		case "v":
			var v uint64
			if v, err = dec.DecodeUint64(); err == nil && v > 255 {
				err = fmt.Errorf("msgpack: version %d", v)
			}
			r.V = uint8(v)
		case "id":
			r.ID, err = dec.DecodeUint64()
		case "q":
			r.Queue, err = dec.DecodeString()
		case "k":
			r.Kind, err = dec.DecodeString()
		case "p":
			r.Payload, err = readRecordBytes(dec)
		case "pr":
			r.Priority, err = dec.DecodeInt64()
		case "s":
			var s string
			s, err = dec.DecodeString()
			r.State = State(s)
		case "a":
			r.Attempts, err = dec.DecodeUint64()
		case "ma":
			r.MaxAttempts, err = dec.DecodeUint64()
		case "bu":
			r.Budget, err = dec.DecodeUint64()
		case "cb":
			r.ClaimedBy, err = dec.DecodeString()
		case "lx":
			r.LeaseExpiresAt, err = dec.DecodeInt64()
		case "ra":
			r.RunAt, err = dec.DecodeInt64()
		case "ca":
			r.CreatedAt, err = dec.DecodeInt64()
		case "ua":
			r.UpdatedAt, err = dec.DecodeInt64()
		case "co":
			r.CompletedAt, err = dec.DecodeInt64()
		case "le":
			r.LastError, err = dec.DecodeString()
		case "er":
			r.Errors, err = decodeErrorRecords(dec)
		case "r":
			r.Result, err = readRecordBytes(dec)
		case "at":
			r.Attestation, err = readRecordBytes(dec)
		case "ik":
			r.IdempotencyKey, err = dec.DecodeString()
		default:
			err = dec.Skip()
		}
		if err != nil {
			return err
		}
	}
	return nil
}

func decodeErrorRecords(dec *msgpack.Decoder) ([]errorRecord, error) {
	n, err := dec.DecodeArrayLen()
	if err != nil || n < 0 {
		return nil, err // n < 0: nil
	}
	// n is only claimed: grow with what is actually there.
	out := make([]errorRecord, 0, min(n, maxErrorsKept))
	var keyBuf [recordKeyMax]byte
	for range n {
		out = append(out, errorRecord{})
		e := &out[len(out)-1]
		m, err := dec.DecodeMapLen()
		if err != nil {
			return nil, err
		}
		for range m {
			k, err := readRecordKey(dec, &keyBuf)
			if err != nil {
				return nil, err
			}
			switch string(k) {
			case "a":
				e.Attempt, err = dec.DecodeUint64()
			case "t":
				e.At, err = dec.DecodeInt64()
			case "e":
				e.Error, err = dec.DecodeString()
			default:
				err = dec.Skip()
			}
			if err != nil {
				return nil, err
			}
		}
	}
	return out, nil
}

// recordKeyMax is the longest map key readRecordKey returns whole; every
// key of a record is shorter.
const recordKeyMax = 8

// readRecordKey reads a map key into buf without allocating. A longer key
// (no field of ours) is read through in small pieces and returned empty,
// which matches no field.
func readRecordKey(dec *msgpack.Decoder, buf *[recordKeyMax]byte) ([]byte, error) {
	n, err := dec.DecodeBytesLen()
	if err != nil || n <= 0 {
		return nil, err
	}
	if n <= len(buf) {
		err := dec.ReadFull(buf[:n])
		return buf[:n], err
	}
	for n > 0 {
		chunk := min(n, len(buf))
		if err := dec.ReadFull(buf[:chunk]); err != nil {
			return nil, err
		}
		n -= chunk
	}
	return nil, nil
}

// readRecordBytes reads a bin (or str) value. msgpack's DecodeBytes
// allocates the length its header claims before reading; this grows the
// slice only as the bytes arrive.
func readRecordBytes(dec *msgpack.Decoder) ([]byte, error) {
	n, err := dec.DecodeBytesLen()
	if err != nil || n < 0 {
		return nil, err
	}
	const firstRead = 64 << 10
	b := make([]byte, 0, min(n, firstRead))
	for len(b) < n {
		if len(b) == cap(b) {
			b = slices.Grow(b, min(n-len(b), cap(b)))
		}
		chunk := min(n-len(b), cap(b)-len(b))
		if err := dec.ReadFull(b[len(b) : len(b)+chunk]); err != nil {
			return nil, err
		}
		b = b[:len(b)+chunk]
	}
	return b, nil
}

// EncodeMsgpack implements msgpack.CustomEncoder for the record an audit
// hash covers (see sealAudit): the reflective codec's bytes with sorted
// details, which TestAuditRecordEncodingMatchesReflection holds it to. It
// sorts whatever the encoder's settings, so the hash never depends on them.
func (r *auditRecord) EncodeMsgpack(enc *msgpack.Encoder) error {
	n := 7 // seq time principal action subject token prev_hash
	if len(r.Details) > 0 {
		n++
	}
	if len(r.Hash) > 0 {
		n++
	}
	w := recordWriter{enc: enc}
	w.err = enc.EncodeMapLen(n)
	w.uint64("seq", r.Seq)
	w.int64("time", r.Time)
	w.string("principal", r.Principal)
	w.string("action", r.Action)
	w.string("subject", r.Subject)
	w.uint64("token", r.Token)
	if len(r.Details) > 0 {
		w.key("details")
		if w.err == nil {
			w.err = enc.EncodeMapLen(len(r.Details))
		}
		keys := make([]string, 0, len(r.Details))
		for k := range r.Details {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			w.string(k, r.Details[k])
		}
	}
	w.bytes("prev_hash", r.PrevHash)
	if len(r.Hash) > 0 {
		w.bytes("hash", r.Hash)
	}
	return w.err
}
