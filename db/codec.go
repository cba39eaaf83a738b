package db

import (
	"fmt"
	"maps"
	"slices"

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
	w := recordWriter{enc: enc, counting: true}
	r.fields(&w)
	if w.startWriting() {
		r.fields(&w)
	}
	return w.err
}

// fields lists the record's map entries in declaration order, leaving out
// the omitempty ones that are empty.
func (r *jobRecord) fields(w *recordWriter) {
	field(w, "v", r.V, encUint8)
	field(w, "id", r.ID, encUint64)
	field(w, "q", r.Queue, encString)
	if r.Kind != "" {
		field(w, "k", r.Kind, encString)
	}
	if len(r.Payload) > 0 {
		field(w, "p", r.Payload, encBytes)
	}
	if r.Priority != 0 {
		field(w, "pr", r.Priority, encInt64)
	}
	field(w, "s", string(r.State), encString)
	field(w, "a", r.Attempts, encUint64)
	field(w, "ma", r.MaxAttempts, encUint64)
	field(w, "bu", r.Budget, encUint64)
	if r.ClaimedBy != "" {
		field(w, "cb", r.ClaimedBy, encString)
	}
	if r.LeaseExpiresAt != 0 {
		field(w, "lx", r.LeaseExpiresAt, encInt64)
	}
	field(w, "ra", r.RunAt, encInt64)
	field(w, "ca", r.CreatedAt, encInt64)
	field(w, "ua", r.UpdatedAt, encInt64)
	if r.CompletedAt != 0 {
		field(w, "co", r.CompletedAt, encInt64)
	}
	if r.LastError != "" {
		field(w, "le", r.LastError, encString)
	}
	if len(r.Errors) > 0 {
		field(w, "er", r.Errors, encodeErrorRecords)
	}
	if len(r.Result) > 0 {
		field(w, "r", r.Result, encBytes)
	}
	if len(r.Attestation) > 0 {
		field(w, "at", r.Attestation, encBytes)
	}
	if r.IdempotencyKey != "" {
		field(w, "ik", r.IdempotencyKey, encString)
	}
}

func encodeErrorRecords(enc *msgpack.Encoder, errs []errorRecord) error {
	err := enc.EncodeArrayLen(len(errs))
	for i := 0; i < len(errs) && err == nil; i++ {
		err = errs[i].encode(enc)
	}
	return err
}

func (e *errorRecord) encode(enc *msgpack.Encoder) error {
	w := recordWriter{enc: enc, counting: true}
	e.fields(&w)
	if w.startWriting() {
		e.fields(&w)
	}
	return w.err
}

func (e *errorRecord) fields(w *recordWriter) {
	field(w, "a", e.Attempt, encUint64)
	field(w, "t", e.At, encInt64)
	field(w, "e", e.Error, encString)
}

// recordWriter is what a record's field list writes to: a first pass
// counts the entries (the map header comes first), a second writes them.
// Each record runs the two passes itself, with direct calls: through an
// interface the writer would move to the heap at every encoding.
type recordWriter struct {
	enc      *msgpack.Encoder
	counting bool
	n        int
	err      error // the first error of the writing pass
}

// startWriting ends the counting pass and writes the map header.
func (w *recordWriter) startWriting() bool {
	w.counting = false
	w.err = w.enc.EncodeMapLen(w.n)
	return w.err == nil
}

// field writes the entry k: v (or counts it) with the encoder's method for
// v's type, the one msgpack's reflection uses for it.
func field[T any](w *recordWriter, k string, v T, encode func(*msgpack.Encoder, T) error) {
	if w.counting {
		w.n++
		return
	}
	if w.err == nil {
		w.err = w.enc.EncodeString(k)
	}
	if w.err == nil {
		w.err = encode(w.enc, v)
	}
}

