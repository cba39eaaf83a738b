package db

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"regexp"
	"strings"
	"time"

	"github.com/fenceq/fenceq/lease"
)

// Rules are the settings of the queue rules that every engine applies the
// same way: the clock, backoff jitter, lease bounds and size limits. The
// zero value is usable: SetDefaults fills in every field.
type Rules struct {
	// Now is the clock, read once per operation. Default time.Now.
	Now func() time.Time
	// Random returns a number in [0, 1) for backoff jitter. Default math/rand/v2.
	Random func() float64
	// DefaultLease is used when a claim or heartbeat gives none. Default 30s.
	DefaultLease time.Duration
	// MaxLease is the longest lease a caller may ask for. Default 1h.
	MaxLease time.Duration
	// MaxPayloadBytes bounds payloads and results. Default 1 MiB.
	MaxPayloadBytes int
	// MaxAttestationBytes bounds a completion's attestation. Default 64 KiB.
	MaxAttestationBytes int
	// Backoff is the retry wait when a failure gives no delay.
	Backoff lease.Backoff
	// RequireFencing refuses heartbeat, complete and fail without a token.
	RequireFencing bool
}

// SetDefaults fills in the fields left zero.
func (r *Rules) SetDefaults() {
	if r.Now == nil {
		r.Now = time.Now
	}
	if r.Random == nil {
		r.Random = rand.Float64
	}
	if r.DefaultLease <= 0 {
		r.DefaultLease = 30 * time.Second
	}
	if r.MaxLease <= 0 {
		r.MaxLease = time.Hour
	}
	if r.DefaultLease > r.MaxLease {
		r.DefaultLease = r.MaxLease
	}
	if r.MaxPayloadBytes <= 0 {
		r.MaxPayloadBytes = 1 << 20
	}
	if r.MaxAttestationBytes <= 0 {
		r.MaxAttestationBytes = 64 << 10
	}
	if r.Backoff == (lease.Backoff{}) {
		r.Backoff = lease.DefaultBackoff
	}
}

var queueNameRE = regexp.MustCompile(`^[A-Za-z0-9_.:-]{1,128}$`)

// ValidateQueue checks a queue name: [A-Za-z0-9_.:-]{1,128}.
func ValidateQueue(q string) error {
	if !queueNameRE.MatchString(q) {
		return Errorf(CodeInvalid, "queue %q must match [A-Za-z0-9_.:-]{1,128}", q)
	}
	return nil
}

// invalidName turns package lease's name refusal into a refusal whose
// message names the field ("worker is required"), not the package.
func invalidName(err error) error {
	return Errorf(CodeInvalid, "%s", strings.TrimPrefix(err.Error(), lease.ErrInvalidName.Error()+": "))
}

// ListLimit is a listing's page size: 0 asks for DefaultListLimit, anything
// else must be between 1 and MaxListLimit.
func ListLimit(limit int) (int, error) {
	if limit == 0 {
		return DefaultListLimit, nil
	}
	if limit < 0 || limit > MaxListLimit {
		return 0, Errorf(CodeInvalid, "limit must be between 1 and %d", MaxListLimit)
	}
	return limit, nil
}

// NormalizeEnqueue fills in req's defaults and refuses it when a field is
// out of bounds.
func (r *Rules) NormalizeEnqueue(req *EnqueueRequest) error {
	if req.Queue == "" {
		req.Queue = DefaultQueue
	}
	if err := ValidateQueue(req.Queue); err != nil {
		return err
	}
	if len(req.Kind) > maxKindBytes {
		return Errorf(CodeInvalid, "kind is longer than %d bytes", maxKindBytes)
	}
	if len(req.Payload) > r.MaxPayloadBytes {
		return Errorf(CodeTooLarge, "too large: payload is %d bytes, the limit is %d", len(req.Payload), r.MaxPayloadBytes)
	}
	if len(req.Payload) > 0 && !json.Valid(req.Payload) {
		return Errorf(CodeInvalid, "payload is not valid JSON")
	}
	if req.MaxAttempts == 0 {
		req.MaxAttempts = DefaultMaxAttempts
	}
	if req.MaxAttempts > MaxMaxAttempts {
		return Errorf(CodeInvalid, "max_attempts %d is above %d", req.MaxAttempts, MaxMaxAttempts)
	}
	if req.Delay < 0 || req.Delay > MaxDelay {
		return Errorf(CodeInvalid, "delay_ms must be between 0 and %d (%v)", MaxDelay.Milliseconds(), MaxDelay)
	}
	if !req.RunAt.IsZero() && req.Delay != 0 {
		return Errorf(CodeInvalid, "give run_at or delay, not both")
	}
	if !req.RunAt.IsZero() && (req.RunAt.Year() < 1970 || req.RunAt.Year() > 2200) {
		return Errorf(CodeInvalid, "run_at %v is out of range", req.RunAt)
	}
	if len(req.IdempotencyKey) > maxIdemKeyBytes {
		return Errorf(CodeInvalid, "idempotency_key is longer than %d bytes", maxIdemKeyBytes)
	}
	return nil
}

