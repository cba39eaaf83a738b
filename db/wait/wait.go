// Package wait holds a store's waits, written once for every engine:
// long-polling claims (sleeping waiters per queue, oldest first), the
// hand-off of a job made available in a commit to the oldest sleeping
// claim of its queue, acquires waiting for a named lease, the timers for
// the next due time, and StopWaiting. An engine supplies only "try now" (a
// claim or acquire attempt that also says when to look again) and, after
// its commits, "something changed" signals: Signal, SignalAll, Later,
// WakeName, WakeAll.
//
// A waiter registers before each attempt, so that a change committed
// between the attempt and the wait still wakes it, and is woken only after
// the commit of the change.
package wait

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fenceq/fenceq/db"
)

// MinTimerWait bounds how often a waiter looks again when the time it
// slept until has come but its attempt found nothing (a test clock that
// does not move, a job another replica took first).
const MinTimerWait = 5 * time.Millisecond

// MinExpiryWait bounds how often a waiting acquire looks again when the
// holder's lease is about to end (or, with a test clock that does not
// move, has not ended yet).
const MinExpiryWait = 10 * time.Millisecond

// Waiters are the waits of one store (one replica). Its methods are safe
// for concurrent use.
type Waiters struct {
	mu      sync.Mutex
	byQueue map[string][]*Claim // registered claims, FIFO per queue
	names   map[string]*nameWait
	timer   *time.Timer // the engine's timer (WakeAt)
	timerAt time.Time

	stopped   chan struct{} // closed by Stop
	closed    chan struct{} // closed by Close
	stopOnce  sync.Once
	closeOnce sync.Once

	looks atomic.Uint64
}

// New returns an empty set of waits.
func New() *Waiters {
	return &Waiters{byQueue: map[string][]*Claim{}, names: map[string]*nameWait{},
		stopped: make(chan struct{}), closed: make(chan struct{})}
}

// Stop ends every wait, now and later, for a graceful shutdown: a
// long-polling claim returns at once with what it has (a job already
// handed off to it, else none), and a waiting acquire returns its last
// lease-held refusal, as when their waits run out. A later wait makes one
// attempt and returns.
func (ws *Waiters) Stop() { ws.stopOnce.Do(func() { close(ws.stopped) }) }

// Close ends every wait with db.ErrClosed (a claim with a job handed off
// to it returns the job) and stops the engine's timer.
func (ws *Waiters) Close() {
	ws.closeOnce.Do(func() { close(ws.closed) })
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if ws.timer != nil {
		ws.timer.Stop()
		ws.timer = nil
	}
}

// Looks is how many attempts long-polling claims have made, their first
// included: a test counts with it how many claims a change woke.
func (ws *Waiters) Looks() uint64 { return ws.looks.Load() }

// Claim is one long-polling claim.
type Claim struct {
	req db.ClaimRequest
	ch  chan struct{} // a wake-up: the claim then reads its fields
	// Under Waiters.mu:
	sleeping  bool    // its attempt found nothing and it waits: it may be taken
	signalled bool    // Signal removed it: it looks again
	taken     bool    // a transaction is handing it a job (Take)
	delivered bool    // that transaction ended: job is the job, or nil
	job       *db.Job // handed off
	later     int64   // the earliest due time Later told it (engine clock), 0 none
	next      int64   // the due time it sleeps until (engine clock), 0 none
	base      int64   // the engine's clock when next was read
	slept     time.Time
}

// Request is the claim's normalized request: a job handed off to it is
// claimed with it.
func (c *Claim) Request() db.ClaimRequest { return c.req }

func wake(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default: // a wake-up is pending already; the claim reads its fields after it
	}
}

// Due is when something a claim asked for becomes claimable by time (a
// scheduled job's run_at, a lease's expiry): At, on the engine's clock in
// Unix nanoseconds, 0 when nothing will without another change; Now is
// the engine's clock when At was read.
type Due struct{ At, Now int64 }

