package wait

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fenceq/fenceq/db"
)

// The engines' conformance suite (db/dbtest) tests the waits through real
// stores; these tests pin the bookkeeping that a store cannot show.

// A claim still inside its own attempt is never handed a job (it could
// then get more jobs than it asked for); once it sleeps, it is, once.
func TestTake_OnlyASleepingClaimIsHandedAJob(t *testing.T) {
	ws := New()
	c := ws.register(db.ClaimRequest{Queues: []string{"q"}})
	if got := ws.Take("q"); got != nil {
		t.Fatal("Take() handed a job to a claim that is still looking")
	}
	if !ws.sleep(c, Due{}) {
		t.Fatal("sleep() refused a claim nobody signalled")
	}
	if got := ws.Take("q"); got != c {
		t.Fatalf("Take() = %v, want the sleeping claim", got)
	}
	if got := ws.Take("q"); got != nil {
		t.Fatal("Take() returned the same claim twice")
	}
	done := make(chan *db.Job)
	go func() { done <- ws.release(c, true) }()
	select {
	case <-done:
		t.Fatal("release() of a taken claim returned before its hand-off ended")
	case <-time.After(20 * time.Millisecond):
	}
	ws.Deliver(c, &db.Job{ID: 7})
	if got := <-done; got == nil || got.ID != 7 {
		t.Fatalf("release() = %v, want job 7", got)
	}
}

// claimer runs long-polling claims on q whose attempts find nothing until
// jobs is positive, then take one job each.
type claimer struct {
	ws   *Waiters
	jobs atomic.Int64
}

func (cl *claimer) claim(wait time.Duration, out chan<- []db.Job) {
	jobs, _ := cl.ws.Claim(context.Background(), db.ClaimRequest{Queues: []string{"q"}, Wait: wait},
		func(context.Context) ([]db.Job, Due, error) {
			if cl.jobs.Add(-1) >= 0 {
				return []db.Job{{ID: 1}}, Due{}, nil
			}
			cl.jobs.Add(1)
			return nil, Due{}, nil
		})
	out <- jobs
}

func waitSleeping(t *testing.T, ws *Waiters, n int) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ws.Sleeping("q") != n; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d claims sleep, want %d", ws.Sleeping("q"), n)
		}
	}
}

// Signal(q, n) wakes n claims, not every one: a change that made n jobs
// available costs n looks.
func TestSignal_WakesAsManyClaimsAsJobs(t *testing.T) {
	cl := &claimer{ws: New()}
	out := make(chan []db.Job, 10)
	for range 10 {
		go cl.claim(time.Minute, out)
	}
	waitSleeping(t, cl.ws, 10)
	looks := cl.ws.Looks()
	cl.jobs.Store(2)
	cl.ws.Signal("q", 2)
	for range 2 {
		if got := <-out; len(got) != 1 {
			t.Fatalf("a signalled claim answered %v, want a job", got)
		}
	}
	waitSleeping(t, cl.ws, 8)
	if n := cl.ws.Looks() - looks; n != 2 {
		t.Fatalf("Signal(q, 2) made %d looks, want 2", n)
	}
	cl.ws.Stop()
	for range 8 {
		if got := <-out; len(got) != 0 {
			t.Fatalf("a claim after Stop answered %v, want nothing", got)
		}
	}
}

// A claim signalled as its wait ends passes the wake-up on, so that no
// available job is left with sleeping claims.
func TestSignal_AnUnusedWakeUpIsPassedOn(t *testing.T) {
	ws := New()
	c := ws.register(db.ClaimRequest{Queues: []string{"q"}})
	ws.sleep(c, Due{})
	cl := &claimer{ws: ws}
	out := make(chan []db.Job, 1)
	go cl.claim(time.Minute, out)
	waitSleeping(t, ws, 2)
	cl.jobs.Store(1)
	ws.Signal("q", 1) // the oldest, c, which then stops waiting without looking
	if job := ws.release(c, true); job != nil {
		t.Fatalf("release() = %v, want no job", job)
	}
	select {
	case got := <-out:
		if len(got) != 1 {
			t.Fatalf("the other claim answered %v, want the job", got)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the wake-up was not passed on")
	}
}

// Later sets a sleeping claim's timer to an earlier due time without a
// look; the claim looks when it comes.
func TestLater_SetsTheTimerWithoutALook(t *testing.T) {
	ws := New()
	var looks atomic.Int64
	start := time.Now()
	got := make(chan []db.Job, 1)
	go func() {
		jobs, _ := ws.Claim(context.Background(), db.ClaimRequest{Queues: []string{"q"}, Wait: time.Minute},
			func(context.Context) ([]db.Job, Due, error) {
				if looks.Add(1) > 1 {
					return []db.Job{{ID: 1}}, Due{}, nil
				}
				return nil, Due{Now: 1000}, nil // nothing due
			})
		got <- jobs
	}()
	waitSleeping(t, ws, 1)
	ws.Later("q", 1000+int64(50*time.Millisecond))
	time.Sleep(10 * time.Millisecond)
	if n := looks.Load(); n != 1 {
		t.Fatalf("%d looks right after Later, want 1", n)
	}
	select {
	case jobs := <-got:
		if len(jobs) != 1 || looks.Load() != 2 {
			t.Fatalf("claim = %v after %d looks, want a job at the second", jobs, looks.Load())
		}
		if took := time.Since(start); took < 50*time.Millisecond {
			t.Fatalf("looked again after %v, before the due time", took)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the claim did not look again at the due time Later told")
	}
}

// A wake of one name ends only its acquires' waits; Close ends the rest
// with db.ErrClosed.
func TestWakeName_WakesOnlyThatNamesAcquires(t *testing.T) {
	ws := New()
	type res struct {
		name string
		err  error
	}
	out := make(chan res, 2)
	tries := map[string]*atomic.Int64{"a": {}, "b": {}}
	for name, n := range tries {
		go func() {
			_, err := ws.Acquire(context.Background(), name, time.Minute, func(context.Context) (db.Lease, bool, time.Duration, error) {
				if n.Add(1) > 1 {
					return db.Lease{Name: name}, false, 0, nil
				}
				return db.Lease{}, true, time.Hour, db.Errorf(db.CodeConflict, "held")
			})
			out <- res{name, err}
		}()
	}
	for deadline := time.Now().Add(10 * time.Second); ws.Acquiring("a") != 1 || ws.Acquiring("b") != 1; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the acquires never waited")
		}
	}
	ws.WakeName("a")
	if r := <-out; r.name != "a" || r.err != nil {
		t.Fatalf("after WakeName(a): %s answered %v, want a acquired", r.name, r.err)
	}
	ws.Close()
	if r := <-out; r.name != "b" || r.err != db.ErrClosed {
		t.Fatalf("after Close: %s answered %v, want b with ErrClosed", r.name, r.err)
	}
}
