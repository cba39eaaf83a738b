package bolt_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/fenceq/fenceq/db"
	"github.com/fenceq/fenceq/db/bolt"
	"github.com/fenceq/fenceq/db/dbtest"
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

func TestStore_ListDeadJobs_QueueByQueueNewestFirst(t *testing.T) {
	s, clk := newStatusStore(t)
	var a, b []uint64 // in the order they died
	for i := 0; i < 3; i++ {
		b = append(b, statusKill(t, s, "b").ID)
		clk.Advance(time.Second)
		a = append(a, statusKill(t, s, "a").ID)
		clk.Advance(time.Second)
	}
	statusEnqueue(t, s, db.EnqueueRequest{Queue: "a"}) // not dead: not listed
	tests := []struct {
		req  db.StateListRequest
		want []uint64
	}{
		{db.StateListRequest{}, []uint64{a[2], a[1], a[0], b[2], b[1], b[0]}},
		{db.StateListRequest{Limit: 4}, []uint64{a[2], a[1], a[0], b[2]}},
		{db.StateListRequest{Queue: "b", Limit: 2}, []uint64{b[2], b[1]}},
		{db.StateListRequest{Queue: "b"}, []uint64{b[2], b[1], b[0]}},
		{db.StateListRequest{Queue: "c"}, []uint64{}},
	}
	for _, tt := range tests {
		req := tt.req
		req.State = db.StateDead
		got, err := s.ListJobsInState(statusCtx, req)
		if err != nil || fmt.Sprint(statusIDs(got)) != fmt.Sprint(tt.want) {
			t.Errorf("ListDeadJobs(%+v) = %v, %v; want %v", tt.req, statusIDs(got), err, tt.want)
		}
	}
	// A retried job leaves the dead index; a cancelled one too.
	if _, err := s.RetryJob(statusCtx, db.JobRequest{Principal: "p", ID: a[1]}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.CancelJob(statusCtx, db.JobRequest{Principal: "p", ID: b[0]}); err != nil {
		t.Fatal(err)
	}
	got, err := s.ListJobsInState(statusCtx, db.StateListRequest{State: db.StateDead})
	if want := []uint64{a[2], a[0], b[2], b[1]}; err != nil || fmt.Sprint(statusIDs(got)) != fmt.Sprint(want) {
		t.Errorf("ListDeadJobs after a retry and a cancel = %v, %v; want %v", statusIDs(got), err, want)
	}
	if err := s.Check(); err != nil {
		t.Errorf("Check() = %v", err)
	}
}

func TestStore_ListClaimedAndScheduledJobs_InIndexOrder(t *testing.T) {
	s, _ := newStatusStore(t)
	var late, soon []uint64
	for i := 0; i < 2; i++ {
		late = append(late, statusEnqueue(t, s, db.EnqueueRequest{Queue: "x", Delay: time.Hour}).ID)
		soon = append(soon, statusEnqueue(t, s, db.EnqueueRequest{Queue: "y", Delay: time.Minute}).ID)
	}
	statusEnqueue(t, s, db.EnqueueRequest{Queue: "y"})
	statusEnqueue(t, s, db.EnqueueRequest{Queue: "y"})
	statusEnqueue(t, s, db.EnqueueRequest{Queue: "x"})
	long := statusClaim(t, s, "y", time.Hour)
	short := statusClaim(t, s, "y", time.Minute)
	other := statusClaim(t, s, "x", 50*time.Minute)

	claimed, err := s.ListJobsInState(statusCtx, db.StateListRequest{State: db.StateClaimed})
	if want := []uint64{other.ID, short.ID, long.ID}; err != nil || fmt.Sprint(statusIDs(claimed)) != fmt.Sprint(want) {
		t.Errorf("ListClaimedJobs() = %v, %v; want queue x, then y by lease expiry: %v", statusIDs(claimed), err, want)
	}
	claimed, err = s.ListJobsInState(statusCtx, db.StateListRequest{State: db.StateClaimed, Queue: "y", Limit: 1})
	if want := []uint64{short.ID}; err != nil || fmt.Sprint(statusIDs(claimed)) != fmt.Sprint(want) {
		t.Errorf("ListClaimedJobs(y, 1) = %v, %v; want %v", statusIDs(claimed), err, want)
	}
	sched, err := s.ListJobsInState(statusCtx, db.StateListRequest{State: db.StateScheduled})
	if want := []uint64{soon[0], soon[1], late[0], late[1]}; err != nil || fmt.Sprint(statusIDs(sched)) != fmt.Sprint(want) {
		t.Errorf("ListScheduledJobs() = %v, %v; want by run_at: %v", statusIDs(sched), err, want)
	}
	sched, err = s.ListJobsInState(statusCtx, db.StateListRequest{State: db.StateScheduled, Queue: "x", Limit: 1})
	if want := []uint64{late[0]}; err != nil || fmt.Sprint(statusIDs(sched)) != fmt.Sprint(want) {
		t.Errorf("ListScheduledJobs(x, 1) = %v, %v; want %v", statusIDs(sched), err, want)
	}
	for _, req := range []db.StateListRequest{{Limit: -1}, {Limit: db.MaxListLimit + 1}, {Queue: "bad queue"}} {
		for _, st := range []db.State{db.StateClaimed, db.StateScheduled, db.StateDead} {
			req.State = st
			if _, err := s.ListJobsInState(statusCtx, req); !errors.Is(err, dbtest.ErrInvalidArgument) {
				t.Errorf("ListJobsInState(%+v) error = %v, want ErrInvalidArgument", req, err)
			}
		}
	}
	for _, st := range []db.State{"", db.StateAvailable, db.StateCompleted, db.StateCancelled, "bogus"} {
		if _, err := s.ListJobsInState(statusCtx, db.StateListRequest{State: st}); !errors.Is(err, dbtest.ErrInvalidArgument) {
			t.Errorf("ListJobsInState(state %q) error = %v, want ErrInvalidArgument", st, err)
		}
	}
}

func TestStore_AuditCountsAndSubjects(t *testing.T) {
	s, clk := newStatusStore(t)
	// A job whose lease expires and is reclaimed, then expires with no
	// attempts left and goes dead on the next claim.
	j := statusEnqueue(t, s, db.EnqueueRequest{Queue: "q", MaxAttempts: 2})
	statusClaim(t, s, "q", time.Second)
	clk.Advance(2 * time.Second)
	statusClaim(t, s, "q", time.Second)
	clk.Advance(2 * time.Second)
	if _, err := s.ClaimJobs(statusCtx, db.ClaimRequest{Principal: "p", Worker: "w", Queues: []string{"q"}}); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.GetJob(statusCtx, j.ID); got.State != db.StateDead || got.LastError != "lease expired" {
		t.Fatalf("job after two expiries = %+v, want dead with lease expired", got)
	}
	statusKill(t, s, "q")
	if _, err := s.AcquireLease(statusCtx, db.AcquireLeaseRequest{Principal: "p", Name: "/a", Holder: "h", TTL: time.Minute}); err != nil {
		t.Fatal(err)
	}

	c, err := s.AuditCounts(statusCtx)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]uint64{"enqueue": 2, "claim": 3, "dead": 2, "acquire": 1}
	if fmt.Sprint(c.Actions) != fmt.Sprint(want) || c.Reclaimed != 1 || c.ExpiredDead != 1 {
		t.Errorf("AuditCounts() = %+v, want actions %v, 1 reclaimed, 1 expired dead", c, want)
	}
	page, err := s.ListAuditBySubject(statusCtx, db.AuditSubjectRequest{Subject: db.JobSubject(j.ID)})
	var actions []string
	for _, r := range page.Records {
		actions = append(actions, r.Action)
	}
	if err != nil || fmt.Sprint(actions) != "[dead claim claim enqueue]" || page.Next != 0 {
		t.Errorf("ListAuditBySubject(job %d) = %v next %d, %v; want [dead claim claim enqueue]", j.ID, actions, page.Next, err)
	}
	page, err = s.ListAuditBySubject(statusCtx, db.AuditSubjectRequest{Subject: "lease:/a"})
	if err != nil || len(page.Records) != 1 || page.Records[0].Action != "acquire" {
		t.Errorf("ListAuditBySubject(lease:/a) = %+v, %v; want its acquire", page, err)
	}
	head, err := s.AuditHead(statusCtx)
	if rep, _ := s.VerifyAudit(statusCtx); err != nil || head.Seq != rep.HeadSeq || head.Hash != rep.HeadHash || head.Seq != 8 {
		t.Errorf("AuditHead() = %+v, %v; want the verified head %d %s (8 records)", head, err, rep.HeadSeq, rep.HeadHash)
	}
	for _, req := range []db.AuditSubjectRequest{{Subject: "job:1", Limit: -1}, {Subject: "job:1", Limit: db.MaxListLimit + 1}, {}} {
		if _, err := s.ListAuditBySubject(statusCtx, req); !errors.Is(err, dbtest.ErrInvalidArgument) {
			t.Errorf("ListAuditBySubject(%+v) error = %v, want ErrInvalidArgument", req, err)
		}
	}
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
	err = raw.Update(func(tx *bbolt.Tx) error {
		for _, b := range []string{"idx_dead", "idx_audit_subject", "audit_counts"} {
			if err := tx.DeleteBucket([]byte(b)); err != nil {
				return fmt.Errorf("delete bucket %s: %w", b, err)
			}
		}
		return nil
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
