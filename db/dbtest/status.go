package dbtest

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/fenceq/fenceq/db"
	"github.com/fenceq/fenceq/internal/testclock"
)

// Tests of the status page's read side: the state indexes, the dead-jobs
// index, the audit subject index and counters,.

func newStatusStore(t *testing.T, newStore Factory) (db.Store, *testclock.Clock) {
	clk := testclock.New(time.Date(2030, 5, 1, 8, 0, 0, 0, time.UTC))
	return newStore(t, db.Rules{Now: clk.Now, Random: func() float64 { return 0.5 }}), clk
}

func statusEnqueue(t *testing.T, s db.Store, req db.EnqueueRequest) db.Job {
	t.Helper()
	req.Principal = "p"
	r, err := s.EnqueueJob(ctx, req)
	if err != nil {
		t.Fatalf("EnqueueJob(%+v) error = %v", req, err)
	}
	return r.Job
}

func statusClaim(t *testing.T, s db.Store, queue string, lease time.Duration) db.Job {
	t.Helper()
	jobs, err := s.ClaimJobs(ctx, db.ClaimRequest{Principal: "p", Worker: "w", Queues: []string{queue}, Lease: lease})
	if err != nil || len(jobs) != 1 {
		t.Fatalf("ClaimJobs(%s) = %v, %v; want one job", queue, jobs, err)
	}
	return jobs[0]
}

