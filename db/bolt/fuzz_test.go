package bolt

// Fuzz targets for decoding stored records: a corrupt job, lease or audit
// record must be an error (ErrCorrupt, or a broken audit chain), never a
// panic and never a huge allocation. Each target decodes the bytes directly
// and also plants them in a real file and reads them back through the
// store's methods (GetJob, ListJobs, Stats, Check; GetLease, ListLeases;
// ListAudit, VerifyAudit).
//
// Plain "go test" runs the seeds: the f.Add calls below and the corpus in
// testdata/fuzz/<FuzzName>/ (Go reads it from this package's directory).
// To fuzz, one target at a time:
//
//	go test ./db -run '^$' -fuzz '^FuzzJobRecord$' -fuzztime 5m

import (
	"bytes"
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/fenceq/fenceq/db"
	"github.com/vmihailenco/msgpack/v5"
	bbolt "go.etcd.io/bbolt"
)

// fuzzStore opens a store whose commits skip fsync: the fuzz targets write
// a record per input, and durability is not what they test.
func fuzzStore(f *testing.F) *Store {
	f.Helper()
	path := filepath.Join(f.TempDir(), "fuzz.db")
	s, err := Open(path, Options{LockTimeout: 200 * time.Millisecond})
	if err != nil {
		f.Fatalf("Open(%s) error = %v", path, err)
	}
	s.bolt.NoSync = true
	f.Cleanup(func() { s.Close() })
	return s
}

