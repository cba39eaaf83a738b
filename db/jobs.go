package db

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/fenceq/fenceq/lease"
	bolt "go.etcd.io/bbolt"
)

// Limits on request fields. Values outside them are refused with
// ErrInvalidArgument: they are client bugs, not wishes to honour.
const (
	DefaultQueue       = "default"
	DefaultMaxAttempts = 10
	MaxMaxAttempts     = 100_000
	MaxDelay           = 366 * 24 * time.Hour
	MaxQueuesPerClaim  = 32
	MaxClaimBatch      = 1000
	MaxEnqueueBatch    = 1000
	MaxListLimit       = 1000
	DefaultListLimit   = 100
	maxKindBytes       = 128
	maxIdemKeyBytes    = 255
	maxErrorBytes      = 4096
	listScanBudget     = 10_000
)

var queueNameRE = regexp.MustCompile(`^[A-Za-z0-9_.:-]{1,128}$`)

// invalidName turns a lease.ErrInvalidName into an ErrInvalidArgument whose
// message names the field ("worker is required"), not the package.
func invalidName(err error) error {
	return fmt.Errorf("%w: %s", ErrInvalidArgument, strings.TrimPrefix(err.Error(), lease.ErrInvalidName.Error()+": "))
}

// ValidateQueue checks a queue name: [A-Za-z0-9_.:-]{1,128}.
func ValidateQueue(q string) error {
	if !queueNameRE.MatchString(q) {
		return fmt.Errorf("%w: queue %q must match [A-Za-z0-9_.:-]{1,128}", ErrInvalidArgument, q)
	}
	return nil
}

// EnqueueRequest asks for a new job.
type EnqueueRequest struct {
	Principal      string
	Queue          string // default "default"
	Kind           string
	Payload        json.RawMessage // any JSON value; empty means null
	Priority       int64           // higher first
	MaxAttempts    uint64          // 0: DefaultMaxAttempts
	RunAt          time.Time       // earliest claim; zero: now + Delay
	Delay          time.Duration
	IdempotencyKey string // unique per queue
}

// EnqueueResult is an enqueued job; Created is false when an existing job
// with the same idempotency key was returned instead.
type EnqueueResult struct {
	Job     Job
	Created bool
}

// EnqueueJob adds one job. It returns ErrInvalidArgument or ErrTooLarge.
func (s *Store) EnqueueJob(ctx context.Context, req EnqueueRequest) (EnqueueResult, error) {
	res, err := s.EnqueueJobs(ctx, []EnqueueRequest{req})
	if err != nil {
		return EnqueueResult{}, err
	}
	return res[0], nil
}

// EnqueueJobs adds several jobs in one transaction: all of them or, when
// any request is invalid, none. Errors name the index of the bad request.
func (s *Store) EnqueueJobs(ctx context.Context, reqs []EnqueueRequest) ([]EnqueueResult, error) {
	if len(reqs) == 0 {
		return nil, fmt.Errorf("%w: no jobs to enqueue", ErrInvalidArgument)
	}
	if len(reqs) > MaxEnqueueBatch {
		return nil, fmt.Errorf("%w: %d jobs in one enqueue; the limit is %d", ErrInvalidArgument, len(reqs), MaxEnqueueBatch)
	}
	reqs = append([]EnqueueRequest(nil), reqs...) // defaults are filled in; the caller's slice stays as given
	for i := range reqs {
		if err := s.normalizeEnqueue(&reqs[i]); err != nil {
			if len(reqs) > 1 {
				return nil, fmt.Errorf("jobs[%d]: %w", i, err)
			}
			return nil, err
		}
	}
	var results []EnqueueResult
	err := s.updateItems(ctx, len(reqs), func(tx *bolt.Tx) error {
		now := s.opts.Now()
		results = make([]EnqueueResult, 0, len(reqs))
		for _, req := range reqs {
			r, err := s.enqueue(tx, now, req)
			if err != nil {
				return err
			}
			results = append(results, r)
		}
		return nil
	})
	return results, err
}

