package bolt

import (
	"bytes"
	"encoding/binary"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/fenceq/fenceq/db"
	"github.com/vmihailenco/msgpack/v5"
	bbolt "go.etcd.io/bbolt"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/records")

var goldenDir = filepath.Join("..", "..", "testdata", "records")

// goldenJobV1 sets every field of a version 1 record, so that the golden
// file pins every tag. (No real job is in every state at once.)
func goldenJobV1() *jobRecord {
	at := func(sec int) int64 { return time.Date(2031, 3, 14, 15, 9, sec, 0, time.UTC).UnixNano() }
	return &jobRecord{V: 1, JobRecord: db.JobRecord{ID: 4242, Queue: "mail.outbound", Kind: "send_welcome", Payload: []byte(`{"to":"ada@example.com","n":[1,2]}`), Priority: -7, State: db.StateCompleted, Attempts: 3, MaxAttempts: 12, Budget: 10, ClaimedBy: "local|worker-1", LeaseExpiresAt: at(50), RunAt: at(1), CreatedAt: at(0), UpdatedAt: at(59), CompletedAt: at(59), LastError: "smtp: 451 try again", Errors: []errorRecord{
		{Attempt: 1, At: at(10), Error: "dial tcp: timeout"},
		{Attempt: 2, At: at(20), Error: "smtp: 451 try again"},
	}, Result: []byte(`{"message_id":"<1@example.com>"}`), Attestation: []byte(`{"sha256":"9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"}`), IdempotencyKey: "welcome:ada"}}
}

func TestJobRecordGoldenFilesStillDecode(t *testing.T) {
	goldens := []struct {
		file string
		want *jobRecord
	}{
		{"job_v1.msgpack", goldenJobV1()},
	}
	for _, g := range goldens {
		t.Run(g.file, func(t *testing.T) {
			b, err := os.ReadFile(filepath.Join(goldenDir, g.file))
			if err != nil {
				t.Fatalf("read golden: %v (run go test ./db -run Golden -update to create it)", err)
			}
			got, err := decodeJob(b)
			if err != nil {
				t.Fatalf("decodeJob(%s) error = %v", g.file, err)
			}
			if !reflect.DeepEqual(got, g.want) {
				t.Errorf("decodeJob(%s) =\n%+v\nwant\n%+v", g.file, *got, *g.want)
			}
		})
	}
}

// The current encoding is the v1 golden, byte for byte. When the format
// changes on purpose: bump jobRecordVersion, add job_v2.msgpack here and
// keep job_v1.msgpack in TestJobRecordGoldenFilesStillDecode.
func TestJobRecordEncodingMatchesTheGolden(t *testing.T) {
	path := filepath.Join(goldenDir, "job_v1.msgpack")
	got, err := encodeRecord(goldenJobV1())
	if err != nil {
		t.Fatalf("encodeRecord() error = %v", err)
	}
	if *update {
		if err := os.MkdirAll(goldenDir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("wrote %s", path)
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read golden: %v (run go test ./db -run Golden -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("encodeRecord(golden job) =\n%x\nwant (%s)\n%x", got, path, want)
	}
	// The tags are the map keys, short and explicit.
	var m map[string]any
	if err := msgpack.Unmarshal(want, &m); err != nil {
		t.Fatalf("golden is not a msgpack map: %v", err)
	}
	wantKeys := []string{"v", "id", "q", "k", "p", "pr", "s", "a", "ma", "bu", "cb", "lx", "ra", "ca", "ua", "co", "le", "er", "r", "at", "ik"}
	for _, k := range wantKeys {
		if _, ok := m[k]; !ok {
			t.Errorf("golden has no key %q", k)
		}
	}
	if len(m) != len(wantKeys) {
		t.Errorf("golden has %d keys, want %d", len(m), len(wantKeys))
	}
}

func TestDecodeJobOfGarbageReturnsErrCorrupt(t *testing.T) {
	valid, err := encodeRecord(goldenJobV1())
	if err != nil {
		t.Fatal(err)
	}
	encode := func(v any) []byte {
		b, err := msgpack.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	golden := goldenJobV1()
	withV := *golden
	withV.V = 2
	noID := *golden
	noID.ID = 0
	badState := *golden
	badState.State = "running"
	tests := []struct {
		name string
		in   []byte
	}{
		{"nil", nil},
		{"empty", []byte{}},
		{"never used byte", []byte{0xc1}},
		{"text", []byte("this is not msgpack")},
		{"an array", encode([]any{1, "default", "available"})},
		{"a string", encode("available")},
		{"wrong field types", encode(map[string]any{"v": "one", "id": []int{1}, "q": 7})},
		{"bin32 claiming 4 GiB", append([]byte{0x81, 0xa1, 'p', 0xc6, 0xff, 0xff, 0xff, 0xff}, 1, 2, 3)},
		{"map32 claiming 4 billion entries", []byte{0xdf, 0xff, 0xff, 0xff, 0xff, 0xa1, 'v', 0x01}},
		{"errors array claiming 4 billion entries", []byte{0x81, 0xa2, 'e', 'r', 0xdd, 0xff, 0xff, 0xff, 0xff}},
		{"version 0 (field missing)", encode(map[string]any{"id": 1, "q": "default", "s": "available"})},
		{"version from the future", encode(&withV)},
		{"id 0", encode(&noID)},
		{"unknown state", encode(&badState)},
		{"deep nesting", bytes.Repeat([]byte{0x91}, 100000)},
		// The golden record behind an entry whose length is 2 GiB or more:
		// on 32-bit platforms msgpack reads such a length as negative,
		// which read the string as empty and the rest as the golden record,
		// and made the skip of the ext panic (.ci/qemu.sh runs this on armv7).
		{"a string of 4 GiB-1 before the golden", withEntry(t, valid, 0xa2, 'c', 'b', 0xdb, 0xff, 0xff, 0xff, 0xff)},
		{"a string of 2 GiB before the golden", withEntry(t, valid, 0xa1, 'q', 0xdb, 0x80, 0, 0, 0)},
		{"result bytes of 2 GiB before the golden", withEntry(t, valid, 0xa1, 'r', 0xc6, 0x80, 0, 0, 0)},
		{"an unknown ext of 2 GiB before the golden", withEntry(t, valid, 0xa2, 'z', 'z', 0xc9, 0x80, 0, 0, 0, 0x05)},
		{"an unknown array of 2 GiB entries before the golden", withEntry(t, valid, 0xa2, 'z', 'z', 0xdd, 0x80, 0, 0, 0)},
		{"an error list of 2 GiB entries before the golden", withEntry(t, valid, 0xa2, 'e', 'r', 0xdd, 0x80, 0, 0, 0)},
		{"an error of 2 GiB fields before the golden", withEntry(t, valid, 0xa2, 'e', 'r', 0x91, 0xdf, 0x80, 0, 0, 0)},
	}
	for n := range len(valid) {
		tests = append(tests, struct {
			name string
			in   []byte
		}{"golden cut at " + itoa(uint64(n)), valid[:n]})
	}
	for _, tt := range tests {
		rec, err := decodeJob(tt.in)
		if !errors.Is(err, db.ErrCorrupt) || rec != nil {
			t.Errorf("decodeJob(%s) = %v, %v; want nil, %v", tt.name, rec, err, db.ErrCorrupt)
		}
	}
	// Those are refused for their length alone: the same entries of a true
	// length decode to the golden record.
	for _, entry := range [][]byte{{0xa2, 'z', 'z', 0xdb, 0, 0, 0, 1, 'x'}, {0xa2, 'z', 'z', 0xc9, 0, 0, 0, 1, 0x05, 'x'}, {0xa2, 'z', 'z', 0xdd, 0, 0, 0, 1, 0xc0}} {
		if rec, err := decodeJob(withEntry(t, valid, entry...)); err != nil || !reflect.DeepEqual(*rec, *golden) {
			t.Errorf("decodeJob(golden behind % x) = %+v, %v; want the golden record", entry, rec, err)
		}
	}
}

// A flipped byte anywhere in a record either still decodes to a valid
// record or gives ErrCorrupt; it never panics.
func TestDecodeJobOfAFlippedByteNeverPanics(t *testing.T) {
	valid, err := encodeRecord(goldenJobV1())
	if err != nil {
		t.Fatal(err)
	}
	for i := range valid {
		for _, mask := range []byte{0x01, 0x10, 0x80, 0xff} {
			b := bytes.Clone(valid)
			b[i] ^= mask
			rec, err := decodeJob(b)
			if err != nil && !errors.Is(err, db.ErrCorrupt) {
				t.Errorf("byte %d ^ %#x: error = %v, want nil or %v", i, mask, err, db.ErrCorrupt)
			}
			if err == nil && (rec.ID == 0 || !db.ValidState(rec.State)) {
				t.Errorf("byte %d ^ %#x: decoded id %d state %q with no error", i, mask, rec.ID, rec.State)
			}
		}
	}
}

func FuzzDecodeJob(f *testing.F) {
	valid, err := encodeRecord(goldenJobV1())
	if err != nil {
		f.Fatal(err)
	}
	f.Add(valid)
	f.Add([]byte{})
	f.Add([]byte{0xdf, 0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, b []byte) {
		rec, err := decodeJob(b)
		if err != nil && !errors.Is(err, db.ErrCorrupt) {
			t.Errorf("decodeJob error = %v, want nil or %v", err, db.ErrCorrupt)
		}
		if err == nil && (rec.ID == 0 || rec.V == 0 || !db.ValidState(rec.State)) {
			t.Errorf("decodeJob = id %d v %d state %q with no error", rec.ID, rec.V, rec.State)
		}
	})
}

// A corrupt stored record is reported as ErrCorrupt by the operations that
// read it, and fails Check; it does not crash the store.
func TestACorruptStoredRecordIsReportedAsErrCorrupt(t *testing.T) {
	clk := newFakeClock()
	s := mustOpenStore(t, testOptions(clk))
	job := mustEnqueue(t, s, db.EnqueueRequest{})
	orig := rawJob(t, s, job.ID)
	put := func(v []byte) {
		t.Helper()
		if err := s.bolt.Update(func(tx *bbolt.Tx) error { return tx.Bucket(bucketJobs).Put(u64(job.ID), v) }); err != nil {
			t.Fatal(err)
		}
	}
	put([]byte("garbage"))
	defer put(orig) // so that the cleanup Check sees a sound file

	if _, err := s.GetJob(ctx, job.ID); !errors.Is(err, db.ErrCorrupt) {
		t.Errorf("GetJob() error = %v, want %v", err, db.ErrCorrupt)
	}
	if _, err := s.ListJobs(ctx, db.ListRequest{}); !errors.Is(err, db.ErrCorrupt) {
		t.Errorf("ListJobs() error = %v, want %v", err, db.ErrCorrupt)
	}
	if _, err := s.CancelJob(ctx, db.JobRequest{ID: job.ID}); !errors.Is(err, db.ErrCorrupt) {
		t.Errorf("CancelJob() error = %v, want %v", err, db.ErrCorrupt)
	}
	if _, err := s.ClaimJobs(ctx, db.ClaimRequest{Principal: "local", Worker: "w1"}); !errors.Is(err, db.ErrCorrupt) {
		t.Errorf("ClaimJobs() error = %v, want %v", err, db.ErrCorrupt)
	}
	if err := s.Check(); !errors.Is(err, db.ErrCorrupt) {
		t.Errorf("Check() error = %v, want %v", err, db.ErrCorrupt)
	}
	// The store still works for everything else.
	if _, err := s.EnqueueJob(ctx, db.EnqueueRequest{Queue: "other"}); err != nil {
		t.Errorf("EnqueueJob() after a corrupt record: error = %v, want nil", err)
	}
}

// withEntry returns the record rec (a msgpack map) with one more entry,
// entry's bytes, before its own.
func withEntry(t *testing.T, rec []byte, entry ...byte) []byte {
	t.Helper()
	var n, header int
	switch {
	case rec[0]&0xf0 == 0x80:
		n, header = int(rec[0]&0x0f), 1
	case rec[0] == 0xde:
		n, header = int(binary.BigEndian.Uint16(rec[1:3])), 3
	default:
		t.Fatalf("record starts with % x, not a map of fewer than 65536 entries", rec[:1])
	}
	var out []byte
	if n+1 < 16 {
		out = append(out, 0x80|byte(n+1))
	} else {
		out = binary.BigEndian.AppendUint16(append(out, 0xde), uint16(n+1))
	}
	return append(append(out, entry...), rec[header:]...)
}
