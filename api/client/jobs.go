package client

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// Job states.
const (
	StateAvailable = "available"
	StateScheduled = "scheduled"
	StateClaimed   = "claimed"
	StateCompleted = "completed"
	StateDead      = "dead"
	StateCancelled = "cancelled"
)

// States lists every job state in the server's display order.
var States = []string{StateAvailable, StateScheduled, StateClaimed, StateCompleted, StateDead, StateCancelled}

// Job is a job as the server shows it. Optional times are zero when
// absent; marshalled again, a Job has the server's JSON shape.
type Job struct {
	ID          uint64          `json:"id"`
	Queue       string          `json:"queue"`
	Kind        string          `json:"kind,omitempty"`
	Payload     json.RawMessage `json:"payload"`
	Priority    int64           `json:"priority"`
	State       string          `json:"state"`
	Attempts    uint64          `json:"attempts"`
	MaxAttempts uint64          `json:"max_attempts"`
	// FencingToken is the token of the current claim while the job is
	// claimed (equal to Attempts), else 0. Send it with every heartbeat,
	// completion and failure of the claim.
	FencingToken   uint64          `json:"fencing_token,omitempty"`
	ClaimedBy      string          `json:"claimed_by,omitempty"`
	LeaseExpiresAt time.Time       `json:"lease_expires_at,omitzero"`
	RunAt          time.Time       `json:"run_at"`
	CreatedAt      time.Time       `json:"created_at"`
	UpdatedAt      time.Time       `json:"updated_at"`
	CompletedAt    time.Time       `json:"completed_at,omitzero"`
	LastError      string          `json:"last_error,omitempty"`
	Errors         []AttemptError  `json:"errors,omitempty"`
	Result         json.RawMessage `json:"result,omitempty"`
	Attestation    json.RawMessage `json:"attestation,omitempty"`
	IdempotencyKey string          `json:"idempotency_key,omitempty"`
	// Schedule names the schedule that enqueued the job (empty when a
	// client did), ScheduledFor its tick, Backfilled whether that tick was
	// a missed one fired by the catch-up policy.
	Schedule     string    `json:"schedule,omitempty"`
	ScheduledFor time.Time `json:"scheduled_for,omitzero"`
	Backfilled   bool      `json:"backfilled,omitempty"`
}

// AttemptError is one recorded failure of a job.
type AttemptError struct {
	Attempt uint64    `json:"attempt"`
	At      time.Time `json:"at"`
	Error   string    `json:"error"`
}

// NewJob is a job to enqueue. Every field is optional.
type NewJob struct {
	Queue string // default "default"
	Kind  string
	// Payload is marshalled to JSON; a json.RawMessage is sent as it is.
	Payload     any
	Priority    int64  // higher is claimed first
	MaxAttempts uint64 // 0: the server's default (10)
	// RunAt is the earliest claim time; zero: now + Delay.
	RunAt time.Time
	Delay time.Duration
	// IdempotencyKey makes a repeat enqueue (same queue and key) return the
	// existing job instead of a new one.
	IdempotencyKey string
}

type newJobBody struct {
	Queue          string          `json:"queue,omitempty"`
	Kind           string          `json:"kind,omitempty"`
	Payload        json.RawMessage `json:"payload,omitempty"`
	Priority       int64           `json:"priority,omitempty"`
	MaxAttempts    uint64          `json:"max_attempts,omitempty"`
	RunAt          string          `json:"run_at,omitempty"`
	DelayMs        int64           `json:"delay_ms,omitempty"`
	IdempotencyKey string          `json:"idempotency_key,omitempty"`
}

func (j NewJob) body(field string) (newJobBody, error) {
	p, err := jsonValue(field, j.Payload)
	if err != nil {
		return newJobBody{}, err
	}
	b := newJobBody{Queue: j.Queue, Kind: j.Kind, Payload: p, Priority: j.Priority, MaxAttempts: j.MaxAttempts,
		DelayMs: millis(j.Delay), IdempotencyKey: j.IdempotencyKey}
	if !j.RunAt.IsZero() {
		b.RunAt = j.RunAt.Format(time.RFC3339Nano)
	}
	return b, nil
}

// EnqueueResult is an enqueued job. Created is false when the idempotency
// key already existed and the existing job was returned.
type EnqueueResult struct {
	Job     Job
	Created bool
}

// Enqueue adds one job (POST /v1/jobs). Errors: CodeInvalidArgument,
// CodeResourceExhausted (payload too large), CodePermissionDenied.
func (c *Client) Enqueue(ctx context.Context, job NewJob) (EnqueueResult, error) {
	b, err := job.body("payload")
	if err != nil {
		return EnqueueResult{}, err
	}
	var out EnqueueResult
	status, err := c.do(ctx, request{method: http.MethodPost, escapedPath: "/v1/jobs", body: b}, &out.Job)
	out.Created = status == http.StatusCreated
	return out, err
}

