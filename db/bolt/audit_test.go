package bolt

import (
	"bytes"
	"errors"
	"maps"
	"path/filepath"
	"testing"

	"github.com/fenceq/fenceq/db"
	"github.com/fenceq/fenceq/db/dbtest"
	"github.com/vmihailenco/msgpack/v5"
	bbolt "go.etcd.io/bbolt"
)

func TestTheAuditChainVerifiesAfterAMixedWorkloadAndAReopen(t *testing.T) {
	clk := newFakeClock()
	path := filepath.Join(t.TempDir(), "fenceq.db")
	s := mustOpenStoreAt(t, path, testOptions(clk))
	changes := dbtest.MixedWorkload(t, s, clk)

	rep, err := s.VerifyAudit(ctx)
	if err != nil {
		t.Fatalf("VerifyAudit() error = %v", err)
	}
	if !rep.OK || rep.FirstBroken != 0 || rep.HeadSeq != changes || rep.Records != changes {
		t.Fatalf("VerifyAudit() = %+v, want OK with HeadSeq and Records %d", rep, changes)
	}
	// The chain's links themselves are the suite's
	// (TheAuditChainVerifiesAfterAMixedWorkload); here: the file keeps them.
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = mustOpenStoreAt(t, path, testOptions(clk))
	again, err := s.VerifyAudit(ctx)
	if err != nil || again != rep {
		t.Errorf("VerifyAudit() after reopen = %+v, %v; want %+v", again, err, rep)
	}
}

// tamper changes the stored audit log with fn in its own transaction.
func tamper(t *testing.T, s *Store, fn func(b *bbolt.Bucket) error) {
	t.Helper()
	if err := s.bolt.Update(func(tx *bbolt.Tx) error { return fn(tx.Bucket(bucketAudit)) }); err != nil {
		t.Fatalf("tamper: %v", err)
	}
}

func TestVerifyAuditReportsTheFirstBrokenRecord(t *testing.T) {
	const target = 10 // a claim by local|w1 in dbtest.MixedWorkload
	tests := []struct {
		name   string
		change func(b *bbolt.Bucket) error
		want   uint64
	}{
		{"one byte of a record flipped", func(b *bbolt.Bucket) error {
			v := bytes.Clone(b.Get(u64(target)))
			i := bytes.Index(v, []byte("local"))
			if i < 0 {
				return errors.New("record has no principal local")
			}
			v[i] ^= 0x01 // "local" → "mocal"
			return b.Put(u64(target), v)
		}, target},
		{"one byte of a record's stored hash flipped", func(b *bbolt.Bucket) error {
			v := bytes.Clone(b.Get(u64(target)))
			v[len(v)-1] ^= 0x80
			return b.Put(u64(target), v)
		}, target},
		{"a record rewritten with a hash of its own", func(b *bbolt.Bucket) error {
			var r db.AuditLink
			if err := msgpack.Unmarshal(b.Get(u64(target)), &r); err != nil {
				return err
			}
			r.Principal = "mallory"
			h, err := r.ComputeHash()
			if err != nil {
				return err
			}
			r.Hash = h
			v, err := encodeRecord(&r)
			if err != nil {
				return err
			}
			return b.Put(u64(target), v)
		}, target + 1},
		{"a record deleted", func(b *bbolt.Bucket) error { return b.Delete(u64(target)) }, target},
		{"a record that does not decode", func(b *bbolt.Bucket) error { return b.Put(u64(target), []byte{0xc1}) }, target},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := newFakeClock()
			s := mustOpenStore(t, testOptions(clk))
			changes := dbtest.MixedWorkload(t, s, clk)
			tamper(t, s, tt.change)

			rep, err := s.VerifyAudit(ctx)
			if err != nil {
				t.Fatalf("VerifyAudit() error = %v", err)
			}
			if rep.OK || rep.FirstBroken != tt.want || rep.Reason == "" {
				t.Errorf("VerifyAudit() = OK %v FirstBroken %d reason %q, want not OK, first broken %d with a reason",
					rep.OK, rep.FirstBroken, rep.Reason, tt.want)
			}
			if rep.HeadSeq != changes {
				t.Errorf("VerifyAudit() HeadSeq = %d, want %d", rep.HeadSeq, changes)
			}
		})
	}
}

