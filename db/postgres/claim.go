package postgres

import (
	"context"

	"github.com/fenceq/fenceq/db"
	"github.com/fenceq/fenceq/db/wait"
	"github.com/jackc/pgx/v5"
)

// ClaimJobs takes up to req.Max of the best eligible jobs in one
// transaction, in bbolt's order (priority, run_at, id): available jobs,
// due scheduled ones, and claims whose lease expired by the database's
// clock (those with no attempts left go dead on the way). Rows another
// transaction holds are skipped (FOR UPDATE SKIP LOCKED). With Wait it
// long-polls. A claim joins the replica's next batch, whose one statement
// fetches the candidates of all its claims: one that finds nothing writes
// nothing, and a batch that writes nothing commits without a flush.
func (s *Store) ClaimJobs(ctx context.Context, req db.ClaimRequest) ([]db.Job, error) {
	if err := s.opts.NormalizeClaim(&req); err != nil {
		return nil, err
	}
	if req.Wait > 0 {
		return s.claimWaiting(ctx, req)
	}
	return s.claimBatch(ctx, req)
}

// claimBatch claims what is eligible now, in the replica's next batch.
func (s *Store) claimBatch(ctx context.Context, req db.ClaimRequest) ([]db.Job, error) {
	var jobs []db.Job
	err := s.updatePlan(ctx, opPlan{claim: &req, early: true, caller: callerOf(req.Principal, req.Worker)}, func(w *writer) error {
		var err error
		jobs, err = claimIn(w, req)
		w.back = len(jobs) > 0
		return err
	})
	return jobs, err
}