func (s *Store) normalizeEnqueue(req *EnqueueRequest) error {
	if req.Queue == "" {
		req.Queue = DefaultQueue
	}
	if err := ValidateQueue(req.Queue); err != nil {
		return err
	}
	if len(req.Kind) > maxKindBytes {
		return fmt.Errorf("%w: kind is longer than %d bytes", ErrInvalidArgument, maxKindBytes)
	}
	if len(req.Payload) > s.opts.MaxPayloadBytes {
		return fmt.Errorf("%w: payload is %d bytes, the limit is %d", ErrTooLarge, len(req.Payload), s.opts.MaxPayloadBytes)
	}
	if len(req.Payload) > 0 && !json.Valid(req.Payload) {
		return fmt.Errorf("%w: payload is not valid JSON", ErrInvalidArgument)
	}
	if req.MaxAttempts == 0 {
		req.MaxAttempts = DefaultMaxAttempts
	}
	if req.MaxAttempts > MaxMaxAttempts {
		return fmt.Errorf("%w: max_attempts %d is above %d", ErrInvalidArgument, req.MaxAttempts, MaxMaxAttempts)
	}
	if req.Delay < 0 || req.Delay > MaxDelay {
		return fmt.Errorf("%w: delay_ms must be between 0 and %d (%v)", ErrInvalidArgument, MaxDelay.Milliseconds(), MaxDelay)
	}
	if !req.RunAt.IsZero() && req.Delay != 0 {
		return fmt.Errorf("%w: give run_at or delay, not both", ErrInvalidArgument)
	}
	if !req.RunAt.IsZero() && (req.RunAt.Year() < 1970 || req.RunAt.Year() > 2200) {
		return fmt.Errorf("%w: run_at %v is out of range", ErrInvalidArgument, req.RunAt)
	}
	if len(req.IdempotencyKey) > maxIdemKeyBytes {
		return fmt.Errorf("%w: idempotency_key is longer than %d bytes", ErrInvalidArgument, maxIdemKeyBytes)
	}
	return nil
}

func (s *Store) enqueue(tx *bolt.Tx, now time.Time, req EnqueueRequest) (EnqueueResult, error) {
	var idemKey []byte
	if req.IdempotencyKey != "" {
		idemKey = append(queuePrefix(req.Queue), req.IdempotencyKey...)
		if v := tx.Bucket(bucketIdempotency).Get(idemKey); v != nil {
			rec, err := getIndexedJob(tx, idFromKey(v))
			if err != nil {
				return EnqueueResult{}, err
			}
			return EnqueueResult{Job: rec.job()}, nil
		}
	}
	id, err := tx.Bucket(bucketJobs).NextSequence()
	if err != nil {
		return EnqueueResult{}, err
	}
	runAt := req.RunAt
	if runAt.IsZero() {
		runAt = now.Add(req.Delay)
	}
	if runAt.Before(now) {
		runAt = now // a run_at in the past means now: available at once, in enqueue order
	}
	rec := &jobRecord{
		V: jobRecordVersion, ID: id, Queue: req.Queue, Kind: req.Kind, Payload: req.Payload,
		Priority: req.Priority, State: StateAvailable, MaxAttempts: req.MaxAttempts, Budget: req.MaxAttempts,
		RunAt: runAt.UnixNano(), CreatedAt: now.UnixNano(), UpdatedAt: now.UnixNano(),
		IdempotencyKey: req.IdempotencyKey,
	}
	if runAt.After(now) {
		rec.State = StateScheduled
	}
	if idemKey != nil {
		if err := tx.Bucket(bucketIdempotency).Put(idemKey, u64(id)); err != nil {
			return EnqueueResult{}, err
		}
	}
	// Audited before putJob, which may hand the job to a waiting claim.
	if err := appendAudit(tx, now, auditEntry{Principal: req.Principal, Action: "enqueue", Job: id,
		Details: map[string]string{"queue": rec.Queue, "state": string(rec.State)}}); err != nil {
		return EnqueueResult{}, err
	}
	if err := s.putJob(tx, nil, rec); err != nil {
		return EnqueueResult{}, err
	}
	return EnqueueResult{Job: rec.job(), Created: true}, nil
}

// ClaimRequest asks for up to Max jobs from Queues for Principal's Worker.
type ClaimRequest struct {
	Principal string
	Worker    string
	Queues    []string      // default ["default"]
	Lease     time.Duration // 0: the store's DefaultLease
	Max       int           // 0: 1
	Wait      time.Duration // long-poll up to this long (at most MaxWait) when nothing is claimable
}

// ClaimJobs takes up to req.Max of the best eligible jobs in one
// transaction: available jobs, scheduled jobs whose run_at is due, and
// claimed jobs whose lease has expired (those whose attempts are exhausted
// go dead with "lease expired" instead). Each claimed job's Attempts is its
// fencing token. No eligible job: an empty slice and no error, at once or,
// with Wait, when a job arrived for somebody else or the wait ended. A
// claim that finds nothing costs a read transaction, not a commit.
func (s *Store) ClaimJobs(ctx context.Context, req ClaimRequest) ([]Job, error) {
	if err := s.normalizeClaim(&req); err != nil {
		return nil, err
	}
	if req.Wait > 0 {
		return s.claimWaiting(ctx, req)
	}
	return s.claimNow(ctx, req)
}

func (s *Store) claimNow(ctx context.Context, req ClaimRequest) ([]Job, error) {
	if ok, err := s.claimable(req.Queues); err != nil || !ok {
		return nil, err
	}
	var jobs []Job
	err := s.updateItems(ctx, req.Max, func(tx *bolt.Tx) error {
		jobs = nil
		return s.claimInTx(tx, s.opts.Now(), req, &jobs)
	})
	return jobs, err
}

