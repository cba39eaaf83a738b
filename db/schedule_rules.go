package db

import (
	"errors"
	"fmt"
	"strconv"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/fenceq/fenceq/schedule"
)

// The rules of schedules (issue 28), as pure functions of (record,
// request, now) like the job transitions in rules.go: every engine loads
// the schedule's record, calls one of them, and writes what it returns —
// the record, the jobs, the audit event — in one transaction. Timing
// (cron, zones, DST, catch-up, overlap) is package schedule's; these
// functions turn its results into stored state and its errors into
// refusals (CodeInvalid).

// ScheduleTicksKept is how many tick records (schedule, scheduled_for →
// job) an engine keeps per schedule, the newest. The unique tick record
// decides a tick against another replica's attempt at the same tick; a
// tick older than the newest ones kept can never be attempted again, as a
// schedule's next fire time only moves forward (a replace or a resume
// computes it from now), so older records decide nothing and are pruned.
// It is at least schedule.MaxTicksPerPlan: one pass's ticks stay.
const ScheduleTicksKept = 2 * schedule.MaxTicksPerPlan

// MaxFireJobs bounds the jobs one FireSchedules call enqueues, so that
// its transaction ends well inside a write timeout however many schedules
// catch up at once: a call stops taking schedules before the one whose
// plan would carry it past the bound (it always takes the first), and
// leaves the rest to the next call, which the tick loop makes at once.
const MaxFireJobs = MaxEnqueueBatch

// ScheduleSubject is the audit subject of a schedule's changes and fires
// ("schedule:<name>").
func ScheduleSubject(name string) string { return "schedule:" + name }

// ValidateScheduleName checks a schedule's name: 1 to MaxScheduleNameBytes
// bytes of UTF-8 without control characters and without "/" (a name is
// one segment of a URL path).
func ValidateScheduleName(name string) error {
	switch {
	case name == "":
		return Errorf(CodeInvalid, "schedule name is required")
	case len(name) > MaxScheduleNameBytes:
		return Errorf(CodeInvalid, "schedule name is %d bytes, the limit is %d", len(name), MaxScheduleNameBytes)
	case !utf8.ValidString(name):
		return Errorf(CodeInvalid, "schedule name %q is not valid UTF-8", name)
	}
	for _, r := range name {
		if unicode.IsControl(r) {
			return Errorf(CodeInvalid, "schedule name %q has a control character (%U)", name, r)
		}
		if r == '/' {
			return Errorf(CodeInvalid, "schedule name %q has a \"/\", which cannot be part of a URL path segment", name)
		}
	}
	return nil
}

// ScheduleRecord is a schedule as the rules see it and as engines store it:
// the normalized spec, the job template, who made it and when, its pause,
// its next fire time and what it fired last. Times are Unix nanoseconds
// (0: unset), durations nanoseconds. The tags are the bbolt engine's
// stored names, never reused (its golden file pins them); other engines
// ignore them.
type ScheduleRecord struct {
	// The normalized schedule.Spec.
	Cron          string `msgpack:"cr,omitempty"`
	Every         int64  `msgpack:"ev,omitempty"`
	StartAt       int64  `msgpack:"sa,omitempty"`
	Timezone      string `msgpack:"tz"`
	Catchup       string `msgpack:"cu"`
	CatchupWindow int64  `msgpack:"cw,omitempty"`
	Overlap       string `msgpack:"ov"`
	Jitter        int64  `msgpack:"ji,omitempty"`
	// The job template, normalized (queue and max attempts filled in).
	Queue       string `msgpack:"q"`
	Kind        string `msgpack:"k,omitempty"`
	Payload     []byte `msgpack:"p,omitempty"`
	Priority    int64  `msgpack:"pr,omitempty"`
	MaxAttempts uint64 `msgpack:"ma"`

	CreatedAt int64  `msgpack:"ca"`
	UpdatedAt int64  `msgpack:"ua"`
	CreatedBy string `msgpack:"cb,omitempty"`
	PausedAt  int64  `msgpack:"pa,omitempty"` // 0: running
	PausedBy  string `msgpack:"pb,omitempty"`
	// Next is the next tick to decide; 0 while paused (or when the spec
	// never fires again within schedule.Horizon).
	Next int64 `msgpack:"nx,omitempty"`
	// The last job enqueued (a tick's or a trigger's) and its scheduled_for.
	LastJob          uint64 `msgpack:"lj,omitempty"`
	LastScheduledFor int64  `msgpack:"ls,omitempty"`
	MissedTicks      uint64 `msgpack:"mt,omitempty"`
	SkippedTicks     uint64 `msgpack:"st,omitempty"`
}

