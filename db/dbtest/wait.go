package dbtest

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/fenceq/fenceq/db"
)

func waiterCount(s db.Store, queue string) int {
	return s.(WaiterCounter).WaitingClaims(queue)
}

// waitForWaiters polls the in-memory registry (not the file) until n
// claims are waiting on queue.
func waitForWaiters(t *testing.T, s db.Store, queue string, n int) {
	t.Helper()
	waiters(t, s)
	deadline := time.Now().Add(5 * time.Second)
	for waiterCount(s, queue) != n {
		if time.Now().After(deadline) {
			t.Fatalf("%d waiters on %q, want %d", waiterCount(s, queue), queue, n)
		}
		time.Sleep(time.Millisecond)
	}
}

func testClaimWaitIsWokenByAnEnqueueAndOneWaiterTakesEachJob(t *testing.T, newStore Factory) {
	s := newStore(t, db.Rules{})
	ctx := context.Background()
	type result struct {
		jobs []db.Job
		err  error
	}
	results := make(chan result, 4)
	for i := 0; i < 4; i++ {
		go func() {
			jobs, err := s.ClaimJobs(ctx, db.ClaimRequest{Principal: "local", Worker: "w", Queues: []string{"q"}, Wait: 2 * time.Second})
			results <- result{jobs, err}
		}()
	}
	waitForWaiters(t, s, "q", 4)
	if _, err := s.EnqueueJob(ctx, db.EnqueueRequest{Queue: "q"}); err != nil {
		t.Fatal(err)
	}
	r := <-results
	if r.err != nil || len(r.jobs) != 1 {
		t.Fatalf("first woken claim = %v, %v; want one job", r.jobs, r.err)
	}
	// The other three keep waiting: one job woke one waiter.
	waitForWaiters(t, s, "q", 3)
	select {
	case r := <-results:
		t.Fatalf("a second waiter returned %v, %v for a single job", r.jobs, r.err)
	case <-time.After(50 * time.Millisecond):
	}
	if _, err := s.EnqueueJobs(ctx, []db.EnqueueRequest{{Queue: "q"}, {Queue: "q"}}); err != nil {
		t.Fatal(err)
	}
	seen := map[uint64]bool{}
	for i := 0; i < 2; i++ {
		r := <-results
		if r.err != nil || len(r.jobs) != 1 || seen[r.jobs[0].ID] {
			t.Fatalf("woken claim = %v, %v; want one new job", r.jobs, r.err)
		}
		seen[r.jobs[0].ID] = true
	}
	r = <-results // the last one times out empty
	if r.err != nil || len(r.jobs) != 0 {
		t.Fatalf("last waiter = %v, %v; want nothing after its wait", r.jobs, r.err)
	}
	if n := waiterCount(s, "q"); n != 0 {
		t.Fatalf("%d waiters left registered", n)
	}
}

