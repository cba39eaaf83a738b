package db

import (
	"encoding/json"
	"time"
)

// Limits on request fields. Values outside them are refused with
// CodeInvalid: they are client bugs, not wishes to honour.
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
	// MaxWait is the longest a claim may long-poll.
	MaxWait = 60 * time.Second
	// MaxLeaseWait is the longest an acquire may wait for a held lease. It
	// stays below the HTTP server's write timeout.
	MaxLeaseWait = time.Minute
	// DefaultSweepBatch bounds how many jobs one sweep transaction
	// deletes, so that a sweep never holds the writer (and the claims
	// waiting on it) long.
	DefaultSweepBatch = 500
	// MaxErrorsKept bounds a job's error history.
	MaxErrorsKept = 10

	maxKindBytes    = 128
	maxIdemKeyBytes = 255
	// MaxErrorBytes bounds the error message a failure records.
	MaxErrorBytes = 4096
)

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

// ClaimRequest asks for up to Max jobs from Queues for Principal's Worker.
type ClaimRequest struct {
	Principal string
	Worker    string
	Queues    []string      // default ["default"]
	Lease     time.Duration // 0: the store's DefaultLease
	Max       int           // 0: 1
	Wait      time.Duration // long-poll up to this long (at most MaxWait) when nothing is claimable
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

// HeartbeatRequest extends the lease of a claim.
type HeartbeatRequest struct {
	Fenced
	Lease time.Duration // 0: the store's DefaultLease
}

// CompleteRequest finishes a claim successfully.
type CompleteRequest struct {
	Fenced
	Result      json.RawMessage
	Attestation json.RawMessage
}

// FailRequest reports a failed attempt.
type FailRequest struct {
	Fenced
	Error      string
	RetryDelay *time.Duration // nil: exponential backoff with jitter
	Final      bool           // no more attempts: the job goes dead
}

// JobRequest names a job for an administrative operation.
type JobRequest struct {
	Principal string
	ID        uint64
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

// StateListRequest asks for the first jobs of one state, in that state's
// order: claimed jobs queue by queue in name order, the lease that ends
// first first; scheduled jobs the earliest run_at first; dead jobs queue by
// queue, the most recent death first. Other states are refused: page
// through them with ListJobs.
type StateListRequest struct {
	State State
	Queue string // empty: every queue
	Limit int    // 0: DefaultListLimit; at most MaxListLimit
	// Retry narrows a list of scheduled jobs to those waiting for a retry
	// (RetryOnly) or to those never attempted (RetryNone); other states
	// take only RetryAny. A filtered list of the bbolt engine reads at
	// most its scan budget of scheduled jobs and may return fewer.
	Retry RetryFilter
}

// QueueStats counts one queue's jobs by state.
type QueueStats struct {
	Queue  string
	Counts map[State]uint64
}
