package bolt

// A claim, from the engine operation to the commit: ClaimJobs validates
// (db.Rules.NormalizeClaim), long-polls when asked (claimWaiting), and
// sends a claimOp to the commit loop (store.go), which runs its steps —
// promote due jobs, then claim the best eligible ones (db.Claim) — and,
// after each step, hands the jobs that became available to waiting
// long-polls (handOff). Waiters are woken only after the commit.

import (
	"bytes"
	"context"
	"time"

	"github.com/fenceq/fenceq/db"
	"github.com/fenceq/fenceq/db/wait"
	"github.com/fenceq/fenceq/lease"
	bbolt "go.etcd.io/bbolt"
)

// ClaimJobs takes up to req.Max of the best eligible jobs in one
// transaction: available jobs, scheduled jobs whose run_at is due, and
// claimed jobs whose lease has expired (those whose attempts are exhausted
// go dead with "lease expired" instead). Each claimed job's Attempts is its
// fencing token. No eligible job: an empty slice and no error, at once or,
// with Wait, when a job arrived for somebody else or the wait ended. A
// claim that finds nothing costs a read transaction, not a commit.
func (s *Store) ClaimJobs(ctx context.Context, req db.ClaimRequest) ([]db.Job, error) {
	if err := s.opts.NormalizeClaim(&req); err != nil {
		return nil, err
	}
	if req.Wait > 0 {
		return s.claimWaiting(ctx, req)
	}
	return s.claimNow(ctx, req)
}

func (s *Store) claimNow(ctx context.Context, req db.ClaimRequest) ([]db.Job, error) {
	if ok, err := s.claimable(req.Queues); err != nil || !ok {
		return nil, err
	}
	op := &claimOp{s: s, req: req}
	if err := s.updateItems(ctx, req.Max, op); err != nil {
		return nil, err
	}
	return jobsOf(op.got), nil
}

// claimOp claims for one request. A valid claim is never refused: it
// takes what is eligible, possibly nothing.
type claimOp struct {
	s   *Store
	req db.ClaimRequest
	got []*jobRecord
}

func (op *claimOp) decide(reader, time.Time) error { return nil }

func (op *claimOp) apply(w *writer, step int) (bool, error) {
	return op.s.claimSteps(w, step, op.req, &op.got)
}

// claimSteps are a claim's apply steps: promote due scheduled jobs (whose
// hand-off to sleeping long-polls follows, as for any job that becomes
// available), then claim up to req.Max jobs into got.
func (s *Store) claimSteps(w *writer, step int, req db.ClaimRequest, got *[]*jobRecord) (more bool, err error) {
	if step == 0 {
		return true, promote(w, db.PlanPromotion(req.Queues, w.now, true))
	}
	if req.Queues = unpausedQueues(w.tx, req.Queues); len(req.Queues) == 0 {
		return false, nil
	}
	for len(*got) < req.Max {
		rec, err := s.claimOne(w, req)
		if err != nil || rec == nil {
			return false, err
		}
		*got = append(*got, rec)
	}
	return false, nil
}

func jobsOf(recs []*jobRecord) []db.Job {
	if recs == nil {
		return nil
	}
	jobs := make([]db.Job, len(recs))
	for i, r := range recs {
		jobs[i] = r.job()
	}
	return jobs
}

// promote executes a promotion plan (db.Promotion): the due jobs of the
// plan's queues, oldest first across them (a merge of their cursors in
// idx_scheduled_queue), then the oldest due jobs of any queue
// (idx_scheduled), each part within its limit.
func promote(w *writer, p db.Promotion) error {
	type head struct {
		c      *bbolt.Cursor
		prefix []byte
		k      []byte
	}
	var heads []*head
	for _, q := range p.Queues {
		h := &head{c: w.tx.Bucket(bucketScheduledQueue).Cursor(), prefix: queuePrefix(q)}
		h.k, _ = h.c.Seek(h.prefix)
		heads = append(heads, h)
	}
	var due []uint64
	for len(due) < p.QueueLimit {
		var first *head
		for _, h := range heads {
			if h.k == nil || !bytes.HasPrefix(h.k, h.prefix) || !p.Due(timeFromKey(h.k, len(h.prefix))) {
				continue
			}
			if first == nil || bytes.Compare(h.k[len(h.prefix):], first.k[len(first.prefix):]) < 0 {
				first = h
			}
		}
		if first == nil {
			break
		}
		due = append(due, idFromKey(first.k))
		first.k, _ = first.c.Next()
	}
	if err := promoteIDs(w, due); err != nil {
		return err
	}
	due = due[:0]
	c := w.tx.Bucket(bucketScheduled).Cursor()
	for k, _ := c.First(); k != nil && len(due) < p.SweepLimit && p.Due(timeFromKey(k, 0)); k, _ = c.Next() {
		due = append(due, idFromKey(k))
	}
	return promoteIDs(w, due)
}

func promoteIDs(w *writer, ids []uint64) error {
	for _, id := range ids {
		old, err := getIndexedJob(w.tx, id)
		if err != nil {
			return err
		}
		if err := w.putJob(old, jobRecordOf(db.Promote(&old.JobRecord))); err != nil {
			return err
		}
	}
	return nil
}

