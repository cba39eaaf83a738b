package bolt

import (
	"bytes"
	"context"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fenceq/fenceq/db"
	"github.com/fenceq/fenceq/internal/testclock"
	bbolt "go.etcd.io/bbolt"
)

var ctx = context.Background()

func newFakeClock() *testclock.Clock {
	return testclock.New(time.Date(2031, 3, 14, 15, 9, 26, 0, time.UTC))
}

// testOptions are the options most tests use: the fake clock and a fixed
// jitter, so that a backoff is a known number.
func testOptions(clk *testclock.Clock) Options {
	return Options{Rules: db.Rules{Now: clk.Now, Random: func() float64 { return 0.5 }}}
}

// mustOpenStore opens a store on a new file in tb.TempDir(). On cleanup it
// runs Check (bbolt's tx.Check and the store's index and count invariants)
// and fails the test if the file is inconsistent, then closes the store.
func mustOpenStore(tb testing.TB, opts Options) *Store {
	tb.Helper()
	return mustOpenStoreAt(tb, filepath.Join(tb.TempDir(), "fenceq.db"), opts)
}

// mustOpenStoreAt is mustOpenStore on a given path, for reopen tests. A
// store the test closed itself is not checked again on cleanup.
func mustOpenStoreAt(tb testing.TB, path string, opts Options) *Store {
	tb.Helper()
	if opts.LockTimeout == 0 {
		opts.LockTimeout = 200 * time.Millisecond
	}
	s, err := Open(path, opts)
	if err != nil {
		tb.Fatalf("Open(%s) error = %v", path, err)
	}
	tb.Cleanup(func() {
		if !storeClosed(s) {
			if err := s.Check(); err != nil {
				tb.Errorf("Check() at cleanup: %v", err)
			}
		}
		if err := s.Close(); err != nil {
			tb.Errorf("Close() error = %v", err)
		}
	})
	return s
}

func storeClosed(s *Store) bool {
	select {
	case <-s.closing:
		return true
	default:
		return false
	}
}

// fenced names a caller of principal "local".
func fenced(id uint64, worker string, token uint64) db.Fenced {
	return db.Fenced{ID: id, Principal: "local", Worker: worker, FencingToken: token}
}

func durationPtr(d time.Duration) *time.Duration { return &d }

func mustEnqueue(tb testing.TB, s *Store, req db.EnqueueRequest) db.Job {
	tb.Helper()
	if req.Principal == "" {
		req.Principal = "local"
	}
	res, err := s.EnqueueJob(context.Background(), req)
	if err != nil {
		tb.Fatalf("EnqueueJob(%+v) error = %v", req, err)
	}
	if !res.Created {
		tb.Fatalf("EnqueueJob(%+v) Created = false, want true", req)
	}
	return res.Job
}

// mustClaim claims one job for local|worker and fails unless it got one.
func mustClaim(tb testing.TB, s *Store, worker string, lease time.Duration, queues ...string) db.Job {
	tb.Helper()
	jobs, err := s.ClaimJobs(context.Background(), db.ClaimRequest{Principal: "local", Worker: worker, Queues: queues, Lease: lease})
	if err != nil {
		tb.Fatalf("ClaimJobs(%s, %v) error = %v", worker, queues, err)
	}
	if len(jobs) != 1 {
		tb.Fatalf("ClaimJobs(%s, %v) returned %d jobs, want 1", worker, queues, len(jobs))
	}
	return jobs[0]
}

// mustClaimNothing fails unless a claim for local|worker finds no job.
func mustClaimNothing(tb testing.TB, s *Store, worker string, queues ...string) {
	tb.Helper()
	jobs, err := s.ClaimJobs(context.Background(), db.ClaimRequest{Principal: "local", Worker: worker, Queues: queues})
	if err != nil {
		tb.Fatalf("ClaimJobs(%s, %v) error = %v", worker, queues, err)
	}
	if len(jobs) != 0 {
		tb.Fatalf("ClaimJobs(%s, %v) returned job %d (state %s), want none", worker, queues, jobs[0].ID, jobs[0].State)
	}
}