// TryClaim is an engine's claim attempt: the jobs it claimed now, and when
// it found none, when to look again (Due).
type TryClaim func(ctx context.Context) ([]db.Job, Due, error)

// Claim claims with try, long-polling up to req.Wait (real time) while try
// finds nothing: it sleeps until a job is handed off to it (Take), a
// change wakes it (Signal, SignalAll, WakeAll), try's due time comes (or
// an earlier one told by Later), the wait ends, Stop, ctx ends, or Close.
func (ws *Waiters) Claim(ctx context.Context, req db.ClaimRequest, try TryClaim) ([]db.Job, error) {
	deadline := time.NewTimer(req.Wait)
	defer deadline.Stop()
	for {
		c := ws.register(req)
		ws.looks.Add(1)
		jobs, due, err := try(ctx)
		if err != nil || len(jobs) > 0 {
			if job := ws.release(c, true); job != nil {
				jobs = append(jobs, *job) // handed off while the attempt ran
			}
			return jobs, err
		}
		if !ws.sleep(c, due) {
			continue // signalled while it looked: look again
		}
		job, again, err := ws.sleepClaim(ctx, c, deadline.C)
		if job != nil {
			return []db.Job{*job}, nil
		}
		if !again {
			return nil, err
		}
	}
}

// sleepClaim waits for c's wake-ups until it should look again (again) or
// stop, with the job handed off to it, if any.
func (ws *Waiters) sleepClaim(ctx context.Context, c *Claim, deadline <-chan time.Time) (job *db.Job, again bool, err error) {
	var t *time.Timer
	var fire <-chan time.Time
	arm := func() {
		ws.mu.Lock()
		next, base, slept := c.next, c.base, c.slept
		ws.mu.Unlock()
		if t != nil {
			t.Stop()
			t, fire = nil, nil
		}
		if next != 0 {
			t = time.NewTimer(max(time.Duration(next-base)-time.Since(slept), MinTimerWait))
			fire = t.C
		}
	}
	arm()
	defer func() {
		if t != nil {
			t.Stop()
		}
	}()
	for {
		select {
		case <-c.ch:
			ws.mu.Lock()
			taken, signalled := c.taken, c.signalled
			ws.mu.Unlock()
			if !taken && !signalled {
				arm() // Later: an earlier due time
				continue
			}
			// A hand-off (nil: its commit failed) or a change: look again.
			return ws.release(c, false), true, nil
		case <-fire:
			return ws.release(c, false), true, nil
		case <-deadline:
			return ws.release(c, true), false, nil
		case <-ws.stopped: // answered as when the wait runs out
			return ws.release(c, true), false, nil
		case <-ctx.Done():
			return ws.release(c, true), false, ctx.Err()
		case <-ws.closed:
			return ws.release(c, true), false, db.ErrClosed
		}
	}
}

func (ws *Waiters) register(req db.ClaimRequest) *Claim {
	c := &Claim{req: req, ch: make(chan struct{}, 1)}
	ws.mu.Lock()
	defer ws.mu.Unlock()
	for _, q := range req.Queues {
		ws.byQueue[q] = append(ws.byQueue[q], c)
	}
	return c
}

// sleep marks c as waiting until due (or an earlier time Later told it):
// from now on it may be handed a job. It reports false when c was
// signalled meanwhile: its attempt may have missed the change.
func (ws *Waiters) sleep(c *Claim, due Due) bool {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if c.signalled {
		return false
	}
	c.sleeping, c.next, c.base, c.slept = true, due.At, due.Now, time.Now()
	if c.later != 0 && (c.next == 0 || c.later < c.next) {
		c.next = c.later
	}
	return true
}