// claimInTx promotes due scheduled jobs and claims up to req.Max jobs,
// appending them to jobs.
func (s *Store) claimInTx(tx *bolt.Tx, now time.Time, req ClaimRequest, jobs *[]Job) error {
	if err := s.promoteDue(tx, now, 1000); err != nil {
		return err
	}
	for len(*jobs) < req.Max {
		rec, err := s.claimOne(tx, now, req)
		if err != nil || rec == nil {
			return err
		}
		*jobs = append(*jobs, rec.job())
	}
	return nil
}

func (s *Store) normalizeClaim(req *ClaimRequest) error {
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
		return fmt.Errorf("%w: at most %d queues per claim", ErrInvalidArgument, MaxQueuesPerClaim)
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
	d, err := s.leaseDuration(req.Lease)
	if err != nil {
		return err
	}
	req.Lease = d
	if req.Max == 0 {
		req.Max = 1
	}
	if req.Max < 0 || req.Max > MaxClaimBatch {
		return fmt.Errorf("%w: max must be between 1 and %d", ErrInvalidArgument, MaxClaimBatch)
	}
	if req.Wait < 0 || req.Wait > MaxWait {
		return fmt.Errorf("%w: wait_ms must be between 0 and %d", ErrInvalidArgument, MaxWait.Milliseconds())
	}
	return nil
}

func (s *Store) leaseDuration(d time.Duration) (time.Duration, error) {
	if d == 0 {
		return s.opts.DefaultLease, nil
	}
	if d < 0 || d > s.opts.MaxLease {
		return 0, fmt.Errorf("%w: lease_ms must be between 1 and %d (%v), or absent for the default", ErrInvalidArgument, s.opts.MaxLease.Milliseconds(), s.opts.MaxLease)
	}
	return d, nil
}

// promoteDue moves up to limit scheduled jobs whose run_at has come into the
// ready index, oldest first.
func (s *Store) promoteDue(tx *bolt.Tx, now time.Time, limit int) error {
	var due []uint64
	c := tx.Bucket(bucketScheduled).Cursor()
	for k, _ := c.First(); k != nil && len(due) < limit; k, _ = c.Next() {
		if timeFromKey(k, 0) > now.UnixNano() {
			break
		}
		due = append(due, idFromKey(k))
	}
	for _, id := range due {
		old, err := getIndexedJob(tx, id)
		if err != nil {
			return err
		}
		rec := old.clone()
		rec.State = StateAvailable
		if err := s.putJob(tx, old, rec); err != nil {
			return err
		}
	}
	return nil
}

// claimOne claims the best eligible job of req.Queues, or returns nil.
func (s *Store) claimOne(tx *bolt.Tx, now time.Time, req ClaimRequest) (*jobRecord, error) {
	var best *jobRecord
	for _, q := range req.Queues {
		for _, find := range []func(*bolt.Tx, time.Time, string) (*jobRecord, error){readyHead, s.expiredHead} {
			rec, err := find(tx, now, q)
			if err != nil {
				return nil, err
			}
			if rec != nil && (best == nil || claimsBefore(rec, best)) {
				best = rec
			}
		}
	}
	if best == nil {
		return nil, nil
	}
	return s.claimRecord(tx, now, best, req)
}

// claimRecord claims the eligible job best for req's holder: attempts + 1
// (the new fencing token), holder, lease; with its audit record.
func (s *Store) claimRecord(tx *bolt.Tx, now time.Time, best *jobRecord, req ClaimRequest) (*jobRecord, error) {
	if best.Attempts >= lease.MaxToken {
		return nil, fmt.Errorf("db: job %d has used every fencing token", best.ID)
	}
	rec := best.clone()
	rec.State = StateClaimed
	rec.Attempts++
	rec.ClaimedBy = lease.Holder(req.Principal, req.Worker)
	rec.LeaseExpiresAt = lease.ExpiresAt(now, req.Lease).UnixNano()
	rec.UpdatedAt = now.UnixNano()
	if err := s.putJob(tx, best, rec); err != nil {
		return nil, err
	}
	details := map[string]string{"holder": rec.ClaimedBy}
	if best.State == StateClaimed {
		details["reclaimed_from"] = best.ClaimedBy
	}
	if err := appendAudit(tx, now, auditEntry{Principal: req.Principal, Action: "claim", Job: rec.ID,
		Token: rec.Attempts, Details: details}); err != nil {
		return nil, err
	}
	return rec, nil
}

// claimsBefore orders candidates: priority desc, then run_at, then id.
func claimsBefore(a, b *jobRecord) bool {
	if a.Priority != b.Priority {
		return a.Priority > b.Priority
	}
	if a.RunAt != b.RunAt {
		return a.RunAt < b.RunAt
	}
	return a.ID < b.ID
}

// readyHead returns the first available job of queue in claim order.
func readyHead(tx *bolt.Tx, _ time.Time, queue string) (*jobRecord, error) {
	prefix := queuePrefix(queue)
	k, _ := tx.Bucket(bucketReady).Cursor().Seek(prefix)
	if k == nil || !bytes.HasPrefix(k, prefix) {
		return nil, nil
	}
	return getIndexedJob(tx, idFromKey(k))
}