// statusKill enqueues a job in queue and makes it dead with a final failure.
func statusKill(t *testing.T, s db.Store, queue string) db.Job {
	t.Helper()
	statusEnqueue(t, s, db.EnqueueRequest{Queue: queue})
	j := statusClaim(t, s, queue, time.Minute)
	dead, err := s.FailJob(ctx, db.FailRequest{Fenced: db.Fenced{ID: j.ID, Principal: "p", Worker: "w", FencingToken: j.Attempts},
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

func testStore_ListDeadJobs_QueueByQueueNewestFirst(t *testing.T, newStore Factory) {
	s, clk := newStatusStore(t, newStore)
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
		got, err := s.ListJobsInState(ctx, req)
		if err != nil || fmt.Sprint(statusIDs(got)) != fmt.Sprint(tt.want) {
			t.Errorf("ListDeadJobs(%+v) = %v, %v; want %v", tt.req, statusIDs(got), err, tt.want)
		}
	}
	// A retried job leaves the dead index; a cancelled one too.
	if _, err := s.RetryJob(ctx, db.JobRequest{Principal: "p", ID: a[1]}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.CancelJob(ctx, db.JobRequest{Principal: "p", ID: b[0]}); err != nil {
		t.Fatal(err)
	}
	got, err := s.ListJobsInState(ctx, db.StateListRequest{State: db.StateDead})
	if want := []uint64{a[2], a[0], b[2], b[1]}; err != nil || fmt.Sprint(statusIDs(got)) != fmt.Sprint(want) {
		t.Errorf("ListDeadJobs after a retry and a cancel = %v, %v; want %v", statusIDs(got), err, want)
	}
	if c, ok := s.(Checker); ok {
		if err := c.Check(); err != nil {
			t.Errorf("Check() = %v", err)
		}
	}
}

func testStore_ListClaimedAndScheduledJobs_InIndexOrder(t *testing.T, newStore Factory) {
	s, _ := newStatusStore(t, newStore)
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

	claimed, err := s.ListJobsInState(ctx, db.StateListRequest{State: db.StateClaimed})
	if want := []uint64{other.ID, short.ID, long.ID}; err != nil || fmt.Sprint(statusIDs(claimed)) != fmt.Sprint(want) {
		t.Errorf("ListClaimedJobs() = %v, %v; want queue x, then y by lease expiry: %v", statusIDs(claimed), err, want)
	}
	claimed, err = s.ListJobsInState(ctx, db.StateListRequest{State: db.StateClaimed, Queue: "y", Limit: 1})
	if want := []uint64{short.ID}; err != nil || fmt.Sprint(statusIDs(claimed)) != fmt.Sprint(want) {
		t.Errorf("ListClaimedJobs(y, 1) = %v, %v; want %v", statusIDs(claimed), err, want)
	}
	sched, err := s.ListJobsInState(ctx, db.StateListRequest{State: db.StateScheduled})
	if want := []uint64{soon[0], soon[1], late[0], late[1]}; err != nil || fmt.Sprint(statusIDs(sched)) != fmt.Sprint(want) {
		t.Errorf("ListScheduledJobs() = %v, %v; want by run_at: %v", statusIDs(sched), err, want)
	}
	sched, err = s.ListJobsInState(ctx, db.StateListRequest{State: db.StateScheduled, Queue: "x", Limit: 1})
	if want := []uint64{late[0]}; err != nil || fmt.Sprint(statusIDs(sched)) != fmt.Sprint(want) {
		t.Errorf("ListScheduledJobs(x, 1) = %v, %v; want %v", statusIDs(sched), err, want)
	}
	for _, req := range []db.StateListRequest{{Limit: -1}, {Limit: db.MaxListLimit + 1}, {Queue: "bad queue"}} {
		for _, st := range []db.State{db.StateClaimed, db.StateScheduled, db.StateDead} {
			req.State = st
			if _, err := s.ListJobsInState(ctx, req); !errors.Is(err, ErrInvalidArgument) {
				t.Errorf("ListJobsInState(%+v) error = %v, want ErrInvalidArgument", req, err)
			}
		}
	}
	for _, st := range []db.State{"", db.StateAvailable, db.StateCompleted, db.StateCancelled, "bogus"} {
		if _, err := s.ListJobsInState(ctx, db.StateListRequest{State: st}); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("ListJobsInState(state %q) error = %v, want ErrInvalidArgument", st, err)
		}
	}
}

func testStore_AuditCountsAndSubjects(t *testing.T, newStore Factory) {
	s, clk := newStatusStore(t, newStore)
	// A job whose lease expires and is reclaimed, then expires with no
	// attempts left and goes dead on the next claim.
	j := statusEnqueue(t, s, db.EnqueueRequest{Queue: "q", MaxAttempts: 2})
	statusClaim(t, s, "q", time.Second)
	clk.Advance(2 * time.Second)
	statusClaim(t, s, "q", time.Second)
	clk.Advance(2 * time.Second)
	if _, err := s.ClaimJobs(ctx, db.ClaimRequest{Principal: "p", Worker: "w", Queues: []string{"q"}}); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.GetJob(ctx, j.ID); got.State != db.StateDead || got.LastError != "lease expired" {
		t.Fatalf("job after two expiries = %+v, want dead with lease expired", got)
	}
	statusKill(t, s, "q")
	if _, err := s.AcquireLease(ctx, db.AcquireLeaseRequest{Principal: "p", Name: "/a", Holder: "h", TTL: time.Minute}); err != nil {
		t.Fatal(err)
	}

	c, err := s.AuditCounts(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]uint64{"enqueue": 2, "claim": 3, "dead": 2, "acquire": 1}
	if fmt.Sprint(c.Actions) != fmt.Sprint(want) || c.Reclaimed != 1 || c.ExpiredDead != 1 {
		t.Errorf("AuditCounts() = %+v, want actions %v, 1 reclaimed, 1 expired dead", c, want)
	}
	page, err := s.ListAuditBySubject(ctx, db.AuditSubjectRequest{Subject: db.JobSubject(j.ID)})
	var actions []string
	for _, r := range page.Records {
		actions = append(actions, r.Action)
	}
	if err != nil || fmt.Sprint(actions) != "[dead claim claim enqueue]" || page.Next != 0 {
		t.Errorf("ListAuditBySubject(job %d) = %v next %d, %v; want [dead claim claim enqueue]", j.ID, actions, page.Next, err)
	}
	page, err = s.ListAuditBySubject(ctx, db.AuditSubjectRequest{Subject: "lease:/a"})
	if err != nil || len(page.Records) != 1 || page.Records[0].Action != "acquire" {
		t.Errorf("ListAuditBySubject(lease:/a) = %+v, %v; want its acquire", page, err)
	}
	head, err := s.AuditHead(ctx)
	if rep, _ := s.VerifyAudit(ctx); err != nil || head.Seq != rep.HeadSeq || head.Hash != rep.HeadHash || head.Seq != 8 {
		t.Errorf("AuditHead() = %+v, %v; want the verified head %d %s (8 records)", head, err, rep.HeadSeq, rep.HeadHash)
	}
	for _, req := range []db.AuditSubjectRequest{{Subject: "job:1", Limit: -1}, {Subject: "job:1", Limit: db.MaxListLimit + 1}, {}} {
		if _, err := s.ListAuditBySubject(ctx, req); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("ListAuditBySubject(%+v) error = %v, want ErrInvalidArgument", req, err)
		}
	}
}