// NormalizeEnqueueBatch copies reqs with their defaults filled in (the
// caller's slice stays as given), or refuses the batch naming the index of
// the first bad request.
func (r *Rules) NormalizeEnqueueBatch(reqs []EnqueueRequest) ([]EnqueueRequest, error) {
	if len(reqs) == 0 {
		return nil, Errorf(CodeInvalid, "no jobs to enqueue")
	}
	if len(reqs) > MaxEnqueueBatch {
		return nil, Errorf(CodeInvalid, "%d jobs in one enqueue; the limit is %d", len(reqs), MaxEnqueueBatch)
	}
	reqs = append([]EnqueueRequest(nil), reqs...)
	for i := range reqs {
		if err := r.NormalizeEnqueue(&reqs[i]); err != nil {
			if len(reqs) > 1 {
				e := err.(*Error)
				return nil, Errorf(e.Code, "jobs[%d]: %s", i, e.Message)
			}
			return nil, err
		}
	}
	return reqs, nil
}

// NormalizeClaim fills in req's defaults (queues deduplicated, lease, max)
// and refuses it when a field is out of bounds.
func (r *Rules) NormalizeClaim(req *ClaimRequest) error {
	if err := lease.ValidatePrincipal(req.Principal); err != nil {
		return invalidName(err)
	}
	if err := lease.ValidateWorker(req.Worker); err != nil {
		return invalidName(err)
	}
	if len(req.Queues) == 0 {
		req.Queues = []string{DefaultQueue}
	}
	if len(req.Queues) > MaxQueuesPerClaim {
		return Errorf(CodeInvalid, "at most %d queues per claim", MaxQueuesPerClaim)
	}
	seen := make(map[string]bool, len(req.Queues))
	queues := req.Queues[:0:0]
	for _, q := range req.Queues {
		if err := ValidateQueue(q); err != nil {
			return err
		}
		if !seen[q] {
			seen[q] = true
			queues = append(queues, q)
		}
	}
	req.Queues = queues
	d, err := r.LeaseDuration(req.Lease)
	if err != nil {
		return err
	}
	req.Lease = d
	if req.Max == 0 {
		req.Max = 1
	}
	if req.Max < 0 || req.Max > MaxClaimBatch {
		return Errorf(CodeInvalid, "max must be between 1 and %d", MaxClaimBatch)
	}
	if req.Wait < 0 || req.Wait > MaxWait {
		return Errorf(CodeInvalid, "wait_ms must be between 0 and %d", MaxWait.Milliseconds())
	}
	return nil
}

// NormalizeClaimNext prepares the claim that follows a completion in the
// same transaction: the completing principal, its worker by default, no wait.
func (r *Rules) NormalizeClaimNext(req CompleteRequest, next *ClaimRequest) error {
	next.Principal = req.Principal
	if next.Worker == "" {
		next.Worker = req.Worker
	}
	if next.Wait != 0 {
		return Errorf(CodeInvalid, "claim_next cannot wait")
	}
	return r.NormalizeClaim(next)
}

