package postgres

import (
	"time"
)

// Gathering the callers a batch answered. Workers that each make a call
// per claim and per completion form a closed loop: the callers a batch
// answers call again about a round trip later, while the next batch,
// begun at once with the calls that waited, is in flight; they then wait
// for the batch after it. The replica's batches split into groups that
// alternate, each paying a commit (its statements, its WAL flush, its
// wake-ups) for part of the callers.
//
// So a batch that would begin without callers that the previous batch
// answered — two or more, each of whose calls completed or failed a job
// or claimed one, so that its next call comes at once — waits for their
// next calls: at most as long as the previous batch took (5 ms at most),
// and no longer once every one of them has called. The groups merge into
// one batch per turn of the loop. A lone caller, a claim that found
// nothing (it waits for a job, not for this replica), enqueues and
// everything without a worker's name never make a batch wait.
//
// Callers whose handlers take longer than a batch do not call again in
// time, and each wait for them would only delay the batch: after a wait
// that ended with fewer than half of them come, the replica skips that many waits
// more before it waits again (1, 2, 4 … 64), and waits every time again
// once half or more came.

// maxGatherWait bounds a batch's wait for the callers the previous batch
// answered (Options.GatherWait's default).
const maxGatherWait = 5 * time.Millisecond

// gatherWait is the commit loop's memory of the previous batch.
type gatherWait struct {
	callers map[string]bool // who the previous batch answered and will call again at once
	took    time.Duration   // how long the previous batch took
	waits   *time.Timer
	// backoff: waits to skip after one that fewer than half of its
	// callers ended (maxGatherBackoff at most).
	backoff skipBackoff
	waited  int // waits begun
}

// maxGatherBackoff bounds how many waits a replica skips after one that
// served little.
const maxGatherBackoff = 64

// answered records batch, committed (or failed) in took.
func (g *gatherWait) answered(batch []*writeOp, took time.Duration) {
	clear(g.callers)
	for _, op := range batch {
		if op.back && op.err == nil && op.plan.caller != "" { // a named caller that will call again at once
			if g.callers == nil {
				g.callers = map[string]bool{}
			}
			g.callers[op.plan.caller] = true
		}
	}
	g.took = took
}

// gatherCallers adds to batch the calls of the callers the previous batch
// answered, waiting for them as gatherWait says.
func (s *Store) gatherCallers(g *gatherWait, batch []*writeOp) []*writeOp {
	if s.opts.NoGatherWait || len(g.callers) < 2 {
		return batch
	}
	missing := len(g.callers)
	seen := make(map[string]bool, missing)
	note := func(op *writeOp) {
		if c := op.plan.caller; g.callers[c] && !seen[c] {
			seen[c] = true
			missing--
		}
	}
	for _, op := range batch {
		note(op)
	}
	if missing == 0 || len(batch) >= s.opts.MaxBatch {
		return batch
	}
	if g.backoff.skipping() {
		return batch
	}
	defer func() {
		if 2*(len(g.callers)-missing) < len(g.callers) {
			g.backoff.missed(maxGatherBackoff)
		} else {
			g.backoff.served()
		}
	}()
	g.waited++
	g.waits.Reset(min(g.took, s.opts.GatherWait)) // Go 1.23 timers: no stale tick survives Stop or Reset
	defer g.waits.Stop()
	for missing > 0 && len(batch) < s.opts.MaxBatch {
		select {
		case op := <-s.writes:
			batch = append(batch, op)
			note(op)
		case <-g.waits.C:
			return batch
		case <-s.closing:
			return batch
		}
	}
	return batch
}

// callerOf names the caller of a worker's call.
func callerOf(principal, worker string) string {
	if worker == "" {
		return ""
	}
	return principal + "\x00" + worker
}
