package msgrec

import (
	"bytes"

	"github.com/vmihailenco/msgpack/v5"
)

// Decode runs decode on a decoder reading b. The decoder is msgpack's
// pooled one, and it goes back to the pool only when decode succeeded.
//
// msgpack v5.4.1 keeps in the decoder the buffer of a read that failed
// (readNGrow grows it by 1 MiB towards the claimed length, then the read
// hits the end of b), and its pool keeps the decoder with that buffer. A
// stored value whose header claims gigabytes, decoded again and again,
// grew the pooled buffers by a mebibyte or more a time, each decode
// copying what the last one left: 15 GB of heap after 200 decodes of one
// 60-byte record (found by fuzzing FuzzDecodeJob).
// TestDecode_AFailedDecodeLeavesNothingInThePool holds it. After a
// success every length read was at most len(b), and so is the buffer kept.
func Decode(b []byte, decode func(*msgpack.Decoder) error) error {
	dec := msgpack.GetDecoder()
	var rd bytes.Reader
	rd.Reset(b)
	dec.Reset(&rd)
	err := decode(dec)
	if err == nil {
		msgpack.PutDecoder(dec)
	}
	return err
}

// Unmarshal decodes b into v with msgpack's reflection, once Skip has
// walked b whole. msgpack v5.4.1 allocates a slice or map as large as its
// header claims (its allocation limit check is inverted), so a corrupt
// header of a few bytes could ask for gigabytes; after a successful walk
// every claimed length is bounded by len(b), and none is read as negative
// on a 32-bit platform.
func Unmarshal(b []byte, v any) error {
	if err := Decode(b, Skip); err != nil {
		return err
	}
	return msgpack.Unmarshal(b, v)
}