// rawJob returns a copy of the stored bytes of job id (nil when absent).
func rawJob(tb testing.TB, s *Store, id uint64) []byte {
	tb.Helper()
	var b []byte
	if err := s.bolt.View(func(tx *bbolt.Tx) error {
		if v := tx.Bucket(bucketJobs).Get(u64(id)); v != nil {
			b = bytes.Clone(v)
		}
		return nil
	}); err != nil {
		tb.Fatalf("read job %d: %v", id, err)
	}
	return b
}

// storedJob decodes the stored record of job id.
func storedJob(tb testing.TB, s *Store, id uint64) *jobRecord {
	tb.Helper()
	b := rawJob(tb, s, id)
	if b == nil {
		tb.Fatalf("job %d is not stored", id)
	}
	rec, err := decodeJob(b)
	if err != nil {
		tb.Fatalf("decode job %d: %v", id, err)
	}
	return rec
}

// auditHead returns a copy of meta audit_head (seq ‖ hash), nil when empty.
func auditHead(tb testing.TB, s *Store) []byte {
	tb.Helper()
	var b []byte
	if err := s.bolt.View(func(tx *bbolt.Tx) error {
		if v := tx.Bucket(bucketMeta).Get(metaAuditHead); v != nil {
			b = bytes.Clone(v)
		}
		return nil
	}); err != nil {
		tb.Fatalf("read audit head: %v", err)
	}
	return b
}

func auditSeq(tb testing.TB, s *Store) uint64 {
	tb.Helper()
	h := auditHead(tb, s)
	if h == nil {
		return 0
	}
	return idFromKey(h[:8])
}

// lastAudit returns the newest audit record.
func lastAudit(tb testing.TB, s *Store) db.AuditRecord {
	tb.Helper()
	seq := auditSeq(tb, s)
	if seq == 0 {
		tb.Fatalf("audit log is empty")
	}
	recs, err := s.ListAudit(context.Background(), seq-1, 1)
	if err != nil || len(recs) != 1 {
		tb.Fatalf("ListAudit(%d, 1) = %d records, %v; want 1 record", seq-1, len(recs), err)
	}
	return recs[0]
}

// snapshot is every key and value of every bucket, and every bucket's
// sequence, as strings (copies, safe after the transaction).
type snapshot map[string]string

func takeSnapshot(tb testing.TB, s *Store) snapshot {
	tb.Helper()
	snap, err := s.Snapshot()
	if err != nil {
		tb.Fatalf("snapshot: %v", err)
	}
	return snap
}

// diff lists the keys whose values differ between two snapshots.
func (a snapshot) diff(b snapshot) []string {
	var out []string
	for k, v := range a {
		w, ok := b[k]
		switch {
		case !ok:
			out = append(out, "removed "+k)
		case v != w:
			out = append(out, "changed "+k)
		}
	}
	for k := range b {
		if _, ok := a[k]; !ok {
			out = append(out, "added "+k)
		}
	}
	sort.Strings(out)
	return out
}

// assertUnchanged fails when the file changed between before and now.
func assertUnchanged(tb testing.TB, s *Store, before snapshot, what string) {
	tb.Helper()
	if d := before.diff(takeSnapshot(tb, s)); len(d) > 0 {
		tb.Errorf("%s changed the file: %s; want no change", what, strings.Join(d, ", "))
	}
}

func itoa(n uint64) string { return strconv.FormatUint(n, 10) }

// claimAll claims one job at a time for local|w1 until none is left and
// returns their ids in claim order.
func claimAll(t *testing.T, s *Store, queues ...string) []uint64 {
	t.Helper()
	var ids []uint64
	for {
		jobs, err := s.ClaimJobs(ctx, db.ClaimRequest{Principal: "local", Worker: "w1", Queues: queues})
		if err != nil {
			t.Fatalf("ClaimJobs(%v) error = %v", queues, err)
		}
		if len(jobs) == 0 {
			return ids
		}
		ids = append(ids, jobs[0].ID)
	}
}
