package db

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/fenceq/fenceq/lease"
)

// The state transitions of jobs and named leases, as pure functions of
// (record, request, now): each returns the new record and the audit event
// that describes the change, or a refusal (an *Error), and never changes
// the record it was given. An engine loads the record, calls the
// transition, and writes what it returns: it decides nothing itself.

// JobRecord is a job as the rules see it: the stored fields, times as Unix
// nanoseconds (0 = unset), JSON values as their bytes. Engines store it
// their own way. The tags are the bbolt engine's short stored names, never
// reused (its jobRecord embeds this type; its golden files pin them);
// other engines ignore them.
type JobRecord struct {
	ID             uint64        `msgpack:"id"`
	Queue          string        `msgpack:"q"`
	Kind           string        `msgpack:"k,omitempty"`
	Payload        []byte        `msgpack:"p,omitempty"`
	Priority       int64         `msgpack:"pr,omitempty"`
	State          State         `msgpack:"s"`
	Attempts       uint64        `msgpack:"a"` // the last fencing token issued
	MaxAttempts    uint64        `msgpack:"ma"`
	Budget         uint64        `msgpack:"bu"` // max_attempts given at enqueue; Retry grants it again
	ClaimedBy      string        `msgpack:"cb,omitempty"`
	LeaseExpiresAt int64         `msgpack:"lx,omitempty"`
	RunAt          int64         `msgpack:"ra"`
	CreatedAt      int64         `msgpack:"ca"`
	UpdatedAt      int64         `msgpack:"ua"`
	CompletedAt    int64         `msgpack:"co,omitempty"`
	LastError      string        `msgpack:"le,omitempty"`
	Errors         []ErrorRecord `msgpack:"er,omitempty"`
	Result         []byte        `msgpack:"r,omitempty"`
	Attestation    []byte        `msgpack:"at,omitempty"`
	IdempotencyKey string        `msgpack:"ik,omitempty"`
}

// ErrorRecord is one recorded failure. The tags are the bbolt engine's
// stored names (its records keep this type's reflective encoding).
type ErrorRecord struct {
	Attempt uint64 `msgpack:"a"`
	At      int64  `msgpack:"t"`
	Error   string `msgpack:"e"`
}

// Clone returns a copy that shares no slice a transition appends to.
func (r *JobRecord) Clone() JobRecord {
	c := *r
	c.Errors = append([]ErrorRecord(nil), r.Errors...)
	return c
}

// Job is the record as callers see it; it copies the record's bytes.
func (r *JobRecord) Job() Job {
	j := Job{
		ID: r.ID, Queue: r.Queue, Kind: r.Kind, Payload: rawJSON(r.Payload),
		Priority: r.Priority, State: r.State, Attempts: r.Attempts, MaxAttempts: r.MaxAttempts,
		ClaimedBy: r.ClaimedBy, LeaseExpiresAt: FromUnixNano(r.LeaseExpiresAt),
		RunAt: FromUnixNano(r.RunAt), CreatedAt: FromUnixNano(r.CreatedAt),
		UpdatedAt: FromUnixNano(r.UpdatedAt), CompletedAt: FromUnixNano(r.CompletedAt),
		LastError: r.LastError, Result: rawJSON(r.Result), Attestation: rawJSON(r.Attestation),
		IdempotencyKey: r.IdempotencyKey,
	}
	for _, e := range r.Errors {
		j.Errors = append(j.Errors, JobError{Attempt: e.Attempt, At: FromUnixNano(e.At), Error: e.Error})
	}
	return j
}

func rawJSON(b []byte) json.RawMessage {
	if len(b) == 0 {
		return nil
	}
	return append(json.RawMessage(nil), b...)
}

// ClaimsBefore orders claim candidates: priority desc, then run_at, then id.
func ClaimsBefore(a, b *JobRecord) bool {
	if a.Priority != b.Priority {
		return a.Priority > b.Priority
	}
	if a.RunAt != b.RunAt {
		return a.RunAt < b.RunAt
	}
	return a.ID < b.ID
}

