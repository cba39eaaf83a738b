package postgres

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/fenceq/fenceq/db"
	"github.com/fenceq/fenceq/internal/msgrec"
	"github.com/jackc/pgx/v5"
	"github.com/vmihailenco/msgpack/v5"
)

const jobColumns = `id, queue, kind, payload, priority, state, attempts, max_attempts, budget, claimed_by,
	lease_expires_at, run_at, created_at, updated_at, completed_at, last_error, errors, result, attestation, idempotency_key,
	schedule, scheduled_for, backfilled`

// scanJob reads one row of jobColumns, and into extra the columns after
// them.
func scanJob(row pgx.Row, extra ...any) (*db.JobRecord, error) {
	var (
		r                                      db.JobRecord
		id, attempts, maxAttempts, budget      int64
		kind, lastError, errs, idem, claimedBy []byte
		state                                  string
		lease, runAt, created, updated, compAt int64
		sched                                  *string
		schedFor                               *int64
	)
	err := row.Scan(append([]any{&id, &r.Queue, &kind, &r.Payload, &r.Priority, &state, &attempts, &maxAttempts, &budget, &claimedBy,
		&lease, &runAt, &created, &updated, &compAt, &lastError, &errs, &r.Result, &r.Attestation, &idem,
		&sched, &schedFor, &r.Backfilled}, extra...)...)
	if err != nil {
		return nil, err
	}
	r.ID, r.Attempts, r.MaxAttempts, r.Budget = uint64(id), uint64(attempts), uint64(maxAttempts), uint64(budget)
	r.Kind, r.LastError, r.IdempotencyKey, r.State = string(kind), string(lastError), string(idem), db.State(state)
	r.ClaimedBy = string(claimedBy)
	r.LeaseExpiresAt, r.RunAt, r.CreatedAt, r.UpdatedAt, r.CompletedAt = lease, runAt, created, updated, compAt
	if sched != nil {
		r.Schedule = *sched
	}
	if schedFor != nil {
		r.ScheduledFor = *schedFor
	}
	if len(errs) > 0 {
		if err := msgrec.Unmarshal(errs, &r.Errors); err != nil {
			return nil, fmt.Errorf("%w: job %d: errors: %v", db.ErrCorrupt, r.ID, err)
		}
	}
	return &r, nil
}

func nullBytes(b []byte) any {
	if len(b) == 0 {
		return nil
	}
	return b
}

func encodeErrors(errs []db.ErrorRecord) ([]byte, error) {
	if len(errs) == 0 {
		return nil, nil
	}
	return msgpack.Marshal(errs)
}

// insertJob writes a new job and reports whether it did: a job of the same
// queue that holds its idempotency key already (found first by enqueue)
// makes it a no-op rather than an error. With newID the job's id is the
// sequence's next, which it returns; else r.ID (a copy).
func insertJob(w *writer, r *db.JobRecord, newID bool) (uint64, bool, error) {
	errs, err := encodeErrors(r.Errors)
	if err != nil {
		return 0, false, err
	}
	var idem any
	if r.IdempotencyKey != "" {
		idem = []byte(r.IdempotencyKey)
	}
	var id int64
	sched, schedFor := scheduleColumns(r)
	err = w.tx.QueryRow(w.ctx, `INSERT INTO fenceq_jobs (id, queue, kind, payload, priority, state, attempts, max_attempts, budget, claimed_by,
		lease_expires_at, run_at, created_at, updated_at, completed_at, last_error, errors, result, attestation, idempotency_key,
		schedule, scheduled_for, backfilled)
		VALUES (CASE WHEN $21 THEN nextval('fenceq_job_id') ELSE $20 END, $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19,
		  $22, $23, $24)
		ON CONFLICT (queue, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING RETURNING id`,
		r.Queue, []byte(r.Kind), nullBytes(r.Payload), r.Priority, string(r.State), int64(r.Attempts), int64(r.MaxAttempts), int64(r.Budget), []byte(r.ClaimedBy),
		r.LeaseExpiresAt, r.RunAt, r.CreatedAt, r.UpdatedAt, r.CompletedAt, []byte(r.LastError), errs, nullBytes(r.Result), nullBytes(r.Attestation), idem, int64(r.ID), newID,
		sched, schedFor, r.Backfilled).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, err
	}
	return uint64(id), true, nil
}

