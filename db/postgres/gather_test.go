package postgres

import (
	"testing"
	"time"

	"github.com/fenceq/fenceq/db"
)

// loopOnly is a replica's commit-loop side alone (its queue of mutations
// and its options), for the gathering policy: no batch runs.
func loopOnly(opts Options) *Store {
	opts.setDefaults()
	return &Store{opts: opts, writes: make(chan *writeOp, 16), closing: make(chan struct{})}
}

func callOf(caller string) *writeOp {
	return &writeOp{plan: opPlan{caller: caller}, done: make(chan struct{})}
}

func answeredBy(took time.Duration, callers ...string) *gatherWait {
	g := &gatherWait{waits: time.NewTimer(time.Hour)}
	var batch []*writeOp
	for _, c := range callers {
		op := callOf(c)
		op.back = true
		batch = append(batch, op)
	}
	g.answered(batch, took)
	return g
}

// TestGather_ABatchTakesTheNextCallsOfTheCallersThePreviousOneAnswered: the
// previous batch answered a and b; the next begins with a's call and takes
// b's, which came after it, and whatever came between.
func TestGather_ABatchTakesTheNextCallsOfTheCallersThePreviousOneAnswered(t *testing.T) {
	s := loopOnly(Options{GatherWait: time.Minute})
	g := answeredBy(time.Hour, callerOf("p", "a"), callerOf("p", "b"))
	x, b := callOf(""), callOf(callerOf("p", "b"))
	s.writes <- x
	go func() {
		time.Sleep(20 * time.Millisecond) // after the batch looked: it waits for b
		s.writes <- b
	}()
	batch := s.gatherCallers(g, []*writeOp{callOf(callerOf("p", "a"))})
	if len(batch) != 3 || batch[1] != x || batch[2] != b {
		t.Fatalf("batch = %d mutations, want a's, the enqueue's and b's in order", len(batch))
	}
}

// TestGather_TheWaitEndsAfterThePreviousBatchsTime: b does not call; the
// batch waits as long as the previous batch took, then goes without it.
func TestGather_TheWaitEndsAfterThePreviousBatchsTime(t *testing.T) {
	s := loopOnly(Options{})
	const took = 2 * time.Millisecond
	g := answeredBy(took, callerOf("p", "a"), callerOf("p", "b"))
	start := time.Now()
	batch := s.gatherCallers(g, []*writeOp{callOf(callerOf("p", "a"))})
	if waited := time.Since(start); len(batch) != 1 || waited < took || waited > time.Second {
		t.Fatalf("gatherCallers() = %d mutations after %v; want a's alone after %v", len(batch), waited, took)
	}
	// No longer than GatherWait, whatever the previous batch took.
	g = answeredBy(time.Hour, callerOf("p", "a"), callerOf("p", "b"))
	start = time.Now()
	s.gatherCallers(g, []*writeOp{callOf(callerOf("p", "a"))})
	if waited := time.Since(start); waited < s.opts.GatherWait || waited > time.Second {
		t.Fatalf("gatherCallers() after a batch of an hour waited %v, want %v", waited, s.opts.GatherWait)
	}
}

// TestGather_NoWaitForOneCallerForCallersThatWaitOrWhenTurnedOff: a lone
// caller, a claim that found nothing (back false), an unnamed caller, or
// NoGatherWait: the batch goes as it is, without waiting.
func TestGather_NoWaitForOneCallerForCallersThatWaitOrWhenTurnedOff(t *testing.T) {
	waiting := &gatherWait{waits: time.NewTimer(time.Hour)}
	a, b := callOf(callerOf("p", "a")), callOf(callerOf("p", "b"))
	a.back = true // b's claim found nothing: it waits for a job
	waiting.answered([]*writeOp{a, b, callOf("")}, time.Hour)
	for name, c := range map[string]struct {
		s *Store
		g *gatherWait
	}{
		"one caller":      {loopOnly(Options{GatherWait: time.Minute}), answeredBy(time.Hour, callerOf("p", "a"))},
		"a waiting claim": {loopOnly(Options{GatherWait: time.Minute}), waiting},
		"turned off":      {loopOnly(Options{GatherWait: time.Minute, NoGatherWait: true}), answeredBy(time.Hour, callerOf("p", "a"), callerOf("p", "b"))},
	} {
		start := time.Now()
		batch := c.s.gatherCallers(c.g, []*writeOp{callOf("")})
		if waited := time.Since(start); len(batch) != 1 || waited > 10*time.Second {
			t.Errorf("%s: gatherCallers() = %d mutations after %v; want the batch as it was, at once", name, len(batch), waited)
		}
	}
}

