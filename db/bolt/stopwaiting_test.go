package bolt

import (
	"context"
	"errors"
	"github.com/fenceq/fenceq/db"
	"path/filepath"
	"testing"
	"time"
)

// StopWaiting answers a long-polling claim at once with no job, as when its
// wait runs out, and every claim that comes later too.
func TestStopWaiting_EndsAClaimWaitWithNoJob(t *testing.T) {
	s := mustOpenStore(t, Options{})
	ctx := context.Background()
	done := make(chan error, 1)
	go func() {
		jobs, err := s.ClaimJobs(ctx, db.ClaimRequest{Principal: "local", Worker: "w", Queues: []string{"q"}, Wait: db.MaxWait})
		if err == nil && len(jobs) != 0 {
			err = errors.New("got a job from an empty queue")
		}
		done <- err
	}()
	waitForWaiters(t, s, "q", 1)
	s.StopWaiting()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("ClaimJobs() after StopWaiting = %v, want no job and no error", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("a claim waiting %v was not answered after StopWaiting", db.MaxWait)
	}
	if n := s.WaitingClaims("q"); n != 0 {
		t.Fatalf("%d waiters left registered", n)
	}
	start := make(chan []db.Job, 1)
	go func() {
		jobs, _ := s.ClaimJobs(ctx, db.ClaimRequest{Principal: "local", Worker: "w", Queues: []string{"q"}, Wait: db.MaxWait})
		start <- jobs
	}()
	select {
	case jobs := <-start:
		if len(jobs) != 0 {
			t.Fatalf("a claim after StopWaiting = %v, want none", jobs)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("a claim begun after StopWaiting waited")
	}
	// Mutations go on: the store is not closed.
	if _, err := s.EnqueueJob(ctx, db.EnqueueRequest{Queue: "q"}); err != nil {
		t.Fatalf("EnqueueJob() after StopWaiting = %v", err)
	}
}

// A job handed off to a waiter in the commit that races StopWaiting is the
// waiter's answer: it is never claimed for nobody, and a job that was not
// handed off stays available.
func TestStopWaiting_AHandedOffJobReachesItsWaiter(t *testing.T) {
	handed := 0
	for round := 0; round < 20; round++ {
		s := mustOpenStoreAt(t, filepath.Join(t.TempDir(), "fenceq.db"), Options{})
		ctx := context.Background()
		got := make(chan []db.Job, 1)
		go func() {
			jobs, err := s.ClaimJobs(ctx, db.ClaimRequest{Principal: "local", Worker: "w", Queues: []string{"q"}, Lease: time.Minute, Wait: db.MaxWait})
			if err != nil {
				t.Errorf("ClaimJobs() = %v", err)
			}
			got <- jobs
		}()
		for deadline := time.Now().Add(5 * time.Second); s.WaitingClaims("q") != 1; time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatal("the claim never went to sleep")
			}
		}
		enq := make(chan db.Job, 1)
		go func() {
			res, err := s.EnqueueJob(ctx, db.EnqueueRequest{Principal: "local", Queue: "q"})
			if err != nil {
				t.Errorf("EnqueueJob() = %v", err)
			}
			enq <- res.Job
		}()
		if round%2 == 0 {
			time.Sleep(time.Duration(round) * 50 * time.Microsecond)
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
				t.Fatalf("round %d: job %d was handed off to the waiter, which answered %+v", round, job.ID, jobs)
			}
		case len(jobs) != 0 || stored.State != db.StateAvailable:
			t.Fatalf("round %d: job %d not handed off is %s, the waiter got %+v; want it available and the waiter empty", round, job.ID, stored.State, jobs)
		}
	}
	t.Logf("%d of 20 rounds handed the job off before StopWaiting ended the wait", handed)
}

// StopWaiting answers an acquire waiting for a held lease with errLeaseHeld,
// as when its wait runs out; the lease is unchanged.
func TestStopWaiting_EndsALeaseWaitAsTimedOut(t *testing.T) {
	clk := newFakeClock()
	s := mustOpenStore(t, testOptions(clk))
	ctx := context.Background()
	held, err := s.AcquireLease(ctx, db.AcquireLeaseRequest{Principal: "local", Name: "l", Holder: "a", TTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := s.AcquireLease(ctx, db.AcquireLeaseRequest{Principal: "local", Name: "l", Holder: "b", TTL: time.Hour, Wait: db.MaxLeaseWait})
		done <- err
	}()
	waitForLeaseWaiter(t, s, "l")
	s.StopWaiting()
	select {
	case err := <-done:
		if !errors.Is(err, errLeaseHeld) {
			t.Fatalf("AcquireLease() after StopWaiting = %v, want ErrLeaseHeld", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("an acquire waiting %v was not answered after StopWaiting", db.MaxLeaseWait)
	}
	now, err := s.GetLease(ctx, "l")
	if err != nil || now.FencingToken != held.FencingToken || now.Holder != held.Holder {
		t.Fatalf("lease after = %+v, %v; want %+v unchanged", now, err, held)
	}
}

// errLeaseHeld matches the refusal of an acquire while another holds the lease.
var errLeaseHeld = &db.Error{Code: db.CodeConflict, Message: "lease is held by "}

// waitForWaiters returns once n claims long-poll on queue.
func waitForWaiters(t *testing.T, s *Store, queue string, n int) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for s.WaitingClaims(queue) < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d claims wait on %q, want %d", s.WaitingClaims(queue), queue, n)
		}
		time.Sleep(time.Millisecond)
	}
}

// waitForLeaseWaiter returns once an acquire waits for name.
func waitForLeaseWaiter(tb testing.TB, s *Store, name string) {
	tb.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for s.WaitingAcquires(name) == 0 {
		if time.Now().After(deadline) {
			tb.Fatalf("no acquire is waiting for %q", name)
		}
		time.Sleep(time.Millisecond)
	}
}