// expiredHead returns the claimed job of queue whose lease expired first, if
// any expired. Expired jobs with no attempts left go dead on the way.
func (s *Store) expiredHead(tx *bolt.Tx, now time.Time, queue string) (*jobRecord, error) {
	prefix := queuePrefix(queue)
	for {
		k, _ := tx.Bucket(bucketClaimed).Cursor().Seek(prefix)
		if k == nil || !bytes.HasPrefix(k, prefix) || !lease.Expired(time.Unix(0, timeFromKey(k, len(prefix))), now) {
			return nil, nil
		}
		rec, err := getIndexedJob(tx, idFromKey(k))
		if err != nil {
			return nil, err
		}
		if rec.Attempts < rec.MaxAttempts {
			return rec, nil
		}
		if err := s.killExpired(tx, now, rec); err != nil {
			return nil, err
		}
	}
}

func (s *Store) killExpired(tx *bolt.Tx, now time.Time, old *jobRecord) error {
	rec := old.clone()
	rec.State = StateDead
	rec.addError(now, "lease expired")
	rec.ClaimedBy, rec.LeaseExpiresAt = "", 0
	rec.UpdatedAt = now.UnixNano()
	if err := s.putJob(tx, old, rec); err != nil {
		return err
	}
	return appendAudit(tx, now, auditEntry{Principal: "system", Action: "dead", Job: rec.ID, Token: rec.Attempts,
		Details: map[string]string{"error": "lease expired", "holder": old.ClaimedBy}})
}

func (r *jobRecord) addError(now time.Time, msg string) {
	if len(msg) > maxErrorBytes {
		// Cut on a rune boundary: a cut through a character would leave
		// the stored error and its audit record invalid UTF-8.
		msg = strings.ToValidUTF8(msg[:maxErrorBytes], "")
	}
	r.LastError = msg
	r.Errors = append(r.Errors, errorRecord{Attempt: r.Attempts, At: now.UnixNano(), Error: msg})
	if len(r.Errors) > maxErrorsKept {
		r.Errors = append([]errorRecord(nil), r.Errors[len(r.Errors)-maxErrorsKept:]...)
	}
}

// Fenced names the caller of a heartbeat, completion or failure: the job,
// the holder (principal and worker label) and the claim's fencing token
// (0 = not given).
type Fenced struct {
	ID           uint64
	Principal    string
	Worker       string
	FencingToken uint64
}

func (s *Store) validateFenced(f Fenced) error {
	if err := lease.ValidateToken(f.FencingToken); err != nil {
		return fmt.Errorf("%w: fencing_token %d is above 4294967295 and cannot be a claim number", ErrInvalidArgument, f.FencingToken)
	}
	if s.opts.RequireFencing && f.FencingToken == 0 {
		return fmt.Errorf("%w: fencing_token is required by this server", ErrInvalidArgument)
	}
	if err := lease.ValidateWorker(f.Worker); err != nil {
		return invalidName(err)
	}
	return nil
}

// fencedJob loads the job and applies the fencing rule; a caller that does
// not hold the current claim gets refused (wrapped in refused).
func fencedJob(tx *bolt.Tx, f Fenced, refused error) (*jobRecord, error) {
	rec, err := getJob(tx, f.ID)
	if err != nil {
		return nil, err
	}
	var claim lease.Claim
	if rec.State == StateClaimed {
		claim = lease.Claim{Holder: rec.ClaimedBy, Token: rec.Attempts}
	}
	holder := lease.Holder(f.Principal, f.Worker)
	switch err := lease.Check(claim, holder, f.FencingToken); {
	case err == nil:
		return rec, nil
	case errors.Is(err, lease.ErrStaleToken):
		return nil, fmt.Errorf("%w: job %d: fencing token %d is not the current claim (%d); the job was claimed again", refused, f.ID, f.FencingToken, rec.Attempts)
	case rec.State != StateClaimed:
		return nil, fmt.Errorf("%w: job %d is %s, not claimed", refused, f.ID, rec.State)
	default:
		return nil, fmt.Errorf("%w: job %d is not claimed by %s", refused, f.ID, holder)
	}
}

// HeartbeatRequest extends the lease of a claim.
type HeartbeatRequest struct {
	Fenced
	Lease time.Duration // 0: the store's DefaultLease
}

// HeartbeatJob extends the caller's lease to now+Lease. A caller that does
// not hold the current claim gets ErrClaimNotFound; a late heartbeat after
// expiry but before anybody claimed the job again is accepted.
func (s *Store) HeartbeatJob(ctx context.Context, req HeartbeatRequest) (Job, error) {
	if err := s.validateFenced(req.Fenced); err != nil {
		return Job{}, err
	}
	d, err := s.leaseDuration(req.Lease)
	if err != nil {
		return Job{}, err
	}
	var job Job
	err = s.update(ctx, func(tx *bolt.Tx) error {
		now := s.opts.Now()
		old, err := fencedJob(tx, req.Fenced, ErrClaimNotFound)
		if err != nil {
			return err
		}
		rec := old.clone()
		rec.LeaseExpiresAt = lease.ExpiresAt(now, d).UnixNano()
		rec.UpdatedAt = now.UnixNano()
		if err := s.putJob(tx, old, rec); err != nil {
			return err
		}
		job = rec.job()
		return appendAudit(tx, now, auditEntry{Principal: req.Principal, Action: "heartbeat", Job: rec.ID, Token: rec.Attempts,
			Details: map[string]string{"lease_expires_at": job.LeaseExpiresAt.Format(time.RFC3339Nano)}})
	})
	return job, err
}