// Enqueue is the new job id of a normalized request (see NormalizeEnqueue):
// available, or scheduled when its run_at is later than now.
func Enqueue(id uint64, req EnqueueRequest, now time.Time) (JobRecord, AuditEvent) {
	runAt := req.RunAt
	if runAt.IsZero() {
		runAt = now.Add(req.Delay)
	}
	rec := JobRecord{
		ID: id, Queue: req.Queue, Kind: req.Kind, Payload: req.Payload,
		Priority: req.Priority, State: StateAvailable, MaxAttempts: req.MaxAttempts, Budget: req.MaxAttempts,
		RunAt: runAt.UnixNano(), CreatedAt: now.UnixNano(), UpdatedAt: now.UnixNano(),
		IdempotencyKey: req.IdempotencyKey,
	}
	if runAt.After(now) {
		rec.State = StateScheduled
	}
	return rec, AuditEvent{Principal: req.Principal, Action: "enqueue", Job: id,
		Details: map[string]string{"queue": rec.Queue, "state": string(rec.State)}}
}

// Promote makes a scheduled job whose run_at has come available.
func Promote(old *JobRecord) JobRecord {
	rec := old.Clone()
	rec.State = StateAvailable
	return rec
}

// Claim claims an eligible job (available, due, or claimed with an expired
// lease and attempts left) for req's holder: attempts + 1 is the new
// fencing token. A job that has issued every token cannot be claimed; that
// is a fault of the job, not a refusal of the request.
func Claim(old *JobRecord, req ClaimRequest, now time.Time) (JobRecord, AuditEvent, error) {
	if old.Attempts >= lease.MaxToken {
		return JobRecord{}, AuditEvent{}, fmt.Errorf("db: job %d has used every fencing token", old.ID)
	}
	rec := old.Clone()
	rec.State = StateClaimed
	rec.Attempts++
	rec.ClaimedBy = lease.Holder(req.Principal, req.Worker)
	rec.LeaseExpiresAt = lease.ExpiresAt(now, req.Lease).UnixNano()
	rec.UpdatedAt = now.UnixNano()
	details := map[string]string{"holder": rec.ClaimedBy}
	if old.State == StateClaimed {
		details["reclaimed_from"] = old.ClaimedBy
	}
	return rec, AuditEvent{Principal: req.Principal, Action: "claim", Job: rec.ID, Token: rec.Attempts, Details: details}, nil
}

// ExpiredReclaimable reports whether a claimed job whose lease expired has
// attempts left (a claim takes it) or must go dead (KillExpired).
func ExpiredReclaimable(rec *JobRecord) bool { return rec.Attempts < rec.MaxAttempts }

// KillExpired sends a claimed job whose lease expired with no attempts left
// to dead.
func KillExpired(old *JobRecord, now time.Time) (JobRecord, AuditEvent) {
	rec := old.Clone()
	rec.State = StateDead
	addError(&rec, now, "lease expired")
	rec.ClaimedBy, rec.LeaseExpiresAt = "", 0
	rec.UpdatedAt = now.UnixNano()
	return rec, AuditEvent{Principal: "system", Action: "dead", Job: rec.ID, Token: rec.Attempts,
		Details: map[string]string{"error": "lease expired", "holder": old.ClaimedBy}}
}

func addError(r *JobRecord, now time.Time, msg string) {
	if len(msg) > MaxErrorBytes {
		msg = msg[:MaxErrorBytes]
	}
	r.LastError = msg
	r.Errors = append(r.Errors, ErrorRecord{Attempt: r.Attempts, At: now.UnixNano(), Error: msg})
	if len(r.Errors) > MaxErrorsKept {
		r.Errors = append([]ErrorRecord(nil), r.Errors[len(r.Errors)-MaxErrorsKept:]...)
	}
}