// scheduleColumns are a job's schedule and scheduled_for columns: NULL
// for a job no schedule enqueued (as every job of an earlier release).
func scheduleColumns(r *db.JobRecord) (sched *string, schedFor *int64) {
	if r.Schedule != "" {
		sched = &r.Schedule
	}
	if r.ScheduledFor != 0 {
		schedFor = &r.ScheduledFor
	}
	return sched, schedFor
}

// putJob writes rec over old (the same id) in the batch's view, written
// to the table at the batch's end, and moves the counts. It is the only
// place that changes a job row, so it is also where waiters are told that
// a job became claimable now, or will at a time.
func putJob(w *writer, old, rec *db.JobRecord) error {
	if err := w.v.put(rec, false); err != nil {
		return err
	}
	return moved(w, old, rec)
}

// nullResult is b as a read of a column written with nullBytes returns it.
func nullResult(b []byte) []byte {
	if len(b) == 0 {
		return nil
	}
	return b
}

// moved records the count change from old to rec (old nil: a new job) and
// the wake-ups it calls for.
func moved(w *writer, old, rec *db.JobRecord) error {
	if old == nil || old.Queue != rec.Queue || old.State != rec.State {
		if old != nil {
			w.count(old.Queue, old.State, -1)
		}
		w.count(rec.Queue, rec.State, 1)
	}
	switch {
	case rec.State == db.StateAvailable && (old == nil || old.State != db.StateAvailable):
		if w.s.waits.Sleeping(rec.Queue) > 0 {
			if paused, err := isPaused(w, rec.Queue); err != nil || paused {
				return err // a paused queue's job waits for the resume
			}
			if wt := w.s.waits.Take(rec.Queue); wt != nil {
				return handOff(w, rec, wt)
			}
		}
		w.notify = append(w.notify, notifyOneAvailable(rec.Queue))
	case rec.State == db.StateScheduled:
		w.notify = append(w.notify, notifyLater(rec.Queue, rec.RunAt))
	case rec.State == db.StateClaimed:
		w.notify = append(w.notify, notifyLater(rec.Queue, rec.LeaseExpiresAt))
	}
	return nil
}

// getJob loads a job, locked for the transaction when lock is set.
func getJob(ctx context.Context, q querier, id uint64, lock bool) (*db.JobRecord, error) {
	sql := `SELECT ` + jobColumns + ` FROM fenceq_jobs WHERE id = $1`
	if lock {
		sql += ` FOR UPDATE`
	}
	if id > 1<<63-1 {
		return nil, db.JobNotFound(id)
	}
	rec, err := scanJob(q.QueryRow(ctx, sql, int64(id)))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, db.JobNotFound(id)
	}
	return rec, err
}

// EnqueueJob adds one job. Refusals: CodeInvalid, CodeTooLarge.
func (s *Store) EnqueueJob(ctx context.Context, req db.EnqueueRequest) (db.EnqueueResult, error) {
	res, err := s.EnqueueJobs(ctx, []db.EnqueueRequest{req})
	if err != nil {
		return db.EnqueueResult{}, err
	}
	return res[0], nil
}

// EnqueueJobs adds several jobs in one transaction: all of them or, when
// any request is invalid, none. Idempotency keys are unique per queue
// across replicas: a key taken returns the job that holds it (Created
// false).
func (s *Store) EnqueueJobs(ctx context.Context, reqs []db.EnqueueRequest) ([]db.EnqueueResult, error) {
	reqs, err := s.opts.NormalizeEnqueueBatch(reqs)
	if err != nil {
		return nil, err
	}
	var plan opPlan
	for _, req := range reqs {
		if req.IdempotencyKey == "" {
			plan.inserts++
		} else {
			plan.keys = append(plan.keys, idemKey(req.Queue, req.IdempotencyKey))
			plan.idem = append(plan.idem, idemPair{req.Queue, req.IdempotencyKey})
		}
	}
	var results []db.EnqueueResult
	err = s.updatePlan(ctx, plan, func(w *writer) error {
		results = make([]db.EnqueueResult, len(reqs))
		for i, req := range reqs {
			r, err := enqueue(w, req)
			if err != nil {
				return err
			}
			results[i] = r
		}
		return nil
	})
	return results, err
}

