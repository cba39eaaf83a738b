package postgres

import (
	"testing"
	"time"
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
	if g.backoff != 8 || g.skip != 8 {
		t.Fatalf("backoff %d, skip %d; want 8, 8", g.backoff, g.skip)
	}
	if got := waits(8); got != 0 {
		t.Fatalf("waited %d times during the 8 skipped", got)
	}
	// Both come: the wait ends at once and the backoff resets.
	s.writes <- callOf(a)
	s.writes <- callOf(b)
	if batch := s.gatherCallers(g, []*writeOp{callOf("")}); len(batch) != 3 || g.backoff != 0 || g.skip != 0 {
		t.Fatalf("gatherCallers() = %d mutations, backoff %d, skip %d; want 3, 0, 0", len(batch), g.backoff, g.skip)
	}
}