// CheckClaim applies the fencing rule to a heartbeat, completion or
// failure of rec by f. A caller that does not hold the current claim
// (another holder, a stale token, a job no longer claimed) is one
// condition; code is the operation's: heartbeat and fail answer
// CodeNotFound ("claim not found"), complete CodeConflict.
func CheckClaim(rec *JobRecord, f Fenced, code Code) error {
	var claim lease.Claim
	if rec.State == StateClaimed {
		claim = lease.Claim{Holder: rec.ClaimedBy, Token: rec.Attempts}
	}
	holder := lease.Holder(f.Principal, f.Worker)
	prefix := "claim not found: "
	if code == CodeConflict {
		prefix = "job is not claimed by this worker with this fencing token: "
	}
	switch err := lease.Check(claim, holder, f.FencingToken); {
	case err == nil:
		return nil
	case errors.Is(err, lease.ErrStaleToken):
		return Errorf(code, prefix+"job %d: fencing token %d is not the current claim (%d); the job was claimed again", f.ID, f.FencingToken, rec.Attempts)
	case rec.State != StateClaimed:
		return Errorf(code, prefix+"job %d is %s, not claimed", f.ID, rec.State)
	default:
		return Errorf(code, prefix+"job %d is not claimed by %s", f.ID, holder)
	}
}

// Heartbeat extends the caller's lease to now + d (see ValidateHeartbeat).
// A late heartbeat, after the expiry but before anybody claimed the job
// again, is accepted.
func Heartbeat(old *JobRecord, req HeartbeatRequest, d time.Duration, now time.Time) (JobRecord, AuditEvent, error) {
	if err := CheckClaim(old, req.Fenced, CodeNotFound); err != nil {
		return JobRecord{}, AuditEvent{}, err
	}
	rec := old.Clone()
	rec.LeaseExpiresAt = lease.ExpiresAt(now, d).UnixNano()
	rec.UpdatedAt = now.UnixNano()
	return rec, AuditEvent{Principal: req.Principal, Action: "heartbeat", Job: rec.ID, Token: rec.Attempts,
		Details: map[string]string{"lease_expires_at": FromUnixNano(rec.LeaseExpiresAt).Format(time.RFC3339Nano)}}, nil
}

// Complete marks the caller's claim completed with its result and
// attestation. The fencing check comes before anything else.
func Complete(old *JobRecord, req CompleteRequest, now time.Time) (JobRecord, AuditEvent, error) {
	if err := CheckClaim(old, req.Fenced, CodeConflict); err != nil {
		return JobRecord{}, AuditEvent{}, err
	}
	rec := old.Clone()
	rec.State = StateCompleted
	rec.ClaimedBy, rec.LeaseExpiresAt = "", 0
	rec.CompletedAt, rec.UpdatedAt = now.UnixNano(), now.UnixNano()
	rec.Result, rec.Attestation = req.Result, req.Attestation
	details := map[string]string{"holder": old.ClaimedBy}
	if len(rec.Attestation) > 0 {
		details["attestation_sha256"] = SHA256Hex(rec.Attestation)
	}
	return rec, AuditEvent{Principal: req.Principal, Action: "complete", Job: rec.ID, Token: rec.Attempts, Details: details}, nil
}

// Fail records the caller's failure. With Final, or when the attempts are
// used up, the job goes dead; otherwise it is scheduled again after
// RetryDelay or the backoff (available at once for a delay of 0).
func (r *Rules) Fail(old *JobRecord, req FailRequest, now time.Time) (JobRecord, AuditEvent, error) {
	if err := CheckClaim(old, req.Fenced, CodeNotFound); err != nil {
		return JobRecord{}, AuditEvent{}, err
	}
	rec := old.Clone()
	addError(&rec, now, req.Error)
	rec.ClaimedBy, rec.LeaseExpiresAt = "", 0
	rec.UpdatedAt = now.UnixNano()
	action := "fail"
	if req.Final || rec.Attempts >= rec.MaxAttempts {
		rec.State = StateDead
		action = "dead"
	} else {
		delay := r.Backoff.Delay(rec.Attempts, r.Random())
		if req.RetryDelay != nil {
			delay = *req.RetryDelay
		}
		rec.RunAt = now.Add(delay).UnixNano()
		rec.State = StateScheduled
		if delay == 0 {
			rec.State = StateAvailable
		}
	}
	return rec, AuditEvent{Principal: req.Principal, Action: action, Job: rec.ID, Token: rec.Attempts,
		Details: map[string]string{"holder": old.ClaimedBy, "error": rec.LastError, "state": string(rec.State)}}, nil
}

