package postgres

import (
	"context"
	"time"

	"github.com/fenceq/fenceq/db"
)

// ClaimJobs takes up to req.Max of the best eligible jobs in one
// transaction, in bbolt's order (priority, run_at, id): available jobs,
// due scheduled ones, and claims whose lease expired by the database's
// clock (those with no attempts left go dead on the way). Rows another
// transaction holds are skipped (FOR UPDATE SKIP LOCKED). With Wait it
// long-polls; a claim that finds nothing costs a read, not a transaction.
func (s *Store) ClaimJobs(ctx context.Context, req db.ClaimRequest) ([]db.Job, error) {
	if err := s.opts.NormalizeClaim(&req); err != nil {
		return nil, err
	}
	if req.Wait > 0 {
		return s.claimWaiting(ctx, req)
	}
	jobs, _, err := s.claimNow(ctx, req)
	return jobs, err
}

// claimNow claims what is eligible now. When nothing is, it returns the
// earliest time something of req.Queues becomes claimable by time (0:
// nothing will without another request).
func (s *Store) claimNow(ctx context.Context, req db.ClaimRequest) ([]db.Job, dueAt, error) {
	ok, next, now, err := s.claimable(ctx, req.Queues)
	if err != nil || !ok {
		return nil, dueAt{at: next, now: now}, err
	}
	var jobs []db.Job
	err = s.update(ctx, func(w *writer) error {
		var err error
		jobs, err = claimIn(w, req)
		return err
	})
	return jobs, dueAt{}, err
}

// dueAt is when something becomes claimable by time (at, 0 for never) and
// the time it was read at, both by the rules' clock (the database's).
type dueAt struct{ at, now int64 }

// claimable reports, in one read, whether a claim on queues could find
// anything now by the database's clock, and otherwise when the first
// scheduled job or lease of queues comes due.
func (s *Store) claimable(ctx context.Context, queues []string) (found bool, next, now int64, err error) {
	var nextp *int64
	err = s.pool.QueryRow(ctx, `WITH now AS (SELECT `+nowSQL+` AS ns)
		SELECT (SELECT ns FROM now),
		  EXISTS (SELECT 1 FROM fenceq_jobs WHERE state = 'available' AND queue = ANY($2))
		  OR EXISTS (SELECT 1 FROM fenceq_jobs, now WHERE state = 'scheduled' AND queue = ANY($2) AND run_at <= now.ns)
		  OR EXISTS (SELECT 1 FROM fenceq_jobs, now WHERE state = 'claimed' AND queue = ANY($2) AND lease_expires_at <= now.ns),
		  (SELECT min(t) FROM unnest($2::text[]) AS q(name), LATERAL (
		     (SELECT run_at AS t FROM fenceq_jobs WHERE state = 'scheduled' AND queue = q.name ORDER BY run_at LIMIT 1)
		     UNION ALL
		     (SELECT lease_expires_at FROM fenceq_jobs WHERE state = 'claimed' AND queue = q.name ORDER BY lease_expires_at LIMIT 1)) AS heads)`,
		int64(s.offset()), queues).Scan(&now, &found, &nextp)
	if err != nil {
		return false, 0, 0, s.readError(err)
	}
	if nextp == nil {
		return found, 0, now, nil
	}
	return found, max(*nextp, now+1), now, nil
}

// claimIn promotes due scheduled jobs and claims up to req.Max jobs in w's
// transaction.
func claimIn(w *writer, req db.ClaimRequest) ([]db.Job, error) {
	if err := promoteDue(w, 1000); err != nil {
		return nil, err
	}
	var jobs []db.Job
	for len(jobs) < req.Max {
		cands, err := candidates(w, req, req.Max-len(jobs))
		if err != nil {
			return nil, err
		}
		if len(cands) == 0 {
			break
		}
		progressed := false
		for _, old := range cands {
			if len(jobs) == req.Max {
				break
			}
			if old.State == db.StateClaimed && !db.ExpiredReclaimable(old) {
				next, ev := db.KillExpired(old, w.now)
				if err := putJob(w, old, &next); err != nil {
					return nil, err
				}
				w.audit(ev)
				progressed = true
				continue
			}
			next, ev, err := db.Claim(old, req, w.now)
			if err != nil {
				return nil, err
			}
			if err := putJob(w, old, &next); err != nil {
				return nil, err
			}
			w.audit(ev)
			jobs = append(jobs, next.Job())
			progressed = true
		}
		if !progressed {
			break
		}
	}
	return jobs, nil
}

