package postgres

import (
	"cmp"
	"context"
	"slices"

	"github.com/fenceq/fenceq/db"
	"github.com/fenceq/fenceq/db/wait"
	"github.com/jackc/pgx/v5"
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

// claimNow claims what is eligible now. When it claims nothing, it returns
// the earliest time something of req.Queues becomes claimable by time, by
// the rules' clock (the database's; 0: nothing will without another
// request).
func (s *Store) claimNow(ctx context.Context, req db.ClaimRequest) ([]db.Job, wait.Due, error) {
	ok, next, now, err := s.claimable(ctx, req.Queues)
	due := wait.Due{At: next, Now: now}
	if err != nil || !ok {
		return nil, due, err
	}
	var jobs []db.Job
	err = s.update(ctx, func(w *writer) error {
		var err error
		jobs, err = claimIn(w, req)
		return err
	})
	// Nothing claimed (another queue's due jobs made it look, or another
	// replica took the job first): the claim still sleeps until its own
	// queues' next due time, read before it looked.
	return jobs, due, err
}

// claimable reports, in one read, whether a claim on queues could find
// anything now by the database's clock (or has due jobs of any queue to
// promote, as every claim does), and otherwise when the first scheduled
// job or lease of queues comes due.
func (s *Store) claimable(ctx context.Context, queues []string) (found bool, next, now int64, err error) {
	var nextp *int64
	err = s.pool.QueryRow(ctx, `WITH now AS (SELECT `+nowSQL+` AS ns)
		SELECT (SELECT ns FROM now),
		  EXISTS (SELECT 1 FROM fenceq_jobs WHERE state = 'available' AND queue = ANY($2) AND queue NOT IN (SELECT queue FROM fenceq_paused))
		  OR EXISTS (SELECT 1 FROM fenceq_jobs, now WHERE state = 'scheduled' AND run_at <= now.ns)
		  OR EXISTS (SELECT 1 FROM fenceq_jobs, now WHERE state = 'claimed' AND queue = ANY($2) AND lease_expires_at <= now.ns
		             AND queue NOT IN (SELECT queue FROM fenceq_paused)),
		  (SELECT min(t) FROM unnest($2::text[]) AS q(name), LATERAL (
		     (SELECT run_at AS t FROM fenceq_jobs WHERE state = 'scheduled' AND queue = q.name ORDER BY run_at LIMIT 1)
		     UNION ALL
		     (SELECT lease_expires_at FROM fenceq_jobs WHERE state = 'claimed' AND queue = q.name ORDER BY lease_expires_at LIMIT 1)) AS heads
		   WHERE q.name NOT IN (SELECT queue FROM fenceq_paused))`,
		s.clockArg(), queues).Scan(&now, &found, &nextp)
	if err != nil {
		return false, 0, 0, s.readError(err)
	}
	if nextp == nil {
		return found, 0, now, nil
	}
	return found, max(*nextp, now+1), now, nil
}

// claimIn promotes due scheduled jobs and claims up to req.Max jobs in w's
// transaction, choosing as the bbolt engine does: at each step, of every
// queue's best available job and its claim whose lease expired first, the
// one db.ClaimsBefore puts first; an expired claim with no attempts left
// at the head goes dead on the way (db.KillExpired).
func claimIn(w *writer, req db.ClaimRequest) ([]db.Job, error) {
	var jobs []db.Job
	for len(jobs) < req.Max {
		want := req.Max - len(jobs)
		// The batch's first claim promotes the due scheduled jobs, in the
		// same round trip as its candidates.
		promote := w.promoted == nil || !*w.promoted
		ready, expired, err := candidates(w, req, want, promote)
		if err != nil {
			return nil, err
		}
		if promote && w.promoted != nil {
			*w.promoted = true
		}
		fetched := 0
		full := map[string]bool{} // the queue's expired list may go on past what was fetched
		for _, q := range req.Queues {
			fetched += len(ready[q]) + len(expired[q])
			full[q] = len(expired[q]) == want
		}
		if fetched == 0 {
			break
		}
		refetch := false
	pick:
		for len(jobs) < req.Max {
			var best *db.JobRecord
			for _, q := range req.Queues {
				for len(expired[q]) > 0 && !db.ExpiredReclaimable(expired[q][0]) {
					old := expired[q][0]
					expired[q] = expired[q][1:]
					next, ev := db.KillExpired(old, w.now)
					w.audit(ev)
					if err := putJob(w, old, &next); err != nil {
						return nil, err
					}
					if len(expired[q]) == 0 && full[q] {
						// Killed every expired claim fetched: more may follow.
						refetch = true
						break pick
					}
				}
				if r := ready[q]; len(r) > 0 && (best == nil || db.ClaimsBefore(r[0], best)) {
					best = r[0]
				}
				if e := expired[q]; len(e) > 0 && (best == nil || db.ClaimsBefore(e[0], best)) {
					best = e[0]
				}
			}
			if best == nil {
				break
			}
			advance(ready, expired, req.Queues, best)
			next, ev, err := db.Claim(best, req, w.now)
			if err != nil {
				return nil, err
			}
			w.audit(ev)
			if err := putJob(w, best, &next); err != nil {
				return nil, err
			}
			w.claimed = append(w.claimed, next.Queue)
			jobs = append(jobs, next.Job())
		}
		if !refetch && fetched < want {
			break // every eligible row was fetched: nothing is left
		}
	}
	return jobs, nil
}

// advance drops rec from the head of the list it came from.
func advance(ready, expired map[string][]*db.JobRecord, queues []string, rec *db.JobRecord) {
	for _, lists := range []map[string][]*db.JobRecord{ready, expired} {
		if l := lists[rec.Queue]; len(l) > 0 && l[0] == rec {
			lists[rec.Queue] = l[1:]
			return
		}
	}
}

// promoteLimit bounds how many due scheduled jobs one claim promotes.
const promoteLimit = 1000

// promoteSQL makes up to $2 scheduled jobs whose run_at ($1) has come
// available, oldest first, and returns their queues. Rows another
// transaction holds are skipped.
const promoteSQL = `UPDATE fenceq_jobs SET state = 'available' WHERE id IN (
	SELECT id FROM fenceq_jobs WHERE state = 'scheduled' AND run_at <= $1 ORDER BY run_at, id LIMIT $2 FOR UPDATE SKIP LOCKED)
	RETURNING id, queue`

// candidatesSQL locks, per queue of $1 that is not paused, up to $2 of
// its available jobs in claim order and up to $2 of its claims whose lease
// expired by $3, the earliest expiry first. The pause is read in the
// claim's transaction, so no claim gives out a job of a paused queue.
const candidatesSQL = `WITH queues AS (
	  SELECT q.name FROM unnest($1::text[]) AS q(name) WHERE NOT EXISTS (SELECT 1 FROM fenceq_paused WHERE queue = q.name)),
	ready AS (
	  SELECT j.* FROM queues AS q, LATERAL (SELECT ` + jobColumns + ` FROM fenceq_jobs
	    WHERE state = 'available' AND queue = q.name ORDER BY priority DESC, run_at, id LIMIT $2 FOR UPDATE SKIP LOCKED) AS j),
	expired AS (
	  SELECT j.* FROM queues AS q, LATERAL (SELECT ` + jobColumns + ` FROM fenceq_jobs
	    WHERE state = 'claimed' AND queue = q.name AND lease_expires_at <= $3 ORDER BY lease_expires_at, id LIMIT $2 FOR UPDATE SKIP LOCKED) AS j)
	SELECT * FROM ready UNION ALL SELECT * FROM expired`

// candidates locks, per unpaused queue of req, up to n of its available
// jobs in claim order and up to n of its claims whose lease expired (see
// candidatesSQL). With promote it first promotes the due scheduled jobs of
// every queue, in the same round trip: the candidates then include them.
// Rows locked by another transaction are skipped. Rows fetched but not
// claimed stay locked until the commit; others skip them meanwhile.
func candidates(w *writer, req db.ClaimRequest, n int, promote bool) (ready, expired map[string][]*db.JobRecord, err error) {
	var recs []*db.JobRecord
	if promote {
		recs, err = promoteAndFetch(w, req.Queues, n)
	} else {
		recs, err = queryJobs(w.ctx, w.tx, candidatesSQL, req.Queues, n, w.now.UnixNano())
	}
	if err != nil {
		return nil, nil, err
	}
	ready, expired = map[string][]*db.JobRecord{}, map[string][]*db.JobRecord{}
	for _, r := range recs {
		if r.State == db.StateAvailable {
			ready[r.Queue] = append(ready[r.Queue], r)
		} else {
			expired[r.Queue] = append(expired[r.Queue], r)
		}
	}
	for _, l := range ready {
		slices.SortFunc(l, func(a, b *db.JobRecord) int {
			if db.ClaimsBefore(a, b) {
				return -1
			}
			return 1
		})
	}
	for _, l := range expired {
		slices.SortFunc(l, func(a, b *db.JobRecord) int {
			return cmp.Or(cmp.Compare(a.LeaseExpiresAt, b.LeaseExpiresAt), cmp.Compare(a.ID, b.ID))
		})
	}
	return ready, expired, nil
}

// claimWaiting claims like ClaimJobs, long-polling up to req.Wait (real
// time) when nothing is claimable (package wait): woken by a hand-off, by
// NOTIFY from any replica when jobs of its queues became available (or
// will, at a time it did not know), and by a timer at the earliest run_at
// or lease expiry of its queues.
func (s *Store) claimWaiting(ctx context.Context, req db.ClaimRequest) ([]db.Job, error) {
	return s.waits.Claim(ctx, req, func(ctx context.Context) ([]db.Job, wait.Due, error) {
		return s.claimNow(ctx, req)
	})
}

// promoteAndFetch promotes the due scheduled jobs and fetches the
// candidates (candidatesSQL) in one round trip.
func promoteAndFetch(w *writer, queues []string, n int) ([]*db.JobRecord, error) {
	b := &pgx.Batch{}
	b.Queue(promoteSQL, w.now.UnixNano(), promoteLimit)
	b.Queue(candidatesSQL, queues, n, w.now.UnixNano())
	br := w.tx.SendBatch(w.ctx, b)
	defer br.Close()
	rows, err := br.Query()
	if err != nil {
		return nil, err
	}
	for rows.Next() {
		var id int64
		var q string
		if err := rows.Scan(&id, &q); err != nil {
			rows.Close()
			return nil, err
		}
		delete(w.locked, uint64(id)) // a row the batch locked, promoted: read it again
		w.count(q, db.StateScheduled, -1)
		w.count(q, db.StateAvailable, 1)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	rows, err = br.Query()
	if err != nil {
		return nil, err
	}
	var out []*db.JobRecord
	for rows.Next() {
		r, err := scanJob(rows)
		if err != nil {
			rows.Close()
			return nil, err
		}
		out = append(out, r)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	return out, br.Close()
}
