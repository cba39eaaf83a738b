package client

// The Worker's loop. One goroutine owns the worker's state: the jobs it
// holds, the handlers running, the claims asked for. Everything that
// talks to the server runs beside it and reports back on a channel:
//
//   - one long-poll claim at a time, for as many jobs as there are free
//     handlers plus WorkerConfig.Prefetch (never more: a claimed job's
//     lease is running); a job claimed while every handler is busy waits
//     in the worker for the first to free up;
//   - one finish call at a time: every completion and failure that came in
//     while the previous one was in flight goes out together, the
//     completions with a claim of replacements for the handlers they free
//     (claim_next, in the same transaction);
//   - one heartbeat call per interval (Lease/3) for every job held.
//
// A refused item cancels only that job's handler (ErrClaimLost). A call
// whose reply is lost (no answer, 5xx, 429) is sent again as it was, but
// without claim_next: fenced calls are safe to repeat, a claim is not. So
// a lost reply leaves at most the claim_next.max of that call claimed by
// nobody until their leases run out — at most the number of completions in
// the batch plus Prefetch, never more than Concurrency + Prefetch — and a
// lost long-poll reply at most its max, the room free at the time.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"runtime/debug"
	"slices"
	"sync"
	"time"
)

// held is a job the worker holds a claim on: it waits for a free handler
// (Prefetch), its handler is running, or it has finished and its
// completion or failure is on its way.
type held struct {
	job    Job
	token  uint64
	log    *slog.Logger
	ctx    context.Context // the handler's
	cancel context.CancelCauseFunc
	lost   error // a heartbeat was refused; loop goroutine only
}

// outcome is what a handler returned.
type outcome struct {
	h                   *held
	result, attestation any
	err                 error
}

type claimReply struct {
	asked int
	jobs  []Job
	err   error
}

type finishReply struct {
	asked    int      // the claim_next max sent
	next     []Job    // jobs claim_next claimed
	finished []uint64 // the jobs of the batch, no longer held
}

type heartbeatReply struct {
	lost map[uint64]error // refused items
	err  error            // the call failed as a whole
}

func (w *Worker) claimParams() ClaimParams {
	return ClaimParams{Worker: w.cfg.Name, Queues: w.cfg.Queues, Lease: w.cfg.Lease, Wait: w.cfg.Wait}
}