// EnqueueBatch adds several jobs in one transaction: all of them, or none
// when one is invalid (the error names its index). Jobs whose idempotency
// key existed are returned as they are.
func (c *Client) EnqueueBatch(ctx context.Context, jobs []NewJob) ([]Job, error) {
	bodies := make([]newJobBody, len(jobs))
	for i, j := range jobs {
		var err error
		if bodies[i], err = j.body(fmt.Sprintf("jobs[%d].payload", i)); err != nil {
			return nil, err
		}
	}
	var out struct {
		Jobs []Job `json:"jobs"`
	}
	_, err := c.do(ctx, request{method: http.MethodPost, escapedPath: "/v1/jobs", body: bodies}, &out)
	return out.Jobs, err
}

func jobPath(id uint64, action string) string {
	p := "/v1/jobs/" + strconv.FormatUint(id, 10)
	if action != "" {
		p += "/" + action
	}
	return p
}

// GetJob returns one job. Errors: CodeNotFound.
func (c *Client) GetJob(ctx context.Context, id uint64) (Job, error) {
	var j Job
	_, err := c.do(ctx, request{method: http.MethodGet, escapedPath: jobPath(id, "")}, &j)
	return j, err
}

// ListParams filters and pages ListJobs. Zero values mean "any" and the
// server's default limit (100, at most 1000).
type ListParams struct {
	Queue string
	State string
	After uint64 // the Next of the previous page
	Limit int
}

// JobPage is one page of jobs in id order. Next, when not 0, is the After
// of the next page.
type JobPage struct {
	Jobs []Job  `json:"jobs"`
	Next uint64 `json:"next,omitempty"`
}

// ListJobs returns jobs in id order (GET /v1/jobs).
func (c *Client) ListJobs(ctx context.Context, p ListParams) (JobPage, error) {
	q := url.Values{}
	if p.Queue != "" {
		q.Set("queue", p.Queue)
	}
	if p.State != "" {
		q.Set("state", p.State)
	}
	if p.After != 0 {
		q.Set("after", strconv.FormatUint(p.After, 10))
	}
	if p.Limit != 0 {
		q.Set("limit", strconv.Itoa(p.Limit))
	}
	var page JobPage
	_, err := c.do(ctx, request{method: http.MethodGet, escapedPath: "/v1/jobs", query: q}, &page)
	return page, err
}

// ClaimParams asks for work.
type ClaimParams struct {
	// Worker is the worker label; the claim's holder is principal|Worker.
	Worker string
	Queues []string // default ["default"]
	// Lease is how long the claim lasts without a heartbeat; 0: the
	// server's default (30s).
	Lease time.Duration
	// Wait long-polls up to this long when nothing is claimable (the
	// server caps it, at most 60s).
	Wait time.Duration
}

type claimBody struct {
	Worker  string   `json:"worker"`
	Queues  []string `json:"queues,omitempty"`
	LeaseMs int64    `json:"lease_ms,omitempty"`
	WaitMs  int64    `json:"wait_ms,omitempty"`
	Max     int      `json:"max,omitempty"`
}

func (p ClaimParams) body(max int) claimBody {
	return claimBody{Worker: p.Worker, Queues: p.Queues, LeaseMs: millis(p.Lease), WaitMs: millis(p.Wait), Max: max}
}

// Claim takes the best eligible job of the queues (POST /v1/claim). ok is
// false when there was none (after waiting up to p.Wait). The job's
// FencingToken is the claim's token.
func (c *Client) Claim(ctx context.Context, p ClaimParams) (job Job, ok bool, err error) {
	status, err := c.do(ctx, request{method: http.MethodPost, escapedPath: "/v1/claim", body: p.body(0)}, &job)
	if err != nil || status == http.StatusNoContent {
		return Job{}, false, err
	}
	return job, true, nil
}

// ClaimMany takes up to max jobs in one transaction. An empty slice means
// there was none.
func (c *Client) ClaimMany(ctx context.Context, p ClaimParams, max int) ([]Job, error) {
	if max < 1 {
		return nil, fmt.Errorf("fenceq: ClaimMany: max must be at least 1, got %d", max)
	}
	var out struct {
		Jobs []Job `json:"jobs"`
	}
	_, err := c.do(ctx, request{method: http.MethodPost, escapedPath: "/v1/claim", body: p.body(max)}, &out)
	return out.Jobs, err
}

