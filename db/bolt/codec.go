package bolt

import (
	"fmt"
	"slices"

	"github.com/fenceq/fenceq/db"
	"github.com/fenceq/fenceq/internal/msgrec"
	"github.com/vmihailenco/msgpack/v5"
	"github.com/vmihailenco/msgpack/v5/msgpcode"
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
	w := msgrec.NewWriter(enc)
	r.fields(&w)
	if w.StartWriting() {
		r.fields(&w)
	}
	return w.Err()
}

// fields lists the record's map entries in declaration order, leaving out
// the omitempty ones that are empty.
func (r *jobRecord) fields(w *msgrec.Writer) {
	msgrec.Field(w, "v", r.V, msgrec.Uint8)
	msgrec.Field(w, "id", r.ID, msgrec.Uint64)
	msgrec.Field(w, "q", r.Queue, msgrec.String)
	if r.Kind != "" {
		msgrec.Field(w, "k", r.Kind, msgrec.String)
	}
	if len(r.Payload) > 0 {
		msgrec.Field(w, "p", r.Payload, msgrec.Bytes)
	}
	if r.Priority != 0 {
		msgrec.Field(w, "pr", r.Priority, msgrec.Int64)
	}
	msgrec.Field(w, "s", string(r.State), msgrec.String)
	msgrec.Field(w, "a", r.Attempts, msgrec.Uint64)
	msgrec.Field(w, "ma", r.MaxAttempts, msgrec.Uint64)
	msgrec.Field(w, "bu", r.Budget, msgrec.Uint64)
	if r.ClaimedBy != "" {
		msgrec.Field(w, "cb", r.ClaimedBy, msgrec.String)
	}
	if r.LeaseExpiresAt != 0 {
		msgrec.Field(w, "lx", r.LeaseExpiresAt, msgrec.Int64)
	}
	msgrec.Field(w, "ra", r.RunAt, msgrec.Int64)
	msgrec.Field(w, "ca", r.CreatedAt, msgrec.Int64)
	msgrec.Field(w, "ua", r.UpdatedAt, msgrec.Int64)
	if r.CompletedAt != 0 {
		msgrec.Field(w, "co", r.CompletedAt, msgrec.Int64)
	}
	if r.LastError != "" {
		msgrec.Field(w, "le", r.LastError, msgrec.String)
	}
	if len(r.Errors) > 0 {
		msgrec.Field(w, "er", r.Errors, encodeErrorRecords)
	}
	if len(r.Result) > 0 {
		msgrec.Field(w, "r", r.Result, msgrec.Bytes)
	}
	if len(r.Attestation) > 0 {
		msgrec.Field(w, "at", r.Attestation, msgrec.Bytes)
	}
	if r.IdempotencyKey != "" {
		msgrec.Field(w, "ik", r.IdempotencyKey, msgrec.String)
	}
	if r.Schedule != "" {
		msgrec.Field(w, "sc", r.Schedule, msgrec.String)
	}
	if r.ScheduledFor != 0 {
		msgrec.Field(w, "sf", r.ScheduledFor, msgrec.Int64)
	}
	if r.Backfilled {
		msgrec.Field(w, "bf", r.Backfilled, (*msgpack.Encoder).EncodeBool)
	}
}

func encodeErrorRecords(enc *msgpack.Encoder, errs []errorRecord) error {
	err := enc.EncodeArrayLen(len(errs))
	for i := 0; i < len(errs) && err == nil; i++ {
		err = encodeErrorRecord(enc, &errs[i])
	}
	return err
}

func encodeErrorRecord(enc *msgpack.Encoder, e *errorRecord) error {
	w := msgrec.NewWriter(enc)
	errorRecordFields(&w, e)
	if w.StartWriting() {
		errorRecordFields(&w, e)
	}
	return w.Err()
}

func errorRecordFields(w *msgrec.Writer, e *errorRecord) {
	msgrec.Field(w, "a", e.Attempt, msgrec.Uint64)
	msgrec.Field(w, "t", e.At, msgrec.Int64)
	msgrec.Field(w, "e", e.Error, msgrec.String)
}