// Cancel cancels a job that has not finished (available, scheduled,
// claimed) or is dead; completed and cancelled jobs are refused.
func Cancel(old *JobRecord, req JobRequest, now time.Time) (JobRecord, AuditEvent, error) {
	if old.State == StateCompleted || old.State == StateCancelled {
		return JobRecord{}, AuditEvent{}, Errorf(CodeConflict, "job state does not allow this: job %d is %s and cannot be cancelled", req.ID, old.State)
	}
	rec := old.Clone()
	rec.State = StateCancelled
	rec.ClaimedBy, rec.LeaseExpiresAt = "", 0
	rec.UpdatedAt = now.UnixNano()
	return rec, AuditEvent{Principal: req.Principal, Action: "cancel", Job: rec.ID, Token: rec.Attempts,
		Details: map[string]string{"from": string(old.State)}}, nil
}

// Retry makes a dead or cancelled job available now. Attempts keep
// counting (they are the fencing tokens); MaxAttempts is raised so the job
// has its enqueue-time budget again. Other states are refused.
func Retry(old *JobRecord, req JobRequest, now time.Time) (JobRecord, AuditEvent, error) {
	if old.State != StateDead && old.State != StateCancelled {
		return JobRecord{}, AuditEvent{}, Errorf(CodeConflict, "job state does not allow this: job %d is %s; only dead or cancelled jobs can be retried", req.ID, old.State)
	}
	rec := old.Clone()
	rec.State = StateAvailable
	rec.RunAt, rec.UpdatedAt = now.UnixNano(), now.UnixNano()
	budget := max(rec.Budget, 1)
	rec.MaxAttempts = max(rec.MaxAttempts, min(rec.Attempts+budget, lease.MaxToken))
	return rec, AuditEvent{Principal: req.Principal, Action: "retry", Job: rec.ID, Token: rec.Attempts,
		Details: map[string]string{"from": string(old.State), "max_attempts": fmt.Sprint(rec.MaxAttempts)}}, nil
}

// CheckJobToken answers whether token is rec's current claim: the job is
// claimed and its attempts equal token. Like a heartbeat, a claim whose
// lease expired is current until the job is claimed again.
func CheckJobToken(rec *JobRecord, token uint64) error {
	if rec.State != StateClaimed {
		return Errorf(CodeConflict, "fencing token is not current: job %d is %s, not claimed (last token %d)", rec.ID, rec.State, rec.Attempts)
	}
	if rec.Attempts != token {
		return Errorf(CodeConflict, "fencing token is not current: job %d: token %d, the current claim is %d", rec.ID, token, rec.Attempts)
	}
	return nil
}

// JobNotFound is the refusal for an id without a job.
func JobNotFound(id uint64) error { return Errorf(CodeNotFound, "job not found: job %d", id) }

// SweepEvent is the audit event of a sweep that deleted ids (in order).
func SweepEvent(ids []uint64, retention time.Duration) AuditEvent {
	return AuditEvent{Principal: "system", Action: "sweep", Subject: "jobs",
		Details: map[string]string{"deleted": fmt.Sprint(len(ids)), "first_id": fmt.Sprint(ids[0]),
			"last_id": fmt.Sprint(ids[len(ids)-1]), "retention": retention.String()}}
}