func enqueue(w *writer, req db.EnqueueRequest) (db.EnqueueResult, error) {
	if req.IdempotencyKey != "" {
		old, err := w.byKey(req.Queue, req.IdempotencyKey)
		if err != nil || old != nil {
			if old == nil {
				return db.EnqueueResult{}, err
			}
			return db.EnqueueResult{Job: old.Job()}, err
		}
	}
	// The id was taken from the sequence at the batch's start (opPlan),
	// one per enqueue without a key and per key no job holds: an enqueue
	// that finds its key taken uses none.
	id, err := w.newID()
	if err != nil {
		return db.EnqueueResult{}, err
	}
	rec, ev := db.Enqueue(id, req, w.now)
	if err := w.v.put(&rec, true); err != nil {
		return db.EnqueueResult{}, err
	}
	if req.IdempotencyKey != "" {
		w.v.keyTaken(req.Queue, req.IdempotencyKey, id)
	}
	w.audit(ev)
	if err := moved(w, nil, &rec); err != nil {
		return db.EnqueueResult{}, err
	}
	return db.EnqueueResult{Job: rec.Job(), Created: true}, nil
}

// change runs a one-record transition on the locked row of id and writes
// what it returns: the rules decide, this only writes.
func (s *Store) change(ctx context.Context, id uint64, transition func(old *db.JobRecord, now time.Time) (db.JobRecord, db.AuditEvent, error)) (db.Job, error) {
	return s.changeBy(ctx, id, "", transition)
}

// changeBy is change for a completion or failure by caller (principal and
// worker), who will likely claim again at once.
func (s *Store) changeBy(ctx context.Context, id uint64, caller string, transition func(old *db.JobRecord, now time.Time) (db.JobRecord, db.AuditEvent, error)) (db.Job, error) {
	var job db.Job
	err := s.updatePlan(ctx, opPlan{jobs: []uint64{id}, early: true, caller: caller}, func(w *writer) error {
		rec, err := changeIn(w, id, transition)
		if err == nil {
			job = rec.Job()
			w.back = true
		}
		return err
	})
	return job, err
}

func changeIn(w *writer, id uint64, transition func(old *db.JobRecord, now time.Time) (db.JobRecord, db.AuditEvent, error)) (*db.JobRecord, error) {
	old, err := w.job(id)
	if err != nil {
		return nil, err
	}
	next, ev, err := transition(old, w.now)
	if err != nil {
		return nil, err
	}
	// Audited before putJob: a job made available may be handed to a
	// waiting claim there, and that claim comes after this change.
	w.audit(ev)
	if err := putJob(w, old, &next); err != nil {
		return nil, err
	}
	return &next, nil
}

// HeartbeatJob extends the caller's lease (db.Heartbeat), checked in the
// transaction that writes it. A caller that does not hold the current
// claim gets CodeNotFound.
func (s *Store) HeartbeatJob(ctx context.Context, req db.HeartbeatRequest) (db.Job, error) {
	d, err := s.opts.ValidateHeartbeat(req)
	if err != nil {
		return db.Job{}, err
	}
	return s.change(ctx, req.ID, func(old *db.JobRecord, now time.Time) (db.JobRecord, db.AuditEvent, error) {
		return db.Heartbeat(old, req, d, now)
	})
}

// CompleteJob completes the caller's claim (db.Complete): the fencing
// check comes before the result and attestation are written. A caller that
// does not hold the current claim gets CodeConflict.
func (s *Store) CompleteJob(ctx context.Context, req db.CompleteRequest) (db.Job, error) {
	if err := s.opts.ValidateComplete(req); err != nil {
		return db.Job{}, err
	}
	return s.changeBy(ctx, req.ID, callerOf(req.Principal, req.Worker), func(old *db.JobRecord, now time.Time) (db.JobRecord, db.AuditEvent, error) {
		return db.Complete(old, req, now)
	})
}

