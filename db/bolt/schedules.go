package bolt

// Schedules (issue 28). A schedule is a record in bucketSchedules, keyed by
// its name; a running one also has an entry in idx_schedule_next under its
// next fire time, so that a pass of FireSchedules reads only the due
// schedules, whatever their number. Each tick fired leaves a tick record
// (name, scheduled_for → job id) in schedule_ticks: a tick whose record
// exists is never enqueued again. One process owns a bbolt file and every
// decision runs in the commit loop, so a tick cannot race another here;
// the record is the same rule as PostgreSQL's unique key, and the newest
// db.ScheduleTicksKept of each schedule are kept (the rest are pruned at
// each pass: a schedule's next fire time only moves forward, so an older
// tick can never be attempted again). All the rules are package db's
// (schedule_rules.go); this file loads and writes.

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/fenceq/fenceq/db"
	"github.com/fenceq/fenceq/internal/msgrec"
	bbolt "go.etcd.io/bbolt"
)

const scheduleRecordVersion = 1

// scheduleRecord is the stored form of a schedule: a version and the
// rules' record, whose tags are the short stored names (never reused).
type scheduleRecord struct {
	V uint8 `msgpack:"v"`
	db.ScheduleRecord
}

func decodeSchedule(name string, b []byte) (*db.ScheduleRecord, error) {
	var r scheduleRecord
	if err := msgrec.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("%w: schedule %q: %v", db.ErrCorrupt, name, err)
	}
	if r.V == 0 || r.V > scheduleRecordVersion || r.Queue == "" || r.CreatedAt == 0 {
		return nil, fmt.Errorf("%w: schedule %q: version %d, queue %q, created at %d", db.ErrCorrupt, name, r.V, r.Queue, r.CreatedAt)
	}
	return &r.ScheduleRecord, nil
}

// scheduleNextKey is the idx_schedule_next key of a schedule: its next
// fire time, then its name.
func scheduleNextKey(name string, next int64) []byte {
	k := make([]byte, 0, 8+len(name))
	k = binary.BigEndian.AppendUint64(k, sortableTime(next))
	return append(k, name...)
}

// scheduleTickPrefix starts the schedule_ticks keys of name (a name has
// no NUL: control characters are refused).
func scheduleTickPrefix(name string) []byte { return append([]byte(name), 0) }

func scheduleTickKey(name string, at int64) []byte {
	return binary.BigEndian.AppendUint64(scheduleTickPrefix(name), sortableTime(at))
}

// getSchedule returns the record of name, or nil when there is none. A
// file of an older schema opened read-only has no bucket: no schedule.
func getSchedule(tx *bbolt.Tx, name string) (*db.ScheduleRecord, error) {
	b := tx.Bucket(bucketSchedules)
	if b == nil {
		return nil, nil
	}
	v := b.Get([]byte(name))
	if v == nil {
		return nil, nil
	}
	return decodeSchedule(name, v)
}

