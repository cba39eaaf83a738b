package bolt

import (
	"bytes"
	"errors"
	"reflect"
	"runtime"
	"testing"

	"github.com/fenceq/fenceq/db"
	"github.com/fenceq/fenceq/internal/msgrec"
	"github.com/vmihailenco/msgpack/v5"
	"pgregory.net/rapid"
)

// plainJobRecord has jobRecord's fields and tags but not its methods, so
// msgpack encodes and decodes it by reflection: the format jobRecord's
// hand-written codec must keep.
type plainJobRecord jobRecord

// genJobRecord draws any record, empty fields included (an empty slice as
// nil, which is what decoding an omitted field gives back).
func genJobRecord(t *rapid.T) *jobRecord {
	bytesOrNil := func(label string) []byte {
		b := rapid.SliceOfN(rapid.Byte(), 0, 40).Draw(t, label)
		if len(b) == 0 {
			return nil
		}
		return b
	}
	str := func(label string) string {
		return rapid.OneOf(rapid.Just(""), rapid.String(), rapid.StringN(30, 300, -1)).Draw(t, label)
	}
	var errs []errorRecord
	for i := range rapid.IntRange(0, 3).Draw(t, "errors") {
		errs = append(errs, errorRecord{Attempt: rapid.Uint64().Draw(t, "attempt"),
			At: rapid.Int64().Draw(t, "at"), Error: str("error" + itoa(uint64(i)))})
	}
	return &jobRecord{V: rapid.Uint8().Draw(t, "v"), JobRecord: db.JobRecord{ID: rapid.Uint64().Draw(t, "id"), Queue: str("queue"), Kind: str("kind"), Payload: bytesOrNil("payload"), Priority: rapid.Int64().Draw(t, "priority"), State: rapid.SampledFrom(db.States).Draw(t, "state"), Attempts: rapid.Uint64().Draw(t, "attempts"), MaxAttempts: rapid.Uint64().Draw(t, "max"), Budget: rapid.Uint64().Draw(t, "budget"), ClaimedBy: str("claimed_by"), LeaseExpiresAt: rapid.Int64().Draw(t, "lx"), RunAt: rapid.Int64().Draw(t, "ra"), CreatedAt: rapid.Int64().Draw(t, "ca"), UpdatedAt: rapid.Int64().Draw(t, "ua"), CompletedAt: rapid.Int64().Draw(t, "co"), LastError: str("last_error"), Errors: errs, Result: bytesOrNil("result"), Attestation: bytesOrNil("attestation"), IdempotencyKey: str("idempotency_key"),
		Schedule: str("schedule"), ScheduledFor: rapid.Int64().Draw(t, "sf"), Backfilled: rapid.Bool().Draw(t, "bf")}}
}

// encodeBothWays encodes a record with its hand-written encoder and, as
// plain (the same fields without the methods), by msgpack's reflection,
// and fails unless the bytes are the same.
func encodeBothWays(t *rapid.T, rec, plain any) (got, want []byte) {
	got, err := encodeRecord(rec)
	if err != nil {
		t.Fatalf("encodeRecord(%T) error = %v", rec, err)
	}
	want, err = encodeRecord(plain)
	if err != nil {
		t.Fatalf("encodeRecord(%T) error = %v", plain, err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("hand-written encoding\n%x\nreflective encoding\n%x", got, want)
	}
	return got, want
}

// The hand-written codec writes the reflective codec's bytes and reads any
// encoding the way it does: the same fields in another order, integers of
// other widths and keys it does not know included.
func TestJobRecordCodecMatchesReflection(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		rec := genJobRecord(t)
		got, want := encodeBothWays(t, rec, (*plainJobRecord)(rec))
		var back jobRecord
		if err := msgrec.Unmarshal(got, &back); err != nil {
			t.Fatalf("decode error = %v", err)
		}
		if !reflect.DeepEqual(&back, rec) {
			t.Fatalf("decode(encode(r)) =\n%+v\nwant\n%+v", back, *rec)
		}

		// The same record written another way: a generic map (its integers
		// at their smallest width, its keys in Go's random map order) with a
		// key from a later version.
		var m map[string]any
		if err := msgpack.Unmarshal(want, &m); err != nil {
			t.Fatal(err)
		}
		m["zz_later"] = map[string]any{"x": []any{1, "y"}}
		other, err := msgpack.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		var viaCustom jobRecord
		var viaReflection plainJobRecord
		errCustom := msgrec.Unmarshal(other, &viaCustom)
		errReflection := msgrec.Unmarshal(other, &viaReflection)
		if errCustom != nil || errReflection != nil {
			t.Fatalf("decode of a reordered record: hand-written error = %v, reflective error = %v", errCustom, errReflection)
		}
		if !reflect.DeepEqual(viaCustom, jobRecord(viaReflection)) {
			t.Fatalf("reordered record: hand-written decode\n%+v\nreflective decode\n%+v", viaCustom, viaReflection)
		}
	})
}

// A decode starts from the zero record: nothing of what the value held
// before survives a nil or a record that omits it.
func TestJobRecordDecodeResetsTheRecord(t *testing.T) {
	small, err := encodeRecord(&jobRecord{V: 1, JobRecord: db.JobRecord{ID: 2, Queue: "q", State: db.StateAvailable}})
	if err != nil {
		t.Fatal(err)
	}
	for name, in := range map[string][]byte{"nil": {0xc0}, "a smaller record": small} {
		r := *goldenJobV1()
		var want jobRecord
		if err := msgrec.Unmarshal(in, &want); err != nil {
			t.Fatal(err)
		}
		if err := msgrec.Unmarshal(in, &r); err != nil {
			t.Fatalf("%s: decode error = %v", name, err)
		}
		if !reflect.DeepEqual(r, want) {
			t.Errorf("%s decoded over the golden record =\n%+v\nwant\n%+v", name, r, want)
		}
	}
}