func (ws *Waiters) removeLocked(c *Claim) {
	for _, q := range c.req.Queues {
		list := ws.byQueue[q]
		for i, x := range list {
			if x == c {
				list = append(list[:i:i], list[i+1:]...)
				break
			}
		}
		if len(list) == 0 {
			delete(ws.byQueue, q)
		} else {
			ws.byQueue[q] = list
		}
	}
}

// release unregisters c and returns a job handed off to it, waiting for a
// hand-off in progress to end (one commit at most) rather than leave the
// job claimed for nobody. With passOn, a wake-up c got but will not use
// (it stops waiting) goes to another claim of its queues, so that no
// available job is left with sleeping claims.
func (ws *Waiters) release(c *Claim, passOn bool) *db.Job {
	ws.mu.Lock()
	ws.removeLocked(c)
	c.sleeping = false
	for c.taken && !c.delivered {
		ws.mu.Unlock()
		<-c.ch
		ws.mu.Lock()
	}
	job, signalled := c.job, c.signalled
	c.job, c.signalled = nil, false
	ws.mu.Unlock()
	if job == nil && signalled && passOn {
		for _, q := range c.req.Queues {
			ws.Signal(q, 1)
		}
	}
	return job
}

// Take removes and returns the oldest sleeping claim of queue, or nil. A
// transaction that made a job of queue available claims the job for it
// with its Request and calls Deliver once the transaction ended. A claim
// still in its own attempt is never taken: it could then get more jobs
// than it asked for.
func (ws *Waiters) Take(queue string) *Claim {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	for _, c := range ws.byQueue[queue] {
		if c.sleeping && !c.taken {
			ws.removeLocked(c)
			c.taken = true
			return c
		}
	}
	return nil
}

// Deliver answers a taken claim after the transaction that took it ended:
// with the job handed off to it, or with nil when the transaction did not
// commit (the claim then looks again).
func (ws *Waiters) Deliver(c *Claim, job *db.Job) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	c.job, c.delivered = job, true
	wake(c.ch)
}

// Signal wakes up to n claims of queue, oldest first, to look again: n jobs
// of queue became claimable. A claim signalled while its own attempt runs
// looks again instead of sleeping.
func (ws *Waiters) Signal(queue string, n int) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	for ; n > 0 && len(ws.byQueue[queue]) > 0; n-- {
		c := ws.byQueue[queue][0]
		ws.removeLocked(c)
		c.signalled = true
		wake(c.ch)
	}
}

// SignalAll wakes every claim of queue (a resumed queue may hold any
// number of jobs).
func (ws *Waiters) SignalAll(queue string) {
	ws.mu.Lock()
	n := len(ws.byQueue[queue])
	ws.mu.Unlock()
	ws.Signal(queue, n)
}

// WakeAll wakes every claim and every waiting acquire: a change may have
// been missed (a lost notification stream).
func (ws *Waiters) WakeAll() {
	ws.mu.Lock()
	queues := make([]string, 0, len(ws.byQueue))
	for q := range ws.byQueue {
		queues = append(queues, q)
	}
	for name, nw := range ws.names {
		close(nw.ch)
		delete(ws.names, name)
	}
	ws.mu.Unlock()
	for _, q := range queues {
		ws.SignalAll(q)
	}
}

// Later tells the claims of queue that a job of it becomes claimable at at
// (engine clock, Unix nanoseconds): those that would sleep past it set
// their timers to it, without looking again.
func (ws *Waiters) Later(queue string, at int64) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	for _, c := range ws.byQueue[queue] {
		if c.later == 0 || at < c.later {
			c.later = at
		}
		if c.sleeping && (c.next == 0 || at < c.next) {
			c.next = at
			wake(c.ch)
		}
	}
}

// Sleeping is the number of claims on queue whose attempt found nothing
// and that sleep.
func (ws *Waiters) Sleeping(queue string) int {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	n := 0
	for _, c := range ws.byQueue[queue] {
		if c.sleeping {
			n++
		}
	}
	return n
}