func TestVerifyAuditReportsATruncatedChain(t *testing.T) {
	clk := newFakeClock()
	s := mustOpenStore(t, testOptions(clk))
	changes := dbtest.MixedWorkload(t, s, clk)
	tamper(t, s, func(b *bbolt.Bucket) error { return b.Delete(u64(changes)) })
	rep, err := s.VerifyAudit(ctx)
	if err != nil || rep.OK || rep.FirstBroken != changes {
		t.Errorf("VerifyAudit() after deleting the last record = OK %v FirstBroken %d, %v; want not OK, %d",
			rep.OK, rep.FirstBroken, err, changes)
	}
}

// No single-byte change of a stored record goes unnoticed, unless it only
// changes how the same record is encoded.
func TestVerifyAuditNoticesEverySingleByteChangeOfARecord(t *testing.T) {
	clk := newFakeClock()
	s := mustOpenStore(t, testOptions(clk))
	dbtest.MixedWorkload(t, s, clk)
	const target = 13 // the completion of job 3, with details

	// One write transaction, rolled back: nothing reaches the file.
	tx, err := s.bolt.Begin(true)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	b := tx.Bucket(bucketAudit)
	orig := bytes.Clone(b.Get(u64(target)))
	var want db.AuditLink
	if err := msgpack.Unmarshal(orig, &want); err != nil {
		t.Fatal(err)
	}
	if want.Action != "complete" {
		t.Fatalf("audit record %d is %s, want complete", target, want.Action)
	}
	for i := range orig {
		for _, mask := range []byte{0x01, 0xff} {
			v := bytes.Clone(orig)
			v[i] ^= mask
			if err := b.Put(u64(target), v); err != nil {
				t.Fatal(err)
			}
			rep := verifyAudit(tx, db.AuditMark{}, -1)
			if rep.FirstBroken == target {
				continue
			}
			var got db.AuditLink
			if err := msgpack.Unmarshal(v, &got); err == nil && equalAudit(got, want) {
				continue // another encoding of the same record
			}
			t.Errorf("byte %d ^ %#x: verify = OK %v FirstBroken %d, want %d", i, mask, rep.OK, rep.FirstBroken, target)
		}
	}
}

func equalAudit(a, b db.AuditLink) bool {
	ea, err1 := encodeRecord(&a)
	eb, err2 := encodeRecord(&b)
	return err1 == nil && err2 == nil && bytes.Equal(ea, eb)
}

// The record appendAudit stores (encoded once, see sealAudit) is exactly
// the documented form: the map with its hash key, encoded as a whole, and
// hash = SHA-256(prev_hash ‖ the map without it).
func TestSealedAuditRecordIsTheWholeRecordEncoded(t *testing.T) {
	prev := bytes.Repeat([]byte{7}, 32)
	for i, rec := range []db.AuditLink{
		{Seq: 1, Time: 0, PrevHash: make([]byte, 32)},
		{Seq: 2, Time: 1_700_000_000_123_456_789, Principal: "local", Action: "claim", Subject: "job:42", Token: 3, PrevHash: prev},
		{Seq: 1 << 40, Time: -5, Principal: "p", Action: "complete", Subject: "job:18446744073709551615", Token: 1<<64 - 1,
			Details: map[string]string{"zeta": "1", "attestation_sha256": "ab", "reclaimed_from": "x|y"}, PrevHash: prev},
		{Seq: 9, Principal: string(bytes.Repeat([]byte("é"), 300)), Action: "sweep", Subject: "jobs", Details: map[string]string{"deleted": "500"}, PrevHash: prev},
	} {
		want := rec
		h, err := want.ComputeHash()
		if err != nil {
			t.Fatal(err)
		}
		want.Hash = h
		wantBytes, err := encodeRecord(&want)
		if err != nil {
			t.Fatal(err)
		}
		got := rec
		gotBytes, err := got.Seal()
		if err != nil {
			t.Fatalf("record %d: sealAudit: %v", i, err)
		}
		if !bytes.Equal(got.Hash, h) {
			t.Errorf("record %d: hash %x, want %x", i, got.Hash, h)
		}
		if !bytes.Equal(gotBytes, wantBytes) {
			t.Errorf("record %d: stored bytes\n%x\nwant\n%x", i, gotBytes, wantBytes)
		}
	}
}

