package bolt

import (
	"bytes"
	"context"
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

// handOff claims rec, which has just become available, for the long-polling
// claim w in the same transaction, and answers w once it has committed:
// enqueue→claim then costs one commit, not two. w was the oldest waiter of
// the queue, and a waiter only waits when nothing it could take was
// claimable. rec is updated to the claimed record. Callers audit their own
// change before putJob, so the claim follows it in the audit log. If the
// transaction does not commit, w is woken to claim again.
// If w's client has gone by then, the job stays claimed until its lease
// expires, as after any claim whose reply was lost.
func (s *Store) handOff(tx *bbolt.Tx, rec *jobRecord, w *waiter) error {
	s.onAbort = append(s.onAbort, func() { s.waiters.deliver(w, nil) })
	claimed, err := s.claimRecord(tx, s.opts.Now(), rec, w.req)
	if err != nil {
		return err
	}
	job := claimed.job()
	tx.OnCommit(func() { s.waiters.deliver(w, &job) })
	*rec = *claimed // the caller answers with the job as it now is
	return nil
}

// signalAvailable wakes one waiter of queue per job made available by tx,
// once tx has committed.
func (s *Store) signalAvailable(tx *bbolt.Tx, queue string, n int) {
	tx.OnCommit(func() { s.waiters.signal(queue, n) })
}

// signalLater makes sure a waiter is woken at t (a run_at or a lease expiry).
func (s *Store) signalLater(tx *bbolt.Tx, t time.Time) {
	tx.OnCommit(func() { s.armTimer(t) })
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
// run_at has come and the claims whose lease has expired (up to a bound),
// and returns the earliest future time at which another becomes claimable.
func claimableByTime(tx *bbolt.Tx, now time.Time, queues []string) (map[string]int, time.Time) {
	const bound = 1000
	due := map[string]int{}
	waiting := map[string]bool{}
	for _, q := range queues {
		waiting[q] = true
	}
	var next time.Time
	earliest := func(t time.Time) {
		if next.IsZero() || t.Before(next) {
			next = t
		}
	}
	c := tx.Bucket(bucketScheduled).Cursor()
	scanned := 0
	for k, _ := c.First(); k != nil && scanned < bound; k, _ = c.Next() {
		scanned++
		at := time.Unix(0, timeFromKey(k, 0))
		if at.After(now) {
			earliest(at)
			break
		}
		if rec, err := getJob(tx, idFromKey(k)); err == nil && waiting[rec.Queue] && due[rec.Queue] < bound {
			due[rec.Queue]++
		}
	}
	for _, q := range queues {
		prefix := queuePrefix(q)
		c := tx.Bucket(bucketClaimed).Cursor()
		for k, _ := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix) && due[q] < bound; k, _ = c.Next() {
			at := time.Unix(0, timeFromKey(k, len(prefix)))
			if !lease.Expired(at, now) {
				earliest(at)
				break
			}
			due[q]++
		}
	}
	return due, next
}

// claimable reports, in a read transaction, whether a claim on queues could
// find anything, so that an empty claim costs no write transaction (and no
// fsync). It may say yes when a claim then finds nothing (an expired job
// with no attempts left); it never says no when a job is claimable.
func (s *Store) claimable(queues []string) (bool, error) {
	found := false
	now := s.opts.Now()
	err := s.view(func(tx *bbolt.Tx) error {
		if k, _ := tx.Bucket(bucketScheduled).Cursor().First(); k != nil && timeFromKey(k, 0) <= now.UnixNano() {
			found = true
			return nil
		}
		for _, q := range queues {
			prefix := queuePrefix(q)
			if k, _ := tx.Bucket(bucketReady).Cursor().Seek(prefix); k != nil && bytes.HasPrefix(k, prefix) {
				found = true
				return nil
			}
			if k, _ := tx.Bucket(bucketClaimed).Cursor().Seek(prefix); k != nil && bytes.HasPrefix(k, prefix) &&
				lease.Expired(time.Unix(0, timeFromKey(k, len(prefix))), now) {
				found = true
				return nil
			}
		}
		return nil
	})
	return found, err
}

// claimWaiting claims like ClaimJobs, long-polling up to req.Wait (real
// time) when nothing is claimable. It registers as a waiter before each
// attempt, so a job committed between the attempt and the wait still
// wakes it. ctx ending (the client went away) ends the wait.
func (s *Store) claimWaiting(ctx context.Context, req db.ClaimRequest) ([]db.Job, error) {
	deadline := time.NewTimer(req.Wait)
	defer deadline.Stop()
	for {
		w := s.waiters.register(req)
		jobs, err := s.claimNow(ctx, req)
		if err != nil || len(jobs) > 0 {
			if job := s.releaseWaiter(w); job != nil {
				jobs = append(jobs, *job) // handed off while this claim ran
			}
			return jobs, err
		}
		s.armForQueues(req.Queues)
		s.waiters.sleep(w)
		select {
		case <-w.ch:
			if job := s.waiters.handedOff(w); job != nil {
				return []db.Job{*job}, nil
			}
			// Signalled and already unregistered: try again.
		case <-deadline.C:
			if job := s.releaseWaiter(w); job != nil {
				return []db.Job{*job}, nil
			}
			return nil, nil
		case <-ctx.Done():
			s.releaseWaiter(w)
			return nil, ctx.Err()
		case <-s.closing:
			if job := s.releaseWaiter(w); job != nil {
				return []db.Job{*job}, nil
			}
			return nil, db.ErrClosed
		}
	}
}

// releaseWaiter unregisters w and returns a job handed off to it, if any.
// A plain wake-up it received but did not use is passed on, so that no
// available job is left with sleeping waiters.
func (s *Store) releaseWaiter(w *waiter) *db.Job {
	if s.waiters.handedOffPending(w) {
		// A commit in progress is handing it a job: wait for its outcome
		// (one commit at most) rather than leave the job claimed for nobody.
		<-w.ch
		if job := s.waiters.handedOff(w); job != nil {
			return job
		}
		return nil
	}
	signalled := s.waiters.unregister(w)
	if job := s.waiters.handedOff(w); job != nil {
		return job
	}
	if signalled {
		for _, q := range w.queues {
			s.waiters.signal(q, 1)
		}
	}
	return nil
}

// armForQueues arms the timer at the next time a job of queues becomes
// claimable by time, read from the indexes' heads.
func (s *Store) armForQueues(queues []string) {
	var next time.Time
	now := s.opts.Now()
	_ = s.view(func(tx *bbolt.Tx) error {
		var due map[string]int
		due, next = claimableByTime(tx, now, queues)
		if len(due) > 0 {
			next = now
		}
		return nil
	})
	if !next.IsZero() {
		s.armTimer(next)
	}
}
