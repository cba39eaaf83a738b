package db

import (
	"context"
	"encoding/json"
	"time"

	"github.com/fenceq/fenceq/schedule"
)

// Limits on schedules.
const (
	// MaxSchedules bounds how many schedules exist; creating one more is
	// refused with CodeTooLarge (as MaxPausedQueues is).
	MaxSchedules = 1000
	// MaxScheduleNameBytes bounds a schedule's name (no control characters).
	MaxScheduleNameBytes = 200
	// NextFireCount is how many next fire times a read answers.
	NextFireCount = 5
)

// ScheduleTemplate is the job a schedule enqueues at each tick.
type ScheduleTemplate struct {
	Queue       string // default "default"
	Kind        string
	Payload     json.RawMessage
	Priority    int64
	MaxAttempts uint64 // 0: DefaultMaxAttempts
}

// PutScheduleRequest creates the schedule Name or replaces it (its next
// tick is then computed from now; a pause stays in force).
type PutScheduleRequest struct {
	Principal string
	Name      string
	Spec      schedule.Spec
	Job       ScheduleTemplate
}

// Schedule is a schedule as callers see it.
type Schedule struct {
	Name      string
	Spec      schedule.Spec // normalized: defaults filled in
	Job       ScheduleTemplate
	CreatedAt time.Time
	UpdatedAt time.Time
	CreatedBy string
	Paused    bool
	PausedAt  time.Time
	PausedBy  string
	// NextFire is the stored next tick (zero while paused); NextFires the
	// next NextFireCount fire times, computed at the read.
	NextFire  time.Time
	NextFires []time.Time
	// The last job the schedule enqueued (0: none yet), its tick and its
	// state at the read ("" when it is gone).
	LastJob          uint64
	LastScheduledFor time.Time
	LastJobState     State
	// Ticks dropped: by the catch-up policy (Missed), by overlap: skip
	// (Skipped), while paused (PausedTicks is not counted: a paused
	// schedule has no next tick).
	MissedTicks  uint64
	SkippedTicks uint64
}

// ScheduleResult is a schedule after PutSchedule; Created is false when it
// replaced one.
type ScheduleResult struct {
	Schedule Schedule
	Created  bool
}

// ScheduleRequest names a schedule for a principal.
type ScheduleRequest struct {
	Principal string
	Name      string
}

// SchedulePauseRequest pauses (Paused true) or resumes a schedule.
type SchedulePauseRequest struct {
	Principal string
	Name      string
	Paused    bool
}

// ListSchedulesRequest pages through schedules in name order, after After.
type ListSchedulesRequest struct {
	After string
	Limit int // 0: DefaultListLimit; at most MaxListLimit
}

// SchedulePage is one page of schedules; Next is the After of the next
// page ("" at the end).
type SchedulePage struct {
	Schedules []Schedule
	Next      string
}

// FireResult is what one FireSchedules pass did.
type FireResult struct {
	Schedules int // schedules whose due ticks the pass decided
	Jobs      int // jobs enqueued
	Dropped   int // ticks dropped (missed and skipped)
	// Next is the earliest stored next fire time of a running schedule
	// after the pass (zero: none), so that the tick loop sleeps until it.
	// The schedules of Broken are left out: they stay due.
	Next time.Time
	// Broken are the due schedules the pass skipped because their stored
	// spec does not compile with this build (ErrScheduleSpec): nothing of
	// them was written — no job, no tick record, no audit link, the next
	// fire time as it was — and every other due schedule was decided as
	// usual. They do not count against the limit, so however many there
	// are, the pass reaches the schedules due after them.
	Broken []BrokenSchedule
}

// BrokenSchedule is a due schedule a pass skipped: its name, and Err, why
// its stored spec does not compile (wrapping ErrScheduleSpec).
type BrokenSchedule struct {
	Name string
	Err  error
}

// Schedules is the schedule half of a Store: periodic jobs.
type Schedules interface {
	// PutSchedule creates or replaces a schedule and audits it.
	// Refusals: CodeInvalid (name, spec, template), CodeTooLarge
	// (MaxSchedules, payload size).
	PutSchedule(ctx context.Context, req PutScheduleRequest) (ScheduleResult, error)
	// GetSchedule returns one schedule, or CodeNotFound.
	GetSchedule(ctx context.Context, name string) (Schedule, error)
	// ListSchedules pages through schedules in name order.
	ListSchedules(ctx context.Context, req ListSchedulesRequest) (SchedulePage, error)
	// DeleteSchedule removes a schedule (its jobs stay) and audits it,
	// returning it as it was; CodeNotFound when there is none.
	DeleteSchedule(ctx context.Context, req ScheduleRequest) (Schedule, error)
	// SetSchedulePaused pauses or resumes a schedule. A paused schedule's
	// ticks are dropped; a resumed one's next tick is computed from now
	// (no catch-up). Asking for what already is changes nothing.
	SetSchedulePaused(ctx context.Context, req SchedulePauseRequest) (Schedule, error)
	// TriggerSchedule enqueues one job now, its scheduled_for the store's
	// now, without moving the next tick.
	TriggerSchedule(ctx context.Context, req ScheduleRequest) (Job, error)
	// FireSchedules decides up to limit due schedules at the store's now
	// (the database's clock on PostgreSQL): for each, in one transaction,
	// the plan of schedule.Plan — its jobs, a unique (schedule,
	// scheduled_for) record per tick, the next fire time and an audit
	// link. Replicas may race: a tick is enqueued once. A call enqueues
	// at most MaxFireJobs jobs (it then decides fewer than limit, and the
	// rest wait for the next call). A due schedule whose stored spec does
	// not compile is skipped and reported in FireResult.Broken, never an
	// error of the call. Refusals: CodeInvalid (limit outside
	// 1..MaxSchedules, ValidateFireLimit).
	FireSchedules(ctx context.Context, limit int) (FireResult, error)
}
