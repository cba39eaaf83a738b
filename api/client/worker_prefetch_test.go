package client_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fenceq/fenceq/api"
	"github.com/fenceq/fenceq/api/client"
	"github.com/fenceq/fenceq/db"
)

// enqueueN enqueues n jobs on queue and returns their ids.
func enqueueN(t *testing.T, c *client.Client, queue string, n int) []uint64 {
	t.Helper()
	ids := make([]uint64, n)
	for i := range ids {
		res, err := c.Enqueue(context.Background(), client.NewJob{Queue: queue})
		if err != nil {
			t.Fatal(err)
		}
		ids[i] = res.Job.ID
	}
	return ids
}

// statesOf reads each job and counts its states.
func statesOf(t *testing.T, c *client.Client, ids []uint64) map[string]int {
	t.Helper()
	n := map[string]int{}
	for _, id := range ids {
		j, err := c.GetJob(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		n[j.State]++
	}
	return n
}

// A Worker with Prefetch holds up to Concurrency+Prefetch claims, runs no
// more than Concurrency handlers at once, and its heartbeats keep the
// waiting jobs' leases too: past several leases none of them was claimed
// again, and every job completes on its first attempt.
func TestWorker_Prefetch_HoldsConcurrencyPlusPrefetchRunsConcurrencyAndKeepsTheWaitingLeases(t *testing.T) {
	srv := newServer(t, db.Rules{}, api.Config{})
	c := mustClient(t, srv.URL)
	const conc, pf, n = 2, 3, 8
	ids := enqueueN(t, c, "pf", n)

	var running, most, calls atomic.Int64
	startedCh := make(chan started, n)
	release := make(chan struct{})
	r := startRunner(t, srv.URL, client.WorkerConfig{Name: "w", Queues: []string{"pf"}, Concurrency: conc, Prefetch: pf, Lease: time.Second, Wait: time.Second},
		func(ctx context.Context, job client.Job) (any, any, error) {
			calls.Add(1)
			now := running.Add(1)
			defer running.Add(-1)
			for m := most.Load(); now > m && !most.CompareAndSwap(m, now); m = most.Load() {
			}
			startedCh <- started{ctx, job}
			select {
			case <-release:
				return "ok", nil, nil
			case <-ctx.Done():
				return nil, nil, ctx.Err()
			}
		})
	for range conc {
		receive(t, startedCh, "a handler starts")
	}
	claims := r.rt.matching("/v1/claim")
	if len(claims) != 1 || decodeSent(t, claims[0]).Max != conc+pf {
		t.Fatalf("claims sent = %v, want one for max %d (handlers plus prefetch)", claims, conc+pf)
	}

	// Past the lease: the held jobs stay claimed (heartbeats), the rest
	// untouched, and no third handler ran.
	time.Sleep(1500 * time.Millisecond)
	if got := statesOf(t, c, ids); got[client.StateClaimed] != conc+pf || got[client.StateAvailable] != n-conc-pf {
		t.Fatalf("states past the lease = %v, want %d claimed and %d available", got, conc+pf, n-conc-pf)
	}
	if got := calls.Load(); got != conc {
		t.Fatalf("%d handlers called while %d were busy, want %d", got, conc, conc)
	}
	hbs := r.rt.matching("/v1/jobs/heartbeat")
	if len(hbs) == 0 {
		t.Fatal("no heartbeat within 1.5 leases")
	}
	for _, s := range hbs {
		if b := decodeSent(t, s); len(b.Jobs) != conc+pf {
			t.Errorf("a heartbeat call carried %d jobs, want all %d held (running and waiting)", len(b.Jobs), conc+pf)
		}
	}
	if got := r.rt.matching("/v1/claim"); len(got) != 1 {
		t.Errorf("%d more claims while the worker held all it may", len(got)-1)
	}

	close(release)
	for range n {
		if d := r.next(t, "a job"); d.Outcome != client.OutcomeCompleted {
			t.Fatalf("job %d: %s %v, want completed", d.Job.ID, d.Outcome, d.Err)
		}
	}
	for _, id := range ids {
		if j, _ := c.GetJob(context.Background(), id); j.State != client.StateCompleted || j.Attempts != 1 {
			t.Errorf("job %d = %s after %d attempts, want completed on its first", id, j.State, j.Attempts)
		}
	}
	if m := most.Load(); m > conc {
		t.Errorf("%d handlers ran at once, want at most %d", m, conc)
	}
	if got := calls.Load(); got != n {
		t.Errorf("the handler ran %d times for %d jobs", got, n)
	}
	for _, s := range r.rt.matching("/v1/jobs/complete") {
		if b := decodeSent(t, s); b.ClaimNext != nil && b.ClaimNext.Max > len(b.Jobs)+pf {
			t.Errorf("claim_next.max %d with %d completions: more than completions plus prefetch", b.ClaimNext.Max, len(b.Jobs))
		}
	}
}

// Jobs waiting in a stopping Worker run during the drain; when the drain
// deadline passes, those not started are failed without their handler
// running, claimable again at once.
func TestWorker_Prefetch_StopRunsTheWaitingJobsAndTheDeadlineFailsThoseNotStarted(t *testing.T) {
	t.Run("drained", func(t *testing.T) {
		srv := newServer(t, db.Rules{}, api.Config{})
		c := mustClient(t, srv.URL)
		ids := enqueueN(t, c, "pfd", 3)
		startedCh, release := make(chan started, 3), make(chan struct{})
		r := startRunner(t, srv.URL, client.WorkerConfig{Name: "w", Queues: []string{"pfd"}, Concurrency: 1, Prefetch: 2, Lease: time.Second, Wait: time.Second},
			func(ctx context.Context, job client.Job) (any, any, error) {
				startedCh <- started{ctx, job}
				<-release
				return "drained", nil, nil
			})
		receive(t, startedCh, "the first job starts")
		waitFor(t, "all three claimed", func() bool { return statesOf(t, c, ids)[client.StateClaimed] == 3 })
		stopped := make(chan error, 1)
		go func() {
			sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			stopped <- r.w.Stop(sctx)
		}()
		receive(t, r.w.Stopping(), "the worker stops claiming")
		close(release)
		if err := receive(t, stopped, "Stop returns"); err != nil {
			t.Fatalf("Stop() = %v, want nil after draining", err)
		}
		for range 3 {
			if d := r.next(t, "a drained job"); d.Outcome != client.OutcomeCompleted {
				t.Fatalf("job %d: %s %v, want completed in the drain", d.Job.ID, d.Outcome, d.Err)
			}
		}
		if got := statesOf(t, c, ids); got[client.StateCompleted] != 3 {
			t.Fatalf("states = %v, want all three completed", got)
		}
	})
	t.Run("deadline", func(t *testing.T) {
		srv := newServer(t, db.Rules{}, api.Config{})
		c := mustClient(t, srv.URL)
		ids := enqueueN(t, c, "pfs", 3)
		var mu sync.Mutex
		var ran []uint64
		startedCh := make(chan started, 3)
		r := startRunner(t, srv.URL, client.WorkerConfig{Name: "w", Queues: []string{"pfs"}, Concurrency: 1, Prefetch: 2, Lease: 5 * time.Second, Wait: time.Second},
			func(ctx context.Context, job client.Job) (any, any, error) {
				mu.Lock()
				ran = append(ran, job.ID)
				mu.Unlock()
				startedCh <- started{ctx, job}
				<-ctx.Done()
				return nil, nil, context.Cause(ctx)
			})
		first := receive(t, startedCh, "the first job starts")
		waitFor(t, "all three claimed", func() bool { return statesOf(t, c, ids)[client.StateClaimed] == 3 })
		sctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		if err := r.w.Stop(sctx); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Stop() past its deadline = %v, want DeadlineExceeded", err)
		}
		for range 3 {
			if d := r.next(t, "a job"); d.Outcome != client.OutcomeFailed {
				t.Fatalf("job %d: %s %v, want failed", d.Job.ID, d.Outcome, d.Err)
			}
		}
		mu.Lock()
		defer mu.Unlock()
		if len(ran) != 1 || ran[0] != first.job.ID {
			t.Fatalf("handlers ran for %v, want only the first job %d", ran, first.job.ID)
		}
		for _, id := range ids {
			j, err := c.GetJob(context.Background(), id)
			if err != nil || (j.State != client.StateAvailable && j.State != client.StateScheduled) || j.Attempts != 1 ||
				j.RunAt.Sub(j.UpdatedAt) > 50*time.Millisecond || !strings.Contains(j.LastError, "worker stopped") {
				t.Fatalf("job %d = %+v, %v; want claimable at once after one attempt, with a \"worker stopped\" error (the lease was 5s)", id, j, err)
			}
		}
	})
}