// CompleteRequest finishes a claim successfully.
type CompleteRequest struct {
	Fenced
	Result      json.RawMessage
	Attestation json.RawMessage
}

// CompleteJob marks the caller's claim completed and stores its result and
// attestation. The fencing check comes first: a caller that does not hold
// the current claim gets ErrClaimMismatch and leaves nothing behind.
func (s *Store) CompleteJob(ctx context.Context, req CompleteRequest) (Job, error) {
	if err := s.validateComplete(req); err != nil {
		return Job{}, err
	}
	var job Job
	err := s.update(ctx, func(tx *bolt.Tx) error {
		rec, err := s.complete(tx, s.opts.Now(), req)
		if err == nil {
			job = rec.job()
		}
		return err
	})
	return job, err
}

// CompleteAndClaimJob completes the caller's claim and, in the same
// transaction, claims up to next.Max jobs for next.Worker (the same
// principal). It saves a commit and a round trip per job. A refused
// completion claims nothing; an empty next claim is not an error.
func (s *Store) CompleteAndClaimJob(ctx context.Context, req CompleteRequest, next ClaimRequest) (Job, []Job, error) {
	if err := s.validateComplete(req); err != nil {
		return Job{}, nil, err
	}
	next.Principal = req.Principal
	if next.Worker == "" {
		next.Worker = req.Worker
	}
	if next.Wait != 0 {
		return Job{}, nil, fmt.Errorf("%w: claim_next cannot wait", ErrInvalidArgument)
	}
	if err := s.normalizeClaim(&next); err != nil {
		return Job{}, nil, err
	}
	var (
		job  Job
		jobs []Job
	)
	err := s.updateItems(ctx, 1+next.Max, func(tx *bolt.Tx) error {
		now := s.opts.Now()
		rec, err := s.complete(tx, now, req)
		if err != nil {
			return err
		}
		job, jobs = rec.job(), nil
		return s.claimInTx(tx, now, next, &jobs)
	})
	return job, jobs, err
}

func (s *Store) validateComplete(req CompleteRequest) error {
	if err := s.validateFenced(req.Fenced); err != nil {
		return err
	}
	if len(req.Result) > s.opts.MaxPayloadBytes {
		return fmt.Errorf("%w: result is %d bytes, the limit is %d", ErrTooLarge, len(req.Result), s.opts.MaxPayloadBytes)
	}
	if len(req.Attestation) > s.opts.MaxAttestationBytes {
		return fmt.Errorf("%w: attestation is %d bytes, the limit is %d", ErrTooLarge, len(req.Attestation), s.opts.MaxAttestationBytes)
	}
	if len(req.Result) > 0 && !json.Valid(req.Result) {
		return fmt.Errorf("%w: result is not valid JSON", ErrInvalidArgument)
	}
	if len(req.Attestation) > 0 && !json.Valid(req.Attestation) {
		return fmt.Errorf("%w: attestation is not valid JSON", ErrInvalidArgument)
	}
	return nil
}

// complete applies a completion in tx. The fencing check comes before
// anything is written, the attestation included.
func (s *Store) complete(tx *bolt.Tx, now time.Time, req CompleteRequest) (*jobRecord, error) {
	old, err := fencedJob(tx, req.Fenced, ErrClaimMismatch)
	if err != nil {
		return nil, err
	}
	rec := old.clone()
	rec.State = StateCompleted
	rec.ClaimedBy, rec.LeaseExpiresAt = "", 0
	rec.CompletedAt, rec.UpdatedAt = now.UnixNano(), now.UnixNano()
	rec.Result, rec.Attestation = req.Result, req.Attestation
	if err := s.putJob(tx, old, rec); err != nil {
		return nil, err
	}
	details := map[string]string{"holder": old.ClaimedBy}
	if len(rec.Attestation) > 0 {
		details["attestation_sha256"] = sha256Hex(rec.Attestation)
	}
	return rec, appendAudit(tx, now, auditEntry{Principal: req.Principal, Action: "complete", Job: rec.ID, Token: rec.Attempts, Details: details})
}

// FailRequest reports a failed attempt.
type FailRequest struct {
	Fenced
	Error      string
	RetryDelay *time.Duration // nil: exponential backoff with jitter
	Final      bool           // no more attempts: the job goes dead
}