// The encoder methods of the field types, at their fixed widths.
var (
	encString = (*msgpack.Encoder).EncodeString
	encBytes  = (*msgpack.Encoder).EncodeBytes
	encUint8  = (*msgpack.Encoder).EncodeUint8
	encUint64 = (*msgpack.Encoder).EncodeUint64
	encInt64  = (*msgpack.Encoder).EncodeInt64
)

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
			r.Errors, err = decodeErrorRecords(dec, &keyBuf)
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

func decodeErrorRecords(dec *msgpack.Decoder, keyBuf *[recordKeyMax]byte) ([]errorRecord, error) {
	n, err := dec.DecodeArrayLen()
	if err != nil || n < 0 {
		return nil, err // n < 0: nil
	}
	// n is only claimed: grow with what is actually there.
	out := make([]errorRecord, 0, min(n, maxErrorsKept))
	for range n {
		out = append(out, errorRecord{})
		e := &out[len(out)-1]
		m, err := dec.DecodeMapLen()
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

// readRecordKey reads a map key into buf, which one decode reuses for all
// its keys instead of allocating a string for each. A longer key
// (no field of ours) is read through and returned empty, which matches no
// field.
func readRecordKey(dec *msgpack.Decoder, buf *[recordKeyMax]byte) ([]byte, error) {
	n, err := decodeBytesLen(dec)
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
	n, err := decodeBytesLen(dec)
	if err != nil || n < 0 {
		return nil, err
	}
	return readArrivingBytes(dec, n)
}

// decodeBytesLen is msgpack's DecodeBytesLen made safe on 32-bit
// platforms, where it turns a length of 2 GiB or more into a negative int
// and 4 GiB-1 into -1, its answer for nil: a corrupt header would then
// read as an absent value instead of failing. No record of ours is 2 GiB.
func decodeBytesLen(dec *msgpack.Decoder) (int, error) {
	c, err := dec.PeekCode()
	if err != nil {
		return 0, err
	}
	n, err := dec.DecodeBytesLen()
	if err == nil && n < 0 && c != msgpcode.Nil {
		return 0, fmt.Errorf("%w: a length of 2 GiB or more", ErrCorrupt)
	}
	return n, err
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

// EncodeMsgpack implements msgpack.CustomEncoder for the record an audit
// hash covers (see sealAudit): the reflective codec's bytes with sorted
// details, which TestAuditRecordEncodingMatchesReflection holds it to. It
// sorts whatever the encoder's settings, so the hash never depends on them.
func (r *auditRecord) EncodeMsgpack(enc *msgpack.Encoder) error {
	w := recordWriter{enc: enc, counting: true}
	r.fields(&w)
	if w.startWriting() {
		r.fields(&w)
	}
	return w.err
}

func (r *auditRecord) fields(w *recordWriter) {
	field(w, "seq", r.Seq, encUint64)
	field(w, "time", r.Time, encInt64)
	field(w, "principal", r.Principal, encString)
	field(w, "action", r.Action, encString)
	field(w, "subject", r.Subject, encString)
	field(w, "token", r.Token, encUint64)
	if len(r.Details) > 0 {
		field(w, "details", r.Details, encodeSortedDetails)
	}
	field(w, "prev_hash", r.PrevHash, encBytes)
	if len(r.Hash) > 0 {
		field(w, "hash", r.Hash, encBytes)
	}
}

// sortedDetails lists a details map's entries in key order.
type sortedDetails struct {
	keys []string
	m    map[string]string
}

func encodeSortedDetails(enc *msgpack.Encoder, details map[string]string) error {
	d := sortedDetails{keys: slices.Sorted(maps.Keys(details)), m: details}
	w := recordWriter{enc: enc, counting: true}
	d.fields(&w)
	if w.startWriting() {
		d.fields(&w)
	}
	return w.err
}

func (d *sortedDetails) fields(w *recordWriter) {
	for _, k := range d.keys {
		field(w, k, d.m[k], encString)
	}
}