// A waiting job whose claim is lost (cancelled) is reported lost at the
// next heartbeat, without its handler running and without waiting for a
// handler to free up; the worker claims another job in its place.
func TestWorker_Prefetch_AWaitingJobLostIsDroppedAtOnceAndReplaced(t *testing.T) {
	srv := newServer(t, db.Rules{}, api.Config{})
	c := mustClient(t, srv.URL)
	ids := enqueueN(t, c, "pfl", 2)
	var calls atomic.Int64
	startedCh, release := make(chan started, 3), make(chan struct{})
	r := startRunner(t, srv.URL, client.WorkerConfig{Name: "w", Queues: []string{"pfl"}, Concurrency: 1, Prefetch: 1, Lease: time.Second, Wait: time.Second},
		func(ctx context.Context, job client.Job) (any, any, error) {
			calls.Add(1)
			startedCh <- started{ctx, job}
			select {
			case <-release:
				return "ok", nil, nil
			case <-ctx.Done():
				return nil, nil, ctx.Err()
			}
		})
	first := receive(t, startedCh, "the first job starts")
	waiting := ids[0]
	if waiting == first.job.ID {
		waiting = ids[1]
	}
	waitFor(t, "both claimed", func() bool { return statesOf(t, c, ids)[client.StateClaimed] == 2 })
	third := enqueueN(t, c, "pfl", 1)[0]
	if _, err := c.CancelJob(context.Background(), waiting); err != nil {
		t.Fatal(err)
	}
	if d := r.next(t, "the cancelled waiting job"); d.Job.ID != waiting || d.Outcome != client.OutcomeLost {
		t.Fatalf("done = job %d %s %v, want the waiting job %d lost", d.Job.ID, d.Outcome, d.Err, waiting)
	}
	waitFor(t, "the third job claimed in its place", func() bool { return statesOf(t, c, []uint64{third})[client.StateClaimed] == 1 })
	if got := calls.Load(); got != 1 {
		t.Fatalf("%d handler calls while the first job runs, want 1 (the lost job must not run)", got)
	}
	close(release)
	for range 2 {
		if d := r.next(t, "a job"); d.Outcome != client.OutcomeCompleted || d.Job.ID == waiting {
			t.Fatalf("done = job %d %s %v, want the first and the third completed", d.Job.ID, d.Outcome, d.Err)
		}
	}
	if j, _ := c.GetJob(context.Background(), waiting); j.State != client.StateCancelled {
		t.Fatalf("the waiting job is %s, want cancelled", j.State)
	}
}

func TestNewWorker_RefusesANegativePrefetch(t *testing.T) {
	c := mustClient(t, "http://127.0.0.1:1")
	_, err := client.NewWorker(c, func(context.Context, client.Job) (any, any, error) { return nil, nil, nil }, client.WorkerConfig{Prefetch: -1})
	if err == nil || !strings.Contains(err.Error(), "prefetch") {
		t.Fatalf("NewWorker(Prefetch: -1) = %v, want an error naming prefetch", err)
	}
}

// waitFor polls cond for up to 10s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatalf("%s: not within 10s", what)
}