// FailJob records the caller's failure. With Final, or when the attempts
// are used up, the job goes dead; otherwise it is scheduled again after
// RetryDelay (or the backoff). A caller that does not hold the current claim
// gets ErrClaimNotFound.
func (s *Store) FailJob(ctx context.Context, req FailRequest) (Job, error) {
	if err := s.validateFenced(req.Fenced); err != nil {
		return Job{}, err
	}
	if req.RetryDelay != nil && (*req.RetryDelay < 0 || *req.RetryDelay > MaxDelay) {
		return Job{}, fmt.Errorf("%w: retry_delay_ms must be between 0 and %d (%v)", ErrInvalidArgument, MaxDelay.Milliseconds(), MaxDelay)
	}
	var job Job
	err := s.update(ctx, func(tx *bolt.Tx) error {
		now := s.opts.Now()
		old, err := fencedJob(tx, req.Fenced, ErrClaimNotFound)
		if err != nil {
			return err
		}
		rec := old.clone()
		rec.addError(now, req.Error)
		rec.ClaimedBy, rec.LeaseExpiresAt = "", 0
		rec.UpdatedAt = now.UnixNano()
		action := "fail"
		if req.Final || rec.Attempts >= rec.MaxAttempts {
			rec.State = StateDead
			action = "dead"
		} else {
			delay := s.opts.Backoff.Delay(rec.Attempts, s.opts.Random())
			if req.RetryDelay != nil {
				delay = *req.RetryDelay
			}
			rec.RunAt = now.Add(delay).UnixNano()
			rec.State = StateScheduled
			if delay == 0 {
				rec.State = StateAvailable
			}
		}
		// Audited before putJob: an available job may be handed off to a
		// waiting claim there, and that claim comes after this failure.
		if err := appendAudit(tx, now, auditEntry{Principal: req.Principal, Action: action, Job: rec.ID, Token: rec.Attempts,
			Details: map[string]string{"holder": old.ClaimedBy, "error": rec.LastError, "state": string(rec.State)}}); err != nil {
			return err
		}
		if err := s.putJob(tx, old, rec); err != nil {
			return err
		}
		job = rec.job()
		return nil
	})
	return job, err
}

// JobRequest names a job for an administrative operation.
type JobRequest struct {
	Principal string
	ID        uint64
}

// CancelJob cancels a job that has not finished (available, scheduled,
// claimed) or is dead. A worker holding a cancelled claim is refused on its
// next call. Completed and cancelled jobs give ErrWrongState.
func (s *Store) CancelJob(ctx context.Context, req JobRequest) (Job, error) {
	var job Job
	err := s.update(ctx, func(tx *bolt.Tx) error {
		now := s.opts.Now()
		old, err := getJob(tx, req.ID)
		if err != nil {
			return err
		}
		if old.State == StateCompleted || old.State == StateCancelled {
			return fmt.Errorf("%w: job %d is %s and cannot be cancelled", ErrWrongState, req.ID, old.State)
		}
		rec := old.clone()
		rec.State = StateCancelled
		rec.ClaimedBy, rec.LeaseExpiresAt = "", 0
		rec.UpdatedAt = now.UnixNano()
		if err := s.putJob(tx, old, rec); err != nil {
			return err
		}
		job = rec.job()
		return appendAudit(tx, now, auditEntry{Principal: req.Principal, Action: "cancel", Job: rec.ID, Token: rec.Attempts,
			Details: map[string]string{"from": string(old.State)}})
	})
	return job, err
}

// RetryJob makes a dead or cancelled job available now. Attempts keep
// counting (they are the fencing tokens); MaxAttempts is raised so the job
// has its enqueue-time budget again. Other states give ErrWrongState.
func (s *Store) RetryJob(ctx context.Context, req JobRequest) (Job, error) {
	var job Job
	err := s.update(ctx, func(tx *bolt.Tx) error {
		now := s.opts.Now()
		old, err := getJob(tx, req.ID)
		if err != nil {
			return err
		}
		if old.State != StateDead && old.State != StateCancelled {
			return fmt.Errorf("%w: job %d is %s; only dead or cancelled jobs can be retried", ErrWrongState, req.ID, old.State)
		}
		rec := old.clone()
		rec.State = StateAvailable
		rec.RunAt, rec.UpdatedAt = now.UnixNano(), now.UnixNano()
		budget := max(rec.Budget, 1)
		rec.MaxAttempts = max(rec.MaxAttempts, min(rec.Attempts+budget, lease.MaxToken))
		// Audited before putJob, which may hand the job to a waiting claim.
		if err := appendAudit(tx, now, auditEntry{Principal: req.Principal, Action: "retry", Job: rec.ID, Token: rec.Attempts,
			Details: map[string]string{"from": string(old.State), "max_attempts": fmt.Sprint(rec.MaxAttempts)}}); err != nil {
			return err
		}
		if err := s.putJob(tx, old, rec); err != nil {
			return err
		}
		job = rec.job()
		return nil
	})
	return job, err
}

