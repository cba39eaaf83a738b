package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/fenceq/fenceq/db"
	"github.com/jackc/pgx/v5"
)

// Schedules (issue 28): a row of fenceq_schedules per schedule, its tick
// records in fenceq_schedule_ticks (migration 0006). The rules are package
// db's (schedule_rules.go); this file reads and writes.
//
// Locks. Every change of a schedule — put, delete, pause, resume, trigger
// — holds the advisory lock of its name (FNV-1a of "s\x00<name>"), taken
// at its batch's start with the other named locks in key order (opPlan); a
// put also holds the one of "s", which serializes the count of schedules
// against MaxSchedules. A fire pass waits for none of them: it tries each
// due schedule's lock (pg_try_advisory_xact_lock) and leaves the ones
// another replica holds to that replica. Whoever holds a name's lock then
// locks its row FOR UPDATE, which therefore never waits: schedule rows
// add no wait to the replicas' lock order.
//
// Why a tick is enqueued once across replicas. A pass decides a schedule
// only under its lock and from its row read after taking it, at the
// transaction's time: a replica that decided the tick first has committed
// the schedule's next fire time past it, so the row read is no longer due.
// What the lock cannot exclude — a replica whose transaction time was read
// before another's fire committed and that then computes the same tick
// again (a replace or a resume computes the next tick from its now) — the
// tick record's primary key (schedule, scheduled_for) does: the pass
// inserts its ticks' records ON CONFLICT DO NOTHING before it makes their
// jobs, and a tick whose record exists makes none.

// scheduleKey is the advisory lock of schedule name's changes.
func scheduleKey(name string) string { return "s\x00" + name }

// schedulesKey serializes creations against db.MaxSchedules.
const schedulesKey = "s"

// scheduleSelect reads a schedule row and the state of its last job ("":
// none, or gone).
const scheduleSelect = `SELECT s.name, s.cron, s.every_ns, s.start_at, s.timezone, s.catchup, s.catchup_window, s.overlap, s.jitter,
	s.queue, s.kind, s.payload, s.priority, s.max_attempts, coalesce(s.next_fire, 0), s.last_job, s.last_scheduled_for,
	s.missed_ticks, s.skipped_ticks, s.created_at, s.updated_at, s.created_by, s.paused_at, s.paused_by,
	coalesce((SELECT j.state FROM fenceq_jobs j WHERE j.id = s.last_job AND s.last_job <> 0), '')
	FROM fenceq_schedules s`

// scannedSchedule is one row of scheduleSelect.
type scannedSchedule struct {
	name      string
	rec       *db.ScheduleRecord
	lastState db.State
}

func scanSchedule(row pgx.Row) (scannedSchedule, error) {
	var (
		r                           db.ScheduleRecord
		name, state                 string
		kind, createdBy, pausedBy   []byte
		maxAttempts, lastJob        int64
		missed, skipped             int64
		catchup, overlap, timezone  string
		every, window, jitter, next int64
	)
	err := row.Scan(&name, &r.Cron, &every, &r.StartAt, &timezone, &catchup, &window, &overlap, &jitter,
		&r.Queue, &kind, &r.Payload, &r.Priority, &maxAttempts, &next, &lastJob, &r.LastScheduledFor,
		&missed, &skipped, &r.CreatedAt, &r.UpdatedAt, &createdBy, &r.PausedAt, &pausedBy, &state)
	if err != nil {
		return scannedSchedule{}, err
	}
	r.Every, r.Timezone, r.Catchup, r.CatchupWindow, r.Overlap, r.Jitter = every, timezone, catchup, window, overlap, jitter
	r.Kind, r.MaxAttempts, r.Next, r.LastJob = string(kind), uint64(maxAttempts), next, uint64(lastJob)
	r.MissedTicks, r.SkippedTicks, r.CreatedBy, r.PausedBy = uint64(missed), uint64(skipped), string(createdBy), string(pausedBy)
	if len(r.Payload) == 0 {
		r.Payload = nil
	}
	return scannedSchedule{name: name, rec: &r, lastState: db.State(state)}, nil
}