// CompleteAndClaimJob completes the caller's claim and claims up to
// next.Max jobs in the same transaction. A refused completion claims
// nothing.
func (s *Store) CompleteAndClaimJob(ctx context.Context, req db.CompleteRequest, next db.ClaimRequest) (db.Job, []db.Job, error) {
	if err := s.opts.ValidateComplete(req); err != nil {
		return db.Job{}, nil, err
	}
	if err := s.opts.NormalizeClaimNext(req, &next); err != nil {
		return db.Job{}, nil, err
	}
	var (
		job  db.Job
		jobs []db.Job
	)
	caller := callerOf(req.Principal, req.Worker)
	err := s.updatePlan(ctx, opPlan{jobs: []uint64{req.ID}, claim: &next, early: true, caller: caller}, func(w *writer) error {
		rec, err := changeIn(w, req.ID, func(old *db.JobRecord, now time.Time) (db.JobRecord, db.AuditEvent, error) {
			return db.Complete(old, req, now)
		})
		if err != nil {
			return err
		}
		job = rec.Job()
		w.back = true
		jobs, err = claimIn(w, next)
		return err
	})
	return job, jobs, err
}

// FailJob records the caller's failure (db.Rules.Fail). A caller that does
// not hold the current claim gets CodeNotFound.
func (s *Store) FailJob(ctx context.Context, req db.FailRequest) (db.Job, error) {
	if err := s.opts.ValidateFail(req); err != nil {
		return db.Job{}, err
	}
	return s.changeBy(ctx, req.ID, callerOf(req.Principal, req.Worker), func(old *db.JobRecord, now time.Time) (db.JobRecord, db.AuditEvent, error) {
		return s.opts.Fail(old, req, now)
	})
}

// CancelJob cancels an unfinished or dead job (db.Cancel).
func (s *Store) CancelJob(ctx context.Context, req db.JobRequest) (db.Job, error) {
	return s.change(ctx, req.ID, func(old *db.JobRecord, now time.Time) (db.JobRecord, db.AuditEvent, error) {
		return db.Cancel(old, req, now)
	})
}

// RetryJob makes a dead or cancelled job available now (db.Retry).
func (s *Store) RetryJob(ctx context.Context, req db.JobRequest) (db.Job, error) {
	return s.change(ctx, req.ID, func(old *db.JobRecord, now time.Time) (db.JobRecord, db.AuditEvent, error) {
		return db.Retry(old, req, now)
	})
}

// GetJob returns one job, or CodeNotFound.
func (s *Store) GetJob(ctx context.Context, id uint64) (db.Job, error) {
	rec, err := getJob(ctx, s.pool, id, false)
	if err != nil {
		return db.Job{}, s.readError(err)
	}
	return rec.Job(), nil
}

// CheckJob answers whether token is the job's current claim
// (db.CheckJobToken).
func (s *Store) CheckJob(ctx context.Context, id, token uint64) (db.Job, error) {
	if err := db.ValidateLeaseToken(token); err != nil {
		return db.Job{}, err
	}
	rec, err := getJob(ctx, s.pool, id, false)
	if err != nil {
		return db.Job{}, s.readError(err)
	}
	if err := db.CheckJobToken(rec, token); err != nil {
		return db.Job{}, err
	}
	return rec.Job(), nil
}