// Spec is the record's normalized spec.
func (r *ScheduleRecord) Spec() schedule.Spec {
	return schedule.Spec{Cron: r.Cron, Every: time.Duration(r.Every), StartAt: FromUnixNano(r.StartAt),
		Timezone: r.Timezone, Catchup: schedule.Catchup(r.Catchup), CatchupWindow: time.Duration(r.CatchupWindow),
		Overlap: schedule.Overlap(r.Overlap), Jitter: time.Duration(r.Jitter)}
}

// Template is the record's job template.
func (r *ScheduleRecord) Template() ScheduleTemplate {
	return ScheduleTemplate{Queue: r.Queue, Kind: r.Kind, Payload: rawJSON(r.Payload), Priority: r.Priority, MaxAttempts: r.MaxAttempts}
}

// Paused reports whether the schedule is paused.
func (r *ScheduleRecord) Paused() bool { return r.PausedAt != 0 }

// Clone returns a copy that shares no slice.
func (r *ScheduleRecord) Clone() ScheduleRecord {
	c := *r
	c.Payload = append([]byte(nil), r.Payload...)
	if len(c.Payload) == 0 {
		c.Payload = nil
	}
	return c
}

// ErrScheduleSpec is the error of a stored schedule spec that does not
// compile with this build: a zone removed from its zone database, or a
// spec a newer build stored that this build's parser refuses (builds of
// different ages may share one PostgreSQL database).
var ErrScheduleSpec = errors.New("db: schedule spec does not compile")

// Compile compiles the record's spec. A stored spec that no longer
// compiles is a fault of the record, not a refusal: the error wraps
// ErrScheduleSpec.
func (r *ScheduleRecord) Compile() (*schedule.Schedule, error) {
	c, err := schedule.Compile(r.Spec())
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrScheduleSpec, err)
	}
	return c, nil
}

// Schedule is the record of name as callers see it at now, the state of
// its last job being lastJobState ("" when it has none or it is gone).
// NextFires are the next NextFireCount fire times from the stored next
// one (none while paused).
func (r *ScheduleRecord) Schedule(name string, lastJobState State) Schedule {
	s := Schedule{Name: name, Spec: r.Spec(), Job: r.Template(),
		CreatedAt: FromUnixNano(r.CreatedAt), UpdatedAt: FromUnixNano(r.UpdatedAt), CreatedBy: r.CreatedBy,
		Paused: r.Paused(), PausedAt: FromUnixNano(r.PausedAt), PausedBy: r.PausedBy,
		NextFire: FromUnixNano(r.Next), LastJob: r.LastJob, LastScheduledFor: FromUnixNano(r.LastScheduledFor),
		MissedTicks: r.MissedTicks, SkippedTicks: r.SkippedTicks}
	if r.LastJob != 0 {
		s.LastJobState = lastJobState
	}
	if r.Next != 0 {
		if c, err := schedule.Compile(s.Spec); err == nil {
			next := FromUnixNano(r.Next)
			s.NextFires = append([]time.Time{next}, c.NextN(next, NextFireCount-1)...)
		}
	}
	return s
}

// ScheduleBusy reports whether a schedule whose last job is in state is
// busy for overlap: skip — the job exists and is neither completed, dead
// nor cancelled. A job that is gone (swept) is not busy.
func ScheduleBusy(state State) bool {
	switch state {
	case "", StateCompleted, StateDead, StateCancelled:
		return false
	}
	return true
}

// ScheduleNotFound is the refusal for a name without a schedule.
func ScheduleNotFound(name string) error {
	return Errorf(CodeNotFound, "schedule not found: %q", name)
}

// NormalizeSchedule validates req — its name, its spec (schedule's
// Normalize, at now) and its job template (the enqueue rules: queue,
// kind, payload, max attempts) — and fills their defaults. Refusals:
// CodeInvalid, CodeTooLarge (payload).
func (r *Rules) NormalizeSchedule(req *PutScheduleRequest, now time.Time) error {
	if err := ValidateScheduleName(req.Name); err != nil {
		return err
	}
	spec, err := req.Spec.Normalize(now)
	if err != nil {
		return Errorf(CodeInvalid, "%s", err)
	}
	req.Spec = spec
	enq := EnqueueRequest{Queue: req.Job.Queue, Kind: req.Job.Kind, Payload: req.Job.Payload,
		Priority: req.Job.Priority, MaxAttempts: req.Job.MaxAttempts}
	if err := r.NormalizeEnqueue(&enq); err != nil {
		return err
	}
	req.Job.Queue, req.Job.MaxAttempts = enq.Queue, enq.MaxAttempts
	return nil
}