// promoteDue makes up to limit scheduled jobs whose run_at has come
// available, oldest first.
func promoteDue(w *writer, limit int) error {
	rows, err := w.tx.Query(w.ctx, `UPDATE fenceq_jobs SET state = 'available' WHERE id IN (
		SELECT id FROM fenceq_jobs WHERE state = 'scheduled' AND run_at <= $1 ORDER BY run_at, id LIMIT $2 FOR UPDATE SKIP LOCKED)
		RETURNING queue`, w.now.UnixNano(), limit)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var q string
		if err := rows.Scan(&q); err != nil {
			return err
		}
		w.count(q, db.StateScheduled, -1)
		w.count(q, db.StateAvailable, 1)
	}
	return rows.Err()
}

// candidates locks up to n of the best eligible jobs of req.Queues in claim
// order: per queue the head of the ready index and the claims whose lease
// expired, merged by db.ClaimsBefore. Rows locked by another transaction
// are skipped. A few more rows than are claimed may stay locked until the
// commit; others skip them meanwhile.
func candidates(w *writer, req db.ClaimRequest, n int) ([]*db.JobRecord, error) {
	recs, err := queryJobs(w.ctx, w.tx, `SELECT j.* FROM unnest($1::text[]) AS q(name), LATERAL (
		  (SELECT `+jobColumns+` FROM fenceq_jobs WHERE state = 'available' AND queue = q.name
		   ORDER BY priority DESC, run_at, id LIMIT $2 FOR UPDATE SKIP LOCKED)
		  UNION ALL
		  (SELECT `+jobColumns+` FROM fenceq_jobs WHERE state = 'claimed' AND queue = q.name AND lease_expires_at <= $3
		   ORDER BY lease_expires_at, id LIMIT $2 FOR UPDATE SKIP LOCKED)) AS j`,
		req.Queues, n, w.now.UnixNano())
	if err != nil {
		return nil, err
	}
	// Sorted by the rules' order; a lease-expired job with no attempts
	// left sorts first so that it goes dead before the claims.
	sortJobs(recs, func(a, b *db.JobRecord) bool {
		ka := a.State == db.StateClaimed && !db.ExpiredReclaimable(a)
		kb := b.State == db.StateClaimed && !db.ExpiredReclaimable(b)
		if ka != kb {
			return ka
		}
		return db.ClaimsBefore(a, b)
	})
	return recs, nil
}

func sortJobs(recs []*db.JobRecord, less func(a, b *db.JobRecord) bool) {
	for i := 1; i < len(recs); i++ {
		for j := i; j > 0 && less(recs[j], recs[j-1]); j-- {
			recs[j], recs[j-1] = recs[j-1], recs[j]
		}
	}
}

// claimWaiting claims like ClaimJobs, long-polling up to req.Wait (real
// time) when nothing is claimable: woken by NOTIFY from any replica when a
// job of its queues became available (or will, at a time it did not know),
// and by a timer at the earliest run_at or lease expiry of its queues. It
// registers before each attempt, so that a job committed between the
// attempt and the wait still wakes it.
func (s *Store) claimWaiting(ctx context.Context, req db.ClaimRequest) ([]db.Job, error) {
	deadline := time.NewTimer(req.Wait)
	defer deadline.Stop()
	for {
		w := s.waiters.register(req.Queues)
		jobs, next, err := s.claimNow(ctx, req)
		if err != nil || len(jobs) > 0 {
			s.waiters.unregister(w)
			return jobs, err
		}
		var timer <-chan time.Time
		var t *time.Timer
		if next.at != 0 {
			s.waiters.setNext(w, next.at)
			t = time.NewTimer(max(time.Duration(next.at-next.now), minTimerWait))
			timer = t.C
		}
		select {
		case <-w.ch:
		case <-timer:
		case <-deadline.C:
			s.waiters.unregister(w)
			return nil, nil
		case <-ctx.Done():
			s.waiters.unregister(w)
			return nil, ctx.Err()
		case <-s.closing:
			s.waiters.unregister(w)
			return nil, db.ErrClosed
		}
		if t != nil {
			t.Stop()
		}
		s.waiters.unregister(w)
	}
}

// minTimerWait bounds how often a waiter looks again when a due time has
// passed but its claim found nothing (a test clock that does not move, or
// a job another replica took).
const minTimerWait = 5 * time.Millisecond