// HeartbeatParams extends a claim's lease.
type HeartbeatParams struct {
	Worker       string
	FencingToken uint64        // the claim's token; 0 sends none
	Lease        time.Duration // 0: the server's default
}

// Heartbeat extends the lease of the caller's claim to now+Lease. A caller
// whose claim was lost (stale token, another holder, job no longer
// claimed) gets CodeNotFound; nothing changes.
func (c *Client) Heartbeat(ctx context.Context, id uint64, p HeartbeatParams) (Job, error) {
	body := struct {
		Worker       string `json:"worker"`
		FencingToken uint64 `json:"fencing_token,omitempty"`
		LeaseMs      int64  `json:"lease_ms,omitempty"`
	}{p.Worker, p.FencingToken, millis(p.Lease)}
	var j Job
	_, err := c.do(ctx, request{method: http.MethodPost, escapedPath: jobPath(id, "heartbeat"), body: body}, &j)
	return j, err
}

// CompleteParams finishes a claim.
type CompleteParams struct {
	Worker       string
	FencingToken uint64 // the claim's token; 0 sends none
	// Result and Attestation are marshalled to JSON (a json.RawMessage is
	// sent as it is); nil is absent.
	Result      any
	Attestation any
}

type completeBody struct {
	Worker       string          `json:"worker"`
	FencingToken uint64          `json:"fencing_token,omitempty"`
	Result       json.RawMessage `json:"result,omitempty"`
	Attestation  json.RawMessage `json:"attestation,omitempty"`
	ClaimNext    *claimNextBody  `json:"claim_next,omitempty"`
}

type claimNextBody struct {
	Worker  string   `json:"worker,omitempty"`
	Queues  []string `json:"queues,omitempty"`
	LeaseMs int64    `json:"lease_ms,omitempty"`
	Max     int      `json:"max,omitempty"`
}

func (p CompleteParams) body() (completeBody, error) {
	r, err := jsonValue("result", p.Result)
	if err != nil {
		return completeBody{}, err
	}
	a, err := jsonValue("attestation", p.Attestation)
	if err != nil {
		return completeBody{}, err
	}
	return completeBody{Worker: p.Worker, FencingToken: p.FencingToken, Result: r, Attestation: a}, nil
}

// Complete marks the caller's claim completed and stores the result and
// attestation. A caller whose claim was lost gets CodeFailedPrecondition
// and leaves nothing behind.
func (c *Client) Complete(ctx context.Context, id uint64, p CompleteParams) (Job, error) {
	body, err := p.body()
	if err != nil {
		return Job{}, err
	}
	var j Job
	_, err = c.do(ctx, request{method: http.MethodPost, escapedPath: jobPath(id, "complete"), body: body}, &j)
	return j, err
}

// ClaimNext asks a completion to claim more work in the same transaction.
type ClaimNext struct {
	Worker string   // default: the completing worker
	Queues []string // default ["default"]
	Lease  time.Duration
	// Max > 0 claims up to Max jobs; 0 claims at most one.
	Max int
}

// CompleteAndClaim completes the caller's claim and, in the same
// transaction, claims the next job(s) for the same principal: one commit
// and one round trip per job instead of two. next is empty when nothing
// was claimable. A refused completion claims nothing.
func (c *Client) CompleteAndClaim(ctx context.Context, id uint64, p CompleteParams, n ClaimNext) (done Job, next []Job, err error) {
	body, err := p.body()
	if err != nil {
		return Job{}, nil, err
	}
	body.ClaimNext = &claimNextBody{Worker: n.Worker, Queues: n.Queues, LeaseMs: millis(n.Lease), Max: n.Max}
	var out struct {
		Job
		Next     *Job  `json:"next"`
		NextJobs []Job `json:"next_jobs"`
	}
	_, err = c.do(ctx, request{method: http.MethodPost, escapedPath: jobPath(id, "complete"), body: body}, &out)
	if err != nil {
		return Job{}, nil, err
	}
	next = out.NextJobs
	if out.Next != nil {
		next = []Job{*out.Next}
	}
	return out.Job, next, nil
}

// FailParams reports a failed attempt.
type FailParams struct {
	Worker       string
	FencingToken uint64 // the claim's token; 0 sends none
	Error        string
	// RetryDelay is the wait before the next attempt; nil uses the
	// server's exponential backoff with jitter.
	RetryDelay *time.Duration
	// Final makes the job dead at once.
	Final bool
}