// PutSchedule creates the schedule req.Name (old nil), count schedules
// existing, or replaces old: the record to store, whether it was created,
// and the audit event ("schedule_put"). Its next fire time is computed
// from now — for a replace too, so a replace never catches up — unless it
// is paused: a replace keeps the pause in force, and the counters and last
// job. Refusals: CodeInvalid (name, spec, template), CodeTooLarge
// (MaxSchedules, payload).
func (r *Rules) PutSchedule(old *ScheduleRecord, count int, req PutScheduleRequest, now time.Time) (ScheduleRecord, bool, AuditEvent, error) {
	if err := r.NormalizeSchedule(&req, now); err != nil {
		return ScheduleRecord{}, false, AuditEvent{}, err
	}
	if old == nil && count >= MaxSchedules {
		return ScheduleRecord{}, false, AuditEvent{}, Errorf(CodeTooLarge, "too many schedules: %d exist, the limit is %d; delete one first", count, MaxSchedules)
	}
	c, err := schedule.Compile(req.Spec)
	if err != nil {
		return ScheduleRecord{}, false, AuditEvent{}, Errorf(CodeInvalid, "%s", err)
	}
	sp := req.Spec
	rec := ScheduleRecord{Cron: sp.Cron, Every: int64(sp.Every), StartAt: UnixNano(sp.StartAt), Timezone: sp.Timezone,
		Catchup: string(sp.Catchup), CatchupWindow: int64(sp.CatchupWindow), Overlap: string(sp.Overlap), Jitter: int64(sp.Jitter),
		Queue: req.Job.Queue, Kind: req.Job.Kind, Payload: append([]byte(nil), req.Job.Payload...), Priority: req.Job.Priority,
		MaxAttempts: req.Job.MaxAttempts, CreatedAt: now.UnixNano(), UpdatedAt: now.UnixNano(), CreatedBy: req.Principal}
	if len(rec.Payload) == 0 {
		rec.Payload = nil
	}
	if old != nil {
		rec.CreatedAt, rec.CreatedBy = old.CreatedAt, old.CreatedBy
		rec.PausedAt, rec.PausedBy = old.PausedAt, old.PausedBy
		rec.LastJob, rec.LastScheduledFor = old.LastJob, old.LastScheduledFor
		rec.MissedTicks, rec.SkippedTicks = old.MissedTicks, old.SkippedTicks
	}
	if !rec.Paused() {
		rec.Next = UnixNano(c.Next(now))
	}
	details := map[string]string{"queue": rec.Queue, "timezone": rec.Timezone, "catchup": rec.Catchup, "overlap": rec.Overlap,
		"created": strconv.FormatBool(old == nil)}
	if rec.Cron != "" {
		details["cron"] = rec.Cron
	} else {
		details["every"] = sp.Every.String()
	}
	return rec, old == nil, AuditEvent{Principal: req.Principal, Action: "schedule_put", Subject: ScheduleSubject(req.Name), Details: details}, nil
}

// DeleteSchedule is the deletion of old (nil: there is none, CodeNotFound):
// its audit event ("schedule_delete"). The schedule's jobs stay.
func DeleteSchedule(old *ScheduleRecord, req ScheduleRequest) (AuditEvent, error) {
	if err := ValidateScheduleName(req.Name); err != nil {
		return AuditEvent{}, err
	}
	if old == nil {
		return AuditEvent{}, ScheduleNotFound(req.Name)
	}
	return AuditEvent{Principal: req.Principal, Action: "schedule_delete", Subject: ScheduleSubject(req.Name),
		Details: map[string]string{"last_job": strconv.FormatUint(old.LastJob, 10)}}, nil
}