// DecodeMsgpack implements msgpack.CustomDecoder. Like the reflective
// decoder it takes the fields in any order, skips keys it does not know and
// reads nil as the zero record; unlike it, it refuses a version above 255
// instead of truncating it.
//
// It allocates nothing a corrupt header can inflate (see msgrec.Unmarshal):
// short strings are read by msgpack, long ones (str32) and bytes by
// readRecordBytes, and the error list grows as its elements are read, so
// a false length fails at the end of the input, and the decoder that read
// it is not pooled again with what it grew (msgrec.Decode, via decodeJob).
func (r *jobRecord) DecodeMsgpack(dec *msgpack.Decoder) error {
	*r = jobRecord{}
	n, err := msgrec.MapLen(dec)
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
			r.Queue, err = decodeString(dec)
		case "k":
			r.Kind, err = decodeString(dec)
		case "p":
			r.Payload, err = readRecordBytes(dec)
		case "pr":
			r.Priority, err = dec.DecodeInt64()
		case "s":
			var s string
			s, err = decodeString(dec)
			r.State = db.State(s)
		case "a":
			r.Attempts, err = dec.DecodeUint64()
		case "ma":
			r.MaxAttempts, err = dec.DecodeUint64()
		case "bu":
			r.Budget, err = dec.DecodeUint64()
		case "cb":
			r.ClaimedBy, err = decodeString(dec)
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
			r.LastError, err = decodeString(dec)
		case "er":
			r.Errors, err = decodeErrorRecords(dec, &keyBuf)
		case "r":
			r.Result, err = readRecordBytes(dec)
		case "at":
			r.Attestation, err = readRecordBytes(dec)
		case "ik":
			r.IdempotencyKey, err = decodeString(dec)
		case "sc":
			r.Schedule, err = decodeString(dec)
		case "sf":
			r.ScheduledFor, err = dec.DecodeInt64()
		case "bf":
			r.Backfilled, err = dec.DecodeBool()
		default:
			err = msgrec.Skip(dec)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

func decodeErrorRecords(dec *msgpack.Decoder, keyBuf *[recordKeyMax]byte) ([]errorRecord, error) {
	n, err := msgrec.ArrayLen(dec)
	if err != nil || n < 0 {
		return nil, err // n < 0: nil
	}
	// n is only claimed: grow with what is actually there.
	out := make([]errorRecord, 0, min(n, db.MaxErrorsKept))
	for range n {
		out = append(out, errorRecord{})
		e := &out[len(out)-1]
		m, err := msgrec.MapLen(dec)
		if err != nil {
			return nil, err
		}
		for range m {
			k, err := readRecordKey(dec, keyBuf)
			if err != nil {
				return nil, err
			}
			switch string(k) {
			case "a":
				e.Attempt, err = dec.DecodeUint64()
			case "t":
				e.At, err = dec.DecodeInt64()
			case "e":
				e.Error, err = decodeString(dec)
			default:
				err = msgrec.Skip(dec)
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

// readRecordKey reads a map key into buf, which one decode reuses for all
// its keys instead of allocating a string for each. A longer key
// (no field of ours) is read through and returned empty, which matches no
// field.
func readRecordKey(dec *msgpack.Decoder, buf *[recordKeyMax]byte) ([]byte, error) {
	n, err := msgrec.BytesLen(dec)
	if err != nil || n <= 0 {
		return nil, err
	}
	if n > len(buf) {
		_, err := readArrivingBytes(dec, n)
		return nil, err
	}
	err = dec.ReadFull(buf[:n])
	return buf[:n], err
}

// readRecordBytes reads a bin (or str) value. msgpack's DecodeBytes
// allocates the length its header claims before reading; this grows the
// slice only as the bytes arrive (readArrivingBytes).
func readRecordBytes(dec *msgpack.Decoder) ([]byte, error) {
	n, err := msgrec.BytesLen(dec)
	if err != nil || n < 0 {
		return nil, err
	}
	return readArrivingBytes(dec, n)
}

// decodeString is msgpack's DecodeString, but a str32 (or bin32) header
// is read by readRecordBytes: its length may be read as negative on a
// 32-bit platform (msgrec.BytesLen), and its bytes arrive before they are
// allocated. Shorter headers (at most 65535 bytes) go to msgpack.
func decodeString(dec *msgpack.Decoder) (string, error) {
	c, err := dec.PeekCode()
	if err != nil {
		return "", err
	}
	if c != msgpcode.Str32 && c != msgpcode.Bin32 {
		return dec.DecodeString()
	}
	b, err := readRecordBytes(dec)
	return string(b), err
}

// readArrivingBytes reads the n bytes a header claimed, allocating at most
// 64 KiB ahead of those actually read.
func readArrivingBytes(dec *msgpack.Decoder, n int) ([]byte, error) {
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