// ListJobs pages through jobs in id order.
func (s *Store) ListJobs(ctx context.Context, req db.ListRequest) (db.JobPage, error) {
	if err := db.ValidateList(&req); err != nil {
		return db.JobPage{}, err
	}
	page := db.JobPage{Jobs: []db.Job{}}
	if req.After >= 1<<63-1 {
		return page, nil
	}
	sql := `SELECT ` + jobColumns + ` FROM fenceq_jobs WHERE id > $1`
	args := []any{int64(req.After)}
	if req.Queue != "" {
		args = append(args, req.Queue)
		sql += ` AND queue = $` + strconv.Itoa(len(args))
	}
	if req.State != "" {
		args = append(args, string(req.State))
		sql += ` AND state = $` + strconv.Itoa(len(args))
	}
	args = append(args, req.Limit+1)
	sql += ` ORDER BY id LIMIT $` + strconv.Itoa(len(args))
	recs, err := queryJobs(ctx, s.pool, sql, args...)
	if err != nil {
		return db.JobPage{}, s.readError(err)
	}
	if len(recs) > req.Limit {
		recs = recs[:req.Limit]
		page.Next = recs[len(recs)-1].ID
	}
	for _, r := range recs {
		page.Jobs = append(page.Jobs, r.Job())
	}
	return page, nil
}

func queryJobs(ctx context.Context, q querier, sql string, args ...any) ([]*db.JobRecord, error) {
	return scanJobs(q.Query(ctx, sql, args...))
}