// A length header is only a claim: a record whose payload claims 4 GiB
// in a few bytes is refused without allocating anything near that, and a
// real payload past the first read (64 KiB) comes back whole.
func TestJobRecordDecodeAllocatesWhatIsThereNotWhatIsClaimed(t *testing.T) {
	claims4GiB := []byte("\x84\xa1v\x01\xa2id\x01\xa1s\xa4dead\xa1p\xc6\xff\xff\xff\xff")
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, err := decodeJob(claims4GiB)
	runtime.ReadMemStats(&after)
	if !errors.Is(err, db.ErrCorrupt) {
		t.Errorf("decodeJob(payload claiming 4 GiB) error = %v, want %v", err, db.ErrCorrupt)
	}
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 1<<20 {
		t.Errorf("decodeJob(payload claiming 4 GiB) allocated %d bytes, want under 1 MiB", grew)
	}

	big := &jobRecord{V: 1, JobRecord: db.JobRecord{ID: 9, Queue: "q", State: db.StateAvailable, Payload: bytes.Repeat([]byte("0123456789abcdef"), 20000), Result: bytes.Repeat([]byte{7}, 64<<10)}}
	enc, err := encodeRecord(big)
	if err != nil {
		t.Fatal(err)
	}
	got, err := decodeJob(enc)
	if err != nil {
		t.Fatalf("decodeJob(320 KB payload) error = %v", err)
	}
	if !reflect.DeepEqual(got, big) {
		t.Errorf("decodeJob(320 KB payload): payload %d bytes, result %d bytes, want %d and %d",
			len(got.Payload), len(got.Result), len(big.Payload), len(big.Result))
	}
}

// BenchmarkJobRecordCodec: a claimed job's record (100-byte payload)
// encoded and decoded by msgpack's reflection (decoding after the bounding
// walk of msgrec.Unmarshal) and by jobRecord's own codec (decodeJob), as a
// store operation does inside the commit.
func BenchmarkJobRecordCodec(b *testing.B) {
	rec := &jobRecord{V: 1, JobRecord: db.JobRecord{ID: 123456, Queue: "bench", Payload: bytes.Repeat([]byte("x"), 100), State: db.StateClaimed, Attempts: 1, MaxAttempts: 25, Budget: 25, ClaimedBy: "bench|worker-07", LeaseExpiresAt: 1795000000000000000, RunAt: 1794999990000000000, CreatedAt: 1794999990000000000, UpdatedAt: 1795000000000000000}}
	enc, err := encodeRecord(rec)
	if err != nil {
		b.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		value func() any
	}{
		{"reflection", func() any { return (*plainJobRecord)(rec) }},
		{"hand-written", func() any { return rec }},
	} {
		b.Run("encode/"+tc.name, func(b *testing.B) {
			v := tc.value()
			for b.Loop() {
				if _, err := encodeRecord(v); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	b.Run("decode/reflection", func(b *testing.B) {
		for b.Loop() {
			var r plainJobRecord
			if err := msgrec.Unmarshal(enc, &r); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("decode/hand-written", func(b *testing.B) {
		for b.Loop() {
			if _, err := decodeJob(enc); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// plainAuditRecord is auditRecord without its encoder: msgpack's reflection.
type plainAuditRecord db.AuditLink

// The hand-written audit encoding is the reflective one with sorted
// details, byte for byte, so every stored hash still verifies.
func TestAuditRecordEncodingMatchesReflection(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		hash := func(label string) []byte {
			return rapid.OneOf(rapid.Just([]byte(nil)), rapid.SliceOfN(rapid.Byte(), 32, 32)).Draw(t, label)
		}
		details := rapid.MapOfN(rapid.String(), rapid.String(), 0, 6).Draw(t, "details")
		if len(details) == 0 && rapid.Bool().Draw(t, "nil details") {
			details = nil
		}
		rec := &db.AuditLink{Seq: rapid.Uint64().Draw(t, "seq"), Time: rapid.Int64().Draw(t, "time"),
			Principal: rapid.String().Draw(t, "principal"), Action: rapid.String().Draw(t, "action"),
			Subject: rapid.String().Draw(t, "subject"), Token: rapid.Uint64().Draw(t, "token"),
			Details: details, PrevHash: hash("prev"), Hash: hash("hash")}
		_, want := encodeBothWays(t, rec, (*plainAuditRecord)(rec))
		// Unsorted settings do not change it (msgpack.Marshal does not sort).
		if plain, err := msgpack.Marshal(rec); err != nil || !bytes.Equal(plain, want) {
			t.Fatalf("msgpack.Marshal(auditRecord) = %x, %v; want %x", plain, err, want)
		}
	})
}

// The hand-written codecs list the fields by hand: a field added to a
// record must be added to its codec and to the generators above, which
// this test points to.
func TestRecordCodecsKnowEveryField(t *testing.T) {
	for _, tc := range []struct {
		typ  reflect.Type
		want int
	}{{reflect.TypeFor[jobRecord](), 2}, {reflect.TypeFor[db.JobRecord](), 23}, {reflect.TypeFor[errorRecord](), 3}, {reflect.TypeFor[db.AuditLink](), 9}} {
		if got := tc.typ.NumField(); got != tc.want {
			t.Errorf("%s has %d fields; its codec in codec.go and the generators in codec_test.go know %d: update them",
				tc.typ.Name(), got, tc.want)
		}
	}
}