// LeaseDuration is the lease a claim or heartbeat asked for: d, or the
// default for 0.
func (r *Rules) LeaseDuration(d time.Duration) (time.Duration, error) {
	if d == 0 {
		return r.DefaultLease, nil
	}
	if d < 0 || d > r.MaxLease {
		return 0, Errorf(CodeInvalid, "lease_ms must be between 1 and %d (%v), or absent for the default", r.MaxLease.Milliseconds(), r.MaxLease)
	}
	return d, nil
}

// ValidateFenced checks the caller of a heartbeat, completion or failure.
func (r *Rules) ValidateFenced(f Fenced) error {
	if err := lease.ValidateToken(f.FencingToken); err != nil {
		return Errorf(CodeInvalid, "fencing_token %d is above 4294967295 and cannot be a claim number", f.FencingToken)
	}
	if r.RequireFencing && f.FencingToken == 0 {
		return Errorf(CodeInvalid, "fencing_token is required by this server")
	}
	if err := lease.ValidateWorker(f.Worker); err != nil {
		return invalidName(err)
	}
	return nil
}

// ValidateHeartbeat checks a heartbeat and returns the lease it asks for.
func (r *Rules) ValidateHeartbeat(req HeartbeatRequest) (time.Duration, error) {
	if err := r.ValidateFenced(req.Fenced); err != nil {
		return 0, err
	}
	return r.LeaseDuration(req.Lease)
}

// ValidateComplete checks a completion: caller, sizes, JSON.
func (r *Rules) ValidateComplete(req CompleteRequest) error {
	if err := r.ValidateFenced(req.Fenced); err != nil {
		return err
	}
	if len(req.Result) > r.MaxPayloadBytes {
		return Errorf(CodeTooLarge, "too large: result is %d bytes, the limit is %d", len(req.Result), r.MaxPayloadBytes)
	}
	if len(req.Attestation) > r.MaxAttestationBytes {
		return Errorf(CodeTooLarge, "too large: attestation is %d bytes, the limit is %d", len(req.Attestation), r.MaxAttestationBytes)
	}
	if len(req.Result) > 0 && !json.Valid(req.Result) {
		return Errorf(CodeInvalid, "result is not valid JSON")
	}
	if len(req.Attestation) > 0 && !json.Valid(req.Attestation) {
		return Errorf(CodeInvalid, "attestation is not valid JSON")
	}
	return nil
}

// ValidateFail checks a failure report.
func (r *Rules) ValidateFail(req FailRequest) error {
	if err := r.ValidateFenced(req.Fenced); err != nil {
		return err
	}
	if req.RetryDelay != nil && (*req.RetryDelay < 0 || *req.RetryDelay > MaxDelay) {
		return Errorf(CodeInvalid, "retry_delay_ms must be between 0 and %d (%v)", MaxDelay.Milliseconds(), MaxDelay)
	}
	return nil
}

// ValidateList checks a listing and fills in its limit.
func ValidateList(req *ListRequest) error {
	if req.Queue != "" {
		if err := ValidateQueue(req.Queue); err != nil {
			return err
		}
	}
	if req.State != "" && !ValidState(req.State) {
		return Errorf(CodeInvalid, "state %q is not one of available, scheduled, claimed, completed, dead, cancelled", req.State)
	}
	var err error
	req.Limit, err = ListLimit(req.Limit)
	return err
}

// ValidateStateList checks a state listing and fills in its limit.
func ValidateStateList(req *StateListRequest) error {
	switch req.State {
	case StateClaimed, StateScheduled, StateDead:
	default:
		return Errorf(CodeInvalid, "state %q cannot be listed in state order; list claimed, scheduled or dead jobs, or page through jobs by id", req.State)
	}
	if req.Retry > RetryNone || (req.Retry != RetryAny && req.State != StateScheduled) {
		return Errorf(CodeInvalid, "retry filter %d applies to scheduled jobs only", req.Retry)
	}
	if req.Queue != "" {
		if err := ValidateQueue(req.Queue); err != nil {
			return err
		}
	}
	var err error
	req.Limit, err = ListLimit(req.Limit)
	return err
}

// ValidateLeaseName checks a lease name.
func ValidateLeaseName(name string) error {
	if err := lease.ValidateName(name); err != nil {
		return invalidName(err)
	}
	return nil
}