// scanJobs reads rows of jobColumns.
func scanJobs(rows pgx.Rows, err error) ([]*db.JobRecord, error) {
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []*db.JobRecord
	for rows.Next() {
		r, err := scanJob(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

// ListJobsInState returns the first jobs of one state in its order (see
// db.StateListRequest), each from its state's index.
func (s *Store) ListJobsInState(ctx context.Context, req db.StateListRequest) ([]db.Job, error) {
	if err := db.ValidateStateList(&req); err != nil {
		return nil, err
	}
	order := map[db.State]string{
		db.StateClaimed:   `queue, lease_expires_at, id`,
		db.StateScheduled: `run_at, id`,
		db.StateDead:      `queue, updated_at DESC, id DESC`,
	}[req.State]
	// A retry filter is written out, not a parameter, so that the planner
	// can use the partial index of the jobs waiting for a retry.
	filter := map[db.RetryFilter]string{
		db.RetryOnly: ` AND state = 'scheduled' AND attempts > 0`,
		db.RetryNone: ` AND attempts = 0`,
	}[req.Retry]
	sql := `SELECT ` + jobColumns + ` FROM fenceq_jobs WHERE state = $1 AND ($2 = '' OR queue = $2)` + filter + ` ORDER BY ` + order + ` LIMIT $3`
	recs, err := queryJobs(ctx, s.pool, sql, string(req.State), req.Queue, req.Limit)
	if err != nil {
		return nil, s.readError(err)
	}
	out := make([]db.Job, 0, len(recs))
	for _, r := range recs {
		out = append(out, r.Job())
	}
	return out, nil
}

// Stats counts jobs per queue and state from the sharded counters, kept in
// the transactions that move the jobs: no scan of the jobs.
func (s *Store) Stats(ctx context.Context) ([]db.QueueStats, error) {
	rows, err := s.pool.Query(ctx, `SELECT queue, state, sum(n)::bigint FROM fenceq_job_counts GROUP BY queue, state HAVING sum(n) <> 0 ORDER BY queue, state`)
	if err != nil {
		return nil, s.readError(err)
	}
	defer rows.Close()
	var out []db.QueueStats
	for rows.Next() {
		var q, st string
		var n int64
		if err := rows.Scan(&q, &st, &n); err != nil {
			return nil, s.readError(err)
		}
		if n < 0 {
			return nil, fmt.Errorf("%w: count of %s/%s is %d", db.ErrCorrupt, q, st, n)
		}
		if len(out) == 0 || out[len(out)-1].Queue != q {
			out = append(out, db.QueueStats{Queue: q, Counts: map[db.State]uint64{}})
		}
		out[len(out)-1].Counts[db.State(st)] = uint64(n)
	}
	return out, s.readError(rows.Err())
}

// SweepOnce deletes up to limit completed or cancelled jobs finished at or
// before now minus retention, in one transaction.
func (s *Store) SweepOnce(ctx context.Context, retention time.Duration, limit int) (int, error) {
	if err := db.CheckSweepArgs(retention); err != nil {
		return 0, err
	}
	var deleted int
	err := s.update(ctx, func(w *writer) error {
		deleted = 0
		plan, err := db.PlanSweep(retention, limit, w.now)
		if err != nil {
			return err
		}
		rows, err := w.tx.Query(w.ctx, sweepSQL, plan.FinishedBy, plan.Limit, w.v.heldIDs())
		if err != nil {
			return err
		}
		var ids []uint64
		for rows.Next() {
			var id int64
			var q, st string
			if err := rows.Scan(&id, &q, &st); err != nil {
				rows.Close()
				return err
			}
			ids = append(ids, uint64(id))
			w.count(q, db.State(st), -1)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		if len(ids) == 0 {
			return nil
		}
		slices.Sort(ids)
		deleted = len(ids)
		w.audit(plan.Event(ids))
		return nil
	})
	return deleted, err
}

// sweepSQL executes a db.Sweep: it deletes up to $2 jobs in db.SweptStates
// whose updated_at is at or before $1, oldest first, but the rows $3 the
// batch holds (they may change in its view). The states are literals, so
// that the partial index fenceq_jobs_finished serves it.
var sweepSQL = `DELETE FROM fenceq_jobs WHERE id IN (
	SELECT id FROM fenceq_jobs WHERE state IN (` + sqlStates(db.SweptStates) + `) AND updated_at <= $1 AND id <> ALL($3)
	ORDER BY updated_at, id LIMIT $2 FOR UPDATE SKIP LOCKED) RETURNING id, queue, state`

// sqlStates lists states as SQL literals.
func sqlStates(states []db.State) string {
	out := make([]string, len(states))
	for i, st := range states {
		out[i] = "'" + string(st) + "'"
	}
	return strings.Join(out, ", ")
}

// sweepLock is the advisory lock a replica holds while it sweeps.
const sweepLock = 0x66656e6365710002

// Sweep runs SweepOnce until a pass deletes less than a full batch. One
// replica sweeps at a time: while another holds the sweep's advisory lock,
// Sweep returns 0 at once.
func (s *Store) Sweep(ctx context.Context, retention time.Duration) (int, error) {
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return 0, s.readError(err)
	}
	defer conn.Release()
	var got bool
	if err := conn.QueryRow(ctx, `SELECT pg_try_advisory_lock($1)`, int64(sweepLock)).Scan(&got); err != nil {
		return 0, s.readError(err)
	}
	if !got {
		return 0, nil
	}
	defer conn.Exec(context.Background(), `SELECT pg_advisory_unlock($1)`, int64(sweepLock))
	return db.SweepPasses(ctx, retention, s.SweepOnce)
}

// Check compares the sharded counters with the jobs they count, and the
// audit head with the newest link: the invariants the transactions keep.
// It scans the jobs table; it is for tests and offline checks.
func (s *Store) Check() error {
	ctx := context.Background()
	rows, err := s.pool.Query(ctx, `SELECT coalesce(c.queue, j.queue), coalesce(c.state, j.state), coalesce(c.n, 0), coalesce(j.n, 0)
		FROM (SELECT queue, state, sum(n)::bigint AS n FROM fenceq_job_counts GROUP BY queue, state HAVING sum(n) <> 0) c
		FULL JOIN (SELECT queue, state, count(*) AS n FROM fenceq_jobs GROUP BY queue, state) j ON c.queue = j.queue AND c.state = j.state
		WHERE coalesce(c.n, 0) <> coalesce(j.n, 0)`)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var q, st string
		var counted, found int64
		if err := rows.Scan(&q, &st, &counted, &found); err != nil {
			return err
		}
		return fmt.Errorf("db: postgres: count %s/%s is %d, the jobs table has %d", q, st, counted, found)
	}
	if err := rows.Err(); err != nil {
		return err
	}
	var headSeq, maxSeq int64
	if err := s.pool.QueryRow(ctx, `SELECT (SELECT seq FROM fenceq_audit_head WHERE id = 1), coalesce((SELECT max(seq) FROM fenceq_audit), 0)`).Scan(&headSeq, &maxSeq); err != nil {
		return err
	}
	if headSeq != maxSeq {
		return fmt.Errorf("db: postgres: the audit head is %d, the newest link %d", headSeq, maxSeq)
	}
	return checkSchedules(ctx, s.pool)
}
