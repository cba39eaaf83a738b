package postgres

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/fenceq/fenceq/db"
	"github.com/jackc/pgx/v5"
)

// The replicas of one schema share a LISTEN/NOTIFY channel (Store.channel,
// "fenceq" in the public schema). A batch sends, on commit, one
// notification per queue and kind:
//
//	"a <queue>"        a job of queue became available
//	"l <ns> <queue>"   a job of queue becomes claimable at ns (run_at, lease end)
//	"r <name>"         the named lease was released

func notifyAvailable(queue string) string { return "a " + queue }

func notifyLater(queue string, ns int64) string {
	return "l " + strconv.FormatInt(ns, 10) + " " + queue
}

func notifyReleased(name string) string { return "r " + name }

// waiter is one long-polling claim of this replica. ch receives a wake-up
// (a notification, a hand-off); the waiter then looks at its fields.
type waiter struct {
	queues []string
	req    db.ClaimRequest // normalized; a job handed off is claimed with it
	ch     chan struct{}
	// Under waiters.mu:
	next      int64   // the due time it sleeps until (rules' clock), 0 for none
	sleeping  bool    // its own claim found nothing: it may be handed a job
	taken     bool    // a transaction is handing it a job
	delivered bool    // that transaction ended: job is the job, or nil
	job       *db.Job // handed off
}

// waiters are the long-polling claims of this replica, FIFO per queue.
type waiters struct {
	mu      sync.Mutex
	byQueue map[string][]*waiter
}

func (ws *waiters) register(req db.ClaimRequest) *waiter {
	w := &waiter{queues: req.Queues, req: req, ch: make(chan struct{}, 1)}
	ws.mu.Lock()
	defer ws.mu.Unlock()
	for _, q := range w.queues {
		ws.byQueue[q] = append(ws.byQueue[q], w)
	}
	return w
}

// sleep marks w as waiting until ns (0: no due time): from now on it may
// be handed a job.
func (ws *waiters) sleep(w *waiter, ns int64) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	w.sleeping, w.next = true, ns
}

func (ws *waiters) unregister(w *waiter) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	ws.removeLocked(w)
}

func (ws *waiters) removeLocked(w *waiter) {
	for _, q := range w.queues {
		list := ws.byQueue[q]
		for i, x := range list {
			if x == w {
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

func wake(w *waiter) {
	select {
	case w.ch <- struct{}{}:
	default:
	}
}

// take removes and returns the oldest sleeping waiter of queue, or nil: a
// transaction that made a job of queue available claims it for that
// waiter (handOff).
func (ws *waiters) take(queue string) *waiter {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	for _, w := range ws.byQueue[queue] {
		if w.sleeping && !w.taken {
			ws.removeLocked(w)
			w.taken = true
			return w
		}
	}
	return nil
}

// deliver answers a taken waiter: the job handed off, or nil when the
// transaction did not commit (it claims again).
func (ws *waiters) deliver(w *waiter, job *db.Job) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	w.job, w.delivered = job, true
	wake(w)
}

// outcome reports, after a wake-up, whether w was taken and its hand-off
// has ended (done), with the job.
func (ws *waiters) outcome(w *waiter) (taken, done bool, job *db.Job) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	return w.taken, w.delivered, w.job
}

// release unregisters w and returns a job handed off to it, waiting for a
// hand-off in progress (one commit at most) to end.
func (ws *waiters) release(w *waiter) *db.Job {
	ws.mu.Lock()
	ws.removeLocked(w)
	w.sleeping = false
	taken := w.taken
	ws.mu.Unlock()
	if !taken {
		return nil
	}
	for {
		if _, done, job := ws.outcome(w); done {
			return job
		}
		<-w.ch
	}
}

// handOff claims rec, just made available, for the waiting claim wt in w's
// transaction: enqueue→claim costs one commit. The claim is audited after
// the change that made rec available (callers audit first). rec becomes
// the claimed job, which the caller answers with.
func handOff(w *writer, rec *db.JobRecord, wt *waiter) error {
	w.onAbort = append(w.onAbort, func() { w.s.waiters.deliver(wt, nil) })
	next, ev, err := db.Claim(rec, wt.req, w.now)
	if err != nil {
		return err
	}
	w.audit(ev)
	if err := putJob(w, rec, &next); err != nil {
		return err
	}
	w.claimed = append(w.claimed, next.Queue)
	job := next.Job()
	w.after = append(w.after, func() { w.s.waiters.deliver(wt, &job) })
	*rec = next
	return nil
}

// available wakes the waiters of queue: they try to claim, and those that
// find nothing wait again.
func (ws *waiters) available(queue string) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	for _, w := range ws.byQueue[queue] {
		wake(w)
	}
}

// later wakes the waiters of queue that sleep past ns, so they set their
// timers to it.
func (ws *waiters) later(queue string, ns int64) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	for _, w := range ws.byQueue[queue] {
		if w.next == 0 || ns < w.next {
			w.next = ns
			wake(w)
		}
	}
}

// all wakes every waiter: after the listener lost its connection, when a
// notification may have been missed.
func (ws *waiters) all() {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	for _, list := range ws.byQueue {
		for _, w := range list {
			wake(w)
		}
	}
}

// listen holds a connection that LISTENs for the notifications of every
// replica (this one's included) and wakes the waiters they concern. It
// reconnects when the connection drops, then wakes every waiter once.
func (s *Store) listen(cfg *pgx.ConnConfig) {
	defer close(s.listened)
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		<-s.closing
		cancel()
	}()
	backoff := 50 * time.Millisecond
	first := true
	for ctx.Err() == nil {
		conn, err := pgx.ConnectConfig(ctx, cfg)
		if err == nil {
			_, err = conn.Exec(ctx, `LISTEN `+pgx.Identifier{s.channel}.Sanitize())
		}
		if err == nil {
			backoff = 50 * time.Millisecond
			if first {
				first = false
				close(s.listening)
			} else {
				// Notifications sent while it was away are lost: everyone
				// looks again.
				s.waiters.all()
				s.nameWaiters.WakeAll()
			}
			for {
				n, err := conn.WaitForNotification(ctx)
				if err != nil {
					break
				}
				s.dispatch(n.Payload)
			}
		}
		if conn != nil {
			conn.Close(context.Background())
		}
		select {
		case <-ctx.Done():
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 2*time.Second)
	}
}

func (s *Store) dispatch(payload string) {
	kind, rest, _ := strings.Cut(payload, " ")
	switch kind {
	case "a":
		s.waiters.available(rest)
	case "l":
		ns, queue, _ := strings.Cut(rest, " ")
		if t, err := strconv.ParseInt(ns, 10, 64); err == nil {
			s.waiters.later(queue, t)
		}
	case "r":
		s.nameWaiters.Wake(rest)
	}
}

// WaitingClaims is the number of this replica's claims long-polling queue
// that found nothing and sleep.
func (s *Store) WaitingClaims(queue string) int {
	s.waiters.mu.Lock()
	defer s.waiters.mu.Unlock()
	n := 0
	for _, w := range s.waiters.byQueue[queue] {
		if w.sleeping {
			n++
		}
	}
	return n
}

// WaitingAcquires is the number of this replica's acquires waiting for
// the named lease.
func (s *Store) WaitingAcquires(name string) int {
	return s.nameWaiters.Count(name)
}