// SetSchedulePaused pauses or resumes old (nil: CodeNotFound): the record
// to store and, when it changes, the audit event ("schedule_pause",
// "schedule_resume"). A paused schedule has no next fire time, so its
// ticks are dropped; a resume computes the next one from now, so nothing
// missed while paused fires. Asking for what already is changes nothing
// (changed false) and is not a refusal.
func SetSchedulePaused(old *ScheduleRecord, req SchedulePauseRequest, now time.Time) (rec ScheduleRecord, changed bool, ev AuditEvent, err error) {
	if err := ValidateScheduleName(req.Name); err != nil {
		return ScheduleRecord{}, false, AuditEvent{}, err
	}
	if old == nil {
		return ScheduleRecord{}, false, AuditEvent{}, ScheduleNotFound(req.Name)
	}
	rec = old.Clone()
	if req.Paused == old.Paused() {
		return rec, false, AuditEvent{}, nil
	}
	rec.UpdatedAt = now.UnixNano()
	if req.Paused {
		rec.PausedAt, rec.PausedBy, rec.Next = now.UnixNano(), req.Principal, 0
		return rec, true, AuditEvent{Principal: req.Principal, Action: "schedule_pause", Subject: ScheduleSubject(req.Name)}, nil
	}
	c, err := old.Compile()
	if err != nil {
		// The caller cannot resume it as it is stored: a refusal that
		// says so, not a fault.
		return ScheduleRecord{}, false, AuditEvent{}, Errorf(CodeConflict,
			"schedule %q cannot be resumed: %v; put it again (PUT /v1/schedules/%s) with a spec this build accepts", req.Name, err, req.Name)
	}
	rec.PausedAt, rec.PausedBy, rec.Next = 0, "", UnixNano(c.Next(now))
	return rec, true, AuditEvent{Principal: req.Principal, Action: "schedule_resume", Subject: ScheduleSubject(req.Name),
		Details: map[string]string{"paused_at": FromUnixNano(old.PausedAt).Format(time.RFC3339Nano), "paused_by": old.PausedBy}}, nil
}

// ScheduledJob is one job a schedule enqueues: the enqueue request made
// from its template, and the job's schedule fields.
type ScheduledJob struct {
	Request      EnqueueRequest
	ScheduledFor time.Time
	Backfilled   bool
}

// EnqueueScheduled is the new job id of a schedule's tick or trigger, as
// Enqueue makes it, carrying the schedule's name, the tick and whether it
// was backfilled; its audit event is the enqueue's, naming the schedule.
func EnqueueScheduled(id uint64, name string, sj ScheduledJob, now time.Time) (JobRecord, AuditEvent) {
	rec, ev := Enqueue(id, sj.Request, now)
	rec.Schedule, rec.ScheduledFor, rec.Backfilled = name, sj.ScheduledFor.UnixNano(), sj.Backfilled
	ev.Details["schedule"] = name
	ev.Details["scheduled_for"] = sj.ScheduledFor.UTC().Format(time.RFC3339Nano)
	if sj.Backfilled {
		ev.Details["backfilled"] = "true"
	}
	return rec, ev
}

func (r *ScheduleRecord) job(principal string, at, runAt time.Time, backfilled bool) ScheduledJob {
	return ScheduledJob{Request: EnqueueRequest{Principal: principal, Queue: r.Queue, Kind: r.Kind, Payload: rawJSON(r.Payload),
		Priority: r.Priority, MaxAttempts: r.MaxAttempts, RunAt: runAt}, ScheduledFor: at.UTC(), Backfilled: backfilled}
}

// TriggerSchedule is a trigger of old (nil: CodeNotFound): one job now,
// its scheduled_for now, whatever the overlap policy says and whether or
// not the schedule is paused; the next fire time does not move. The
// engine enqueues the job (EnqueueScheduled) and then calls Fired.
func TriggerSchedule(old *ScheduleRecord, req ScheduleRequest, now time.Time) (ScheduledJob, error) {
	if err := ValidateScheduleName(req.Name); err != nil {
		return ScheduledJob{}, err
	}
	if old == nil {
		return ScheduledJob{}, ScheduleNotFound(req.Name)
	}
	return old.job(req.Principal, now, now, false), nil
}

// TriggerEvent is the audit event of a trigger that enqueued job id.
func TriggerEvent(req ScheduleRequest, id uint64, now time.Time) AuditEvent {
	return AuditEvent{Principal: req.Principal, Action: "schedule_trigger", Subject: ScheduleSubject(req.Name),
		Details: map[string]string{"job": strconv.FormatUint(id, 10), "scheduled_for": now.UTC().Format(time.RFC3339Nano)}}
}