// lockedSchedule reads schedule name in w's transaction, its row locked
// (the caller holds the name's advisory lock, so it never waits); nil when
// there is none. Its last job's state is the batch's when the batch holds
// that job.
func lockedSchedule(w *writer, name string) (scannedSchedule, error) {
	sc, err := scanSchedule(w.tx.QueryRow(w.ctx, scheduleSelect+` WHERE s.name = $1 FOR UPDATE OF s`, name))
	if errors.Is(err, pgx.ErrNoRows) {
		return scannedSchedule{name: name}, nil
	}
	if err != nil {
		return sc, err
	}
	sc.lastState = lastStateIn(w, sc.rec, sc.lastState)
	return sc, nil
}

// lastStateIn is the state of rec's last job as w's batch sees it: read
// from the table, or changed by the batch.
func lastStateIn(w *writer, rec *db.ScheduleRecord, read db.State) db.State {
	if rec.LastJob == 0 {
		return ""
	}
	if j, ok := w.v.rows[rec.LastJob]; ok {
		return j.State
	}
	return read
}

// writeSchedule stores rec as schedule name, in place of the row there.
func writeSchedule(w *writer, name string, rec *db.ScheduleRecord) error {
	var next any
	if rec.Next != 0 {
		next = rec.Next
	}
	_, err := w.tx.Exec(w.ctx, `INSERT INTO fenceq_schedules (name, cron, every_ns, start_at, timezone, catchup, catchup_window, overlap, jitter,
		queue, kind, payload, priority, max_attempts, next_fire, last_job, last_scheduled_for, missed_ticks, skipped_ticks,
		created_at, updated_at, created_by, paused_at, paused_by)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20, $21, $22, $23, $24)
		ON CONFLICT (name) DO UPDATE SET cron = excluded.cron, every_ns = excluded.every_ns, start_at = excluded.start_at,
		  timezone = excluded.timezone, catchup = excluded.catchup, catchup_window = excluded.catchup_window, overlap = excluded.overlap,
		  jitter = excluded.jitter, queue = excluded.queue, kind = excluded.kind, payload = excluded.payload, priority = excluded.priority,
		  max_attempts = excluded.max_attempts, next_fire = excluded.next_fire, last_job = excluded.last_job,
		  last_scheduled_for = excluded.last_scheduled_for, missed_ticks = excluded.missed_ticks, skipped_ticks = excluded.skipped_ticks,
		  created_at = excluded.created_at, updated_at = excluded.updated_at, created_by = excluded.created_by,
		  paused_at = excluded.paused_at, paused_by = excluded.paused_by`,
		name, rec.Cron, rec.Every, rec.StartAt, rec.Timezone, rec.Catchup, rec.CatchupWindow, rec.Overlap, rec.Jitter,
		rec.Queue, []byte(rec.Kind), nullBytes(rec.Payload), rec.Priority, int64(rec.MaxAttempts), next, int64(rec.LastJob),
		rec.LastScheduledFor, int64(rec.MissedTicks), int64(rec.SkippedTicks), rec.CreatedAt, rec.UpdatedAt, []byte(rec.CreatedBy),
		rec.PausedAt, []byte(rec.PausedBy))
	return err
}

// enqueueScheduled makes the job id of schedule name's tick or trigger
// sj in the batch's view, as an enqueue does: its audit link, its count,
// the wake-up of a long-poll (handed to one of this replica, or NOTIFY).
func enqueueScheduled(w *writer, id uint64, name string, sj db.ScheduledJob) (db.JobRecord, error) {
	rec, ev := db.EnqueueScheduled(id, name, sj, w.now)
	if err := w.v.put(&rec, true); err != nil {
		return db.JobRecord{}, err
	}
	w.audit(ev)
	return rec, moved(w, nil, &rec)
}

// PutSchedule creates or replaces a schedule and audits it
// (db.Rules.PutSchedule). Refusals: CodeInvalid, CodeTooLarge
// (db.MaxSchedules, the payload).
func (s *Store) PutSchedule(ctx context.Context, req db.PutScheduleRequest) (db.ScheduleResult, error) {
	if err := db.ValidateScheduleName(req.Name); err != nil {
		return db.ScheduleResult{}, err
	}
	var res db.ScheduleResult
	err := s.updatePlan(ctx, opPlan{keys: []string{schedulesKey, scheduleKey(req.Name)}}, func(w *writer) error {
		old, err := lockedSchedule(w, req.Name)
		if err != nil {
			return err
		}
		count := 0
		if old.rec == nil {
			if err := w.tx.QueryRow(w.ctx, `SELECT count(*) FROM fenceq_schedules`).Scan(&count); err != nil {
				return err
			}
		}
		rec, created, ev, err := s.opts.PutSchedule(old.rec, count, req, w.now)
		if err != nil {
			return err
		}
		if err := writeSchedule(w, req.Name, &rec); err != nil {
			return err
		}
		w.audit(ev)
		res = db.ScheduleResult{Schedule: rec.Schedule(req.Name, old.lastState), Created: created}
		return nil
	})
	return res, err
}