// lastJobState is the state of the schedule's last job, "" when it has
// none or the job is gone.
func lastJobState(tx *bbolt.Tx, rec *db.ScheduleRecord) (db.State, error) {
	if rec.LastJob == 0 {
		return "", nil
	}
	j, err := getJob(tx, rec.LastJob)
	if db.ErrorCode(err) == db.CodeNotFound {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	return j.State, nil
}

func scheduleOf(tx *bbolt.Tx, name string, rec *db.ScheduleRecord) (db.Schedule, error) {
	st, err := lastJobState(tx, rec)
	if err != nil {
		return db.Schedule{}, err
	}
	return rec.Schedule(name, st), nil
}

// putSchedule writes the record of name in place of old (nil: new) and
// moves its next-fire index entry. It is the only place that writes
// schedule records.
func (w *writer) putSchedule(name string, old *db.ScheduleRecord, rec db.ScheduleRecord) error {
	idx := w.tx.Bucket(bucketScheduleNext)
	if old != nil && old.Next != 0 && old.Next != rec.Next {
		if err := idx.Delete(scheduleNextKey(name, old.Next)); err != nil {
			return err
		}
	}
	if rec.Next != 0 {
		if err := idx.Put(scheduleNextKey(name, rec.Next), nil); err != nil {
			return err
		}
	}
	v, err := encodeRecord(&scheduleRecord{V: scheduleRecordVersion, ScheduleRecord: rec})
	if err != nil {
		return err
	}
	return w.tx.Bucket(bucketSchedules).Put([]byte(name), v)
}

// deleteSchedule removes the record of name, its index entry and its tick
// records.
func (w *writer) deleteSchedule(name string, old *db.ScheduleRecord) error {
	if old.Next != 0 {
		if err := w.tx.Bucket(bucketScheduleNext).Delete(scheduleNextKey(name, old.Next)); err != nil {
			return err
		}
	}
	ticks := w.tx.Bucket(bucketScheduleTicks)
	prefix := scheduleTickPrefix(name)
	var keys [][]byte
	c := ticks.Cursor()
	for k, _ := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, _ = c.Next() {
		keys = append(keys, bytes.Clone(k))
	}
	for _, k := range keys {
		if err := ticks.Delete(k); err != nil {
			return err
		}
	}
	return w.tx.Bucket(bucketSchedules).Delete([]byte(name))
}

// pruneTicks removes the tick records of name beyond the newest
// db.ScheduleTicksKept.
func (w *writer) pruneTicks(name string) error {
	ticks := w.tx.Bucket(bucketScheduleTicks)
	prefix := scheduleTickPrefix(name)
	end := append([]byte(name), 1) // just past the prefix: no name has 0x01
	c := ticks.Cursor()
	k, _ := c.Seek(end)
	if k == nil {
		k, _ = c.Last()
	} else {
		k, _ = c.Prev()
	}
	var old [][]byte
	for n := 0; k != nil && bytes.HasPrefix(k, prefix); k, _ = c.Prev() {
		if n++; n > db.ScheduleTicksKept {
			old = append(old, bytes.Clone(k))
		}
	}
	for _, k := range old {
		if err := ticks.Delete(k); err != nil {
			return err
		}
	}
	return nil
}

// enqueueScheduled writes one job of schedule name.
func (w *writer) enqueueScheduled(name string, sj db.ScheduledJob) (*jobRecord, error) {
	id, err := w.tx.Bucket(bucketJobs).NextSequence()
	if err != nil {
		return nil, err
	}
	next, ev := db.EnqueueScheduled(id, name, sj, w.now)
	return w.put(nil, next, ev)
}

// PutSchedule creates or replaces a schedule and audits it, in one
// transaction (db.Rules.PutSchedule). Refusals: CodeInvalid, CodeTooLarge
// (db.MaxSchedules, the payload), ErrClosed.
func (s *Store) PutSchedule(ctx context.Context, req db.PutScheduleRequest) (db.ScheduleResult, error) {
	if err := db.ValidateScheduleName(req.Name); err != nil {
		return db.ScheduleResult{}, err
	}
	op := &putScheduleOp{s: s, req: req}
	if err := s.update(ctx, op); err != nil {
		return db.ScheduleResult{}, err
	}
	return db.ScheduleResult{Schedule: op.rec.Schedule(req.Name, op.lastState), Created: op.created}, nil
}

type putScheduleOp struct {
	s         *Store
	req       db.PutScheduleRequest
	old       *db.ScheduleRecord
	rec       db.ScheduleRecord
	created   bool
	ev        db.AuditEvent
	lastState db.State
}

func (op *putScheduleOp) decide(r reader, now time.Time) error {
	old, err := getSchedule(r.tx, op.req.Name)
	if err != nil {
		return err
	}
	count := 0
	if old == nil {
		// A cursor sees the schedules written earlier in this commit; at
		// most MaxSchedules keys.
		c := r.tx.Bucket(bucketSchedules).Cursor()
		for k, _ := c.First(); k != nil && count < db.MaxSchedules; k, _ = c.Next() {
			count++
		}
	}
	op.old = old
	if op.rec, op.created, op.ev, err = op.s.opts.PutSchedule(old, count, op.req, now); err != nil {
		return err
	}
	op.lastState, err = lastJobState(r.tx, &op.rec)
	return err
}

func (op *putScheduleOp) apply(w *writer, _ int) (bool, error) {
	if err := w.putSchedule(op.req.Name, op.old, op.rec); err != nil {
		return false, err
	}
	return false, w.audit(op.ev)
}

// GetSchedule returns one schedule, or CodeNotFound.
func (s *Store) GetSchedule(ctx context.Context, name string) (db.Schedule, error) {
	if err := db.ValidateScheduleName(name); err != nil {
		return db.Schedule{}, err
	}
	var out db.Schedule
	err := s.view(func(tx *bbolt.Tx) error {
		rec, err := getSchedule(tx, name)
		if err != nil {
			return err
		}
		if rec == nil {
			return db.ScheduleNotFound(name)
		}
		out, err = scheduleOf(tx, name, rec)
		return err
	})
	return out, err
}

// ListSchedules pages through schedules in name order, in one read
// transaction. Refusals: CodeInvalid (a bad limit).
func (s *Store) ListSchedules(ctx context.Context, req db.ListSchedulesRequest) (db.SchedulePage, error) {
	limit, err := db.ListLimit(req.Limit)
	if err != nil {
		return db.SchedulePage{}, err
	}
	page := db.SchedulePage{Schedules: []db.Schedule{}}
	err = s.view(func(tx *bbolt.Tx) error {
		b := tx.Bucket(bucketSchedules)
		if b == nil {
			return nil
		}
		c := b.Cursor()
		k, v := c.Seek([]byte(req.After))
		if k != nil && string(k) == req.After && req.After != "" {
			k, v = c.Next()
		}
		for ; k != nil; k, v = c.Next() {
			if len(page.Schedules) == limit {
				page.Next = page.Schedules[limit-1].Name
				return nil
			}
			rec, err := decodeSchedule(string(k), v)
			if err != nil {
				return err
			}
			sc, err := scheduleOf(tx, string(k), rec)
			if err != nil {
				return err
			}
			page.Schedules = append(page.Schedules, sc)
		}
		return nil
	})
	return page, err
}

// DeleteSchedule removes a schedule, its index entry and its tick records
// (its jobs stay) and audits it. Refusals: CodeInvalid, CodeNotFound.
func (s *Store) DeleteSchedule(ctx context.Context, req db.ScheduleRequest) (db.Schedule, error) {
	if err := db.ValidateScheduleName(req.Name); err != nil {
		return db.Schedule{}, err
	}
	op := &deleteScheduleOp{req: req}
	if err := s.update(ctx, op); err != nil {
		return db.Schedule{}, err
	}
	return op.was, nil
}

type deleteScheduleOp struct {
	req db.ScheduleRequest
	old *db.ScheduleRecord
	was db.Schedule
	ev  db.AuditEvent
}

func (op *deleteScheduleOp) decide(r reader, _ time.Time) error {
	old, err := getSchedule(r.tx, op.req.Name)
	if err != nil {
		return err
	}
	if op.ev, err = db.DeleteSchedule(old, op.req); err != nil {
		return err
	}
	op.old = old
	op.was, err = scheduleOf(r.tx, op.req.Name, old)
	return err
}

func (op *deleteScheduleOp) apply(w *writer, _ int) (bool, error) {
	if err := w.deleteSchedule(op.req.Name, op.old); err != nil {
		return false, err
	}
	return false, w.audit(op.ev)
}

// SetSchedulePaused pauses or resumes a schedule (db.SetSchedulePaused).
// Asking for what already is changes nothing. Refusals: CodeInvalid,
// CodeNotFound.
func (s *Store) SetSchedulePaused(ctx context.Context, req db.SchedulePauseRequest) (db.Schedule, error) {
	if err := db.ValidateScheduleName(req.Name); err != nil {
		return db.Schedule{}, err
	}
	op := &pauseScheduleOp{req: req}
	if err := s.update(ctx, op); err != nil {
		return db.Schedule{}, err
	}
	return op.rec.Schedule(req.Name, op.lastState), nil
}

type pauseScheduleOp struct {
	req       db.SchedulePauseRequest
	old       *db.ScheduleRecord
	rec       db.ScheduleRecord
	changed   bool
	ev        db.AuditEvent
	lastState db.State
}

func (op *pauseScheduleOp) decide(r reader, now time.Time) error {
	old, err := getSchedule(r.tx, op.req.Name)
	if err != nil {
		return err
	}
	if op.rec, op.changed, op.ev, err = db.SetSchedulePaused(old, op.req, now); err != nil {
		return err
	}
	op.old = old
	op.lastState, err = lastJobState(r.tx, old)
	return err
}

func (op *pauseScheduleOp) apply(w *writer, _ int) (bool, error) {
	if !op.changed {
		return false, nil
	}
	if err := w.putSchedule(op.req.Name, op.old, op.rec); err != nil {
		return false, err
	}
	return false, w.audit(op.ev)
}

// TriggerSchedule enqueues one job of the schedule now (db.TriggerSchedule),
// its scheduled_for the store's now, without moving the next tick; paused
// or not, whatever the overlap policy. Refusals: CodeInvalid, CodeNotFound.
func (s *Store) TriggerSchedule(ctx context.Context, req db.ScheduleRequest) (db.Job, error) {
	if err := db.ValidateScheduleName(req.Name); err != nil {
		return db.Job{}, err
	}
	op := &triggerOp{req: req}
	if err := s.update(ctx, op); err != nil {
		return db.Job{}, err
	}
	return op.job.job(), nil
}

type triggerOp struct {
	req db.ScheduleRequest
	old *db.ScheduleRecord
	sj  db.ScheduledJob
	job *jobRecord
}

func (op *triggerOp) decide(r reader, now time.Time) error {
	old, err := getSchedule(r.tx, op.req.Name)
	if err != nil {
		return err
	}
	op.sj, err = db.TriggerSchedule(old, op.req, now)
	op.old = old
	return err
}

func (op *triggerOp) apply(w *writer, _ int) (bool, error) {
	rec, err := w.enqueueScheduled(op.req.Name, op.sj)
	if err != nil {
		return false, err
	}
	op.job = rec
	if err := w.putSchedule(op.req.Name, op.old, db.Triggered(op.old, rec.ID, w.now)); err != nil {
		return false, err
	}
	return false, w.audit(db.TriggerEvent(op.req, rec.ID, w.now))
}

// FireSchedules decides up to limit due schedules at the store's now,
// oldest next fire time first. A pass that finds none due (the common
// case) reads the index's first entry in a read transaction and costs no
// commit; otherwise one commit decides them all, each schedule in its own
// steps (db.FireSchedule): its jobs under their tick records, its next
// fire time, its counters and its "schedule_fire" audit link. A due
// schedule whose spec does not compile is skipped, outside the limit, and
// reported (db.FireResult.Broken).
func (s *Store) FireSchedules(ctx context.Context, limit int) (db.FireResult, error) {
	if err := db.ValidateFireLimit(limit); err != nil {
		return db.FireResult{}, err
	}
	var res db.FireResult
	due := false
	now := s.opts.Now()
	err := s.view(func(tx *bbolt.Tx) error {
		res.Next = firstNext(tx)
		due = !res.Next.IsZero() && !res.Next.After(now)
		return nil
	})
	if err != nil || !due {
		return res, err
	}
	op := &fireOp{limit: limit}
	if err := s.updateItems(ctx, limit, op); err != nil {
		return db.FireResult{}, err
	}
	return op.res, nil
}

// firstNext is the earliest next fire time stored, zero for none, of a
// schedule other than the broken ones (which stay due: a pass skipped
// them).
func firstNext(tx *bbolt.Tx, broken ...db.BrokenSchedule) time.Time {
	b := tx.Bucket(bucketScheduleNext)
	if b == nil {
		return time.Time{}
	}
	c := b.Cursor()
next:
	for k, _ := c.First(); len(k) >= 8; k, _ = c.Next() {
		for _, br := range broken {
			if br.Name == string(k[8:]) {
				continue next
			}
		}
		return db.FromUnixNano(timeFromKey(k, 0))
	}
	return time.Time{}
}

// fireOp: decide reads the due schedules from the index and plans each,
// passing over (and reporting) those whose spec does not compile; apply
// step i writes schedule i's pass.
type fireOp struct {
	limit int
	names []string
	olds  []*db.ScheduleRecord
	plans []*db.FirePlan
	res   db.FireResult
}

func (op *fireOp) decide(r reader, now time.Time) error {
	op.names, op.olds, op.plans, op.res = nil, nil, nil, db.FireResult{}
	jobs := 0
	c := r.tx.Bucket(bucketScheduleNext).Cursor()
	for k, _ := c.First(); k != nil && len(op.names) < op.limit; k, _ = c.Next() {
		if len(k) < 8 || timeFromKey(k, 0) > now.UnixNano() {
			break
		}
		name := string(k[8:])
		old, err := getSchedule(r.tx, name)
		if err != nil {
			return err
		}
		if old == nil || old.Next != timeFromKey(k, 0) {
			return fmt.Errorf("%w: idx_schedule_next entry of %q at %d does not match its record", db.ErrCorrupt, name, timeFromKey(k, 0))
		}
		st, err := lastJobState(r.tx, old)
		if err != nil {
			return err
		}
		p, err := db.FireSchedule(name, old, db.ScheduleBusy(st), now)
		if errors.Is(err, db.ErrScheduleSpec) {
			// It stays due and first in the index; not counting it
			// against the limit lets the pass reach those after it.
			op.res.Broken = append(op.res.Broken, db.BrokenSchedule{Name: name, Err: err})
			continue
		}
		if err != nil {
			return err
		}
		if jobs += len(p.Jobs); jobs > db.MaxFireJobs && len(op.names) > 0 {
			break // the next call takes it (db.MaxFireJobs)
		}
		op.names, op.olds, op.plans = append(op.names, name), append(op.olds, old), append(op.plans, p)
	}
	return nil
}

func (op *fireOp) apply(w *writer, i int) (bool, error) {
	if i < len(op.plans) {
		if err := op.fire(w, i); err != nil {
			return false, err
		}
	}
	if i+1 < len(op.plans) {
		return true, nil
	}
	op.res.Next = firstNext(w.tx, op.res.Broken...)
	return false, nil
}

func (op *fireOp) fire(w *writer, i int) error {
	name, p := op.names[i], op.plans[i]
	ticks := w.tx.Bucket(bucketScheduleTicks)
	var ids []uint64
	var fired []db.ScheduledJob
	for _, sj := range p.Jobs {
		tk := scheduleTickKey(name, sj.ScheduledFor.UnixNano())
		if ticks.Get(tk) != nil {
			continue // decided already
		}
		rec, err := w.enqueueScheduled(name, sj)
		if err != nil {
			return err
		}
		if err := ticks.Put(tk, u64(rec.ID)); err != nil {
			return err
		}
		ids, fired = append(ids, rec.ID), append(fired, sj)
	}
	if len(ids) > 0 {
		if err := w.pruneTicks(name); err != nil {
			return err
		}
	}
	rec, ev := p.Done(ids, fired)
	if err := w.putSchedule(name, op.olds[i], rec); err != nil {
		return err
	}
	op.res.Schedules++
	op.res.Jobs += len(ids)
	op.res.Dropped += p.Missed + p.Skipped
	return w.audit(ev)
}

// checkSchedules verifies that every schedule record decodes under a
// valid name, that idx_schedule_next holds exactly the running schedules'
// next fire times, that no more than db.MaxSchedules exist, and that each
// tick record belongs to a schedule and names a job id.
func checkSchedules(tx *bbolt.Tx) error {
	b := tx.Bucket(bucketSchedules)
	if b == nil {
		return nil
	}
	want := map[string]bool{}
	n := 0
	err := b.ForEach(func(k, v []byte) error {
		n++
		if err := db.ValidateScheduleName(string(k)); err != nil {
			return fmt.Errorf("%w: schedule %q: %v", db.ErrCorrupt, k, err)
		}
		rec, err := decodeSchedule(string(k), v)
		if err != nil {
			return err
		}
		if rec.Next != 0 {
			want[string(scheduleNextKey(string(k), rec.Next))] = true
		}
		return nil
	})
	if err != nil {
		return err
	}
	if n > db.MaxSchedules {
		return fmt.Errorf("db: %d schedules exist, more than %d", n, db.MaxSchedules)
	}
	err = tx.Bucket(bucketScheduleNext).ForEach(func(k, _ []byte) error {
		if !want[string(k)] {
			return fmt.Errorf("db: idx_schedule_next has %x, which no schedule's next fire time is", k)
		}
		delete(want, string(k))
		return nil
	})
	if err != nil {
		return err
	}
	for k := range want {
		return fmt.Errorf("db: idx_schedule_next lacks the entry %x of a running schedule", k)
	}
	return tx.Bucket(bucketScheduleTicks).ForEach(func(k, v []byte) error {
		i := bytes.IndexByte(k, 0)
		if i < 0 || len(k) != i+9 || len(v) != 8 || b.Get(k[:i]) == nil {
			return fmt.Errorf("db: schedule_ticks has %x → %x, not a tick of a schedule and a job id", k, v)
		}
		return nil
	})
}

// ExportSchedules returns up to limit schedules with a name after after,
// in name order, with their tick records, as the rules see them: what
// "fenceq copy" moves to another engine.
func (s *Store) ExportSchedules(ctx context.Context, after string, limit int) ([]db.ScheduleExport, error) {
	var out []db.ScheduleExport
	err := s.view(func(tx *bbolt.Tx) error {
		b := tx.Bucket(bucketSchedules)
		if b == nil {
			return nil
		}
		c := b.Cursor()
		k, v := c.Seek([]byte(after))
		if k != nil && after != "" && string(k) == after {
			k, v = c.Next()
		}
		for ; k != nil && len(out) < limit; k, v = c.Next() {
			rec, err := decodeSchedule(string(k), v)
			if err != nil {
				return err
			}
			e := db.ScheduleExport{Name: string(k), Record: rec.Clone()}
			prefix := scheduleTickPrefix(e.Name)
			tc := tx.Bucket(bucketScheduleTicks).Cursor()
			for tk, tv := tc.Seek(prefix); tk != nil && bytes.HasPrefix(tk, prefix); tk, tv = tc.Next() {
				if len(tk) != len(prefix)+8 || len(tv) != 8 {
					return fmt.Errorf("%w: tick record %x of schedule %q", db.ErrCorrupt, tk, e.Name)
				}
				e.Ticks = append(e.Ticks, db.ScheduleTick{ScheduledFor: timeFromKey(tk, len(prefix)), Job: idFromKey(tv)})
			}
			out = append(out, e)
		}
		return nil
	})
	return out, err
}
