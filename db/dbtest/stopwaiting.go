package dbtest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fenceq/fenceq/db"
)

// stopWaitingWithin is how soon after StopWaiting every wait is answered.
const stopWaitingWithin = 100 * time.Millisecond

// StopWaiting (a graceful shutdown) answers every long-polling claim (with
// no job, as when its wait runs out) and every waiting acquire (with its
// lease-held refusal) within 100 ms; a wait begun later returns at once;
// the lease is unchanged and mutations go on.
func testStopWaitingAnswersEveryWaitWithin100ms(t *testing.T, newStore Factory) {
	s := newStore(t, db.Rules{})
	held, err := s.AcquireLease(ctx, db.AcquireLeaseRequest{Principal: "local", Name: "l", Holder: "a", TTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	type answer struct {
		what string
		jobs []db.Job
		err  error
		at   time.Time
	}
	claim := func(out chan<- answer) {
		jobs, err := s.ClaimJobs(ctx, db.ClaimRequest{Principal: "local", Worker: "w", Queues: []string{"q"}, Wait: db.MaxWait})
		out <- answer{"claim", jobs, err, time.Now()}
	}
	acquire := func(out chan<- answer) {
		_, err := s.AcquireLease(ctx, db.AcquireLeaseRequest{Principal: "local", Name: "l", Holder: "b", TTL: time.Hour, Wait: db.MaxLeaseWait})
		out <- answer{"acquire", nil, err, time.Now()}
	}
	check := func(a answer, since time.Time) {
		t.Helper()
		if took := a.at.Sub(since); took > stopWaitingWithin {
			t.Errorf("%s answered %v after StopWaiting, want within %v", a.what, took, stopWaitingWithin)
		}
		switch a.what {
		case "claim":
			if a.err != nil || len(a.jobs) != 0 {
				t.Errorf("waiting claim after StopWaiting = %v, %v; want no job and no error", a.jobs, a.err)
			}
		case "acquire":
			if !errors.Is(a.err, ErrLeaseHeld) {
				t.Errorf("waiting acquire after StopWaiting = %v, want the lease-held refusal", a.err)
			}
		}
	}
	const each = 3
	answers := make(chan answer, 2*each)
	for range each {
		go claim(answers)
		go acquire(answers)
	}
	waitForWaiters(t, s, "q", each)
	deadline := time.Now().Add(20 * time.Second)
	for s.(WaiterCounter).WaitingAcquires("l") != each {
		if time.Now().After(deadline) {
			t.Fatalf("%d acquires wait for l, want %d", s.(WaiterCounter).WaitingAcquires("l"), each)
		}
		time.Sleep(time.Millisecond)
	}
	stopped := time.Now()
	s.StopWaiting()
	for range 2 * each {
		select {
		case a := <-answers:
			check(a, stopped)
		case <-time.After(10 * time.Second):
			t.Fatal("a wait was not answered after StopWaiting")
		}
	}
	if n, m := waiterCount(s, "q"), s.(WaiterCounter).WaitingAcquires("l"); n != 0 || m != 0 {
		t.Fatalf("%d claims and %d acquires left waiting", n, m)
	}

	// Later waits return at once.
	begun := time.Now()
	go claim(answers)
	go acquire(answers)
	for range 2 {
		select {
		case a := <-answers:
			check(a, begun)
		case <-time.After(10 * time.Second):
			t.Fatal("a wait begun after StopWaiting waited")
		}
	}
	now, err := s.GetLease(ctx, "l")
	if err != nil || now.FencingToken != held.FencingToken || now.Holder != held.Holder {
		t.Fatalf("lease after = %+v, %v; want %+v unchanged", now, err, held)
	}
	// Mutations go on: the store is not closed, and a claim still claims.
	job := mustEnqueue(t, s, db.EnqueueRequest{Queue: "q"})
	jobs, err := s.ClaimJobs(ctx, db.ClaimRequest{Principal: "local", Worker: "w", Queues: []string{"q"}, Wait: db.MaxWait})
	if err != nil || len(jobs) != 1 || jobs[0].ID != job.ID {
		t.Fatalf("ClaimJobs() after StopWaiting = %v, %v; want job %d", jobs, err, job.ID)
	}
}

// A job handed off to a waiting claim in the commit that races
// StopWaiting is that claim's answer: it is never claimed for nobody, and
// a job that was not handed off stays available.
func testAJobHandedOffAsStopWaitingEndsTheWaitReachesItsClaim(t *testing.T, newStore Factory) {
	handed := 0
	const rounds = 10
	for round := range rounds {
		s := newStore(t, db.Rules{})
		got := make(chan []db.Job, 1)
		go func() {
			jobs, err := s.ClaimJobs(ctx, db.ClaimRequest{Principal: "local", Worker: "w", Queues: []string{"q"}, Lease: time.Minute, Wait: db.MaxWait})
			if err != nil {
				t.Errorf("ClaimJobs() = %v", err)
			}
			got <- jobs
		}()
		waitForWaiters(t, s, "q", 1)
		enq := make(chan db.Job, 1)
		go func() {
			res, err := s.EnqueueJob(context.Background(), db.EnqueueRequest{Principal: "local", Queue: "q"})
			if err != nil {
				t.Errorf("EnqueueJob() = %v", err)
			}
			enq <- res.Job
		}()
		if round%2 == 0 {
			time.Sleep(time.Duration(round*round) * 60 * time.Microsecond)
		}
		s.StopWaiting()
		jobs, job := <-got, <-enq
		stored, err := s.GetJob(ctx, job.ID)
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case job.State == db.StateClaimed:
			handed++
			if len(jobs) != 1 || jobs[0].ID != job.ID || jobs[0].ClaimedBy != "local|w" {
				t.Fatalf("round %d: job %d was handed off to the claim, which answered %+v", round, job.ID, jobs)
			}
		case len(jobs) == 1 && jobs[0].ID == job.ID:
			// The claim looked again after the enqueue and claimed it itself.
			if stored.State != db.StateClaimed || stored.Attempts != jobs[0].Attempts {
				t.Fatalf("round %d: the claim answered job %d, which is stored %s with %d attempts", round, job.ID, stored.State, stored.Attempts)
			}
		case len(jobs) != 0 || stored.State != db.StateAvailable:
			t.Fatalf("round %d: job %d not handed off is %s, the claim got %+v; want it available and the claim empty", round, job.ID, stored.State, jobs)
		}
	}
	t.Logf("%d of %d rounds handed the job off before StopWaiting ended the wait", handed, rounds)
}
