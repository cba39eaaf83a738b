package bolt_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/fenceq/fenceq/db"
	"github.com/fenceq/fenceq/db/bolt"
	"github.com/fenceq/fenceq/internal/testclock"
	bbolt "go.etcd.io/bbolt"
)

// Tests of the status page's read side: the state indexes, the dead-jobs
// index, the audit subject index and counters, and their building on a
// file made before they existed. Names carry "status" so that they cannot
// clash with the package's other external tests.

// openStatusStore opens a store on path with clk; on cleanup it runs Check
// unless the test closed the store itself.
func openStatusStore(t *testing.T, path string, clk *testclock.Clock) *bolt.Store {
	t.Helper()
	s, err := bolt.Open(path, bolt.Options{Rules: db.Rules{Now: clk.Now, Random: func() float64 { return 0.5 }}, LockTimeout: time.Second})
	if err != nil {
		t.Fatalf("Open(%s) error = %v", path, err)
	}
	t.Cleanup(func() {
		if s.Ping(statusCtx) == nil { // not closed by the test
			if err := s.Check(); err != nil {
				t.Errorf("Check() at cleanup: %v", err)
			}
		}
		s.Close()
	})
	return s
}

func newStatusStore(t *testing.T) (*bolt.Store, *testclock.Clock) {
	clk := testclock.New(time.Date(2030, 5, 1, 8, 0, 0, 0, time.UTC))
	return openStatusStore(t, filepath.Join(t.TempDir(), "fenceq.db"), clk), clk
}

var statusCtx = context.Background()

func statusEnqueue(t *testing.T, s *bolt.Store, req db.EnqueueRequest) db.Job {
	t.Helper()
	req.Principal = "p"
	r, err := s.EnqueueJob(statusCtx, req)
	if err != nil {
		t.Fatalf("EnqueueJob(%+v) error = %v", req, err)
	}
	return r.Job
}

func statusClaim(t *testing.T, s *bolt.Store, queue string, lease time.Duration) db.Job {
	t.Helper()
	jobs, err := s.ClaimJobs(statusCtx, db.ClaimRequest{Principal: "p", Worker: "w", Queues: []string{queue}, Lease: lease})
	if err != nil || len(jobs) != 1 {
		t.Fatalf("ClaimJobs(%s) = %v, %v; want one job", queue, jobs, err)
	}
	return jobs[0]
}

// statusKill enqueues a job in queue and makes it dead with a final failure.
func statusKill(t *testing.T, s *bolt.Store, queue string) db.Job {
	t.Helper()
	statusEnqueue(t, s, db.EnqueueRequest{Queue: queue})
	j := statusClaim(t, s, queue, time.Minute)
	dead, err := s.FailJob(statusCtx, db.FailRequest{Fenced: db.Fenced{ID: j.ID, Principal: "p", Worker: "w", FencingToken: j.Attempts},
		Error: fmt.Sprintf("error of job %d", j.ID), Final: true})
	if err != nil || dead.State != db.StateDead {
		t.Fatalf("FailJob(final) = %+v, %v; want dead", dead, err)
	}
	return dead
}

func statusIDs(jobs []db.Job) []uint64 {
	ids := []uint64{}
	for _, j := range jobs {
		ids = append(ids, j.ID)
	}
	return ids
}