// claimOne claims the best eligible job of req.Queues, or returns nil.
func (s *Store) claimOne(w *writer, req db.ClaimRequest) (*jobRecord, error) {
	var best *jobRecord
	for _, q := range req.Queues {
		for _, find := range []func(*writer, string) (*jobRecord, error){readyHead, s.expiredHead} {
			rec, err := find(w, q)
			if err != nil {
				return nil, err
			}
			if rec != nil && (best == nil || db.ClaimsBefore(&rec.JobRecord, &best.JobRecord)) {
				best = rec
			}
		}
	}
	if best == nil {
		return nil, nil
	}
	return claimRecord(w, best, req)
}

// claimRecord writes the claim of best for req (db.Claim) with its audit link.
func claimRecord(w *writer, best *jobRecord, req db.ClaimRequest) (*jobRecord, error) {
	next, ev, err := db.Claim(&best.JobRecord, req, w.now)
	if err != nil {
		return nil, err
	}
	return w.put(best, next, ev)
}

// readyHead returns the first available job of queue in claim order.
func readyHead(w *writer, queue string) (*jobRecord, error) {
	prefix := queuePrefix(queue)
	k, _ := w.tx.Bucket(bucketReady).Cursor().Seek(prefix)
	if k == nil || !bytes.HasPrefix(k, prefix) {
		return nil, nil
	}
	return getIndexedJob(w.tx, idFromKey(k))
}

// expiredHead returns the claimed job of queue whose lease expired first, if
// any expired. Expired jobs with no attempts left go dead on the way.
func (s *Store) expiredHead(w *writer, queue string) (*jobRecord, error) {
	prefix := queuePrefix(queue)
	for {
		k, _ := w.tx.Bucket(bucketClaimed).Cursor().Seek(prefix)
		if k == nil || !bytes.HasPrefix(k, prefix) || !lease.Expired(time.Unix(0, timeFromKey(k, len(prefix))), w.now) {
			return nil, nil
		}
		rec, err := getIndexedJob(w.tx, idFromKey(k))
		if err != nil {
			return nil, err
		}
		if db.ExpiredReclaimable(&rec.JobRecord) {
			return rec, nil
		}
		next, ev := db.KillExpired(&rec.JobRecord, w.now)
		if _, err := w.put(rec, next, ev); err != nil {
			return nil, err
		}
	}
}

// handOff is the one place where a job that became available meets a
// waiting long-poll. The commit loop calls it after each step of a
// mutation, in the same transaction: each job the step made available goes
// to the oldest sleeping long-poll of its queue, claimed for it with its
// own request (so the claim's audit link follows the step's, and the
// step's reply shows the job claimed); a job nobody sleeps on wakes one
// waiter after the commit. It also registers, for after the commit, the
// timer for the earliest run_at or lease expiry the step wrote and the
// wake-up of acquires waiting for a released lease. A waiter a job was
// handed to is told after the commit, or woken to claim again if the
// commit fails. If its client has gone by then, the job stays claimed
// until its lease expires, as after any claim whose reply was lost.
func (s *Store) handOff(w *writer) error {
	for _, rec := range w.available {
		if isPaused(w.tx, rec.Queue) {
			continue // its long-polls are woken when the queue is resumed
		}
		wt := s.waits.Take(rec.Queue)
		if wt == nil {
			queue := rec.Queue
			w.tx.OnCommit(func() { s.waits.Signal(queue, 1) })
			continue
		}
		s.onAbort = append(s.onAbort, func() { s.waits.Deliver(wt, nil) })
		claimed, err := claimRecord(w, rec, wt.Request())
		if err != nil {
			return err
		}
		job := claimed.job()
		w.tx.OnCommit(func() { s.waits.Deliver(wt, &job) })
		*rec = *claimed // the step's reply is the job as it now is
	}
	w.available = w.available[:0]
	if w.wakeAt != 0 {
		t := time.Unix(0, w.wakeAt)
		w.tx.OnCommit(func() { s.armTimer(t) })
		w.wakeAt = 0
	}
	for _, name := range w.released {
		w.tx.OnCommit(func() { s.waits.WakeName(name) })
	}
	w.released = w.released[:0]
	for _, queue := range w.resumed {
		// Every long-poll of the queue claims again: a resumed queue may
		// hold any number of jobs.
		w.tx.OnCommit(func() { s.waits.SignalAll(queue) })
	}
	w.resumed = w.resumed[:0]
	return nil
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
		for _, q := range unpausedQueues(tx, queues) {
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
// time) when nothing is claimable (package wait): woken by a hand-off, a
// job that became available, or the timer at the next run_at or lease
// expiry of its queues (armForQueues). ctx ending (the client went away)
// ends the wait.
func (s *Store) claimWaiting(ctx context.Context, req db.ClaimRequest) ([]db.Job, error) {
	return s.waits.Claim(ctx, req, func(ctx context.Context) ([]db.Job, wait.Due, error) {
		jobs, err := s.claimNow(ctx, req)
		if err == nil && len(jobs) == 0 {
			s.armForQueues(req.Queues)
		}
		return jobs, wait.Due{}, err // the engine's one timer wakes it (armTimer)
	})
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
