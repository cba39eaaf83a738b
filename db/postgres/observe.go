package postgres

// What the status page shows besides the jobs (db/observe.go): refused
// fenced calls and the workers heard from, each a bounded table of its own
// (migration 0004), and the oldest available job of each queue, read from
// the claim index. Recording an observation changes no job and appends no
// audit link.

import (
	"context"
	"errors"
	"time"

	"github.com/fenceq/fenceq/db"
	"github.com/jackc/pgx/v5"
)

// refusedKey and workersKey serialize the writes of each kind across
// replicas (opPlan.keys): the removals past a bound then never wait on each
// other's rows.
const (
	refusedKey = "r"
	workersKey = "w"
)

// RecordRefusedCalls keeps calls in one transaction (see db.Store); the
// oldest beyond db.MaxRefusedCalls are removed in it.
func (s *Store) RecordRefusedCalls(ctx context.Context, calls []db.RefusedCall) error {
	calls = append([]db.RefusedCall(nil), calls...)
	if err := db.NormalizeRefusedCalls(calls); err != nil {
		return err
	}
	return s.updatePlan(ctx, opPlan{keys: []string{refusedKey}}, func(w *writer) error {
		for _, c := range calls {
			at := c.At.UnixNano()
			if c.At.IsZero() {
				at = w.now.UnixNano()
			}
			if _, err := w.tx.Exec(w.ctx, `INSERT INTO fenceq_refused (at, principal, worker, job, operation, token_sent, code, message)
				VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`,
				at, []byte(c.Principal), []byte(c.Worker), int64(c.Job), c.Operation, int64(c.TokenSent), c.Code, []byte(c.Message)); err != nil {
				return err
			}
		}
		_, err := w.tx.Exec(w.ctx, `DELETE FROM fenceq_refused WHERE seq <= (SELECT max(seq) FROM fenceq_refused) - $1`, db.MaxRefusedCalls)
		return err
	})
}

// ListRefusedCalls returns the newest refused calls first (see db.Store).
func (s *Store) ListRefusedCalls(ctx context.Context, req db.RefusedCallsRequest) ([]db.RefusedCall, error) {
	limit, err := db.ListLimit(req.Limit)
	if err != nil {
		return nil, err
	}
	sql := `SELECT seq, at, principal, worker, job, operation, token_sent, code, message FROM fenceq_refused ORDER BY seq DESC LIMIT $1`
	args := []any{limit}
	if req.Job != 0 {
		sql = `SELECT seq, at, principal, worker, job, operation, token_sent, code, message FROM fenceq_refused WHERE job = $2 ORDER BY seq DESC LIMIT $1`
		args = append(args, int64(req.Job))
	}
	rows, err := s.pool.Query(ctx, sql, args...)
	if err != nil {
		return nil, s.readError(err)
	}
	defer rows.Close()
	out := []db.RefusedCall{}
	for rows.Next() {
		var seq, at, job, token int64
		var principal, worker, message []byte
		var c db.RefusedCall
		if err := rows.Scan(&seq, &at, &principal, &worker, &job, &c.Operation, &token, &c.Code, &message); err != nil {
			return nil, s.readError(err)
		}
		c.Seq, c.At, c.Job, c.TokenSent = uint64(seq), db.FromUnixNano(at), uint64(job), uint64(token)
		c.Principal, c.Worker, c.Message = string(principal), string(worker), string(message)
		out = append(out, c)
	}
	return out, s.readError(rows.Err())
}

const workerColumns = `principal, worker, claims, first_seen, last_seen, last_claim, last_heartbeat`

type rowScanner interface{ Scan(dest ...any) error }

func scanWorker(row rowScanner) (db.Worker, error) {
	var principal, worker []byte
	var claims, first, last, lastClaim, lastHeartbeat int64
	if err := row.Scan(&principal, &worker, &claims, &first, &last, &lastClaim, &lastHeartbeat); err != nil {
		return db.Worker{}, err
	}
	return db.Worker{Principal: string(principal), Worker: string(worker), Claims: uint64(claims),
		FirstSeen: db.FromUnixNano(first), LastSeen: db.FromUnixNano(last),
		LastClaim: db.FromUnixNano(lastClaim), LastHeartbeat: db.FromUnixNano(lastHeartbeat)}, nil
}