// TestOpen_BuildsTheNewIndexesOfAnOlderFile removes the dead index, the
// audit subject index and the audit counters from a file, as a build from
// before them would have left it. Read-only, the file still checks (it has
// nothing to show); opened for writing, the indexes are built from the jobs
// and the log and match what a file kept with them all along holds.
func TestOpen_BuildsTheNewIndexesOfAnOlderFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "old.db")
	clk := testclock.New(time.Date(2030, 5, 1, 8, 0, 0, 0, time.UTC))
	s := openStatusStore(t, path, clk)
	var dead []uint64
	for i := 0; i < 3; i++ {
		dead = append([]uint64{statusKill(t, s, "q").ID}, dead...)
		clk.Advance(time.Second)
	}
	statusEnqueue(t, s, db.EnqueueRequest{Queue: "q"})
	wantCounts, _ := s.AuditCounts(statusCtx)
	wantHistory, _ := s.ListAuditBySubject(statusCtx, db.AuditSubjectRequest{Subject: db.JobSubject(dead[1])})
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	raw, err := bbolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	// The file as an early build of schema version 1 left it.
	err = raw.Update(func(tx *bbolt.Tx) error {
		for _, b := range []string{"idx_dead", "idx_audit_subject", "audit_counts"} {
			if err := tx.DeleteBucket([]byte(b)); err != nil {
				return fmt.Errorf("delete bucket %s: %w", b, err)
			}
		}
		return tx.Bucket([]byte("meta")).Put([]byte("schema_version"), binary.BigEndian.AppendUint64(nil, 1))
	})
	raw.Close()
	if err != nil {
		t.Fatal(err)
	}

	ro, err := bolt.Open(path, bolt.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := ro.Check(); err != nil {
		t.Errorf("Check() of the older file, read-only = %v, want nil", err)
	}
	if got, err := ro.ListJobsInState(statusCtx, db.StateListRequest{State: db.StateDead}); err != nil || len(got) != 0 {
		t.Errorf("ListDeadJobs() of the older file, read-only = %v, %v; want none", statusIDs(got), err)
	}
	if got, err := ro.ListAuditBySubject(statusCtx, db.AuditSubjectRequest{Subject: db.JobSubject(dead[1])}); err != nil || len(got.Records) != 0 {
		t.Errorf("ListAuditBySubject() of the older file, read-only = %+v, %v; want none", got, err)
	}
	ro.Close()

	s = openStatusStore(t, path, clk)
	if err := s.Check(); err != nil {
		t.Errorf("Check() after the indexes were built = %v", err)
	}
	got, err := s.ListJobsInState(statusCtx, db.StateListRequest{State: db.StateDead})
	if err != nil || fmt.Sprint(statusIDs(got)) != fmt.Sprint(dead) {
		t.Errorf("ListDeadJobs() after the build = %v, %v; want %v", statusIDs(got), err, dead)
	}
	if c, err := s.AuditCounts(statusCtx); err != nil || fmt.Sprint(c) != fmt.Sprint(wantCounts) {
		t.Errorf("AuditCounts() after the build = %+v, %v; want %+v", c, err, wantCounts)
	}
	h, err := s.ListAuditBySubject(statusCtx, db.AuditSubjectRequest{Subject: db.JobSubject(dead[1])})
	if err != nil || fmt.Sprint(h) != fmt.Sprint(wantHistory) || len(h.Records) != 3 {
		t.Errorf("ListAuditBySubject() after the build = %+v, %v; want %+v", h, err, wantHistory)
	}
	// New records go on from there.
	if _, err := s.RetryJob(statusCtx, db.JobRequest{Principal: "p", ID: dead[1]}); err != nil {
		t.Fatal(err)
	}
	if c, _ := s.AuditCounts(statusCtx); c.Actions["retry"] != 1 || c.Actions["enqueue"] != wantCounts.Actions["enqueue"] {
		t.Errorf("AuditCounts() after a retry = %+v, want one retry more", c)
	}
}

func TestStore_FileStats(t *testing.T) {
	s, _ := newStatusStore(t)
	before, err := s.FileStats()
	if err != nil {
		t.Fatal(err)
	}
	statusEnqueue(t, s, db.EnqueueRequest{Queue: "q"})
	if _, err := s.GetJob(statusCtx, 1); err != nil {
		t.Fatal(err)
	}
	after, err := s.FileStats()
	if err != nil {
		t.Fatal(err)
	}
	if after.SizeBytes <= 0 || after.PageWrites <= before.PageWrites || after.ReadTxs <= before.ReadTxs || after.WriteTime <= 0 {
		t.Errorf("FileStats() before %+v, after an enqueue and a read %+v; want a size and more page writes and read transactions", before, after)
	}
}