// GetJob returns one job or ErrJobNotFound.
func (s *Store) GetJob(ctx context.Context, id uint64) (Job, error) {
	var job Job
	err := s.view(func(tx *bolt.Tx) error {
		rec, err := getJob(tx, id)
		if err != nil {
			return err
		}
		job = rec.job()
		return nil
	})
	return job, err
}

// ListRequest filters and pages through jobs in id order.
type ListRequest struct {
	Queue string // empty: all
	State State  // empty: all
	After uint64 // cursor: ids above this one
	Limit int    // 0: DefaultListLimit
}

// JobPage is one page of a listing. Next is the cursor for the next page,
// 0 when the listing is done.
type JobPage struct {
	Jobs []Job
	Next uint64
}

// listLimit is a listing's page size: 0 asks for DefaultListLimit, anything
// else must be between 1 and MaxListLimit.
func listLimit(limit int) (int, error) {
	if limit == 0 {
		return DefaultListLimit, nil
	}
	if limit < 0 || limit > MaxListLimit {
		return 0, fmt.Errorf("%w: limit must be between 1 and %d", ErrInvalidArgument, MaxListLimit)
	}
	return limit, nil
}

// ListJobs returns jobs matching req in id order. A page scans at most
// listScanBudget records, so a selective filter over a large file returns a
// short page with a Next cursor rather than holding a read transaction long.
func (s *Store) ListJobs(ctx context.Context, req ListRequest) (JobPage, error) {
	if req.Queue != "" {
		if err := ValidateQueue(req.Queue); err != nil {
			return JobPage{}, err
		}
	}
	if req.State != "" && !ValidState(req.State) {
		return JobPage{}, fmt.Errorf("%w: state %q is not one of available, scheduled, claimed, completed, dead, cancelled", ErrInvalidArgument, req.State)
	}
	var err error
	if req.Limit, err = listLimit(req.Limit); err != nil {
		return JobPage{}, err
	}
	page := JobPage{Jobs: []Job{}}
	err = s.view(func(tx *bolt.Tx) error {
		if req.After == ^uint64(0) {
			return nil
		}
		c := tx.Bucket(bucketJobs).Cursor()
		scanned, lastScanned := 0, uint64(0)
		for k, v := c.Seek(u64(req.After + 1)); k != nil; k, v = c.Next() {
			if len(page.Jobs) == req.Limit || scanned == listScanBudget {
				page.Next = lastScanned
				return nil
			}
			scanned++
			lastScanned = idFromKey(k)
			rec, err := decodeJob(v)
			if err != nil {
				return err
			}
			if (req.Queue == "" || rec.Queue == req.Queue) && (req.State == "" || rec.State == req.State) {
				page.Jobs = append(page.Jobs, rec.job())
			}
		}
		return nil
	})
	return page, err
}

// QueueStats counts one queue's jobs by state.
type QueueStats struct {
	Queue  string
	Counts map[State]uint64
}

// Stats returns job counts per queue and state, from counters kept in the
// same transactions as the jobs (no scan).
func (s *Store) Stats(ctx context.Context) ([]QueueStats, error) {
	var out []QueueStats
	err := s.view(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketCounts).ForEach(func(k, v []byte) error {
			i := bytes.IndexByte(k, 0)
			if i < 0 || len(v) != 8 {
				return fmt.Errorf("%w: count key %q", ErrCorrupt, k)
			}
			q, st := string(k[:i]), State(k[i+1:])
			if len(out) == 0 || out[len(out)-1].Queue != q {
				out = append(out, QueueStats{Queue: q, Counts: map[State]uint64{}})
			}
			out[len(out)-1].Counts[st] = idFromKey(v)
			return nil
		})
	})
	return out, err
}

func getJob(tx *bolt.Tx, id uint64) (*jobRecord, error) {
	v := tx.Bucket(bucketJobs).Get(u64(id))
	if v == nil {
		return nil, fmt.Errorf("%w: job %d", ErrJobNotFound, id)
	}
	return decodeJob(v)
}

// getIndexedJob loads a job that an index entry points to. A missing record
// is corruption, not a refusal: it must abort the commit, never be answered
// as "job not found" after other writes of the same transaction.
func getIndexedJob(tx *bolt.Tx, id uint64) (*jobRecord, error) {
	rec, err := getJob(tx, id)
	if errors.Is(err, ErrJobNotFound) {
		return nil, fmt.Errorf("%w: an index points at job %d, which has no record", ErrCorrupt, id)
	}
	return rec, err
}

// indexEntry returns the index bucket and key a record belongs in, if any.
func indexEntry(r *jobRecord) (bucket, key []byte) {
	switch r.State {
	case StateAvailable:
		return bucketReady, readyKey(r)
	case StateScheduled:
		return bucketScheduled, scheduledKey(r)
	case StateClaimed:
		return bucketClaimed, claimedKey(r)
	case StateCompleted, StateCancelled:
		return bucketFinished, finishedKey(r)
	case StateDead:
		return bucketDead, deadKey(r)
	}
	return nil, nil
}

