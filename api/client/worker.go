package client

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"sync"
	"time"
)

// Handler does one job. ctx is cancelled when the claim is lost (a
// heartbeat was refused: the job was claimed again, cancelled, or is no
// longer claimed by this worker; context.Cause is then ErrClaimLost) or when
// a stopping Worker's drain deadline passed (ErrWorkerStopped). A handler
// should stop its work when ctx ends; its answer is then not used to
// complete the job.
//
// A nil error completes the job with result and attestation (marshalled to
// JSON; a json.RawMessage is sent as it is). An error fails the attempt:
// the server retries the job after its backoff, unless the error is (or
// wraps) a *Failure that gives a delay or makes the failure final — see
// RetryAfter and Final. A panic fails the attempt like an error.
type Handler func(ctx context.Context, job Job) (result, attestation any, err error)

var (
	// ErrClaimLost is the cause of a handler context's cancellation when
	// the server refused a heartbeat: the claim is no longer this
	// worker's, and the job must not be completed by it.
	ErrClaimLost = errors.New("fenceq: claim lost")
	// ErrWorkerStopped is the cause of a handler context's cancellation
	// when a stopping Worker's drain deadline passed.
	ErrWorkerStopped = errors.New("fenceq: worker stopped before the job finished")
)

// Failure is a handler error that says how to fail the job.
type Failure struct {
	Err error
	// Delay is the wait before the next attempt; nil leaves it to the
	// server's exponential backoff.
	Delay *time.Duration
	// Final makes the job dead at once, whatever attempts it has left.
	Final bool
}

func (f *Failure) Error() string {
	if f.Err == nil {
		return "job failed"
	}
	return f.Err.Error()
}

func (f *Failure) Unwrap() error { return f.Err }

// RetryAfter wraps err so that the Worker fails the job with a retry
// delay of d (0: retry at once) instead of the server's backoff.
func RetryAfter(err error, d time.Duration) error { return &Failure{Err: err, Delay: &d} }

// Final wraps err so that the Worker fails the job for good: it goes dead
// and is not retried.
func Final(err error) error { return &Failure{Err: err, Final: true} }

// Outcome says how a Worker finished a job.
type Outcome string

// Outcomes reported to WorkerConfig.OnDone.
const (
	// OutcomeCompleted: the handler succeeded and the server accepted the
	// completion.
	OutcomeCompleted Outcome = "completed"
	// OutcomeFailed: the handler failed (or its result could not be
	// stored) and the server recorded the failure.
	OutcomeFailed Outcome = "failed"
	// OutcomeLost: the claim was lost — a heartbeat, the completion or the
	// failure was refused as not the current claim. Nothing of this attempt
	// was stored.
	OutcomeLost Outcome = "lost"
	// OutcomeUnknown: the completion or failure could not be delivered
	// (server unreachable until the retries ran out). The lease will expire
	// and the job be claimed again.
	OutcomeUnknown Outcome = "unknown"
)

// Done reports one finished job to WorkerConfig.OnDone.
type Done struct {
	// Job is the job as claimed (Job.FencingToken is the claim's token).
	Job     Job
	Outcome Outcome
	// Err is the handler's error (OutcomeFailed), the refusal
	// (OutcomeLost) or the last delivery error (OutcomeUnknown).
	Err error
	// Stored is the job as the server returned it after the completion
	// or failure; zero for OutcomeLost and OutcomeUnknown.
	Stored Job
}

// WorkerConfig configures a Worker. Only the handler is required.
type WorkerConfig struct {
	// Name is the worker label; claims are held by principal|Name.
	// Default: the host name. Several Workers (and restarts) may share a
	// name: the fencing token tells their claims apart.
	Name string
	// Queues to claim from. Default ["default"].
	Queues []string
	// Concurrency is how many jobs run at once. Default 1.
	Concurrency int
	// Prefetch is how many jobs the worker may hold claimed beyond its
	// handlers, waiting for one to free up. A free handler then starts
	// one at once instead of waiting for a claim, and each call carries
	// more completions: for short jobs, Prefetch = Concurrency drains
	// faster. A waiting job's lease is running (heartbeats keep it), and
	// another worker cannot take it: leave it 0 for long jobs. Jobs still
	// waiting when a stop begins run during the drain; those the drain
	// deadline finds not started are failed without running, to be
	// retried at once (each claim counts as an attempt). Default 0.
	Prefetch int
	// Lease of each claim; heartbeats go every Lease/3. Default 30s.
	Lease time.Duration
	// Wait is the long-poll of each claim. Default 30s (the server may
	// shorten it).
	Wait time.Duration
	// DrainTimeout is how long Run lets in-flight jobs finish after its
	// context ended, before it cancels their contexts. Default 30s.
	// (Stop takes its deadline from its own context instead.)
	DrainTimeout time.Duration
	// Logger receives claim errors, lost claims and failures. Default
	// slog.Default().
	Logger *slog.Logger
	// OnDone, if set, is called after each job, from a goroutine of the
	// Worker's that sends completions and failures: it should return soon.
	OnDone func(Done)
	// NoClaimNext turns off claiming the next job with the completion (one
	// transaction for both). Leave it off unless a proxy cannot pass it.
	NoClaimNext bool
	// StartTimeout, if positive, is how long Run keeps trying to reach
	// the server before its first answer: when every claim since Run
	// began went unanswered (a wrong URL, nothing listening, a name that
	// does not resolve) for that long, Run stops and returns the last
	// error, which names the URL. Once the server has answered, claims are
	// retried for as long as it takes (a restart). Default 0: forever.
	StartTimeout time.Duration
}

