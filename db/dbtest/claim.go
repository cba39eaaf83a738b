package dbtest

import (
	"encoding/json"
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/fenceq/fenceq/db"
	"github.com/fenceq/fenceq/lease"
)

// claimAll claims one job at a time until none is left and returns the ids
// in claim order.
func claimAll(t *testing.T, s db.Store, queues ...string) []uint64 {
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

func testClaimTakesHigherPriorityFirstAndFIFOWithinAPriority(t *testing.T, newStore Factory) {
	clk := newFakeClock()
	s := newStore(t, testRules(clk))
	// Enqueued in this order, with the clock still (equal run_at: id order).
	priorities := []int64{0, 5, 0, math.MinInt64, 5, -3, math.MaxInt64, 0}
	for _, p := range priorities {
		mustEnqueue(t, s, db.EnqueueRequest{Priority: p})
	}
	want := []uint64{7, 2, 5, 1, 3, 8, 6, 4}
	if got := claimAll(t, s); !reflect.DeepEqual(got, want) {
		t.Errorf("claim order = %v, want %v (priority desc, then id)", got, want)
	}
}

func testClaimTakesTheOlderRunAtFirstWithinAPriority(t *testing.T, newStore Factory) {
	clk := newFakeClock()
	s := newStore(t, testRules(clk))
	t0 := clk.Now()
	// Ids 1..3 with run_at 3s, 1s and 2s after now, all due once the clock
	// has moved past them: FIFO is by run_at. (A run_at in the past is
	// "now", so past times cannot order jobs.)
	for _, ahead := range []time.Duration{3, 1, 2} {
		mustEnqueue(t, s, db.EnqueueRequest{RunAt: t0.Add(ahead * time.Second)})
	}
	clk.Advance(4 * time.Second)
	if got, want := claimAll(t, s), []uint64{2, 3, 1}; !reflect.DeepEqual(got, want) {
		t.Errorf("claim order = %v, want %v (oldest run_at first)", got, want)
	}
}

func testClaimOfSeveralQueuesTakesTheBestJobOfAnyOfThem(t *testing.T, newStore Factory) {
	clk := newFakeClock()
	s := newStore(t, testRules(clk))
	a1 := mustEnqueue(t, s, db.EnqueueRequest{Queue: "a"})
	clk.Advance(time.Millisecond)
	b1 := mustEnqueue(t, s, db.EnqueueRequest{Queue: "b"})
	clk.Advance(time.Millisecond)
	b2 := mustEnqueue(t, s, db.EnqueueRequest{Queue: "b", Priority: 5})
	clk.Advance(time.Millisecond)
	c1 := mustEnqueue(t, s, db.EnqueueRequest{Queue: "c", Priority: 100}) // not asked for
	clk.Advance(time.Millisecond)
	a2 := mustEnqueue(t, s, db.EnqueueRequest{Queue: "a"})

	got := claimAll(t, s, "b", "a", "b") // order of queues and repeats do not matter
	if want := []uint64{b2.ID, a1.ID, b1.ID, a2.ID}; !reflect.DeepEqual(got, want) {
		t.Errorf("claim order over queues a and b = %v, want %v", got, want)
	}
	if st := storedJob(t, s, c1.ID).State; st != db.StateAvailable {
		t.Errorf("job of queue c after claims of a and b is %s, want available", st)
	}
	if got := claimAll(t, s, "c"); !reflect.DeepEqual(got, []uint64{c1.ID}) {
		t.Errorf("claim of queue c = %v, want [%d]", got, c1.ID)
	}
}

func testADelayedJobIsClaimableOnlyOnceItsRunAtHasCome(t *testing.T, newStore Factory) {
	clk := newFakeClock()
	s := newStore(t, testRules(clk))
	job := mustEnqueue(t, s, db.EnqueueRequest{Delay: 10 * time.Second, Priority: 50})
	later := mustEnqueue(t, s, db.EnqueueRequest{Priority: 0})

	if got := mustClaim(t, s, "w1", time.Minute); got.ID != later.ID {
		t.Fatalf("claim before run_at took job %d, want %d (the delayed job must wait)", got.ID, later.ID)
	}
	mustClaimNothing(t, s, "w1")
	clk.Advance(10*time.Second - time.Nanosecond)
	mustClaimNothing(t, s, "w1")
	if st := storedJob(t, s, job.ID).State; st != db.StateScheduled {
		t.Fatalf("delayed job 1ns before run_at is %s, want scheduled", st)
	}
	clk.Advance(time.Nanosecond)
	got := mustClaim(t, s, "w1", time.Minute)
	if got.ID != job.ID || got.Attempts != 1 {
		t.Errorf("claim at run_at = job %d attempts %d, want job %d attempts 1", got.ID, got.Attempts, job.ID)
	}
}

func testADueScheduledJobCompetesByPriority(t *testing.T, newStore Factory) {
	clk := newFakeClock()
	s := newStore(t, testRules(clk))
	low := mustEnqueue(t, s, db.EnqueueRequest{Priority: 1})
	high := mustEnqueue(t, s, db.EnqueueRequest{Priority: 2, Delay: time.Second})
	clk.Advance(time.Second)
	if got := claimAll(t, s); !reflect.DeepEqual(got, []uint64{high.ID, low.ID}) {
		t.Errorf("claim order = %v, want [%d %d] (the due job has the higher priority)", got, high.ID, low.ID)
	}
}

func testEnqueueWithAKnownIdempotencyKeyReturnsTheExistingJob(t *testing.T, newStore Factory) {
	clk := newFakeClock()
	s := newStore(t, testRules(clk))
	first := mustEnqueue(t, s, db.EnqueueRequest{Queue: "orders", IdempotencyKey: "order-7", Payload: json.RawMessage(`{"v":1}`)})
	clk.Advance(time.Second)

	before := takeSnapshot(t, s)
	res, err := s.EnqueueJob(ctx, db.EnqueueRequest{Queue: "orders", IdempotencyKey: "order-7", Payload: json.RawMessage(`{"v":2}`), Priority: 9})
	if err != nil {
		t.Fatalf("repeat EnqueueJob error = %v", err)
	}
	if res.Created {
		t.Errorf("repeat EnqueueJob Created = true, want false")
	}
	if !reflect.DeepEqual(res.Job, first) {
		t.Errorf("repeat EnqueueJob job = %+v, want the first job %+v", res.Job, first)
	}
	assertUnchanged(t, s, before, "a repeated enqueue")

	other, err := s.EnqueueJob(ctx, db.EnqueueRequest{Queue: "refunds", IdempotencyKey: "order-7"})
	if err != nil {
		t.Fatalf("EnqueueJob with the same key in another queue: error = %v", err)
	}
	if !other.Created || other.Job.ID == first.ID {
		t.Errorf("same key in another queue: Created = %v id %d, want a new job (not %d)", other.Created, other.Job.ID, first.ID)
	}

	// The key stays taken after the job finished.
	mustClaim(t, s, "w1", time.Minute, "orders")
	if _, err := s.CompleteJob(ctx, db.CompleteRequest{Fenced: fenced(first.ID, "w1", 1)}); err != nil {
		t.Fatal(err)
	}
	res, err = s.EnqueueJob(ctx, db.EnqueueRequest{Queue: "orders", IdempotencyKey: "order-7"})
	if err != nil || res.Created || res.Job.ID != first.ID || res.Job.State != db.StateCompleted {
		t.Errorf("enqueue after completion = id %d created %v state %s, %v; want id %d, false, completed, nil",
			res.Job.ID, res.Created, res.Job.State, err, first.ID)
	}

	// In one batch, the second use of a key returns the job the first made.
	results, err := s.EnqueueJobs(ctx, []db.EnqueueRequest{{IdempotencyKey: "k"}, {IdempotencyKey: "k"}})
	if err != nil {
		t.Fatalf("EnqueueJobs with a repeated key: error = %v", err)
	}
	if !results[0].Created || results[1].Created || results[0].Job.ID != results[1].Job.ID {
		t.Errorf("batch with a repeated key = (%d, %v), (%d, %v); want one job created once",
			results[0].Job.ID, results[0].Created, results[1].Job.ID, results[1].Created)
	}
}

func testAnExpiredClaimWithNoAttemptsLeftGoesDeadAndTheClaimTakesTheNextJob(t *testing.T, newStore Factory) {
	clk := newFakeClock()
	s := newStore(t, testRules(clk))
	last := mustEnqueue(t, s, db.EnqueueRequest{MaxAttempts: 1, Priority: 10})
	next := mustEnqueue(t, s, db.EnqueueRequest{})
	mustClaim(t, s, "w1", 10*time.Second)

	clk.Advance(10 * time.Second) // a lease ends at its expiry instant
	got := mustClaim(t, s, "w2", time.Minute)
	if got.ID != next.ID {
		t.Errorf("claim after the lease expired took job %d, want %d", got.ID, next.ID)
	}
	rec := storedJob(t, s, last.ID)
	if rec.State != db.StateDead || rec.LastError != "lease expired" || rec.ClaimedBy != "" || rec.LeaseExpiresAt != 0 || rec.Attempts != 1 {
		t.Errorf("exhausted expired job = state %s last_error %q claimed_by %q lease %d attempts %d, want dead, %q, \"\", 0, 1",
			rec.State, rec.LastError, rec.ClaimedBy, rec.LeaseExpiresAt, rec.Attempts, "lease expired")
	}
	if len(rec.Errors) != 1 || rec.Errors[0] != (db.ErrorRecord{Attempt: 1, At: clk.Now().UnixNano(), Error: "lease expired"}) {
		t.Errorf("errors = %+v, want one lease expired error at attempt 1", rec.Errors)
	}
	if _, err := s.HeartbeatJob(ctx, db.HeartbeatRequest{Fenced: fenced(last.ID, "w1", 1)}); !errors.Is(err, ErrClaimNotFound) {
		t.Errorf("heartbeat of the dead job's old claim: error = %v, want %v", err, ErrClaimNotFound)
	}
}

func testAnExpiredClaimWithNoAttemptsLeftGoesDeadEvenWhenNothingIsClaimed(t *testing.T, newStore Factory) {
	clk := newFakeClock()
	s := newStore(t, testRules(clk))
	job := mustEnqueue(t, s, db.EnqueueRequest{MaxAttempts: 1})
	mustClaim(t, s, "w1", 10*time.Second)
	clk.Advance(time.Minute)
	seq := auditSeq(t, s)

	mustClaimNothing(t, s, "w2")
	if rec := storedJob(t, s, job.ID); rec.State != db.StateDead || rec.LastError != "lease expired" {
		t.Errorf("job = %s %q, want dead %q", rec.State, rec.LastError, "lease expired")
	}
	if got := auditSeq(t, s); got != seq+1 {
		t.Errorf("audit head = %d, want %d (the death is recorded)", got, seq+1)
	}
	if a := lastAudit(t, s); a.Action != "dead" || a.Principal != "system" || a.Details["error"] != "lease expired" {
		t.Errorf("audit = %s by %s error %q, want dead by system %q", a.Action, a.Principal, a.Details["error"], "lease expired")
	}
}

func testALeaseIsHeldUntilItsExpiryInstant(t *testing.T, newStore Factory) {
	clk := newFakeClock()
	s := newStore(t, testRules(clk))
	job := mustEnqueue(t, s, db.EnqueueRequest{})
	mustClaim(t, s, "w1", 10*time.Second)
	clk.Advance(10*time.Second - time.Nanosecond)
	mustClaimNothing(t, s, "w2")
	clk.Advance(time.Nanosecond)
	if got := mustClaim(t, s, "w2", 10*time.Second); got.ID != job.ID || got.Attempts != 2 {
		t.Errorf("claim at the expiry instant = job %d attempts %d, want job %d attempts 2", got.ID, got.Attempts, job.ID)
	}
}

func testALateHeartbeatBeforeAnyReclaimIsAccepted(t *testing.T, newStore Factory) {
	clk := newFakeClock()
	s := newStore(t, testRules(clk))
	job := mustEnqueue(t, s, db.EnqueueRequest{})
	mustClaim(t, s, "w1", 10*time.Second)
	clk.Advance(25 * time.Second) // well past the lease; nobody claimed since

	hb, err := s.HeartbeatJob(ctx, db.HeartbeatRequest{Fenced: fenced(job.ID, "w1", 1), Lease: 10 * time.Second})
	if err != nil {
		t.Fatalf("late heartbeat: error = %v, want nil", err)
	}
	if want := clk.Now().Add(10 * time.Second); !hb.LeaseExpiresAt.Equal(want) || hb.Attempts != 1 {
		t.Errorf("late heartbeat = lease %v attempts %d, want %v, 1", hb.LeaseExpiresAt, hb.Attempts, want)
	}
	mustClaimNothing(t, s, "w2") // the renewed lease holds again
	if _, err := s.CompleteJob(ctx, db.CompleteRequest{Fenced: fenced(job.ID, "w1", 1)}); err != nil {
		t.Errorf("complete after the late heartbeat: error = %v, want nil", err)
	}
}

func testClaimWithMaxReturnsDistinctJobsEachWithItsOwnToken(t *testing.T, newStore Factory) {
	clk := newFakeClock()
	s := newStore(t, testRules(clk))
	a := mustEnqueue(t, s, db.EnqueueRequest{Priority: 1})
	b := mustEnqueue(t, s, db.EnqueueRequest{})
	c := mustEnqueue(t, s, db.EnqueueRequest{})
	d := mustEnqueue(t, s, db.EnqueueRequest{})
	// Job a has been claimed once before, so its next token is 2.
	mustClaim(t, s, "w0", time.Minute)
	if _, err := s.FailJob(ctx, db.FailRequest{Fenced: fenced(a.ID, "w0", 1), RetryDelay: durationPtr(0)}); err != nil {
		t.Fatal(err)
	}

	jobs, err := s.ClaimJobs(ctx, db.ClaimRequest{Principal: "local", Worker: "w1", Max: 3, Lease: time.Minute})
	if err != nil {
		t.Fatalf("ClaimJobs(max 3) error = %v", err)
	}
	type claimed struct{ id, token uint64 }
	var got []claimed
	for _, j := range jobs {
		got = append(got, claimed{j.ID, j.FencingToken()})
	}
	want := []claimed{{a.ID, 2}, {b.ID, 1}, {c.ID, 1}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("ClaimJobs(max 3) = %v, want %v (id, token)", got, want)
	}
	for _, j := range jobs {
		if rec := storedJob(t, s, j.ID); rec.State != db.StateClaimed || rec.Attempts != j.Attempts || rec.ClaimedBy != "local|w1" {
			t.Errorf("stored job %d = %s attempts %d by %q, want claimed %d by local|w1", j.ID, rec.State, rec.Attempts, rec.ClaimedBy, j.Attempts)
		}
		if _, err := s.HeartbeatJob(ctx, db.HeartbeatRequest{Fenced: fenced(j.ID, "w1", j.Attempts)}); err != nil {
			t.Errorf("heartbeat of job %d with its token %d: error = %v", j.ID, j.Attempts, err)
		}
	}
	// One job's token is not another's.
	if _, err := s.HeartbeatJob(ctx, db.HeartbeatRequest{Fenced: fenced(b.ID, "w1", 2)}); !errors.Is(err, ErrClaimNotFound) {
		t.Errorf("heartbeat of job %d with job %d's token 2: error = %v, want %v", b.ID, a.ID, err, ErrClaimNotFound)
	}

	jobs, err = s.ClaimJobs(ctx, db.ClaimRequest{Principal: "local", Worker: "w2", Max: 3})
	if err != nil || len(jobs) != 1 || jobs[0].ID != d.ID {
		t.Errorf("second ClaimJobs(max 3) = %d jobs, %v; want only job %d", len(jobs), err, d.ID)
	}
	jobs, err = s.ClaimJobs(ctx, db.ClaimRequest{Principal: "local", Worker: "w2", Max: 3})
	if err != nil || len(jobs) != 0 {
		t.Errorf("third ClaimJobs(max 3) = %d jobs, %v; want none", len(jobs), err)
	}
}

func testEnqueueJobsWithOneInvalidRequestWritesNothing(t *testing.T, newStore Factory) {
	clk := newFakeClock()
	s := newStore(t, db.Rules{Now: clk.Now, MaxPayloadBytes: 16})
	mustEnqueue(t, s, db.EnqueueRequest{IdempotencyKey: "exists"})
	tests := []struct {
		name    string
		reqs    []db.EnqueueRequest
		wantErr error
		wantMsg string
	}{
		{"invalid queue", []db.EnqueueRequest{{Queue: "a"}, {Queue: "bad queue"}, {Queue: "c"}}, ErrInvalidArgument, "jobs[1]"},
		{"payload too large", []db.EnqueueRequest{{}, {}, {Payload: json.RawMessage(`"0123456789abcdef"`)}}, ErrTooLarge, "jobs[2]"},
		{"invalid first with a known key after it", []db.EnqueueRequest{{Delay: -1}, {IdempotencyKey: "exists"}}, ErrInvalidArgument, "jobs[0]"},
		{"empty batch", nil, ErrInvalidArgument, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := takeSnapshot(t, s)
			res, err := s.EnqueueJobs(ctx, tt.reqs)
			if !errors.Is(err, tt.wantErr) || !strings.Contains(err.Error(), tt.wantMsg) {
				t.Errorf("EnqueueJobs error = %v, want %v naming %q", err, tt.wantErr, tt.wantMsg)
			}
			if res != nil {
				t.Errorf("EnqueueJobs results = %+v, want nil", res)
			}
			assertUnchanged(t, s, before, "a refused batch")
		})
	}
	// No id was spent on the refused batches.
	if got := mustEnqueue(t, s, db.EnqueueRequest{}); got.ID != 2 {
		t.Errorf("next job id = %d, want 2", got.ID)
	}
}

