package bolt

import (
	"bytes"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/fenceq/fenceq/db"
	"github.com/fenceq/fenceq/db/dbtest"
	bbolt "go.etcd.io/bbolt"
)

func listAllJobs(t *testing.T, s *Store) []db.Job {
	t.Helper()
	page, err := s.ListJobs(ctx, db.ListRequest{Limit: db.MaxListLimit})
	if err != nil || page.Next != 0 {
		t.Fatalf("ListJobs() next %d, error %v; want one page", page.Next, err)
	}
	return page.Jobs
}

func TestReopeningTheFileKeepsEveryJobIndexAndCount(t *testing.T) {
	// Two stores go through the same deterministic workload; one is closed
	// and reopened, the other stays open as the reference.
	clk, refClk := newFakeClock(), newFakeClock()
	path := filepath.Join(t.TempDir(), "fenceq.db")
	s := mustOpenStoreAt(t, path, testOptions(clk))
	ref := mustOpenStore(t, testOptions(refClk))
	dbtest.MixedWorkload(t, s, clk)
	dbtest.MixedWorkload(t, ref, refClk)
	clk.Advance(time.Minute) // scheduled jobs are due and both claims expired
	refClk.Advance(time.Minute)

	jobs := listAllJobs(t, s)
	if refJobs := listAllJobs(t, ref); !reflect.DeepEqual(refJobs, jobs) {
		t.Fatalf("the workload is not deterministic: jobs\n%+v\nand\n%+v", jobs, refJobs)
	}
	stats, err := s.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	audit, err := s.VerifyAudit(ctx)
	if err != nil || !audit.OK {
		t.Fatalf("VerifyAudit() before close = %+v, %v", audit, err)
	}
	if err := s.Check(); err != nil {
		t.Fatalf("Check() before close: %v", err)
	}

	if err := s.Close(); err != nil {
		t.Fatalf("Close() error = %v", err)
	}
	if _, err := s.GetJob(ctx, 1); !errors.Is(err, db.ErrClosed) {
		t.Errorf("GetJob() after Close error = %v, want %v", err, db.ErrClosed)
	}
	if _, err := s.EnqueueJob(ctx, db.EnqueueRequest{}); !errors.Is(err, db.ErrClosed) {
		t.Errorf("EnqueueJob() after Close error = %v, want %v", err, db.ErrClosed)
	}

	r := mustOpenStoreAt(t, path, testOptions(clk))
	if err := r.Check(); err != nil {
		t.Fatalf("Check() after reopen: %v", err)
	}
	if got := listAllJobs(t, r); !reflect.DeepEqual(got, jobs) {
		t.Errorf("jobs after reopen =\n%+v\nwant\n%+v", got, jobs)
	}
	if got, err := r.Stats(ctx); err != nil || !reflect.DeepEqual(got, stats) {
		t.Errorf("Stats() after reopen = %+v, %v; want %+v", got, err, stats)
	}
	if got, err := r.VerifyAudit(ctx); err != nil || got != audit {
		t.Errorf("VerifyAudit() after reopen = %+v, %v; want %+v", got, err, audit)
	}

	// Claims continue as they would have without the reopen: two expired
	// claims, two due scheduled jobs and two available ones.
	want := claimAll(t, ref, "a", "b")
	got := claimAll(t, r, "a", "b")
	if !reflect.DeepEqual(got, want) {
		t.Errorf("claim order after reopen = %v, want %v (the order of the store that stayed open)", got, want)
	}
	if len(got) != 6 {
		t.Errorf("claims after reopen took %d jobs (%v), want 6", len(got), got)
	}
	if got, want := listAllJobs(t, r), listAllJobs(t, ref); !reflect.DeepEqual(got, want) {
		t.Errorf("jobs after the claims =\n%+v\nwant\n%+v", got, want)
	}

	// Ids are never reused, and idempotency keys are still known.
	next := mustEnqueue(t, r, db.EnqueueRequest{Queue: "a"})
	if next.ID != uint64(len(jobs))+1 {
		t.Errorf("first id after reopen = %d, want %d", next.ID, len(jobs)+1)
	}
	res, err := r.EnqueueJob(ctx, db.EnqueueRequest{Queue: "b", IdempotencyKey: "b-1"})
	if err != nil || res.Created || res.Job.ID != 8 {
		t.Errorf("enqueue with key b-1 after reopen = id %d created %v, %v; want job 8, not created", res.Job.ID, res.Created, err)
	}
}