// ValidateLeaseHolder checks a lease holder's label.
func ValidateLeaseHolder(label string) error {
	if err := lease.ValidateHolder(label); err != nil {
		return invalidName(err)
	}
	return nil
}

// ValidateLeaseToken checks a token that renew, release and check need.
func ValidateLeaseToken(token uint64) error {
	if token == 0 {
		return Errorf(CodeInvalid, "fencing_token is required")
	}
	if lease.ValidateToken(token) != nil {
		return Errorf(CodeInvalid, "fencing_token %d is above 4294967295 and cannot be a token", token)
	}
	return nil
}

// LeaseTTL is the TTL an acquire or renew asked for: d, or the default for 0.
func (r *Rules) LeaseTTL(d time.Duration) (time.Duration, error) {
	if d == 0 {
		return r.DefaultLease, nil
	}
	if d < time.Millisecond || d > r.MaxLease {
		return 0, Errorf(CodeInvalid, "ttl must be between 1ms and %v", r.MaxLease)
	}
	return d, nil
}

// ValidateAcquire checks an acquire and returns its holder and TTL.
func (r *Rules) ValidateAcquire(req AcquireLeaseRequest) (holder string, ttl time.Duration, err error) {
	if err := ValidateLeaseName(req.Name); err != nil {
		return "", 0, err
	}
	if err := ValidateLeaseHolder(req.Holder); err != nil {
		return "", 0, err
	}
	if ttl, err = r.LeaseTTL(req.TTL); err != nil {
		return "", 0, err
	}
	if req.Wait < 0 || req.Wait > MaxLeaseWait {
		return "", 0, Errorf(CodeInvalid, "wait must be between 0 and %v", MaxLeaseWait)
	}
	return lease.Holder(req.Principal, req.Holder), ttl, nil
}

// ValidateRenew checks a renew and returns its holder and TTL.
func (r *Rules) ValidateRenew(req RenewLeaseRequest) (holder string, ttl time.Duration, err error) {
	if err := ValidateLeaseName(req.Name); err != nil {
		return "", 0, err
	}
	if err := ValidateLeaseHolder(req.Holder); err != nil {
		return "", 0, err
	}
	if err := ValidateLeaseToken(req.FencingToken); err != nil {
		return "", 0, err
	}
	if ttl, err = r.LeaseTTL(req.TTL); err != nil {
		return "", 0, err
	}
	return lease.Holder(req.Principal, req.Holder), ttl, nil
}

// ValidateRelease checks a release and returns its holder.
func (r *Rules) ValidateRelease(req ReleaseLeaseRequest) (holder string, err error) {
	if err := ValidateLeaseName(req.Name); err != nil {
		return "", err
	}
	if err := ValidateLeaseHolder(req.Holder); err != nil {
		return "", err
	}
	if err := ValidateLeaseToken(req.FencingToken); err != nil {
		return "", err
	}
	return lease.Holder(req.Principal, req.Holder), nil
}

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
	// Schedule names the schedule that enqueued the job, ScheduledFor its
	// tick, Backfilled whether the catch-up policy fired it late (schema
	// version 7 of the bbolt engine).
	Schedule     string `msgpack:"sc,omitempty"`
	ScheduledFor int64  `msgpack:"sf,omitempty"`
	Backfilled   bool   `msgpack:"bf,omitempty"`
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
		Schedule:       r.Schedule, ScheduledFor: FromUnixNano(r.ScheduledFor), Backfilled: r.Backfilled,
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
// available, or scheduled when its run_at is later than now. A run_at in
// the past means now.
func Enqueue(id uint64, req EnqueueRequest, now time.Time) (JobRecord, AuditEvent) {
	runAt := req.RunAt
	if runAt.IsZero() {
		runAt = now.Add(req.Delay)
	}
	if runAt.Before(now) {
		runAt = now // a run_at in the past means now: available at once, in enqueue order
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
		// Cut on a rune boundary: a cut through a character would leave
		// the stored error and its audit record invalid UTF-8.
		msg = strings.ToValidUTF8(msg[:MaxErrorBytes], "")
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