// loop runs until claiming has stopped (claimCtx ended or the worker is
// stopping) and every held job is finished and reported.
func (w *Worker) loop(claimCtx context.Context) {
	var (
		holding   = map[uint64]*held{}
		queued    []*held // claimed, waiting for a free handler
		busy      int     // handlers running
		asked     int     // jobs asked for by calls in flight
		pending   []outcome
		claiming  bool
		finishing bool
		beating   bool
		retryAt   <-chan time.Time // a claim error's pause
		pause     = claimRetryMin
		answered  bool // a call of this Run got an answer from the server
		began     = time.Now()
		wg        sync.WaitGroup
	)
	outcomes := make(chan outcome)
	claims := make(chan claimReply, 1)
	finishes := make(chan finishReply, 1)
	beats := make(chan heartbeatReply, 1)
	every := w.cfg.Lease / 3
	tick := time.NewTimer(every)
	defer tick.Stop()
	hbCtx, stopBeats := context.WithCancel(w.base)
	defer func() {
		stopBeats()
		wg.Wait()
	}()
	stopCh := w.stopping

	// run starts waiting jobs on the free handlers, in the order claimed.
	run := func() {
		for busy < w.cfg.Concurrency && len(queued) > 0 {
			h := queued[0]
			queued[0] = nil
			queued = queued[1:]
			if w.droppedLost(outcome{h: h}, holding) {
				continue // a heartbeat found its claim lost while it waited
			}
			busy++
			if w.jobsCtx.Err() != nil {
				// The drain deadline passed before it started: fail it
				// without running the handler (retried at once). The
				// parent is asked, not h.ctx: the hard stop cancels the
				// handlers' contexts one after the other, and the job
				// whose handler returned first may free a handler before
				// this one's context is reached.
				h.cancel(context.Cause(w.jobsCtx))
				go func() { outcomes <- outcome{h: h, err: fmt.Errorf("not started: %w", context.Cause(h.ctx))} }()
				continue
			}
			go func() {
				res, att, err := w.call(h.ctx, h.job, h.log)
				outcomes <- outcome{h: h, result: res, attestation: att, err: err}
			}()
		}
	}
	start := func(jobs []Job) {
		for _, job := range jobs {
			token := job.FencingToken
			if token == 0 {
				token = job.Attempts
			}
			h := &held{job: job, token: token, log: w.log.With("job", job.ID, "queue", job.Queue, "token", token)}
			h.ctx, h.cancel = context.WithCancelCause(w.jobsCtx)
			holding[job.ID] = h
			queued = append(queued, h)
		}
		run()
	}
	free := func() int { return w.cfg.Concurrency + w.cfg.Prefetch - busy - len(queued) - asked }
	sendFinish := func() {
		batch := pending
		pending = nil
		// Replacements for the handlers this batch frees (and room for
		// Prefetch), and no more: the bound on what a lost reply can
		// leave claimed.
		n := 0
		if !w.cfg.NoClaimNext && !w.isStopping() {
			completions := 0
			for _, o := range batch {
				if o.err == nil && o.h.lost == nil {
					completions++
				}
			}
			n = min(free(), completions+w.cfg.Prefetch)
		}
		asked += n
		finishing = true
		wg.Go(func() { finishes <- w.finish(batch, n) })
	}
	for {
		run()
		stopping := w.isStopping() || claimCtx.Err() != nil
		// Claim for free handlers unless a finish call is about to claim
		// replacements for them in its own transaction.
		if !stopping && !claiming && retryAt == nil && free() > 0 && (w.cfg.NoClaimNext || (!finishing && len(pending) == 0)) {
			n := free()
			asked += n
			claiming = true
			wg.Go(func() {
				jobs, err := w.c.ClaimMany(claimCtx, w.claimParams(), n)
				claims <- claimReply{asked: n, jobs: jobs, err: err}
			})
		}
		if !finishing && len(pending) > 0 {
			sendFinish()
		}
		if stopping && busy == 0 && len(queued) == 0 && !claiming && !finishing && len(pending) == 0 {
			return
		}
		select {
		case r := <-claims:
			claiming = false
			asked -= r.asked
			start(r.jobs) // even when stopping: they are claimed
			answered = answered || r.err == nil || StatusCode(r.err) != 0
			switch {
			case r.err == nil:
				pause = claimRetryMin
			case w.isStopping() || claimCtx.Err() != nil:
			case !answered && w.cfg.StartTimeout > 0 && time.Since(began) >= w.cfg.StartTimeout:
				w.log.Error("the server never answered; stopping", "err", r.err, "within", w.cfg.StartTimeout)
				w.fatal(fmt.Errorf("fenceq: worker: no answer from %s within %v: %w", w.c.BaseURL(), w.cfg.StartTimeout, r.err))
			case claimRefused(r.err):
				w.log.Error("the server refuses the claim itself; stopping", "err", r.err)
				w.fatal(r.err)
			default:
				w.log.Warn("claim failed; trying again", "err", r.err, "in", pause)
				retryAt = time.After(pause)
				pause = min(2*pause, claimRetryMax)
			}
		case <-retryAt:
			retryAt = nil
		case <-stopCh:
			// Wake up to notice; a claim in flight ends with claimCtx.
			stopCh, retryAt = nil, nil
		case o := <-outcomes:
			busy--
			if w.droppedLost(o, holding) {
				continue
			}
			pending = append(pending, o)
			if !finishing {
				// Handlers started together (one claim's jobs) tend to end
				// together: let those that are about to report do so, so
				// that the call that goes out at once carries them too.
				pending = w.gatherOutcomes(outcomes, pending, &busy, holding)
			}
		case r := <-finishes:
			finishing = false
			asked -= r.asked
			start(r.next)
			for _, id := range r.finished {
				delete(holding, id)
			}
			if len(pending) > 0 {
				// The jobs just claimed join the waiting outcomes if they
				// end at once (short jobs), so that the worker's calls do
				// not split into two cohorts taking turns.
				pending = w.gatherOutcomes(outcomes, pending, &busy, holding)
			}
		case <-tick.C:
			if beating || len(holding) == 0 {
				tick.Reset(every)
				continue
			}
			items := make([]HeartbeatItem, 0, len(holding))
			for id, h := range holding {
				items = append(items, HeartbeatItem{ID: id, FencingToken: h.token, Lease: w.cfg.Lease})
			}
			beating = true
			wg.Go(func() { beats <- w.heartbeat(hbCtx, items) })
		case r := <-beats:
			beating = false
			for id, err := range r.lost {
				if h := holding[id]; h != nil && h.lost == nil && h.ctx.Err() == nil {
					h.lost = err
					h.cancel(fmt.Errorf("%w: %w", ErrClaimLost, err))
				}
			}
			if len(r.lost) > 0 {
				// A waiting job whose claim was lost ends now, not when
				// a handler frees up; its room is claimed again.
				queued = slices.DeleteFunc(queued, func(h *held) bool { return w.droppedLost(outcome{h: h}, holding) })
			}
			if r.err != nil && hbCtx.Err() == nil {
				w.log.Warn("heartbeat failed; trying again", "err", r.err)
				tick.Reset(max(every/4, 10*time.Millisecond))
			} else {
				tick.Reset(every)
			}
		}
	}
}