// A head in meta that is not a sequence and a hash is corruption: a write
// that would append a link is refused with ErrCorrupt, leaves every link
// and job as it was, and the store writes again once the head is sound.
func TestACorruptAuditHeadRefusesAuditedWritesAndOverwritesNoLink(t *testing.T) {
	clk := newFakeClock()
	s := mustOpenStore(t, testOptions(clk))
	for range 3 {
		mustEnqueue(t, s, db.EnqueueRequest{})
	}
	snapshot := func() (links, jobs map[string][]byte, head []byte) {
		t.Helper()
		links, jobs = map[string][]byte{}, map[string][]byte{}
		err := s.bolt.View(func(tx *bbolt.Tx) error {
			copyAll := func(name []byte, into map[string][]byte) error {
				return tx.Bucket(name).ForEach(func(k, v []byte) error {
					into[string(k)] = bytes.Clone(v)
					return nil
				})
			}
			head = bytes.Clone(tx.Bucket(bucketMeta).Get(metaAuditHead))
			if err := copyAll(bucketAudit, links); err != nil {
				return err
			}
			return copyAll(bucketJobs, jobs)
		})
		if err != nil {
			t.Fatal(err)
		}
		return links, jobs, head
	}
	links, jobs, head := snapshot()
	if len(links) != 3 || len(jobs) != 3 || len(head) != 40 {
		t.Fatalf("before: %d links, %d jobs, a head of %d bytes; want 3, 3 and 40", len(links), len(jobs), len(head))
	}
	setHead := func(v []byte) {
		t.Helper()
		if err := s.bolt.Update(func(tx *bbolt.Tx) error { return tx.Bucket(bucketMeta).Put(metaAuditHead, v) }); err != nil {
			t.Fatal(err)
		}
	}
	bad := head[:20] // a sequence and part of a hash: read as before, it would append link 1 again or a link on a cut hash
	setHead(bad)

	if _, err := s.EnqueueJob(ctx, db.EnqueueRequest{}); !errors.Is(err, db.ErrCorrupt) {
		t.Errorf("EnqueueJob() with a corrupt audit head: error = %v, want %v", err, db.ErrCorrupt)
	}
	if _, err := s.ClaimJobs(ctx, db.ClaimRequest{Principal: "local", Worker: "w1"}); !errors.Is(err, db.ErrCorrupt) {
		t.Errorf("ClaimJobs() with a corrupt audit head: error = %v, want %v", err, db.ErrCorrupt)
	}
	afterLinks, afterJobs, afterHead := snapshot()
	sameLinks, sameJobs, sameHead := maps.EqualFunc(afterLinks, links, bytes.Equal), maps.EqualFunc(afterJobs, jobs, bytes.Equal), bytes.Equal(afterHead, bad)
	if !sameLinks || !sameJobs || !sameHead {
		t.Errorf("the refused writes changed the file: links unchanged %v, jobs unchanged %v, head unchanged %v", sameLinks, sameJobs, sameHead)
	}

	setHead(head)
	if _, err := s.EnqueueJob(ctx, db.EnqueueRequest{}); err != nil {
		t.Fatalf("EnqueueJob() after the head is restored: error = %v", err)
	}
	if rep, err := s.VerifyAudit(ctx); err != nil || !rep.OK || rep.HeadSeq != 4 {
		t.Errorf("VerifyAudit() = %+v, %v; want OK with head 4", rep, err)
	}
}