// Fail records a failed attempt: the job is scheduled again (or goes dead
// when Final or out of attempts). A caller whose claim was lost gets
// CodeNotFound; nothing changes.
func (c *Client) Fail(ctx context.Context, id uint64, p FailParams) (Job, error) {
	body := struct {
		Worker       string `json:"worker"`
		FencingToken uint64 `json:"fencing_token,omitempty"`
		Error        string `json:"error,omitempty"`
		RetryDelayMs *int64 `json:"retry_delay_ms,omitempty"`
		Final        bool   `json:"final,omitempty"`
	}{Worker: p.Worker, FencingToken: p.FencingToken, Error: p.Error, Final: p.Final}
	if p.RetryDelay != nil {
		ms := millis(*p.RetryDelay)
		body.RetryDelayMs = &ms
	}
	var j Job
	_, err := c.do(ctx, request{method: http.MethodPost, escapedPath: jobPath(id, "fail"), body: body}, &j)
	return j, err
}

// CancelJob cancels an available, scheduled, claimed or dead job (admin).
// Errors: CodeNotFound, CodeFailedPrecondition (completed or cancelled).
func (c *Client) CancelJob(ctx context.Context, id uint64) (Job, error) {
	var j Job
	_, err := c.do(ctx, request{method: http.MethodPost, escapedPath: jobPath(id, "cancel")}, &j)
	return j, err
}

// RetryJob makes a dead or cancelled job available again with a fresh
// attempt budget (admin). Errors: CodeNotFound, CodeFailedPrecondition.
func (c *Client) RetryJob(ctx context.Context, id uint64) (Job, error) {
	var j Job
	_, err := c.do(ctx, request{method: http.MethodPost, escapedPath: jobPath(id, "retry")}, &j)
	return j, err
}

// JobCheck is the answer of a current job token.
type JobCheck struct {
	ID             uint64    `json:"id"`
	FencingToken   uint64    `json:"fencing_token"`
	Current        bool      `json:"current"`
	LeaseExpiresAt time.Time `json:"lease_expires_at,omitzero"`
}

// CheckJob asks whether token is the job's current claim (for a downstream
// service guarding its writes). A token that is not current is
// CodeFailedPrecondition; an unknown job CodeNotFound.
func (c *Client) CheckJob(ctx context.Context, id, token uint64) (JobCheck, error) {
	var out JobCheck
	body := struct {
		FencingToken uint64 `json:"fencing_token"`
	}{token}
	_, err := c.do(ctx, request{method: http.MethodPost, escapedPath: jobPath(id, "check"), body: body}, &out)
	return out, err
}

// QueueCounts is the number of jobs of one queue in each state, and its
// pause: a paused queue takes enqueues but gives no claims.
type QueueCounts struct {
	Queue    string            `json:"queue"`
	Counts   map[string]uint64 `json:"counts"`
	Paused   bool              `json:"paused"`
	PausedAt time.Time         `json:"paused_at,omitzero"` // while paused
	PausedBy string            `json:"paused_by,omitempty"`
}

// QueuePause is a queue after PauseQueue or ResumeQueue. Changed is false
// when it already was as asked (nothing was written or audited).
type QueuePause struct {
	Queue    string    `json:"queue"`
	Paused   bool      `json:"paused"`
	PausedAt time.Time `json:"paused_at,omitzero"`
	PausedBy string    `json:"paused_by,omitempty"`
	Changed  bool      `json:"changed"`
}

// PauseQueue pauses a queue (admin): it keeps taking enqueues, but claims
// (long-polls included) get none of its jobs until ResumeQueue; jobs
// already claimed can still be heartbeaten, completed and failed. Pausing
// a paused queue is no error. Errors: CodeInvalidArgument (a bad queue
// name), CodeResourceExhausted (too many queues paused).
func (c *Client) PauseQueue(ctx context.Context, queue string) (QueuePause, error) {
	return c.setPaused(ctx, queue, "pause")
}

// ResumeQueue resumes a paused queue (admin); its waiting long-polls are
// woken. Resuming a queue that runs is no error.
func (c *Client) ResumeQueue(ctx context.Context, queue string) (QueuePause, error) {
	return c.setPaused(ctx, queue, "resume")
}

func (c *Client) setPaused(ctx context.Context, queue, action string) (QueuePause, error) {
	var out QueuePause
	path := "/v1/queues/" + url.PathEscape(queue) + "/" + action
	_, err := c.do(ctx, request{method: http.MethodPost, escapedPath: path}, &out)
	return out, err
}

// Queues returns the job counts per queue and state (GET /v1/queues).
func (c *Client) Queues(ctx context.Context) ([]QueueCounts, error) {
	var out struct {
		Queues []QueueCounts `json:"queues"`
	}
	_, err := c.do(ctx, request{method: http.MethodGet, escapedPath: "/v1/queues"}, &out)
	return out.Queues, err
}