// claimNow claims what is eligible now. When it claims nothing, it returns
// the earliest time something of req.Queues becomes claimable by time, by
// the rules' clock (the database's; 0: nothing will without another
// request).
func (s *Store) claimNow(ctx context.Context, req db.ClaimRequest) ([]db.Job, wait.Due, error) {
	// The claim first (claimBatch); the look at due times only when it
	// found nothing (another replica took the job first, or nothing was
	// there): the claim then sleeps until its own queues' next due time.
	jobs, err := s.claimBatch(ctx, req)
	if err != nil || len(jobs) > 0 {
		return jobs, wait.Due{}, err
	}
	_, next, now, err := s.claimable(ctx, req.Queues)
	return nil, wait.Due{At: next, Now: now}, err
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

// claimIn claims up to req.Max jobs in w's batch, choosing as the bbolt
// engine does: at each step, of every queue's best available job and its
// claim whose lease expired first, the one db.ClaimsBefore puts first; an
// expired claim with no attempts left at the head goes dead on the way
// (db.KillExpired). It chooses among the batch's candidates: the rows the
// batch holds (an enqueue's job, a failed job made available, earlier in
// the batch) and the candidates fetched for its claims at its start in one
// statement (fetchCandidates; again, for a queue whose fetched candidates
// ran out while the table may hold more).
func claimIn(w *writer, req db.ClaimRequest) ([]db.Job, error) {
	v := w.v
	var missing []string
	for _, q := range req.Queues {
		if v.pool[q] == nil {
			missing = append(missing, q)
		}
	}
	if len(missing) > 0 {
		limits := map[string]int{}
		for _, q := range missing {
			limits[q] = req.Max
		}
		if err := fetchCandidates(w, missing, limits); err != nil {
			return nil, err
		}
	}
	heldReady, heldExpired := v.heldCandidates(req.Queues, w.now.UnixNano())
	var jobs []db.Job
	for len(jobs) < req.Max {
		var best *db.JobRecord
		var take func()
		for _, q := range req.Queues {
			paused, err := isPaused(w, q)
			if err != nil {
				return nil, err
			}
			if paused {
				continue
			}
			c, t, err := queueHead(w, q, req.Max-len(jobs), heldReady, heldExpired)
			if err != nil {
				return nil, err
			}
			if c != nil && (best == nil || db.ClaimsBefore(c, best)) {
				best, take = c, t
			}
		}
		if best == nil {
			break
		}
		take()
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
	return jobs, nil
}

// queueHead is queue q's next candidate for a claim, and how to take it
// off its list: the first in claim order of its best available job and its
// claim whose lease expired first, among the rows the batch holds (held*)
// and its fetched candidates. Expired claims with no attempts left met at
// the head go dead on the way; fetched candidates that ran out are fetched
// again (up to want) when the table may hold more.
func queueHead(w *writer, q string, want int, heldReady, heldExpired map[string][]*db.JobRecord) (*db.JobRecord, func(), error) {
	v := w.v
	for {
		p := v.pool[q]
		v.trim(p)
		if (len(p.ready) == 0 && p.readyFull) || (len(p.expired) == 0 && p.expiredFull) {
			if err := fetchCandidates(w, []string{q}, map[string]int{q: want}); err != nil {
				return nil, nil, err
			}
			continue
		}
		var exp *db.JobRecord
		var takeExp func()
		if len(p.expired) > 0 {
			exp = p.expired[0]
			takeExp = func() { v.take(p, exp) }
		}
		if h := heldExpired[q]; len(h) > 0 && (exp == nil || h[0].LeaseExpiresAt < exp.LeaseExpiresAt ||
			(h[0].LeaseExpiresAt == exp.LeaseExpiresAt && h[0].ID < exp.ID)) {
			exp = h[0]
			takeExp = func() { heldExpired[q] = heldExpired[q][1:] }
		}
		if exp != nil && !db.ExpiredReclaimable(exp) {
			takeExp()
			next, ev := db.KillExpired(exp, w.now)
			w.audit(ev)
			if err := putJob(w, exp, &next); err != nil {
				return nil, nil, err
			}
			continue
		}
		best, take := exp, takeExp
		if len(p.ready) > 0 && (best == nil || db.ClaimsBefore(p.ready[0], best)) {
			r := p.ready[0]
			best, take = r, func() { v.take(p, r) }
		}
		if h := heldReady[q]; len(h) > 0 && (best == nil || db.ClaimsBefore(h[0], best)) {
			best, take = h[0], func() { heldReady[q] = heldReady[q][1:] }
		}
		return best, take, nil
	}
}

// promoteSQL executes a db.Promotion: it makes available the scheduled
// jobs of the queues $3 whose run_at has come ($1, or when NULL the
// batch's time kept by beginBatch), up to $2 of them oldest first across
// the queues, then up to $4 due jobs of any queue, oldest first, and
// returns their ids and queues. Rows another transaction holds are
// skipped, and so are ids $5 (rows the batch holds: they change in its
// view).
const promoteSQL = `WITH due AS (SELECT coalesce($1::bigint, ` + batchNow + `) AS ns),
	mine AS (
	  SELECT s.id FROM unnest($3::text[]) AS q(name), due, LATERAL (
	    SELECT id, run_at FROM fenceq_jobs WHERE state = 'scheduled' AND queue = q.name AND run_at <= due.ns AND id <> ALL($5)
	    ORDER BY run_at, id LIMIT $2 FOR UPDATE SKIP LOCKED) AS s
	  ORDER BY s.run_at, s.id LIMIT $2),
	anyq AS (
	  SELECT id FROM fenceq_jobs, due WHERE state = 'scheduled' AND run_at <= due.ns AND id <> ALL($5) AND id NOT IN (SELECT id FROM mine)
	  ORDER BY run_at, id LIMIT $4 FOR UPDATE SKIP LOCKED)
	UPDATE fenceq_jobs SET state = 'available' WHERE id IN (SELECT id FROM mine UNION ALL SELECT id FROM anyq)
	RETURNING id, queue`

// promoteArgs are promoteSQL's arguments for p, leaving out held; a nil
// dueBy is the batch's time kept by beginBatch.
func promoteArgs(p db.Promotion, dueBy any, held []int64) []any {
	if held == nil {
		held = []int64{}
	}
	return []any{dueBy, p.QueueLimit, p.Queues, p.SweepLimit, held}
}

// candidatesSQL locks, per queue of $1 that is not paused, up to $2 (an
// array: one limit per queue) of its available jobs in claim order and up
// to as many of its claims whose lease expired by $3 (NULL: the batch's
// time kept by beginBatch), the earliest expiry
// first, leaving out ids $4 (rows the batch holds or fetched already). The
// pause is read in the claim's transaction, so no claim gives out a job of
// a paused queue.
const candidatesSQL = `WITH queues AS (
	  SELECT q.name, q.n FROM unnest($1::text[], $2::int[]) AS q(name, n) WHERE NOT EXISTS (SELECT 1 FROM fenceq_paused WHERE queue = q.name)),
	ready AS (
	  SELECT j.* FROM queues AS q, LATERAL (SELECT ` + jobColumns + ` FROM fenceq_jobs
	    WHERE state = 'available' AND queue = q.name AND id <> ALL($4) ORDER BY priority DESC, run_at, id LIMIT q.n FOR UPDATE SKIP LOCKED) AS j),
	expired AS (
	  SELECT j.* FROM queues AS q, LATERAL (SELECT ` + jobColumns + ` FROM fenceq_jobs
	    WHERE state = 'claimed' AND queue = q.name AND lease_expires_at <= coalesce($3::bigint, ` + batchNow + `) AND id <> ALL($4) ORDER BY lease_expires_at, id LIMIT q.n FOR UPDATE SKIP LOCKED) AS j)
	SELECT * FROM ready UNION ALL SELECT * FROM expired`

// batchNow is the batch's time as beginBatch keeps it for the statements
// of its first round trip.
const batchNow = `current_setting('fenceq.now', true)::bigint`

// candidateArgs are candidatesSQL's arguments for queues with their limits.
func candidateArgs(queues []string, limits map[string]int, now any, held []int64) []any {
	ns := make([]int32, len(queues))
	for i, q := range queues {
		ns[i] = int32(limits[q])
	}
	if held == nil {
		held = []int64{} // NULL would leave every row out
	}
	return []any{queues, ns, now, held}
}

// fetchCandidates fetches, in one round trip, the candidates of queues
// (candidatesSQL, limits per queue) into the batch's pool, after promoting
// the due scheduled jobs of those queues (and of every queue, the batch's
// first time) in the same round trip. Rows the batch holds or fetched before
// are left out. Rows fetched but not claimed stay locked until the
// commit; others skip them meanwhile.
func fetchCandidates(w *writer, queues []string, limits map[string]int) error {
	v := w.v
	held := v.heldIDs()
	b := &pgx.Batch{}
	// The claim promotes the due scheduled jobs of the queues it fetches,
	// and the batch's first promotion those of every queue
	// (db.PlanPromotion), in the same round trip.
	b.Queue(promoteSQL, promoteArgs(db.PlanPromotion(queues, w.now, !v.promoted), w.now.UnixNano(), held)...)
	b.Queue(candidatesSQL, candidateArgs(queues, limits, w.now.UnixNano(), held)...)
	br := w.tx.SendBatch(w.ctx, b)
	defer br.Close()
	if err := readPromoted(v, br); err != nil {
		return err
	}
	recs, err := scanJobs(br.Query())
	if err != nil {
		return err
	}
	v.fill(queues, recs, limits)
	return br.Close()
}

// readPromoted reads promoteSQL's rows: counts move, and a row the batch
// holds is available in its view too.
func readPromoted(v *batchView, br pgx.BatchResults) error {
	rows, err := br.Query()
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var id int64
		var q string
		if err := rows.Scan(&id, &q); err != nil {
			return err
		}
		if r, ok := v.rows[uint64(id)]; ok {
			r.State = db.StateAvailable
		}
		v.count(q, db.StateScheduled, -1)
		v.count(q, db.StateAvailable, 1)
	}
	rows.Close()
	v.promoted = true
	return rows.Err()
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