// putJob writes rec and moves its index entry and state count from what old
// had (nil for a new job). It is the only place that writes job records, so
// it is also where long-polling claims learn, after the commit, that a job
// became claimable now (available) or will at a time (run_at, lease expiry).
func (s *Store) putJob(tx *bolt.Tx, old, rec *jobRecord) error {
	sameCount := old != nil && old.Queue == rec.Queue && old.State == rec.State
	if old != nil {
		if b, k := indexEntry(old); b != nil {
			if err := tx.Bucket(b).Delete(k); err != nil {
				return err
			}
		}
		if !sameCount {
			if err := addCount(tx, old.Queue, old.State, -1); err != nil {
				return err
			}
		}
	}
	if b, k := indexEntry(rec); b != nil {
		if err := tx.Bucket(b).Put(k, nil); err != nil {
			return err
		}
	}
	if !sameCount {
		if err := addCount(tx, rec.Queue, rec.State, 1); err != nil {
			return err
		}
	}
	v, err := encodeRecord(rec)
	if err != nil {
		return err
	}
	if err := tx.Bucket(bucketJobs).Put(u64(rec.ID), v); err != nil {
		return err
	}
	switch {
	case rec.State == StateAvailable && (old == nil || old.State != StateAvailable):
		if w := s.waiters.take(rec.Queue); w != nil {
			return s.handOff(tx, rec, w)
		}
		s.signalAvailable(tx, rec.Queue, 1)
	case rec.State == StateScheduled:
		s.signalLater(tx, time.Unix(0, rec.RunAt))
	case rec.State == StateClaimed:
		s.signalLater(tx, time.Unix(0, rec.LeaseExpiresAt))
	}
	return nil
}

// deleteJob removes a job, its index entries, its count and its
// idempotency key.
func deleteJob(tx *bolt.Tx, rec *jobRecord) error {
	if b, k := indexEntry(rec); b != nil {
		if err := tx.Bucket(b).Delete(k); err != nil {
			return err
		}
	}
	if err := addCount(tx, rec.Queue, rec.State, -1); err != nil {
		return err
	}
	if rec.IdempotencyKey != "" {
		k := append(queuePrefix(rec.Queue), rec.IdempotencyKey...)
		if v := tx.Bucket(bucketIdempotency).Get(k); v != nil && idFromKey(v) == rec.ID {
			if err := tx.Bucket(bucketIdempotency).Delete(k); err != nil {
				return err
			}
		}
	}
	return tx.Bucket(bucketJobs).Delete(u64(rec.ID))
}

func addCount(tx *bolt.Tx, queue string, state State, delta int64) error {
	b := tx.Bucket(bucketCounts)
	k := countKey(queue, state)
	var n uint64
	if v := b.Get(k); v != nil {
		n = idFromKey(v)
	}
	n = uint64(int64(n) + delta)
	if n == 0 {
		return b.Delete(k)
	}
	return b.Put(k, u64(n))
}

// checkIndexes verifies that every job has exactly the index entry its
// state calls for, that no index entry is orphaned, and that the counts
// match the records.
func checkIndexes(tx *bolt.Tx) error {
	want := map[string]bool{}
	counts := map[string]uint64{}
	err := tx.Bucket(bucketJobs).ForEach(func(k, v []byte) error {
		rec, err := decodeJob(v)
		if err != nil {
			return err
		}
		if rec.ID != idFromKey(k) {
			return fmt.Errorf("db: job key %d holds job %d", idFromKey(k), rec.ID)
		}
		// A file opened read-only that predates an index bucket has none
		// of its entries; Open builds the bucket when it opens for writing.
		if b, key := indexEntry(rec); b != nil && tx.Bucket(b) != nil {
			want[string(b)+"/"+string(key)] = true
		}
		counts[string(countKey(rec.Queue, rec.State))]++
		return nil
	})
	if err != nil {
		return err
	}
	for _, b := range [][]byte{bucketReady, bucketScheduled, bucketClaimed, bucketFinished, bucketDead} {
		if tx.Bucket(b) == nil {
			continue
		}
		err := tx.Bucket(b).ForEach(func(k, _ []byte) error {
			name := string(b) + "/" + string(k)
			if !want[name] {
				return fmt.Errorf("db: index %s has an entry for job %d that its record does not call for", b, idFromKey(k))
			}
			delete(want, name)
			return nil
		})
		if err != nil {
			return err
		}
	}
	for name := range want {
		return fmt.Errorf("db: index entry %q is missing", name)
	}
	err = tx.Bucket(bucketCounts).ForEach(func(k, v []byte) error {
		if counts[string(k)] != idFromKey(v) {
			return fmt.Errorf("db: count %q is %d, records say %d", k, idFromKey(v), counts[string(k)])
		}
		delete(counts, string(k))
		return nil
	})
	if err != nil {
		return err
	}
	for k, n := range counts {
		return fmt.Errorf("db: count %q is missing (records say %d)", k, n)
	}
	return nil
}
