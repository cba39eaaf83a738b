package msgrec

import (
	"runtime"
	"testing"

	"github.com/vmihailenco/msgpack/v5"
)

// A value whose header claims 4 GiB, decoded again and again, costs each
// time what it cost the first time: the buffer a failed read grew is not
// kept for the next decode. Under msgpack v5.4.1's own pooling the
// allocation of a call grew by a mebibyte or more with every call (88 MB
// at the 50th, 1.6 GB at the 150th).
func TestDecode_AFailedDecodeLeavesNothingInThePool(t *testing.T) {
	claim := []byte{0xdb, 0xff, 0xff, 0xff, 0xbf, 'a', 'b', 'c'} // str32 of 4 GiB - 65 bytes, then 3
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
					t.Fatalf("call %d: a 4 GiB string in %d bytes decoded with no error", i, len(claim))
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
