package msgrec

import (
	"bytes"
	"runtime"
	"testing"

	"github.com/vmihailenco/msgpack/v5"
)

// A value whose header claims nearly 2 GiB (what a 32-bit int holds),
// decoded again and again, costs each time what it cost the first time:
// the buffer a failed read grew is not kept for the next decode. Under msgpack v5.4.1's own pooling the
// allocation of a call grew by a mebibyte or more with every call (88 MB
// at the 50th, 1.6 GB at the 150th).
func TestDecode_AFailedDecodeLeavesNothingInThePool(t *testing.T) {
	claim := []byte{0xdb, 0x7f, 0xff, 0xff, 0xbf, 'a', 'b', 'c'} // str32 of 2 GiB - 65 bytes, then 3
	wrapped := append([]byte{0x81, 0xa1, 'q'}, claim...)         // {"q": that}
	cases := []struct {
		name   string
		decode func() error
	}{
		{"Decode", func() error {
			return Decode(claim, func(dec *msgpack.Decoder) error { _, err := dec.DecodeString(); return err })
		}},
		{"Unmarshal", func() error {
			var v struct {
				Q string `msgpack:"q"`
			}
			return Unmarshal(wrapped, &v)
		}},
	}
	const calls, perCall = 60, 4 << 20
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var worst uint64
			for i := range calls {
				var before, after runtime.MemStats
				runtime.ReadMemStats(&before)
				if err := tc.decode(); err == nil {
					t.Fatalf("call %d: a 2 GiB string in %d bytes decoded with no error", i, len(claim))
				}
				runtime.ReadMemStats(&after)
				worst = max(worst, after.TotalAlloc-before.TotalAlloc)
			}
			if worst > perCall {
				t.Errorf("the costliest of %d failed decodes allocated %d bytes, want at most %d", calls, worst, perCall)
			}
		})
	}
}

// A value decoded whole goes back with its decoder, which the next decode
// reuses: what Decode keeps is bounded by what it read.
func TestDecode_DecodesAndUnmarshals(t *testing.T) {
	b, err := msgpack.Marshal(map[string]string{"q": "mail"})
	if err != nil {
		t.Fatal(err)
	}
	var v struct {
		Q string `msgpack:"q"`
	}
	if err := Unmarshal(b, &v); err != nil || v.Q != "mail" {
		t.Fatalf("Unmarshal() = %+v, %v; want q mail", v, err)
	}
	var n int
	err = Decode(b, func(dec *msgpack.Decoder) (err error) { n, err = dec.DecodeMapLen(); return err })
	if err != nil || n != 1 {
		t.Fatalf("Decode(map len) = %d, %v; want 1", n, err)
	}
}

// A length of 2 GiB or more is refused on every platform. On 32-bit ones
// msgpack v5.4.1 reads it as a negative int: Skip then took a string of
// that length as empty and went on reading inside it (so Unmarshal read a
// corrupt record as a different, whole one), and panicked on such an ext
// (a slice of negative length). .ci/qemu.sh runs this under armv7.
func TestUnmarshal_RefusesALengthOf2GiBOrMore(t *testing.T) {
	type rec struct {
		Q string `msgpack:"q"`
		N int    `msgpack:"n"`
	}
	// {"q": str32 header claiming 2^32-1 bytes, then what would read as
	// "n": 7 if that header were taken as an empty string}
	tail := []byte{0xa1, 'n', 0x07}
	cases := map[string][]byte{
		"str32":   append([]byte{0x82, 0xa1, 'q', 0xdb, 0xff, 0xff, 0xff, 0xff}, tail...),
		"str32-2": append([]byte{0x82, 0xa1, 'q', 0xdb, 0x80, 0x00, 0x00, 0x00}, tail...),
		"bin32":   append([]byte{0x82, 0xa1, 'x', 0xc6, 0x80, 0x00, 0x00, 0x01}, tail...),
		"ext32":   append([]byte{0x82, 0xa1, 'x', 0xc9, 0xff, 0xff, 0xff, 0xff, 0x05}, tail...),
		"array32": append([]byte{0x82, 0xa1, 'x', 0xdd, 0x80, 0x00, 0x00, 0x00}, tail...),
		"map32":   append([]byte{0x82, 0xa1, 'x', 0xdf, 0x80, 0x00, 0x00, 0x00}, tail...),
	}
	for name, b := range cases {
		t.Run(name, func(t *testing.T) {
			var v rec
			if err := Unmarshal(b, &v); err == nil {
				t.Fatalf("Unmarshal(% x) = %+v, nil; want an error", b, v)
			}
			if err := Decode(b, Skip); err == nil {
				t.Fatalf("Skip(% x) = nil; want an error", b)
			}
		})
	}
	// What is not corrupt still decodes, ext and containers included.
	good, err := msgpack.Marshal(map[string]any{"q": "mail", "n": 7, "x": []any{map[string]any{"b": []byte("xy")}, nil, 1.5}})
	if err != nil {
		t.Fatal(err)
	}
	var v rec
	if err := Unmarshal(good, &v); err != nil || v.Q != "mail" || v.N != 7 {
		t.Fatalf("Unmarshal(good) = %+v, %v; want q mail, n 7", v, err)
	}
}

// The walk before the decode allocates nothing for what it skips. (A first
// version of Skip read each string into a buffer of its own: 24
// allocations in Unmarshal where msgpack.Unmarshal made 7.) The decoder is
// the test's own, not the pool's: under the race detector sync.Pool drops
// what it is given at random, and a decode through the pool may allocate.
func TestSkip_AllocatesNothing(t *testing.T) {
	b, err := msgpack.Marshal(map[string]any{"q": "mail", "n": 7, "b": []byte("0123456789"), "l": []string{"a", "b", "c"},
		"m": map[string]string{"k": "v"}, "t": []map[string]any{{"x": 1.5, "e": nil}}, "s": string(make([]byte, 300))})
	if err != nil {
		t.Fatal(err)
	}
	var rd bytes.Reader
	dec := msgpack.NewDecoder(&rd)
	walk := testing.AllocsPerRun(50, func() {
		rd.Reset(b)
		dec.Reset(&rd)
		if err := Skip(dec); err != nil {
			t.Fatal(err)
		}
	})
	if walk != 0 {
		t.Errorf("a walk of a %d-byte value allocates %.0f times, want none", len(b), walk)
	}
}