// Triggered is old after a trigger enqueued job id at now: its last job.
func Triggered(old *ScheduleRecord, id uint64, now time.Time) ScheduleRecord {
	rec := old.Clone()
	rec.LastJob, rec.LastScheduledFor = id, now.UnixNano()
	return rec
}

// ValidateFireLimit checks FireSchedules's limit: 1 to MaxSchedules.
func ValidateFireLimit(limit int) error {
	if limit < 1 || limit > MaxSchedules {
		return Errorf(CodeInvalid, "fire limit must be between 1 and %d", MaxSchedules)
	}
	return nil
}

// Due reports whether the schedule has a tick to decide at now.
func (r *ScheduleRecord) Due(now time.Time) bool { return r.Next != 0 && r.Next <= now.UnixNano() }

// FirePlan is what one pass does to one due schedule (FireSchedule):
// the jobs to enqueue, oldest tick first, each under its unique tick
// record, and the ticks dropped. The engine enqueues the jobs
// (EnqueueScheduled) — leaving out any tick whose record already exists:
// another replica decided it — and writes Done's record and event.
type FirePlan struct {
	Name    string
	Jobs    []ScheduledJob
	Missed  int
	Skipped int
	old     ScheduleRecord
	next    int64
}

// FireSchedule plans the pass at now of the schedule name, whose record is
// old and whose last job is busy or not (ScheduleBusy): schedule's Plan
// from the stored next fire time. A schedule that is not due (paused, or
// its next tick later than now) plans nothing and Done leaves it as it is.
// The jobs are enqueued as the system's (principal "system").
func FireSchedule(name string, old *ScheduleRecord, busy bool, now time.Time) (*FirePlan, error) {
	p := &FirePlan{Name: name, old: old.Clone(), next: old.Next}
	if !old.Due(now) {
		return p, nil
	}
	c, err := old.Compile()
	if err != nil {
		return nil, err
	}
	plan := c.Plan(name, FromUnixNano(old.Next), now, busy)
	for _, t := range plan.Fire {
		p.Jobs = append(p.Jobs, old.job("system", t.At, t.RunAt, t.Backfilled))
	}
	p.Missed, p.Skipped = plan.Missed, plan.Skipped
	p.next = UnixNano(plan.Next)
	if p.next != 0 && p.next <= old.Next {
		// A plan must move the schedule forward, or a pass would decide
		// the same tick for ever.
		return nil, fmt.Errorf("db: schedule %q: the plan at %v keeps the next tick at %v", name, now, plan.Next)
	}
	return p, nil
}

// Changed reports whether the pass changes the schedule.
func (p *FirePlan) Changed() bool { return p.next != p.old.Next }

// Done is the record after the pass enqueued ids (the jobs of p.Jobs that
// it enqueued, in order; a tick another replica decided is left out) and
// the pass's audit event ("schedule_fire").
func (p *FirePlan) Done(ids []uint64, fired []ScheduledJob) (ScheduleRecord, AuditEvent) {
	rec := p.old.Clone()
	rec.Next = p.next
	rec.MissedTicks += uint64(p.Missed)
	rec.SkippedTicks += uint64(p.Skipped)
	details := map[string]string{"jobs": strconv.Itoa(len(ids)), "missed": strconv.Itoa(p.Missed), "skipped": strconv.Itoa(p.Skipped)}
	if p.next != 0 {
		details["next"] = FromUnixNano(p.next).Format(time.RFC3339Nano)
	}
	if len(ids) > 0 {
		last := fired[len(fired)-1]
		rec.LastJob, rec.LastScheduledFor = ids[len(ids)-1], last.ScheduledFor.UnixNano()
		details["first_job"] = strconv.FormatUint(ids[0], 10)
		details["last_job"] = strconv.FormatUint(ids[len(ids)-1], 10)
		details["first_tick"] = fired[0].ScheduledFor.Format(time.RFC3339Nano)
		details["last_tick"] = last.ScheduledFor.Format(time.RFC3339Nano)
	}
	return rec, AuditEvent{Principal: "system", Action: "schedule_fire", Subject: ScheduleSubject(p.Name), Details: details}
}

// ScheduleTick is one tick record: the tick and the job it enqueued.
type ScheduleTick struct {
	ScheduledFor int64 // Unix nanoseconds
	Job          uint64
}

// ScheduleExport is a schedule's stored state as "fenceq copy" moves it
// from one engine to another: its name, its record and its tick records
// (oldest first).
type ScheduleExport struct {
	Name   string
	Record ScheduleRecord
	Ticks  []ScheduleTick
}