// GetSchedule returns one schedule, or CodeNotFound.
func (s *Store) GetSchedule(ctx context.Context, name string) (db.Schedule, error) {
	if err := db.ValidateScheduleName(name); err != nil {
		return db.Schedule{}, err
	}
	sc, err := scanSchedule(s.pool.QueryRow(ctx, scheduleSelect+` WHERE s.name = $1`, name))
	if errors.Is(err, pgx.ErrNoRows) {
		return db.Schedule{}, db.ScheduleNotFound(name)
	}
	if err != nil {
		return db.Schedule{}, s.readError(err)
	}
	return sc.rec.Schedule(sc.name, sc.lastState), nil
}

// ListSchedules pages through schedules in name order. Refusals:
// CodeInvalid (a bad limit).
func (s *Store) ListSchedules(ctx context.Context, req db.ListSchedulesRequest) (db.SchedulePage, error) {
	limit, err := db.ListLimit(req.Limit)
	if err != nil {
		return db.SchedulePage{}, err
	}
	// Names sort bytewise (collation "C"), as bbolt's keys. A cursor that
	// is no name — not UTF-8, or with a NUL, which a text parameter cannot
	// carry — is compared as bytes.
	where, after := `s.name > $1`, any(req.After)
	if !textParam(req.After) {
		where, after = `convert_to(s.name, 'UTF8') > $1`, []byte(req.After)
	}
	rows, err := s.pool.Query(ctx, scheduleSelect+` WHERE `+where+` ORDER BY s.name LIMIT $2`, after, limit+1)
	if err != nil {
		return db.SchedulePage{}, s.readError(err)
	}
	defer rows.Close()
	page := db.SchedulePage{Schedules: []db.Schedule{}}
	for rows.Next() {
		sc, err := scanSchedule(rows)
		if err != nil {
			return db.SchedulePage{}, s.readError(err)
		}
		if len(page.Schedules) == limit {
			page.Next = page.Schedules[limit-1].Name
			break
		}
		page.Schedules = append(page.Schedules, sc.rec.Schedule(sc.name, sc.lastState))
	}
	return page, s.readError(rows.Err())
}

// DeleteSchedule removes a schedule and its tick records (its jobs stay)
// and audits it, answering the schedule as it was. Refusals: CodeInvalid,
// CodeNotFound.
func (s *Store) DeleteSchedule(ctx context.Context, req db.ScheduleRequest) (db.Schedule, error) {
	if err := db.ValidateScheduleName(req.Name); err != nil {
		return db.Schedule{}, err
	}
	var was db.Schedule
	err := s.updatePlan(ctx, opPlan{keys: []string{scheduleKey(req.Name)}}, func(w *writer) error {
		old, err := lockedSchedule(w, req.Name)
		if err != nil {
			return err
		}
		ev, err := db.DeleteSchedule(old.rec, req)
		if err != nil {
			return err
		}
		b := &pgx.Batch{}
		b.Queue(`DELETE FROM fenceq_schedule_ticks WHERE schedule = $1`, req.Name)
		b.Queue(`DELETE FROM fenceq_schedules WHERE name = $1`, req.Name)
		if err := w.tx.SendBatch(w.ctx, b).Close(); err != nil {
			return err
		}
		w.audit(ev)
		was = old.rec.Schedule(req.Name, old.lastState)
		return nil
	})
	return was, err
}

// SetSchedulePaused pauses or resumes a schedule (db.SetSchedulePaused);
// asking for what already is changes nothing. Refusals: CodeInvalid,
// CodeNotFound.
func (s *Store) SetSchedulePaused(ctx context.Context, req db.SchedulePauseRequest) (db.Schedule, error) {
	if err := db.ValidateScheduleName(req.Name); err != nil {
		return db.Schedule{}, err
	}
	var out db.Schedule
	err := s.updatePlan(ctx, opPlan{keys: []string{scheduleKey(req.Name)}}, func(w *writer) error {
		old, err := lockedSchedule(w, req.Name)
		if err != nil {
			return err
		}
		rec, changed, ev, err := db.SetSchedulePaused(old.rec, req, w.now)
		if err != nil {
			return err
		}
		if changed {
			if err := writeSchedule(w, req.Name, &rec); err != nil {
				return err
			}
			w.audit(ev)
		}
		out = rec.Schedule(req.Name, old.lastState)
		return nil
	})
	return out, err
}