func unixNano(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

// RecordWorkers merges sightings into the workers' records in one
// transaction and prunes them (see db.Store).
func (s *Store) RecordWorkers(ctx context.Context, sightings []db.WorkerSighting) error {
	ss, err := db.NormalizeWorkerSightings(sightings)
	if err != nil {
		return err
	}
	return s.updatePlan(ctx, opPlan{keys: []string{workersKey}}, func(w *writer) error {
		for _, sg := range ss {
			var old *db.Worker
			o, err := scanWorker(w.tx.QueryRow(w.ctx, `SELECT `+workerColumns+` FROM fenceq_workers WHERE principal = $1 AND worker = $2`,
				[]byte(sg.Principal), []byte(sg.Worker)))
			switch {
			case err == nil:
				old = &o
			case !errors.Is(err, pgx.ErrNoRows):
				return err
			}
			m := db.MergeWorker(old, sg)
			if _, err := w.tx.Exec(w.ctx, `INSERT INTO fenceq_workers (`+workerColumns+`) VALUES ($1, $2, $3, $4, $5, $6, $7)
				ON CONFLICT (principal, worker) DO UPDATE SET claims = excluded.claims, first_seen = excluded.first_seen,
					last_seen = excluded.last_seen, last_claim = excluded.last_claim, last_heartbeat = excluded.last_heartbeat`,
				[]byte(m.Principal), []byte(m.Worker), int64(m.Claims), unixNano(m.FirstSeen), unixNano(m.LastSeen),
				unixNano(m.LastClaim), unixNano(m.LastHeartbeat)); err != nil {
				return err
			}
		}
		if _, err := w.tx.Exec(w.ctx, `DELETE FROM fenceq_workers WHERE last_seen < $1`,
			w.now.Add(-db.WorkerRetention).UnixNano()); err != nil {
			return err
		}
		_, err := w.tx.Exec(w.ctx, `DELETE FROM fenceq_workers WHERE (principal, worker) IN (
			SELECT principal, worker FROM fenceq_workers ORDER BY last_seen DESC, principal DESC, worker DESC OFFSET $1)`,
			db.MaxWorkersKept)
		return err
	})
}

// ListWorkers returns the workers heard from most recently first.
func (s *Store) ListWorkers(ctx context.Context, req db.WorkersRequest) ([]db.Worker, error) {
	limit, err := db.ListLimit(req.Limit)
	if err != nil {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, `SELECT `+workerColumns+` FROM fenceq_workers ORDER BY last_seen DESC, principal DESC, worker DESC LIMIT $1`, limit)
	if err != nil {
		return nil, s.readError(err)
	}
	defer rows.Close()
	out := []db.Worker{}
	for rows.Next() {
		wk, err := scanWorker(rows)
		if err != nil {
			return nil, s.readError(err)
		}
		out = append(out, wk)
	}
	return out, s.readError(rows.Err())
}

// QueueWaiting returns the oldest available job of every queue that has
// one (see db.Store). The claim index (fenceq_jobs_ready) orders a queue's
// jobs by priority, then run_at: a recursive walk takes the first row of
// each priority level, at most db.MaxWaitingPriorities levels, so the
// cost does not grow with the queue's jobs.
func (s *Store) QueueWaiting(ctx context.Context) ([]db.QueueWaiting, error) {
	rows, err := s.pool.Query(ctx, `
WITH RECURSIVE queues AS (
	SELECT queue FROM fenceq_job_counts WHERE state = 'available' GROUP BY queue HAVING sum(n) > 0
), levels AS (
	SELECT q.queue, f.priority, f.run_at, f.id, 1 AS level
	FROM queues q CROSS JOIN LATERAL (
		SELECT priority, run_at, id FROM fenceq_jobs
		WHERE state = 'available' AND queue = q.queue
		ORDER BY priority DESC, run_at, id LIMIT 1) f
	UNION ALL
	SELECT l.queue, f.priority, f.run_at, f.id, l.level + 1
	FROM levels l CROSS JOIN LATERAL (
		SELECT priority, run_at, id FROM fenceq_jobs
		WHERE state = 'available' AND queue = l.queue AND priority < l.priority
		ORDER BY priority DESC, run_at, id LIMIT 1) f
	WHERE l.level < $1
)
SELECT DISTINCT ON (queue) queue, id, run_at FROM levels ORDER BY queue, run_at, id`, db.MaxWaitingPriorities)
	if err != nil {
		return nil, s.readError(err)
	}
	defer rows.Close()
	out := []db.QueueWaiting{}
	for rows.Next() {
		var q db.QueueWaiting
		var id, runAt int64
		if err := rows.Scan(&q.Queue, &id, &runAt); err != nil {
			return nil, s.readError(err)
		}
		q.Job, q.Since = uint64(id), db.FromUnixNano(runAt)
		out = append(out, q)
	}
	return out, s.readError(rows.Err())
}
