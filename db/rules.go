package db

import (
	"encoding/json"
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