// TriggerSchedule enqueues one job of the schedule now
// (db.TriggerSchedule), its scheduled_for the store's now, without moving
// the next tick; paused or not, whatever the overlap policy. Refusals:
// CodeInvalid, CodeNotFound.
func (s *Store) TriggerSchedule(ctx context.Context, req db.ScheduleRequest) (db.Job, error) {
	if err := db.ValidateScheduleName(req.Name); err != nil {
		return db.Job{}, err
	}
	var job db.Job
	err := s.updatePlan(ctx, opPlan{keys: []string{scheduleKey(req.Name)}, inserts: 1}, func(w *writer) error {
		old, err := lockedSchedule(w, req.Name)
		if err != nil {
			return err
		}
		sj, err := db.TriggerSchedule(old.rec, req, w.now)
		if err != nil {
			return err
		}
		id, err := w.newID()
		if err != nil {
			return err
		}
		rec, err := enqueueScheduled(w, id, req.Name, sj)
		if err != nil {
			return err
		}
		next := db.Triggered(old.rec, id, w.now)
		if err := writeSchedule(w, req.Name, &next); err != nil {
			return err
		}
		w.audit(db.TriggerEvent(req, id, w.now))
		job = rec.Job()
		return nil
	})
	return job, err
}

// FireSchedules decides up to limit due schedules at the database's clock
// (the test clock in tests), the earliest next fire time first. A pass
// that finds none due (the common case) is one read outside the replica's
// commit stream. Otherwise one mutation of the replica's batch decides
// them: it tries each due schedule's advisory lock and skips the ones
// another replica holds, reads the won rows locked with their last jobs'
// states, plans each (db.FireSchedule), inserts the ticks' records ON
// CONFLICT DO NOTHING — a tick whose record exists was decided before and
// makes no job —, enqueues the jobs of the ticks it recorded as an enqueue
// does (audit links, counts, long-poll wake-ups), prunes each schedule's
// tick records to the newest db.ScheduleTicksKept and writes each
// schedule's next fire time, counters and last job with its
// "schedule_fire" audit link. It stops before the schedule whose plan
// would carry it past db.MaxFireJobs jobs (the first is always taken):
// the rest stay due for the next call. A due schedule whose spec does not
// compile is skipped, outside the limit, and reported
// (db.FireResult.Broken). Refusals: CodeInvalid (the limit).
func (s *Store) FireSchedules(ctx context.Context, limit int) (db.FireResult, error) {
	if err := db.ValidateFireLimit(limit); err != nil {
		return db.FireResult{}, err
	}
	var now int64
	var first *int64
	if err := s.pool.QueryRow(ctx, `SELECT `+nowSQL+`, (SELECT min(next_fire) FROM fenceq_schedules WHERE next_fire IS NOT NULL)`,
		s.clockArg()).Scan(&now, &first); err != nil {
		return db.FireResult{}, s.readError(err)
	}
	if first == nil || *first > now {
		var res db.FireResult
		if first != nil {
			res.Next = db.FromUnixNano(*first)
		}
		return res, nil
	}
	var res db.FireResult
	err := s.update(ctx, func(w *writer) (err error) {
		res, err = fireIn(w, limit)
		return err
	})
	return res, err
}