// droppedLost ends a job whose claim a heartbeat found lost: its handler's
// answer is not sent.
func (w *Worker) droppedLost(o outcome, holding map[uint64]*held) bool {
	if o.h.lost == nil {
		return false
	}
	o.h.log.Warn("claim lost; the job is not completed by this worker", "err", o.h.lost)
	delete(holding, o.h.job.ID)
	o.h.cancel(nil)
	w.report(Done{Job: o.h.job, Outcome: OutcomeLost, Err: o.h.lost})
	return true
}

// gatherOutcomes yields to the handlers that are about to report and adds
// their outcomes to pending, for as long as yielding brings more (at most
// a few rounds: microseconds, not a timer).
func (w *Worker) gatherOutcomes(outcomes <-chan outcome, pending []outcome, busy *int, holding map[uint64]*held) []outcome {
	for range 8 {
		runtime.Gosched()
		n := len(pending)
		if pending = w.drainOutcomes(outcomes, pending, busy, holding); len(pending) == n {
			break
		}
	}
	return pending
}

// drainOutcomes adds every outcome already waiting to pending.
func (w *Worker) drainOutcomes(outcomes <-chan outcome, pending []outcome, busy *int, holding map[uint64]*held) []outcome {
	for *busy > 0 {
		select {
		case o := <-outcomes:
			*busy--
			if !w.droppedLost(o, holding) {
				pending = append(pending, o)
			}
		default:
			return pending
		}
	}
	return pending
}

// call runs the handler, turning a panic into an error.
func (w *Worker) call(ctx context.Context, job Job, log *slog.Logger) (result, attestation any, err error) {
	defer func() {
		if r := recover(); r != nil {
			log.Error("handler panicked", "panic", r, "stack", string(debug.Stack()))
			err = fmt.Errorf("handler panicked: %v", r)
		}
	}()
	return w.h(ctx, job)
}

// heartbeat extends every held claim in calls of at most MaxBatch jobs.
func (w *Worker) heartbeat(ctx context.Context, items []HeartbeatItem) heartbeatReply {
	out := heartbeatReply{lost: map[uint64]error{}}
	for len(items) > 0 {
		chunk := items[:min(len(items), MaxBatch)]
		items = items[len(chunk):]
		res, err := w.c.HeartbeatMany(ctx, w.cfg.Name, chunk)
		if err != nil {
			out.err = err
			continue
		}
		for _, r := range res {
			if r.Err != nil && lostClaim(r.Err) {
				out.lost[r.ID] = r.Err
			}
		}
	}
	return out
}