func testClaimWaitEndsWhenItsContextIsCancelled(t *testing.T, newStore Factory) {
	s := newStore(t, db.Rules{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := s.ClaimJobs(ctx, db.ClaimRequest{Principal: "local", Worker: "w", Queues: []string{"q"}, Wait: time.Minute})
		done <- err
	}()
	waitForWaiters(t, s, "q", 1)
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("ClaimJobs() = %v, want context.Canceled", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a cancelled wait did not end")
	}
	if n := waiterCount(s, "q"); n != 0 {
		t.Fatalf("%d waiters left registered after cancel", n)
	}
	// The job it would have got is still there for the next claim.
	if _, err := s.EnqueueJob(context.Background(), db.EnqueueRequest{Queue: "q"}); err != nil {
		t.Fatal(err)
	}
	jobs, err := s.ClaimJobs(context.Background(), db.ClaimRequest{Principal: "local", Worker: "w", Queues: []string{"q"}})
	if err != nil || len(jobs) != 1 {
		t.Fatalf("ClaimJobs() after = %v, %v", jobs, err)
	}
}

// Scheduled jobs and expired leases are found by a timer at their time,
// not by polling: this uses the real clock with short times.
func testClaimWaitIsWokenAtRunAtAndAtLeaseExpiry(t *testing.T, newStore Factory) {
	s := newStore(t, db.Rules{})
	ctx := context.Background()
	res, err := s.EnqueueJob(ctx, db.EnqueueRequest{Queue: "q", Delay: 150 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	jobs, err := s.ClaimJobs(ctx, db.ClaimRequest{Principal: "local", Worker: "w1", Queues: []string{"q"}, Lease: 150 * time.Millisecond, Wait: 5 * time.Second})
	if err != nil || len(jobs) != 1 || jobs[0].ID != res.Job.ID {
		t.Fatalf("ClaimJobs() = %v, %v; want the delayed job", jobs, err)
	}
	// Judged against the job's run_at, not the call's start: the enqueue's
	// commit (an fsync, under load) may end well after the time it read.
	if early := time.Until(res.Job.RunAt); early > 5*time.Millisecond {
		t.Fatalf("claimed %v before the job's run_at %v", early, res.Job.RunAt)
	}
	if waited := time.Since(start); waited > 3*time.Second {
		t.Fatalf("woken after %v, want about 150ms", waited)
	}
	start = time.Now()
	jobs, err = s.ClaimJobs(ctx, db.ClaimRequest{Principal: "local", Worker: "w2", Queues: []string{"q"}, Wait: 5 * time.Second})
	if err != nil || len(jobs) != 1 || jobs[0].Attempts != 2 {
		t.Fatalf("ClaimJobs() = %v, %v; want the job again after its lease expired", jobs, err)
	}
	if waited := time.Since(start); waited > 3*time.Second {
		t.Fatalf("woken after %v, want about 150ms", waited)
	}
}

func testAnEmptyClaimCostsNoCommit(t *testing.T, newStore Factory) {
	s := newStore(t, db.Rules{})
	before := commits(t, s)
	for i := 0; i < 10; i++ {
		jobs, err := s.ClaimJobs(context.Background(), db.ClaimRequest{Principal: "local", Worker: "w", Queues: []string{"q"}})
		if err != nil || len(jobs) != 0 {
			t.Fatalf("ClaimJobs() = %v, %v", jobs, err)
		}
	}
	if after := commits(t, s); after != before {
		t.Fatalf("commits %d → %d for empty claims, want none", before, after)
	}
}

func testCompleteAndClaimJobIsOneCommit(t *testing.T, newStore Factory) {
	clk := newFakeClock()
	s := newStore(t, testRules(clk))
	ctx := context.Background()
	if _, err := s.EnqueueJobs(ctx, []db.EnqueueRequest{{Queue: "q"}, {Queue: "q"}}); err != nil {
		t.Fatal(err)
	}
	first, err := s.ClaimJobs(ctx, db.ClaimRequest{Principal: "local", Worker: "w", Queues: []string{"q"}})
	if err != nil || len(first) != 1 {
		t.Fatal(first, err)
	}
	fenced := db.Fenced{ID: first[0].ID, Principal: "local", Worker: "w", FencingToken: first[0].Attempts}

	// A refused completion claims nothing.
	stale := fenced
	stale.FencingToken++
	if _, next, err := s.CompleteAndClaimJob(ctx, db.CompleteRequest{Fenced: stale}, db.ClaimRequest{Queues: []string{"q"}}); !errors.Is(err, ErrClaimMismatch) || next != nil {
		t.Fatalf("stale CompleteAndClaimJob() = %v, %v; want ErrClaimMismatch and nothing claimed", next, err)
	}
	if j, _ := s.GetJob(ctx, first[0].ID+1); j.State != db.StateAvailable {
		t.Fatalf("the next job is %s after a refused complete-and-claim, want available", j.State)
	}

	n := commits(t, s)
	done, next, err := s.CompleteAndClaimJob(ctx, db.CompleteRequest{Fenced: fenced, Result: json.RawMessage(`1`)}, db.ClaimRequest{Queues: []string{"q"}})
	if err != nil || done.State != db.StateCompleted || len(next) != 1 || next[0].State != db.StateClaimed || next[0].ClaimedBy != "local|w" {
		t.Fatalf("CompleteAndClaimJob() = %+v, %+v, %v", done, next, err)
	}
	if after := commits(t, s); after != n+1 {
		t.Fatalf("complete-and-claim took %d commits, want 1", after-n)
	}
	// Nothing left: completes and returns no next job.
	_, next, err = s.CompleteAndClaimJob(ctx, db.CompleteRequest{Fenced: db.Fenced{ID: next[0].ID, Principal: "local", Worker: "w", FencingToken: next[0].Attempts}}, db.ClaimRequest{Queues: []string{"q"}})
	if err != nil || len(next) != 0 {
		t.Fatalf("last CompleteAndClaimJob() = %v, %v", next, err)
	}
}

func testSweepDeletesFinishedJobsPastRetentionOnly(t *testing.T, newStore Factory) {
	clk := newFakeClock()
	s := newStore(t, testRules(clk))
	ctx := context.Background()
	mk := func(key string) db.Job {
		r, err := s.EnqueueJob(ctx, db.EnqueueRequest{Queue: "q", IdempotencyKey: key})
		if err != nil {
			t.Fatal(err)
		}
		return r.Job
	}
	completed, cancelled, dead, waiting := mk("c"), mk("x"), mk("d"), mk("w")
	jobs, _ := s.ClaimJobs(ctx, db.ClaimRequest{Principal: "local", Worker: "w", Queues: []string{"q"}, Max: 3})
	if _, err := s.CompleteJob(ctx, db.CompleteRequest{Fenced: db.Fenced{ID: completed.ID, Principal: "local", Worker: "w", FencingToken: jobs[0].Attempts}}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.CancelJob(ctx, db.JobRequest{ID: cancelled.ID}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.FailJob(ctx, db.FailRequest{Fenced: db.Fenced{ID: dead.ID, Principal: "local", Worker: "w"}, Final: true}); err != nil {
		t.Fatal(err)
	}
	clk.Advance(time.Hour)
	if n, err := s.SweepOnce(ctx, 2*time.Hour, 10); err != nil || n != 0 {
		t.Fatalf("SweepOnce before retention = %d, %v; want 0", n, err)
	}
	clk.Advance(2 * time.Hour)
	if n, err := s.Sweep(ctx, 2*time.Hour); err != nil || n != 2 {
		t.Fatalf("Sweep() = %d, %v; want 2 (the completed and the cancelled job)", n, err)
	}
	for _, id := range []uint64{completed.ID, cancelled.ID} {
		if _, err := s.GetJob(ctx, id); !errors.Is(err, ErrJobNotFound) {
			t.Errorf("GetJob(%d) after sweep = %v, want ErrJobNotFound", id, err)
		}
	}
	for _, id := range []uint64{dead.ID, waiting.ID} {
		if _, err := s.GetJob(ctx, id); err != nil {
			t.Errorf("GetJob(%d) after sweep = %v; dead and available jobs are kept", id, err)
		}
	}
	// The swept job's idempotency key is free again; a kept one is not.
	if r, err := s.EnqueueJob(ctx, db.EnqueueRequest{Queue: "q", IdempotencyKey: "c"}); err != nil || !r.Created {
		t.Errorf("enqueue with a swept job's key = %+v, %v; want a new job", r, err)
	}
	if r, err := s.EnqueueJob(ctx, db.EnqueueRequest{Queue: "q", IdempotencyKey: "d"}); err != nil || r.Created || r.Job.ID != dead.ID {
		t.Errorf("enqueue with a kept job's key = %+v, %v; want the existing job", r, err)
	}
	if rep, err := s.VerifyAudit(ctx); err != nil || !rep.OK {
		t.Errorf("VerifyAudit() = %+v, %v", rep, err)
	}
}

// TestAJobEnqueuedForAWaitingClaimIsHandedOffInOneCommit: the enqueue's
// transaction claims the job for the oldest waiter, so enqueue→claim costs
// one commit; the claim is audited after the enqueue, with the waiter's
// holder and token.
func testAJobEnqueuedForAWaitingClaimIsHandedOffInOneCommit(t *testing.T, newStore Factory) {
	s := newStore(t, db.Rules{})
	ctx := context.Background()
	got := make(chan []db.Job, 1)
	go func() {
		jobs, err := s.ClaimJobs(ctx, db.ClaimRequest{Principal: "local", Worker: "w1", Queues: []string{"q"}, Lease: time.Minute, Wait: 5 * time.Second})
		if err != nil {
			t.Error(err)
		}
		got <- jobs
	}()
	waitForWaiters(t, s, "q", 1)
	n := commits(t, s)
	res, err := s.EnqueueJob(ctx, db.EnqueueRequest{Principal: "local", Queue: "q"})
	if err != nil {
		t.Fatal(err)
	}
	if res.Job.State != db.StateClaimed || res.Job.ClaimedBy != "local|w1" || res.Job.Attempts != 1 {
		t.Fatalf("enqueued job = %+v, want it claimed by local|w1 with token 1 in the same transaction", res.Job)
	}
	jobs := <-got
	if len(jobs) != 1 || jobs[0].ID != res.Job.ID || jobs[0].FencingToken() != 1 || jobs[0].ClaimedBy != "local|w1" {
		t.Fatalf("the waiter got %+v, want job %d with token 1", jobs, res.Job.ID)
	}
	if after := commits(t, s); after != n+1 {
		t.Fatalf("enqueue→claim took %d commits, want 1", after-n)
	}
	recs, err := s.ListAudit(ctx, 0, 10)
	if err != nil || len(recs) != 2 || recs[0].Action != "enqueue" || recs[1].Action != "claim" || recs[1].Token != 1 {
		t.Fatalf("audit = %+v, %v; want enqueue then claim with token 1", recs, err)
	}
	// The waiter's claim is a real one: its token completes the job.
	if _, err := s.CompleteJob(ctx, db.CompleteRequest{Fenced: db.Fenced{ID: res.Job.ID, Principal: "local", Worker: "w1", FencingToken: 1}}); err != nil {
		t.Fatalf("CompleteJob with the handed-off token = %v", err)
	}
}

// Issue 30 item 10: a long-poll is woken at its own queue's run_at by a
// timer, even when its first look found another queue's due, not yet
// promoted job (and so claimed, and promoted, but got nothing). Before the
// fix the PostgreSQL engine then slept without a timer until its wait ran
// out.
func testALongPollWakesAtItsQueuesRunAtWhileAnotherQueueHasDueJobs(t *testing.T, newStore Factory) {
	clk := newFakeClock()
	s := newStore(t, testRules(clk))
	mustEnqueue(t, s, db.EnqueueRequest{Queue: "other", Delay: time.Second})
	job := mustEnqueue(t, s, db.EnqueueRequest{Queue: "q", Delay: 2 * time.Second})
	clk.Advance(1500 * time.Millisecond) // other's job is due, and nobody claimed since
	got := make(chan []db.Job, 1)
	go func() {
		jobs, err := s.ClaimJobs(context.Background(), db.ClaimRequest{Principal: "local", Worker: "w", Queues: []string{"q"}, Wait: 10 * time.Second})
		if err != nil && !errors.Is(err, db.ErrClosed) {
			t.Errorf("ClaimJobs() error = %v", err)
		}
		got <- jobs
	}()
	waitForWaiters(t, s, "q", 1)
	clk.Advance(time.Second) // q's job is due: only the long-poll's timer can tell it
	select {
	case jobs := <-got:
		if len(jobs) != 1 || jobs[0].ID != job.ID {
			t.Fatalf("long-poll on q = %+v, want job %d at its run_at", jobs, job.ID)
		}
	case <-time.After(8 * time.Second):
		t.Fatal("the long-poll on q was not woken at its job's run_at")
	}
}