func testTheBackoffWithoutARetryDelayStaysWithinItsBounds(t *testing.T, newStore Factory) {
	for _, random := range []float64{0, 0.999999} {
		clk := newFakeClock()
		b := lease.Backoff{Base: time.Second, Max: 5 * time.Second}
		s := newStore(t, db.Rules{Now: clk.Now, Random: func() float64 { return random }, Backoff: b})
		job := mustEnqueue(t, s, db.EnqueueRequest{MaxAttempts: 6})
		for attempt := uint64(1); attempt <= 5; attempt++ {
			clk.Advance(time.Hour)
			mustClaim(t, s, "w1", time.Minute)
			got, err := s.FailJob(ctx, db.FailRequest{Fenced: fenced(job.ID, "w1", attempt), Error: "x"})
			if err != nil {
				t.Fatalf("FailJob(attempt %d) error = %v", attempt, err)
			}
			full := min(b.Base<<(attempt-1), b.Max)
			wait := got.RunAt.Sub(clk.Now())
			if got.State != db.StateScheduled || wait < full/2 || wait > full {
				t.Errorf("random %v attempt %d: state %s wait %v, want scheduled with a wait in [%v, %v]",
					random, attempt, got.State, wait, full/2, full)
			}
			if wait != b.Delay(attempt, random) {
				t.Errorf("random %v attempt %d: wait %v, want %v", random, attempt, wait, b.Delay(attempt, random))
			}
		}
	}
}