// fireIn is FireSchedules's mutation. A due schedule whose spec does not
// compile is skipped and reported (res.Broken); as it stays due and first
// in next_fire order, it does not count against limit: the due names are
// read again without the ones read so far, while some of them were
// broken, until limit are planned or none is left — at most
// db.MaxSchedules rows in all.
func fireIn(w *writer, limit int) (db.FireResult, error) {
	var res db.FireResult
	now := w.now.UnixNano()
	var plans []*db.FirePlan
	seen, broken := []string{}, []string{} // the rows read (planned or broken); the broken ones (not nil: NULL would match nothing)
	jobs := 0
	for len(plans) < limit {
		left := limit - len(plans)
		// The due schedules, more than left: some may be another replica's.
		rows, err := w.tx.Query(w.ctx, `SELECT name FROM fenceq_schedules WHERE next_fire <= $1 AND name <> ALL($3::text[])
			ORDER BY next_fire, name LIMIT $2`, now, min(2*left, db.MaxSchedules), seen)
		if err != nil {
			return res, err
		}
		names, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return res, err
		}
		if len(names) == 0 {
			break
		}
		keys := make([]int64, len(names))
		for i, n := range names {
			keys[i] = lockKey(scheduleKey(n))
		}
		// The locks are tried in the order of the due names and only
		// until left are won (the LIMIT stops the scan), then the rows
		// are read again under them: one another replica decided
		// meanwhile is no longer due.
		rows, err = w.tx.Query(w.ctx, `WITH won AS (
			  SELECT u.name FROM unnest($1::text[], $2::bigint[]) AS u(name, k) WHERE pg_try_advisory_xact_lock(u.k) LIMIT $3)
			`+scheduleSelect+` WHERE s.name IN (SELECT name FROM won) AND s.next_fire <= $4 ORDER BY s.next_fire, s.name FOR UPDATE OF s`,
			names, keys, left, now)
		if err != nil {
			return res, err
		}
		var due []scannedSchedule
		for rows.Next() {
			sc, err := scanSchedule(rows)
			if err != nil {
				rows.Close()
				return res, err
			}
			due = append(due, sc)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return res, err
		}
		full, found := false, false
		for _, sc := range due {
			p, err := db.FireSchedule(sc.name, sc.rec, db.ScheduleBusy(lastStateIn(w, sc.rec, sc.lastState)), w.now)
			if errors.Is(err, db.ErrScheduleSpec) {
				res.Broken = append(res.Broken, db.BrokenSchedule{Name: sc.name, Err: err})
				seen, broken, found = append(seen, sc.name), append(broken, sc.name), true
				continue
			}
			if err != nil {
				return res, err
			}
			if jobs += len(p.Jobs); jobs > db.MaxFireJobs && len(plans) > 0 {
				full = true
				break // the next call takes it and the rest (db.MaxFireJobs)
			}
			plans, seen = append(plans, p), append(seen, sc.name)
		}
		if full || !found {
			break // nothing broken was in the way: the rest is not due, or another replica's
		}
	}
	var first *int64
	if len(plans) > 0 {
		if err := firePlans(w, plans, broken, &res, &first); err != nil {
			return res, err
		}
	} else if err := w.tx.QueryRow(w.ctx, firstNextSQL, broken).Scan(&first); err != nil {
		return res, err
	}
	if first != nil {
		res.Next = db.FromUnixNano(*first)
	}
	return res, nil
}

// firstNextSQL reads the earliest next fire time of a running schedule
// other than the broken ones ($1), which stay due: a pass skipped them.
const firstNextSQL = `SELECT min(next_fire) FROM fenceq_schedules WHERE next_fire IS NOT NULL AND name <> ALL($1::text[])`

