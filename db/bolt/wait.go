package bolt

import (
	"bytes"
	"sync"
	"time"

	"github.com/fenceq/fenceq/db"
	"github.com/fenceq/fenceq/lease"
	bbolt "go.etcd.io/bbolt"
)

// waiter is one long-polling claim. ch receives one signal when a job it
// may take has become claimable; the signaller has already removed it from
// every queue's list.
type waiter struct {
	queues []string
	req    db.ClaimRequest // normalized; a job handed off is claimed with it
	ch     chan struct{}
	job    *db.Job // set (under waiters.mu) when a job was handed off to it
	taken  bool    // a transaction is handing it a job (under waiters.mu)
	// sleeping: its claim found nothing and it waits (under waiters.mu).
	// Only a sleeping waiter is handed a job; one still in its own claim
	// is signalled instead, so that it never gets more jobs than it asked for.
	sleeping bool
}

// waiters wakes long-polling claims from memory after commits, never by
// polling the file: one waiter per job that became available (enqueue,
// retry, immediate re-run), and a timer at the earliest run_at or lease
// expiry that a waiter could take.
type waiters struct {
	mu      sync.Mutex
	byQueue map[string][]*waiter // FIFO per queue
	timer   *time.Timer
	timerAt time.Time
}

func (ws *waiters) register(req db.ClaimRequest) *waiter {
	queues := req.Queues
	w := &waiter{queues: queues, req: req, ch: make(chan struct{}, 1)}
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if ws.byQueue == nil {
		ws.byQueue = map[string][]*waiter{}
	}
	for _, q := range queues {
		ws.byQueue[q] = append(ws.byQueue[q], w)
	}
	return w
}

// unregister removes w. It reports whether w had been signalled (and so
// took a wake-up that nobody used).
func (ws *waiters) unregister(w *waiter) (signalled bool) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	ws.removeLocked(w)
	select {
	case <-w.ch:
		return true
	default:
		return false
	}
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

// signal wakes up to n waiters of queue, oldest first.
func (ws *waiters) signal(queue string, n int) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	for ; n > 0 && len(ws.byQueue[queue]) > 0; n-- {
		w := ws.byQueue[queue][0]
		ws.removeLocked(w)
		w.ch <- struct{}{}
	}
}

// signalAll wakes every waiter of queue.
func (ws *waiters) signalAll(queue string) {
	ws.mu.Lock()
	n := len(ws.byQueue[queue])
	ws.mu.Unlock()
	ws.signal(queue, n)
}

// take removes and returns the oldest sleeping waiter of queue, or nil.
func (ws *waiters) take(queue string) *waiter {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	for _, w := range ws.byQueue[queue] {
		if w.sleeping {
			ws.removeLocked(w)
			w.taken = true
			return w
		}
	}
	return nil
}

// sleep marks w as waiting: from now on it may be handed a job.
func (ws *waiters) sleep(w *waiter) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	w.sleeping = true
}

// handedOffPending reports whether w was taken but not yet answered.
func (ws *waiters) handedOffPending(w *waiter) bool {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	return w.taken && w.job == nil && len(w.ch) == 0
}

// deliver wakes a taken waiter, with the job handed off to it or, when the
// handing transaction did not commit, with nothing (it claims again).
func (ws *waiters) deliver(w *waiter, job *db.Job) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	w.job = job
	w.ch <- struct{}{}
}

// handedOff returns the job handed off to w, if any.
func (ws *waiters) handedOff(w *waiter) *db.Job {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	j := w.job
	w.job = nil
	return j
}

func (ws *waiters) waitingQueues() []string {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	qs := make([]string, 0, len(ws.byQueue))
	for q := range ws.byQueue {
		qs = append(qs, q)
	}
	return qs
}

// wakeAt arms the timer for t when there are waiters and t is earlier than
// the timer's current target.
func (ws *waiters) wakeAt(t time.Time, d time.Duration, fire func()) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if len(ws.byQueue) == 0 {
		return
	}
	if ws.timer != nil && !ws.timerAt.After(t) {
		return
	}
	if ws.timer != nil {
		ws.timer.Stop()
	}
	ws.timerAt = t
	ws.timer = time.AfterFunc(max(d, 0), fire)
}

func (ws *waiters) stopTimer() {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if ws.timer != nil {
		ws.timer.Stop()
		ws.timer = nil
	}
}

func (s *Store) armTimer(t time.Time) {
	s.waiters.wakeAt(t, t.Sub(s.opts.Now()), s.timerFired)
}

// timerFired wakes one waiter per job that has become claimable by time
// (due run_at, expired lease) in a queue somebody waits on, then re-arms
// for the next such time.
func (s *Store) timerFired() {
	s.waiters.mu.Lock()
	s.waiters.timer = nil
	s.waiters.mu.Unlock()
	queues := s.waiters.waitingQueues()
	if len(queues) == 0 {
		return
	}
	due := map[string]int{}
	var next time.Time
	now := s.opts.Now()
	_ = s.view(func(tx *bbolt.Tx) error {
		due, next = claimableByTime(tx, now, queues)
		return nil
	})
	for q, n := range due {
		s.waiters.signal(q, n)
	}
	if !next.IsZero() {
		s.armTimer(next)
	}
}

// claimableByTime counts, per queue of queues, the scheduled jobs whose
// run_at has come (from the queue's own scheduled index, so that other
// queues' due jobs cannot hide them) and the claims whose lease has
// expired, up to a bound per queue and index, and returns the earliest
// future time at which another becomes claimable. A scan stopped at its
// bound may have left claimable jobs uncounted: it then asks to be run
// again shortly (next), so that their waiters are woken too.
func claimableByTime(tx *bbolt.Tx, now time.Time, queues []string) (map[string]int, time.Time) {
	const bound = 1000
	due := map[string]int{}
	queues = unpausedQueues(tx, queues) // a paused queue's jobs wake nobody
	var next time.Time
	earliest := func(t time.Time) {
		if next.IsZero() || t.Before(next) {
			next = t
		}
	}
	for _, q := range queues {
		prefix := queuePrefix(q)
		for _, b := range [][]byte{bucketScheduledQueue, bucketClaimed} {
			c := tx.Bucket(b).Cursor()
			n := 0
			k, _ := c.Seek(prefix)
			for ; k != nil && bytes.HasPrefix(k, prefix) && n < bound; k, _ = c.Next() {
				at := time.Unix(0, timeFromKey(k, len(prefix)))
				if !lease.Expired(at, now) { // at is after now
					earliest(at)
					break
				}
				n++
			}
			if n == bound && k != nil && bytes.HasPrefix(k, prefix) {
				earliest(now.Add(time.Millisecond)) // stopped at the bound: look again
			}
			if n > 0 {
				due[q] += n
			}
		}
	}
	return due, next
}