// Queues lists the queues some claim waits on.
func (ws *Waiters) Queues() []string {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	qs := make([]string, 0, len(ws.byQueue))
	for q := range ws.byQueue {
		qs = append(qs, q)
	}
	return qs
}

// WakeAt arms the engine's one timer to call fire after d (at t on the
// engine's clock) when some claim waits and the timer is not set for t or
// earlier already: an engine that counts what became claimable by time
// then signals that many claims (and calls WakeAt for the next time).
func (ws *Waiters) WakeAt(t time.Time, d time.Duration, fire func()) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if len(ws.byQueue) == 0 {
		return
	}
	select {
	case <-ws.closed:
		return
	default:
	}
	if ws.timer != nil && !ws.timerAt.After(t) {
		return
	}
	if ws.timer != nil {
		ws.timer.Stop()
	}
	ws.timerAt = t
	var timer *time.Timer
	timer = time.AfterFunc(max(d, 0), func() {
		ws.mu.Lock()
		mine := ws.timer == timer
		if mine {
			ws.timer = nil
		}
		ws.mu.Unlock()
		if mine {
			fire()
		}
	})
	ws.timer = timer
}

// nameWait is the acquires waiting for one name: ch is closed at the next
// wake of the name.
type nameWait struct {
	ch chan struct{}
	n  int
}

// subscribe returns a channel closed at the next wake of name, and the
// function that ends the subscription.
func (ws *Waiters) subscribe(name string) (<-chan struct{}, func()) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	nw := ws.names[name]
	if nw == nil {
		nw = &nameWait{ch: make(chan struct{})}
		ws.names[name] = nw
	}
	nw.n++
	return nw.ch, func() {
		ws.mu.Lock()
		defer ws.mu.Unlock()
		nw.n--
		if nw.n == 0 && ws.names[name] == nw {
			delete(ws.names, name)
		}
	}
}

// WakeName wakes every acquire waiting for name: the named lease was
// released.
func (ws *Waiters) WakeName(name string) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if nw := ws.names[name]; nw != nil {
		close(nw.ch)
		delete(ws.names, name)
	}
}

// Acquiring is the number of acquires waiting for name.
func (ws *Waiters) Acquiring(name string) int {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if nw := ws.names[name]; nw != nil {
		return nw.n
	}
	return 0
}

// TryAcquire is an engine's acquire attempt: the lease, or err; held says
// the refusal is because another holds the lease, whose expiry comes in
// expiresIn (by the engine's clock).
type TryAcquire func(ctx context.Context) (l db.Lease, held bool, expiresIn time.Duration, err error)

// Acquire acquires the lease name with try, once when wait is 0, else
// waiting up to wait (real time)
// while another holds it: until a release (WakeName), the holder's expiry,
// the wait's end or Stop (both answered with the last lease-held refusal),
// ctx's end (its error) or Close (db.ErrClosed). It subscribes before each
// attempt, so that a release committed after the attempt looked is not
// missed.
func (ws *Waiters) Acquire(ctx context.Context, name string, wait time.Duration, try TryAcquire) (db.Lease, error) {
	if wait <= 0 {
		l, _, _, err := try(ctx)
		return l, err
	}
	deadline := time.NewTimer(wait)
	defer deadline.Stop()
	for {
		changed, unsubscribe := ws.subscribe(name)
		l, held, expiresIn, err := try(ctx)
		if err == nil || !held {
			unsubscribe()
			return l, err
		}
		expiry := time.NewTimer(max(expiresIn, MinExpiryWait))
		var stop error
		select {
		case <-changed:
		case <-expiry.C:
		case <-deadline.C:
			stop = err // still held: the holder and expiry of the last look
		case <-ws.stopped:
			stop = err
		case <-ctx.Done():
			stop = ctx.Err()
		case <-ws.closed:
			stop = db.ErrClosed
		}
		expiry.Stop()
		unsubscribe()
		if stop != nil {
			return db.Lease{}, stop
		}
	}
}
