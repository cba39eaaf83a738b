package msgrec

import (
	"errors"
	"strconv"

	"github.com/vmihailenco/msgpack/v5"
	"github.com/vmihailenco/msgpack/v5/msgpcode"
)

// ErrTooLong is a length header of 2 GiB or more. No record is that large.
var ErrTooLong = errors.New("msgpack: a length of 2 GiB or more")

// BytesLen is msgpack's DecodeBytesLen, refusing what a 32-bit platform
// would read as a negative length: msgpack turns a length of 2 GiB or
// more into a negative int there, and 4 GiB-1 into -1, its answer for nil,
// so a corrupt header would read as an absent value instead of failing.
func BytesLen(dec *msgpack.Decoder) (int, error) {
	return guardLen(dec, dec.DecodeBytesLen)
}

// ArrayLen is msgpack's DecodeArrayLen, refusing what BytesLen refuses.
func ArrayLen(dec *msgpack.Decoder) (int, error) {
	return guardLen(dec, dec.DecodeArrayLen)
}

// MapLen is msgpack's DecodeMapLen, refusing what BytesLen refuses.
func MapLen(dec *msgpack.Decoder) (int, error) {
	return guardLen(dec, dec.DecodeMapLen)
}

func guardLen(dec *msgpack.Decoder, decodeLen func() (int, error)) (int, error) {
	if strconv.IntSize == 64 {
		return decodeLen() // an int holds every 32-bit length
	}
	c, err := dec.PeekCode()
	if err != nil {
		return 0, err
	}
	n, err := decodeLen()
	if err == nil && n < 0 && c != msgpcode.Nil {
		return 0, ErrTooLong
	}
	return n, err
}

// Skip reads one value whole, as msgpack's Skip does, but refuses a length
// of 2 GiB or more (ErrTooLong). On 32-bit platforms msgpack v5.4.1's Skip
// takes a string or bin of such a length as empty and goes on reading
// inside it, and panics on such an ext; there Skip walks arrays and maps
// itself and reads 32-bit lengths itself, the only headers that can claim
// that much. On 64-bit platforms, where an int holds every 32-bit length,
// it is msgpack's Skip.
func Skip(dec *msgpack.Decoder) error {
	if strconv.IntSize == 64 {
		return dec.Skip()
	}
	c, err := dec.PeekCode()
	if err != nil {
		return err
	}
	var n int
	switch {
	case c == msgpcode.Str32 || c == msgpcode.Bin32:
		if n, err = BytesLen(dec); err != nil {
			return err
		}
		return discard(dec, n)
	case c == msgpcode.Ext32:
		if _, n, err = dec.DecodeExtHeader(); err != nil {
			return err
		}
		if n < 0 {
			return ErrTooLong
		}
		return discard(dec, n)
	case msgpcode.IsFixedArray(c) || c == msgpcode.Array16 || c == msgpcode.Array32:
		if n, err = ArrayLen(dec); err != nil {
			return err
		}
	case msgpcode.IsFixedMap(c) || c == msgpcode.Map16 || c == msgpcode.Map32:
		if n, err = MapLen(dec); err != nil {
			return err
		}
		if n > 1<<30 {
			return ErrTooLong // twice that, keys and values, is no int
		}
		n *= 2
	default:
		return dec.Skip() // a fixed size, nil, or a length below 64 KiB
	}
	for range n {
		if err := Skip(dec); err != nil {
			return err
		}
	}
	return nil
}

// discard reads n bytes and drops them, allocating at most 64 KiB however
// many bytes are claimed.
func discard(dec *msgpack.Decoder, n int) error {
	if n <= 0 {
		return nil
	}
	buf := make([]byte, min(n, 64<<10))
	for n > 0 {
		k := min(n, len(buf))
		if err := dec.ReadFull(buf[:k]); err != nil {
			return err
		}
		n -= k
	}
	return nil
}