// plant writes value under key in bucket, bypassing the store's encoders.
func plant(t *testing.T, s *Store, bucket, key, value []byte, more func(tx *bbolt.Tx) error) {
	t.Helper()
	err := s.bolt.Update(func(tx *bbolt.Tx) error {
		if err := tx.Bucket(bucket).Put(key, value); err != nil {
			return err
		}
		if more != nil {
			return more(tx)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("planting %d bytes in %s: %v", len(value), bucket, err)
	}
}

func seedJobRecords() [][]byte {
	recs := []*jobRecord{
		{V: 1, JobRecord: db.JobRecord{ID: 1, Queue: "default", State: db.StateAvailable, MaxAttempts: 10, Budget: 10, RunAt: 1, CreatedAt: 1, UpdatedAt: 1}},
		{V: 1, JobRecord: db.JobRecord{ID: 7, Queue: "emails", Kind: "send", Payload: []byte(`{"to":"a@example.com"}`), Priority: -3,
			State: db.StateClaimed, Attempts: 2, MaxAttempts: 5, Budget: 5, ClaimedBy: "local|w1", LeaseExpiresAt: 1e18,
			RunAt: 2e18, CreatedAt: 3, UpdatedAt: 4, LastError: "boom",
			Errors: []errorRecord{{Attempt: 1, At: 5, Error: "boom"}}, IdempotencyKey: "k"}},
		{V: 1, JobRecord: db.JobRecord{ID: 9, Queue: "q", State: db.StateCompleted, Attempts: 1, MaxAttempts: 1, Budget: 1, RunAt: 1, CreatedAt: 1,
			UpdatedAt: 2, CompletedAt: 2, Result: []byte(`{"ok":true}`), Attestation: []byte(`{"sig":"x"}`)}},
	}
	var out [][]byte
	for _, r := range recs {
		b, err := encodeRecord(r)
		if err != nil {
			panic(err)
		}
		out = append(out, b, b[:len(b)/2])
	}
	// An "er" array header claiming 2^32-1 entries in a few bytes.
	out = append(out, []byte("\x83\xa1v\x01\xa2id\x01\xa2er\xdd\xff\xff\xff\xff"))
	return out
}

func FuzzJobRecord(f *testing.F) {
	for _, b := range seedJobRecords() {
		f.Add(b)
	}
	f.Add([]byte{})
	f.Add([]byte{0xc1})
	s := fuzzStore(f)
	ctx := context.Background()
	f.Fuzz(func(t *testing.T, data []byte) {
		rec, err := decodeJob(data)
		if err != nil {
			if !errors.Is(err, db.ErrCorrupt) {
				t.Fatalf("decodeJob(%x) error = %v, want ErrCorrupt", data, err)
			}
		} else {
			_ = rec.job()
			enc, err := encodeRecord(rec)
			if err != nil {
				t.Fatalf("encodeRecord(decodeJob(%x)) error = %v", data, err)
			}
			again, err := decodeJob(enc)
			if err != nil {
				t.Fatalf("a decoded record does not decode again: %v", err)
			}
			if enc2, _ := encodeRecord(again); !bytes.Equal(enc, enc2) {
				t.Fatalf("decode/encode is not stable: %x then %x", enc, enc2)
			}
		}

		// The same bytes in a real file, read by the store's methods.
		plant(t, s, bucketJobs, u64(1), data, nil)
		if _, err := s.GetJob(ctx, 1); err != nil && !errors.Is(err, db.ErrCorrupt) {
			t.Fatalf("GetJob on a planted record: error = %v, want nil or ErrCorrupt", err)
		}
		if _, err := s.ListJobs(ctx, db.ListRequest{}); err != nil && !errors.Is(err, db.ErrCorrupt) {
			t.Fatalf("ListJobs on a planted record: error = %v, want nil or ErrCorrupt", err)
		}
		if _, err := s.Stats(ctx); err != nil {
			t.Fatalf("Stats() error = %v", err)
		}
		if err := s.Check(); err == nil {
			// Planted bytes are either corrupt or a record without its
			// index entry and count: the check must see it either way.
			t.Fatalf("Check() passed with %x planted as job 1", data)
		}
	})
}

func FuzzLeaseRecord(f *testing.F) {
	for _, r := range []*leaseRecord{
		{V: 1, Holder: "local|etl-1", Token: 3, ExpiresAt: 1e18, AcquiredAt: 1, UpdatedAt: 2},
		{V: 1, Token: 4294967295, UpdatedAt: 2},
	} {
		b, err := encodeRecord(r)
		if err != nil {
			f.Fatal(err)
		}
		f.Add("/data/a.csv", b)
		f.Add("x", b[:len(b)-1])
	}
	f.Add("", []byte{0x80})
	s := fuzzStore(f)
	ctx := context.Background()
	f.Fuzz(func(t *testing.T, name string, data []byte) {
		rec, err := decodeLease(name, data)
		if err != nil {
			if !errors.Is(err, db.ErrCorrupt) {
				t.Fatalf("decodeLease(%q, %x) error = %v, want ErrCorrupt", name, data, err)
			}
		} else {
			_ = rec.rules().Named()
			enc, err := encodeRecord(rec)
			if err != nil {
				t.Fatalf("encodeRecord(decodeLease(%x)) error = %v", data, err)
			}
			if _, err := decodeLease(name, enc); err != nil {
				t.Fatalf("a decoded lease does not decode again: %v", err)
			}
		}
		plant(t, s, bucketLeases, []byte("fuzzed"), data, nil)
		if _, err := s.GetLease(ctx, "fuzzed"); err != nil && !errors.Is(err, db.ErrCorrupt) {
			t.Fatalf("GetLease on a planted record: error = %v, want nil or ErrCorrupt", err)
		}
		if _, err := s.ListLeases(ctx, db.ListLeasesRequest{}); err != nil && !errors.Is(err, db.ErrCorrupt) {
			t.Fatalf("ListLeases on a planted record: error = %v, want nil or ErrCorrupt", err)
		}
	})
}

func FuzzAuditRecord(f *testing.F) {
	rec := db.AuditLink{Seq: 1, Time: 1e18, Principal: "local", Action: "complete", Subject: "job:1", Token: 2,
		Details: map[string]string{"holder": "local|w1", "attestation_sha256": "00"}, PrevHash: make([]byte, 32)}
	h, err := rec.ComputeHash()
	if err != nil {
		f.Fatal(err)
	}
	rec.Hash = h
	valid, err := encodeRecord(&rec)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(valid)
	f.Add(valid[:len(valid)-5])
	f.Add([]byte("\x81\xa7details\xdf\xff\xff\xff\xff"))
	s := fuzzStore(f)
	ctx := context.Background()
	f.Fuzz(func(t *testing.T, data []byte) {
		// What ListAudit and VerifyAudit do with a stored record.
		var r db.AuditLink
		decoded := msgpack.Unmarshal(data, &r) == nil
		if decoded {
			_, _ = r.ComputeHash()
		}

		plant(t, s, bucketAudit, u64(1), data, func(tx *bbolt.Tx) error {
			// The head names record 1 with the valid record's hash: only
			// the valid record's bytes verify.
			return tx.Bucket(bucketMeta).Put(metaAuditHead, append(u64(1), h...))
		})
		if _, err := s.ListAudit(ctx, 0, 10); err != nil && !errors.Is(err, db.ErrCorrupt) {
			t.Fatalf("ListAudit on a planted record: error = %v, want nil or ErrCorrupt", err)
		}
		rep, err := s.VerifyAudit(ctx)
		if err != nil {
			t.Fatalf("VerifyAudit() error = %v", err)
		}
		// Another encoding of the valid record may verify too (msgpack has
		// several for one integer), but only a record whose hash is the
		// head's, which is the valid record's content.
		if rep.OK && (!decoded || r.Seq != 1 || !bytes.Equal(r.Hash, h)) {
			t.Fatalf("VerifyAudit() OK for %x, which is not the record the head names", data)
		}
		if !rep.OK && bytes.Equal(data, valid) {
			t.Fatalf("VerifyAudit() = %+v for the valid record", rep)
		}
	})
}