// firePlans writes the passes of plans (of schedules w holds locked):
// the tick records, the jobs of the ticks recorded, the schedules; and
// reads the earliest next fire time after them, of a schedule not broken,
// into first.
func firePlans(w *writer, plans []*db.FirePlan, broken []string, res *db.FireResult, first **int64) error {
	type tick struct {
		name string
		at   int64
	}
	var tickNames []string
	var tickAts []int64
	for _, p := range plans {
		for _, sj := range p.Jobs {
			tickNames, tickAts = append(tickNames, p.Name), append(tickAts, sj.ScheduledFor.UnixNano())
		}
	}
	// The tick records first: a tick whose record exists was decided
	// before (the conflict leaves it out of RETURNING) and makes no job.
	// Each new record takes its job's id from the sequence, in tick order.
	won := map[tick]uint64{}
	if len(tickNames) > 0 {
		rows, err := w.tx.Query(w.ctx, `INSERT INTO fenceq_schedule_ticks (schedule, scheduled_for, job_id)
			SELECT u.name, u.at, nextval('fenceq_job_id') FROM unnest($1::text[], $2::bigint[]) WITH ORDINALITY AS u(name, at, i) ORDER BY u.i
			ON CONFLICT (schedule, scheduled_for) DO NOTHING RETURNING schedule, scheduled_for, job_id`, tickNames, tickAts)
		if err != nil {
			return err
		}
		for rows.Next() {
			var t tick
			var id int64
			if err := rows.Scan(&t.name, &t.at, &id); err != nil {
				rows.Close()
				return err
			}
			won[t] = uint64(id)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
	}
	n := len(plans)
	names, next, lastJob, lastFor, missed, skipped := make([]string, n), make([]*int64, n), make([]int64, n), make([]int64, n), make([]int64, n), make([]int64, n)
	var pruned []string
	for i, p := range plans {
		var ids []uint64
		var fired []db.ScheduledJob
		for _, sj := range p.Jobs {
			id, ok := won[tick{p.Name, sj.ScheduledFor.UnixNano()}]
			if !ok {
				continue // decided already
			}
			if _, err := enqueueScheduled(w, id, p.Name, sj); err != nil {
				return err
			}
			ids, fired = append(ids, id), append(fired, sj)
		}
		if len(ids) > 0 {
			pruned = append(pruned, p.Name)
		}
		rec, ev := p.Done(ids, fired)
		names[i], lastJob[i], lastFor[i], missed[i], skipped[i] = p.Name, int64(rec.LastJob), rec.LastScheduledFor, int64(rec.MissedTicks), int64(rec.SkippedTicks)
		if rec.Next != 0 {
			next[i] = &rec.Next
		}
		w.audit(ev)
		res.Schedules++
		res.Jobs += len(ids)
		res.Dropped += p.Missed + p.Skipped
	}
	b := &pgx.Batch{}
	b.Queue(`UPDATE fenceq_schedules AS s SET next_fire = u.next, last_job = u.last_job, last_scheduled_for = u.last_for,
		missed_ticks = u.missed, skipped_ticks = u.skipped
		FROM unnest($1::text[], $2::bigint[], $3::bigint[], $4::bigint[], $5::bigint[], $6::bigint[]) AS u(name, next, last_job, last_for, missed, skipped)
		WHERE s.name = u.name`, names, next, lastJob, lastFor, missed, skipped)
	if len(pruned) > 0 {
		// The newest db.ScheduleTicksKept tick records of each schedule
		// stay; an older tick can never be attempted again.
		b.Queue(`DELETE FROM fenceq_schedule_ticks AS t USING unnest($1::text[]) AS u(name)
			WHERE t.schedule = u.name AND t.scheduled_for < (SELECT k.scheduled_for FROM fenceq_schedule_ticks AS k
			  WHERE k.schedule = u.name ORDER BY k.scheduled_for DESC OFFSET $2 LIMIT 1)`, pruned, db.ScheduleTicksKept-1)
	}
	b.Queue(firstNextSQL, broken)
	br := w.tx.SendBatch(w.ctx, b)
	var err error
	for i := 0; i < b.Len()-1 && err == nil; i++ {
		_, err = br.Exec()
	}
	if err == nil {
		err = br.QueryRow().Scan(first)
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	return err
}

// checkSchedules checks what the schedules' transactions keep: at most
// db.MaxSchedules, each tick record of a schedule that exists, at most
// db.ScheduleTicksKept of them per schedule. It is part of Check.
func checkSchedules(ctx context.Context, q querier) error {
	var n int
	var orphan, over *string
	err := q.QueryRow(ctx, `SELECT (SELECT count(*) FROM fenceq_schedules),
		(SELECT t.schedule FROM fenceq_schedule_ticks t WHERE NOT EXISTS (SELECT 1 FROM fenceq_schedules s WHERE s.name = t.schedule) LIMIT 1),
		(SELECT schedule FROM fenceq_schedule_ticks GROUP BY schedule HAVING count(*) > $1 LIMIT 1)`,
		db.ScheduleTicksKept).Scan(&n, &orphan, &over)
	switch {
	case err != nil:
		return err
	case n > db.MaxSchedules:
		return fmt.Errorf("db: postgres: %d schedules exist, more than %d", n, db.MaxSchedules)
	case orphan != nil:
		return fmt.Errorf("db: postgres: fenceq_schedule_ticks has ticks of %q, which is no schedule", *orphan)
	case over != nil:
		return fmt.Errorf("db: postgres: schedule %q has more than %d tick records", *over, db.ScheduleTicksKept)
	}
	return nil
}
