package db

import (
	"encoding/json"
	"time"
)

// State is a job's place in its life cycle.
type State string

// Job states. A job is created available or scheduled, is claimed, and ends
// completed, dead or cancelled; dead and cancelled jobs can be retried.
const (
	StateAvailable State = "available"
	StateScheduled State = "scheduled"
	StateClaimed   State = "claimed"
	StateCompleted State = "completed"
	StateDead      State = "dead"
	StateCancelled State = "cancelled"
)

// States lists every state in display order.
var States = []State{StateAvailable, StateScheduled, StateClaimed, StateCompleted, StateDead, StateCancelled}

// ValidState reports whether s is one of States.
func ValidState(s State) bool {
	for _, v := range States {
		if s == v {
			return true
		}
	}
	return false
}

// Job is a job as callers see it. It holds no memory owned by a store.
type Job struct {
	ID             uint64
	Queue          string
	Kind           string
	Payload        json.RawMessage
	Priority       int64
	State          State
	Attempts       uint64
	MaxAttempts    uint64
	ClaimedBy      string
	LeaseExpiresAt time.Time
	RunAt          time.Time
	CreatedAt      time.Time
	UpdatedAt      time.Time
	CompletedAt    time.Time
	LastError      string
	Errors         []JobError
	Result         json.RawMessage
	Attestation    json.RawMessage
	IdempotencyKey string
	// Schedule names the schedule that enqueued the job ("" when a
	// client did), ScheduledFor its tick, Backfilled whether the tick was
	// a missed one fired by the catch-up policy.
	Schedule     string
	ScheduledFor time.Time
	Backfilled   bool
}

// JobError is one recorded failure of a job.
type JobError struct {
	Attempt uint64
	At      time.Time
	Error   string
}

// FencingToken is the token of the job's current claim, or 0 when it is not
// claimed.
func (j Job) FencingToken() uint64 {
	if j.State != StateClaimed {
		return 0
	}
	return j.Attempts
}