// Worker claims jobs and runs a Handler on each, keeping the claim alive
// with heartbeats and sending the claim's fencing token on every
// heartbeat, completion and failure. Create it with NewWorker, start it
// with Run, end it by cancelling Run's context or with Stop.
type Worker struct {
	c   *Client
	h   Handler
	cfg WorkerConfig
	log *slog.Logger

	mu       sync.Mutex
	started  bool
	stopOnce sync.Once
	stopping chan struct{} // closed: no new claims
	done     chan struct{} // closed when Run returned
	hardStop context.CancelCauseFunc
	runErr   error
	base     context.Context // Run's context without its cancellation
	jobsCtx  context.Context // parent of handler contexts; hard-stopped
}

// NewWorker returns a Worker that runs h on jobs claimed through c.
func NewWorker(c *Client, h Handler, cfg WorkerConfig) (*Worker, error) {
	if c == nil || h == nil {
		return nil, errors.New("fenceq: NewWorker needs a client and a handler")
	}
	if cfg.Name == "" {
		host, err := os.Hostname()
		if err != nil || host == "" {
			host = "worker"
		}
		cfg.Name = host
	}
	if cfg.Concurrency <= 0 {
		cfg.Concurrency = 1
	}
	if cfg.Prefetch < 0 {
		return nil, fmt.Errorf("fenceq: worker prefetch %d is negative", cfg.Prefetch)
	}
	if cfg.Lease <= 0 {
		cfg.Lease = 30 * time.Second
	}
	if cfg.Lease < 30*time.Millisecond {
		return nil, fmt.Errorf("fenceq: worker lease %v is too short to heartbeat (at least 30ms)", cfg.Lease)
	}
	if cfg.Wait <= 0 {
		cfg.Wait = 30 * time.Second
	}
	if cfg.DrainTimeout <= 0 {
		cfg.DrainTimeout = 30 * time.Second
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	return &Worker{c: c, h: h, cfg: cfg, log: log.With("worker", cfg.Name),
		stopping: make(chan struct{}), done: make(chan struct{})}, nil
}

// Name returns the worker label.
func (w *Worker) Name() string { return w.cfg.Name }

// Stopping returns a channel that is closed when the worker stops
// claiming (Stop was called, Run's context ended, or claiming failed for
// good). A long handler may watch it to save its progress early.
func (w *Worker) Stopping() <-chan struct{} { return w.stopping }

func (w *Worker) beginStop() { w.stopOnce.Do(func() { close(w.stopping) }) }

func (w *Worker) isStopping() bool {
	select {
	case <-w.stopping:
		return true
	default:
		return false
	}
}

// fatal stops the worker because claiming cannot work (the server refuses
// the claim itself: bad queue or worker name, lease above the server's
// maximum, missing role). Run returns err after draining.
func (w *Worker) fatal(err error) {
	w.mu.Lock()
	if w.runErr == nil {
		w.runErr = err
	}
	w.mu.Unlock()
	w.beginStop()
}

// Run claims and runs jobs until ctx ends or Stop is called. Then it stops
// claiming (a long-poll in progress is abandoned), lets the jobs in flight
// finish — heartbeats go on meanwhile — and cancels the contexts of those
// still running after DrainTimeout (Run) or when Stop's context ends. A job
// whose handler returns an error after that is failed with no retry delay,
// so another worker takes it at once. Run returns nil after a stop, or
// the error that made it stop on its own (the server refused the claim
// itself, e.g. invalid_argument or permission_denied). A handler that
// ignores its context keeps Run from returning.
func (w *Worker) Run(ctx context.Context) error {
	w.mu.Lock()
	if w.started {
		w.mu.Unlock()
		return errors.New("fenceq: Worker.Run called twice")
	}
	w.started = true
	w.base = context.WithoutCancel(ctx)
	w.jobsCtx, w.hardStop = context.WithCancelCause(w.base)
	w.mu.Unlock()
	defer close(w.done)
	defer w.hardStop(nil)

	claimCtx, cancelClaims := context.WithCancel(ctx)
	defer cancelClaims()
	slotsDone := make(chan struct{})
	go func() {
		select {
		case <-w.stopping: // Stop, or a fatal claim error
			cancelClaims()
		case <-ctx.Done():
		case <-slotsDone:
			return
		}
		// Whatever stopped the claims, the end of ctx starts the drain
		// deadline.
		select {
		case <-ctx.Done():
		case <-slotsDone:
			return
		}
		w.beginStop()
		cancelClaims()
		t := time.NewTimer(w.cfg.DrainTimeout)
		defer t.Stop()
		select {
		case <-t.C:
			w.log.Warn("drain timeout: cancelling the jobs still running", "timeout", w.cfg.DrainTimeout)
			w.hardStop(ErrWorkerStopped)
		case <-slotsDone:
		}
	}()

	w.loop(claimCtx)
	close(slotsDone)
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.runErr
}

// Stop stops claiming and waits for the jobs in flight to finish. When ctx
// ends first, it cancels their contexts (cause ErrWorkerStopped), waits
// for the handlers to return and returns ctx's error. Stop before Run
// makes Run return at once.
func (w *Worker) Stop(ctx context.Context) error {
	w.beginStop()
	w.mu.Lock()
	started, hardStop := w.started, w.hardStop
	w.mu.Unlock()
	if !started {
		return nil
	}
	select {
	case <-w.done:
		return nil
	case <-ctx.Done():
		hardStop(ErrWorkerStopped)
		<-w.done
		return ctx.Err()
	}
}

// Claim errors are retried after a pause that doubles up to a limit.
const (
	claimRetryMin = 100 * time.Millisecond
	claimRetryMax = 5 * time.Second
)

// claimRefused reports an answer that says claiming itself is wrong, not
// that the server is busy or away: any 4xx but 408 and 429.
func claimRefused(err error) bool {
	s := StatusCode(err)
	return s >= 400 && s < 500 && s != http.StatusRequestTimeout && s != http.StatusTooManyRequests
}

// lostClaim reports a refusal that means "not your claim any more":
// not_found from heartbeat and fail, failed_precondition from complete.
func lostClaim(err error) bool {
	s := StatusCode(err)
	return s == http.StatusNotFound || s == http.StatusConflict
}

// transient reports an error worth sending the same call again for: no
// answer, or an answer that says the server could not decide.
func transient(err error) bool {
	s := StatusCode(err)
	return s == 0 || s == http.StatusTooManyRequests || s >= 500
}

// finishBudget bounds how long a completion or failure is sent again
// while the server does not answer. Past the lease there is little point:
// the job is claimable again and a late call would be refused.
func (w *Worker) finishBudget() time.Duration { return max(w.cfg.Lease, 5*time.Second) }

// deliver sends call until it gets an answer, or the budget runs out.
// Fenced calls are safe to repeat: a repeat after an applied one is
// refused and changes nothing. repeated is true when call was sent more
// than once.
func (w *Worker) deliver(call func(ctx context.Context, attempt int) error, log *slog.Logger) (repeated bool, err error) {
	ctx, cancel := context.WithTimeout(w.base, w.finishBudget())
	defer cancel()
	pause := 50 * time.Millisecond
	for attempt := 0; ; attempt++ {
		err = call(ctx, attempt)
		if err == nil || !transient(err) || ctx.Err() != nil {
			return attempt > 0, err
		}
		log.Warn("could not reach the server; sending again", "err", err, "in", pause)
		select {
		case <-time.After(pause):
		case <-ctx.Done():
			return attempt > 0, err
		}
		pause = min(2*pause, time.Second)
	}
}

// completedByUs reports whether the job is completed by the claim with
// token: only its holder could complete it with that token.
func (w *Worker) completedByUs(id, token uint64) bool {
	ctx, cancel := context.WithTimeout(w.base, 5*time.Second)
	defer cancel()
	j, err := w.c.GetJob(ctx, id)
	return err == nil && j.State == StateCompleted && j.Attempts == token
}

// maxErrorText is how much of a handler's error is sent (the server keeps
// at most 4096 bytes).
const maxErrorText = 4000

func (w *Worker) report(d Done) {
	if w.cfg.OnDone != nil {
		w.cfg.OnDone(d)
	}
}

// truncate cuts s to at most n bytes on a UTF-8 boundary.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && s[n]&0xC0 == 0x80 {
		n--
	}
	return s[:n]
}
