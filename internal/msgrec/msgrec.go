// Package msgrec writes a record as a msgpack map with direct calls, the
// bytes msgpack's reflective encoder gives for the same fields: a record
// lists its entries once, and Writer runs that list twice (a counting pass,
// for the map header, then the writing pass). It is shared by the audit
// record's canonical encoding (package db) and the bbolt engine's records.
package msgrec

import "github.com/vmihailenco/msgpack/v5"

// Writer is what a record's field list writes to. Each record runs the two
// passes itself, with direct calls: through an interface the writer would
// move to the heap at every encoding.
type Writer struct {
	enc      *msgpack.Encoder
	counting bool
	n        int
	err      error // the first error of the writing pass
}

// NewWriter returns a Writer in its counting pass.
func NewWriter(enc *msgpack.Encoder) Writer { return Writer{enc: enc, counting: true} }

// StartWriting ends the counting pass and writes the map header; it
// reports whether the writing pass should run.
func (w *Writer) StartWriting() bool {
	w.counting = false
	w.err = w.enc.EncodeMapLen(w.n)
	return w.err == nil
}

// Err returns the first error of the writing pass.
func (w *Writer) Err() error { return w.err }

// Field writes the entry k: v (or counts it) with the encoder's method for
// v's type, the one msgpack's reflection uses for it.
func Field[T any](w *Writer, k string, v T, encode func(*msgpack.Encoder, T) error) {
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
	String = (*msgpack.Encoder).EncodeString
	Bytes  = (*msgpack.Encoder).EncodeBytes
	Uint8  = (*msgpack.Encoder).EncodeUint8
	Uint64 = (*msgpack.Encoder).EncodeUint64
	Int64  = (*msgpack.Encoder).EncodeInt64
)