// finish sends a batch of outcomes: the failures, then the completions
// with claim_next for claimMax jobs; reports each job (OnDone); and marks
// the batch's jobs as no longer held.
func (w *Worker) finish(batch []outcome, claimMax int) finishReply {
	reply := finishReply{asked: claimMax}
	for _, o := range batch {
		reply.finished = append(reply.finished, o.h.job.ID)
	}
	var completes, fails []outcome
	var completeItems []CompleteItem
	for _, o := range batch {
		if o.err != nil {
			fails = append(fails, o)
			continue
		}
		params := CompleteParams{Result: o.result, Attestation: o.attestation}
		if _, err := params.body(); err != nil {
			// The result cannot be stored: fail the attempt instead.
			o.err = fmt.Errorf("the handler's result cannot be sent: %w", err)
			fails = append(fails, o)
			continue
		}
		completes = append(completes, o)
		completeItems = append(completeItems, CompleteItem{ID: o.h.job.ID, FencingToken: o.h.token, Result: o.result, Attestation: o.attestation})
	}
	var refusedCompletes []outcome
	for len(completes) > 0 {
		n := min(len(completes), MaxBatch)
		chunk, items := completes[:n], completeItems[:n]
		completes, completeItems = completes[n:], completeItems[n:]
		var (
			results []ItemResult
			next    []Job
		)
		repeated, err := w.deliver(func(ctx context.Context, attempt int) error {
			var claim *ClaimNext
			// A repeat asks for no replacements: an applied first try
			// must not leave more claimed jobs nobody knows of.
			if attempt == 0 && claimMax > 0 {
				claim = &ClaimNext{Queues: w.cfg.Queues, Lease: w.cfg.Lease, Max: claimMax}
			}
			var err error
			results, next, err = w.c.CompleteMany(ctx, w.cfg.Name, items, claim)
			return err
		}, w.log)
		claimMax = 0
		reply.next = append(reply.next, next...)
		for i, o := range chunk {
			var ierr error
			var stored Job
			if err != nil {
				ierr = err
			} else {
				ierr, stored = results[i].Err, results[i].Job
			}
			log := o.h.log
			var d Done
			switch {
			case ierr == nil:
				log.Debug("completed")
				d = Done{Job: o.h.job, Outcome: OutcomeCompleted, Stored: stored}
			case repeated && lostClaim(ierr) && w.completedByUs(o.h.job.ID, o.h.token):
				// The first try was applied; its answer got lost on the way.
				d = Done{Job: o.h.job, Outcome: OutcomeCompleted}
			case lostClaim(ierr):
				log.Warn("completion refused: the claim was lost", "err", ierr)
				d = Done{Job: o.h.job, Outcome: OutcomeLost, Err: ierr}
			case transient(ierr):
				log.Error("could not deliver the completion", "err", ierr)
				d = Done{Job: o.h.job, Outcome: OutcomeUnknown, Err: ierr}
			default:
				// The server refuses the completion itself (result too
				// large, not JSON): fail the attempt rather than leave it
				// to expire.
				o.err = fmt.Errorf("completion refused: %w", ierr)
				refusedCompletes = append(refusedCompletes, o)
				continue
			}
			w.finished(o.h, d)
		}
	}
	fails = append(fails, refusedCompletes...)
	for len(fails) > 0 {
		chunk := fails[:min(len(fails), MaxBatch)]
		fails = fails[len(chunk):]
		items := make([]FailItem, len(chunk))
		for i, o := range chunk {
			items[i] = FailItem{ID: o.h.job.ID, FencingToken: o.h.token, Error: truncate(o.err.Error(), maxErrorText)}
			if f, ok := errors.AsType[*Failure](o.err); ok {
				items[i].RetryDelay, items[i].Final = f.Delay, f.Final
			} else if errors.Is(context.Cause(o.h.ctx), ErrWorkerStopped) {
				// Cut short by a stop, not by a fault of the job: let
				// another worker take it at once.
				var now time.Duration
				items[i].RetryDelay = &now
			}
		}
		var results []ItemResult
		_, err := w.deliver(func(ctx context.Context, _ int) error {
			var err error
			results, err = w.c.FailMany(ctx, w.cfg.Name, items)
			return err
		}, w.log)
		for i, o := range chunk {
			ierr, stored := err, Job{}
			if err == nil {
				ierr, stored = results[i].Err, results[i].Job
			}
			log := o.h.log
			switch {
			case ierr == nil:
				log.Debug("job failed", "err", o.err, "state", stored.State, "run_at", stored.RunAt)
				w.finished(o.h, Done{Job: o.h.job, Outcome: OutcomeFailed, Err: o.err, Stored: stored})
			case lostClaim(ierr):
				log.Warn("failure refused: the claim was lost", "err", ierr, "handler_err", o.err)
				w.finished(o.h, Done{Job: o.h.job, Outcome: OutcomeLost, Err: ierr})
			default:
				log.Error("could not deliver the failure", "err", ierr, "handler_err", o.err)
				w.finished(o.h, Done{Job: o.h.job, Outcome: OutcomeUnknown, Err: ierr})
			}
		}
	}
	return reply
}

// finished ends a held job: whatever its handler left running stops (with
// ErrClaimLost when the claim turned out lost), and OnDone hears of it.
func (w *Worker) finished(h *held, d Done) {
	if d.Outcome == OutcomeLost {
		h.cancel(fmt.Errorf("%w: %w", ErrClaimLost, d.Err))
	}
	h.cancel(nil)
	w.report(d)
}