func TestIdsAreNeverReusedAcrossReopens(t *testing.T) {
	clk := newFakeClock()
	path := filepath.Join(t.TempDir(), "fenceq.db")
	seen := map[uint64]bool{}
	for round := range 3 {
		s := mustOpenStoreAt(t, path, testOptions(clk))
		for range 3 {
			id := mustEnqueue(t, s, db.EnqueueRequest{}).ID
			if seen[id] {
				t.Fatalf("round %d: id %d was used before", round, id)
			}
			seen[id] = true
		}
		if err := s.Check(); err != nil {
			t.Fatal(err)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if len(seen) != 9 {
		t.Errorf("%d distinct ids, want 9", len(seen))
	}
}

func TestOpenOfAFileThatIsNotADatabaseReturnsErrCorrupt(t *testing.T) {
	path := filepath.Join(t.TempDir(), "notes.txt")
	if err := os.WriteFile(path, make([]byte, 8192), 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := Open(path, Options{LockTimeout: 100 * time.Millisecond})
	if !errors.Is(err, db.ErrCorrupt) {
		t.Errorf("Open(zero-filled file) error = %v, want %v", err, db.ErrCorrupt)
	}
	if s != nil {
		s.Close()
	}
}

// A file shorter than the pages its meta page counts (a copy cut short)
// is refused as corrupt, read-write and read-only, and left as it is.
// Before, bbolt read those pages past the end of its memory map: the test
// process died of SIGBUS or SIGSEGV, or of a failed page assertion.
func TestOpenOfACutFileReturnsErrCorruptAndLeavesItAsItIs(t *testing.T) {
	path := filepath.Join(t.TempDir(), "fenceq.db")
	s := mustOpenStoreAt(t, path, Options{})
	reqs := make([]db.EnqueueRequest, 500)
	for i := range reqs {
		reqs[i] = db.EnqueueRequest{Queue: "q", Payload: []byte(`{"pad":"0123456789012345678901234567890123456789"}`)}
	}
	for range 4 {
		if _, err := s.EnqueueJobs(ctx, reqs); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	full, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := bbolt.Open(path, 0o600, &bbolt.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	var used int64
	_ = raw.View(func(tx *bbolt.Tx) error { used = tx.Size(); return nil })
	raw.Close()
	page := int64(os.Getpagesize())
	if used < 16*page || used > int64(len(full)) {
		t.Fatalf("the file's pages reach to byte %d of %d; want a file of at least 16 pages", used, len(full))
	}

	for _, n := range []int64{2 * page, 3*page + 100, used / 2, used - page, used - 1} {
		cut := filepath.Join(t.TempDir(), "cut.db")
		if err := os.WriteFile(cut, full[:n], 0o600); err != nil {
			t.Fatal(err)
		}
		for _, readOnly := range []bool{false, true} {
			s, err := Open(cut, Options{ReadOnly: readOnly, LockTimeout: 100 * time.Millisecond})
			if !errors.Is(err, db.ErrCorrupt) || !strings.Contains(err.Error(), "cut short") {
				t.Errorf("Open(file cut at %d of %d bytes, read-only %v) error = %v, want %v saying it was cut short", n, used, readOnly, err, db.ErrCorrupt)
			}
			if s != nil {
				s.Close()
			}
			if after, err := os.ReadFile(cut); err != nil || !bytes.Equal(after, full[:n]) {
				t.Errorf("the file cut at %d changed (%d bytes now, %v)", n, len(after), err)
			}
		}
	}
	// Whole, it opens with every job.
	s = mustOpenStoreAt(t, path, Options{})
	if st, err := s.Stats(ctx); err != nil || len(st) != 1 || st[0].Counts[db.StateAvailable] != 2000 {
		t.Fatalf("the whole file: stats %+v, %v; want 2000 available jobs in q", st, err)
	}
}

func TestOpenOfAFileHeldByAnotherStoreReturnsErrLocked(t *testing.T) {
	s := mustOpenStore(t, Options{})
	other, err := Open(s.Path(), Options{LockTimeout: 50 * time.Millisecond})
	if !errors.Is(err, ErrLocked) {
		t.Errorf("second Open(%s) error = %v, want %v", s.Path(), err, ErrLocked)
	}
	if other != nil {
		other.Close()
	}
}

// setSchemaVersion writes version v into the closed file at path.
func setSchemaVersion(t *testing.T, path string, v uint64) {
	t.Helper()
	raw, err := bbolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	if err := raw.Update(func(tx *bbolt.Tx) error { return tx.Bucket(bucketMeta).Put(metaSchemaVersion, u64(v)) }); err != nil {
		t.Fatal(err)
	}
}

func readSchemaVersion(t *testing.T, path string) uint64 {
	t.Helper()
	raw, err := bbolt.Open(path, 0o600, &bbolt.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	var v uint64
	_ = raw.View(func(tx *bbolt.Tx) error { v = idFromKey(tx.Bucket(bucketMeta).Get(metaSchemaVersion)); return nil })
	return v
}

// TestSchemaVersion_AVersion2FileIsUpgradedToTheCheckpointVersion: a
// file of schema version 2 (before the audit checkpoint) opens, keeps its
// jobs and its chain, and becomes this build's version (3, the checkpoint's,
// or later); archived records can then be
// removed from it.
func TestSchemaVersion_AVersion2FileIsUpgradedToTheCheckpointVersion(t *testing.T) {
	path := filepath.Join(t.TempDir(), "fenceq.db")
	clk := newFakeClock()
	s := mustOpenStoreAt(t, path, testOptions(clk))
	mustEnqueue(t, s, db.EnqueueRequest{Principal: "p", Queue: "a"})
	s.Close()
	setSchemaVersion(t, path, 2)
	s = mustOpenStoreAt(t, path, testOptions(clk))
	if _, err := s.GetJob(ctx, 1); err != nil {
		t.Errorf("GetJob(1) on the upgraded file: %v", err)
	}
	recs, err := s.ListAudit(ctx, 0, 10)
	if err != nil || len(recs) != 1 {
		t.Fatalf("ListAudit() = %v, %v", recs, err)
	}
	clk.Advance(time.Hour)
	h, _ := hex.DecodeString(recs[0].Hash)
	if cp, err := s.RemoveAudit(ctx, db.RemoveAuditRequest{Principal: "admin", Through: db.AuditMark{Seq: 1, Hash: h}, Before: clk.Now()}); err != nil || cp.Seq != 1 {
		t.Errorf("RemoveAudit(through 1) on the upgraded file = %+v, %v; want the checkpoint at 1", cp, err)
	}
	s.Close()
	if v := readSchemaVersion(t, path); v != schemaVersion || schemaVersion < 3 {
		t.Errorf("schema version after opening a version 2 file = %d (this build: %d), want this build's, at least 3 (the checkpoint's)", v, schemaVersion)
	}
}