// TestGather_WaitsThatServeLittleBackOff: callers that do not call again
// within the wait (their handlers take longer than a batch) make the
// replica skip the next 1, 2, 4 … waits; a wait that half or more of them
// end makes it wait every time again.
func TestGather_WaitsThatServeLittleBackOff(t *testing.T) {
	s := loopOnly(Options{GatherWait: time.Minute})
	a, b := callerOf("p", "a"), callerOf("p", "b")
	g := answeredBy(2*time.Millisecond, a, b)
	waits := func(n int) int {
		before := g.waited
		for range n {
			s.gatherCallers(g, []*writeOp{callOf("")})
		}
		return g.waited - before
	}
	// Nobody comes: waits 1, skips 1, waits, skips 2, waits, skips 4, waits.
	if got := waits(1 + 1 + 1 + 2 + 1 + 4 + 1); got != 4 {
		t.Fatalf("waited %d times of 11 with callers that never came, want 4 (then 1, 2, 4 skipped)", got)
	}
	if g.backoff.n != 8 || g.backoff.skip != 8 {
		t.Fatalf("backoff %d, skip %d; want 8, 8", g.backoff.n, g.backoff.skip)
	}
	if got := waits(8); got != 0 {
		t.Fatalf("waited %d times during the 8 skipped", got)
	}
	// Both come: the wait ends at once and the backoff resets.
	s.writes <- callOf(a)
	s.writes <- callOf(b)
	if batch := s.gatherCallers(g, []*writeOp{callOf("")}); len(batch) != 3 || g.backoff.n != 0 || g.backoff.skip != 0 {
		t.Fatalf("gatherCallers() = %d mutations, backoff %d, skip %d; want 3, 0, 0", len(batch), g.backoff.n, g.backoff.skip)
	}
}

// TestGather_TheNextCallsOfTwoWorkersAnsweredTogetherShareACommit: workers
// a and b complete a job each in one batch (which takes a while: it holds
// a mutation); a completes its next job at once, b 100 ms later. A's call
// waits for b's and they commit together — for single completions and for
// the Go Worker's batched ones alike.
func TestGather_TheNextCallsOfTwoWorkersAnsweredTogetherShareACommit(t *testing.T) {
	for _, kind := range []string{"CompleteJob", "CompleteJobs"} {
		t.Run(kind, func(t *testing.T) {
			s := mustOpen(t, newTestDB(t), Options{GatherWait: time.Minute, NoEarlyRead: true})
			for range 4 {
				mustEnqueueJob(t, s, db.EnqueueRequest{Principal: "p", Queue: "q"})
			}
			held := map[string][]db.Job{}
			for _, w := range []string{"a", "b"} {
				jobs, err := s.ClaimJobs(bg, db.ClaimRequest{Principal: "p", Worker: w, Queues: []string{"q"}, Max: 2, Lease: time.Minute})
				if err != nil || len(jobs) != 2 {
					t.Fatalf("ClaimJobs(%s) = %d jobs, %v", w, len(jobs), err)
				}
				held[w] = jobs
			}
			complete := func(w string, j db.Job) error {
				f := db.Fenced{ID: j.ID, Principal: "p", Worker: w, FencingToken: j.FencingToken()}
				if kind == "CompleteJob" {
					_, err := s.CompleteJob(bg, db.CompleteRequest{Fenced: f})
					return err
				}
				_, err := s.CompleteJobs(bg, db.CompleteBatchRequest{Items: []db.CompleteRequest{{Fenced: f}}})
				return err
			}
			// Batch 1 holds the loop; batch 2 gets a hold of its own
			// (300 ms: the time the next wait may take) and a's and b's
			// first completions.
			release1, release2 := make(chan struct{}), make(chan struct{})
			hold1 := holdLoop(t, s, opPlan{}, release1, func(*writer) error { return nil })
			hold2 := make(chan error, 1)
			go func() {
				hold2 <- s.update(bg, func(*writer) error { <-release2; return nil })
			}()
			first := make(chan error, 2)
			for _, w := range []string{"a", "b"} {
				go func() { first <- complete(w, held[w][0]) }()
			}
			time.Sleep(100 * time.Millisecond) // all three wait behind batch 1
			close(release1)
			time.Sleep(300 * time.Millisecond)
			close(release2)
			for _, c := range []<-chan error{hold1, hold2, first, first} {
				if err := <-c; err != nil {
					t.Fatal(err)
				}
			}
			commits, _ := s.CommitStats()
			second := make(chan error, 2)
			go func() { second <- complete("a", held["a"][1]) }()
			go func() {
				time.Sleep(100 * time.Millisecond)
				second <- complete("b", held["b"][1])
			}()
			for range 2 {
				if err := <-second; err != nil {
					t.Fatal(err)
				}
			}
			if after, _ := s.CommitStats(); after-commits != 1 {
				t.Fatalf("a's and b's next completions took %d commits, want 1 (a's waited for b's)", after-commits)
			}
		})
	}
}

// holdLoop runs fn as a mutation of plan that waits, once the commit loop
// runs it, until release is closed: the mutations sent meanwhile wait for
// the next batch. It returns when fn runs; the mutation's error comes on
// the channel.
func holdLoop(t *testing.T, s *Store, plan opPlan, release <-chan struct{}, fn func(w *writer) error) <-chan error {
	t.Helper()
	started := make(chan struct{})
	errc := make(chan error, 1)
	go func() {
		errc <- s.updatePlan(bg, plan, func(w *writer) error {
			close(started)
			<-release
			return fn(w)
		})
	}()
	<-started
	return errc
}
