package api

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"time"

	"github.com/fenceq/fenceq/db"
	"github.com/labstack/echo/v4"
)

// jobResponse is a job in JSON. fencing_token is the current claim's token
// (equal to attempts) while the job is claimed.
type jobResponse struct {
	ID             uint64          `json:"id"`
	Queue          string          `json:"queue"`
	Kind           string          `json:"kind,omitempty"`
	Payload        json.RawMessage `json:"payload"`
	Priority       int64           `json:"priority"`
	State          db.State        `json:"state"`
	Attempts       uint64          `json:"attempts"`
	MaxAttempts    uint64          `json:"max_attempts"`
	FencingToken   uint64          `json:"fencing_token,omitempty"`
	ClaimedBy      string          `json:"claimed_by,omitempty"`
	LeaseExpiresAt *time.Time      `json:"lease_expires_at,omitempty"`
	RunAt          time.Time       `json:"run_at"`
	CreatedAt      time.Time       `json:"created_at"`
	UpdatedAt      time.Time       `json:"updated_at"`
	CompletedAt    *time.Time      `json:"completed_at,omitempty"`
	LastError      string          `json:"last_error,omitempty"`
	Errors         []jobError      `json:"errors,omitempty"`
	Result         json.RawMessage `json:"result,omitempty"`
	Attestation    json.RawMessage `json:"attestation,omitempty"`
	IdempotencyKey string          `json:"idempotency_key,omitempty"`
	// A job a schedule enqueued: the schedule's name, the tick it was
	// enqueued for, and whether that tick was a missed one fired by the
	// catch-up policy. Absent on a job a client enqueued.
	Schedule     string     `json:"schedule,omitempty"`
	ScheduledFor *time.Time `json:"scheduled_for,omitempty"`
	Backfilled   bool       `json:"backfilled,omitempty"`
}

type jobError struct {
	Attempt uint64    `json:"attempt"`
	At      time.Time `json:"at"`
	Error   string    `json:"error"`
}

func optTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

func toJobResponse(j db.Job) jobResponse {
	r := jobResponse{
		ID: j.ID, Queue: j.Queue, Kind: j.Kind, Payload: j.Payload, Priority: j.Priority, State: j.State,
		Attempts: j.Attempts, MaxAttempts: j.MaxAttempts, FencingToken: j.FencingToken(), ClaimedBy: j.ClaimedBy,
		LeaseExpiresAt: optTime(j.LeaseExpiresAt), RunAt: j.RunAt, CreatedAt: j.CreatedAt, UpdatedAt: j.UpdatedAt,
		CompletedAt: optTime(j.CompletedAt), LastError: j.LastError, Result: j.Result, Attestation: j.Attestation,
		IdempotencyKey: j.IdempotencyKey, Schedule: j.Schedule, ScheduledFor: optTime(j.ScheduledFor), Backfilled: j.Backfilled,
	}
	if r.Payload == nil {
		r.Payload = json.RawMessage("null")
	}
	for _, e := range j.Errors {
		r.Errors = append(r.Errors, jobError{Attempt: e.Attempt, At: e.At, Error: e.Error})
	}
	return r
}

type jobsResponse struct {
	Jobs []jobResponse `json:"jobs"`
	Next uint64        `json:"next,omitempty"`
}

func toJobsResponse(jobs []db.Job) jobsResponse {
	out := jobsResponse{Jobs: make([]jobResponse, 0, len(jobs))}
	for _, j := range jobs {
		out.Jobs = append(out.Jobs, toJobResponse(j))
	}
	return out
}

type enqueueBody struct {
	Queue          string          `json:"queue"`
	Kind           string          `json:"kind"`
	Payload        json.RawMessage `json:"payload"`
	Priority       int64           `json:"priority"`
	MaxAttempts    uint64          `json:"max_attempts"`
	RunAt          string          `json:"run_at"`
	DelayMs        int64           `json:"delay_ms"`
	IdempotencyKey string          `json:"idempotency_key"`
}

func (b enqueueBody) request(principal string) (db.EnqueueRequest, error) {
	req := db.EnqueueRequest{Principal: principal, Queue: b.Queue, Kind: b.Kind, Payload: b.Payload,
		Priority: b.Priority, MaxAttempts: b.MaxAttempts, IdempotencyKey: b.IdempotencyKey}
	if b.RunAt != "" {
		t, err := time.Parse(time.RFC3339Nano, b.RunAt)
		if err != nil {
			return req, invalidArgument("run_at %q is not an RFC 3339 time", b.RunAt)
		}
		if t.Year() < 1970 {
			// Refused here, not in the store: year 1 is the zero time,
			// which the store reads as "run_at not given".
			return req, invalidArgument("run_at %q is before 1970", b.RunAt)
		}
		req.RunAt = t
	}
	d, err := msDuration("delay_ms", b.DelayMs)
	req.Delay = d
	return req, err
}

// enqueue: a JSON object enqueues one job (201, or 200 when the idempotency
// key already exists); a JSON list enqueues all of them in one transaction
// and answers {"jobs": […]} with 201.
func (s *Server) enqueue(c echo.Context) error {
	body, err := readBody(c)
	if err != nil {
		return err
	}
	batch := bytes.HasPrefix(bytes.TrimSpace(body), []byte("["))
	var bodies []enqueueBody
	if batch {
		bodies, err = decodeJSONList[enqueueBody](body, db.MaxEnqueueBatch, "jobs")
		if err == nil && len(bodies) == 0 {
			err = invalidArgument("the list of jobs is empty")
		}
	} else {
		bodies = make([]enqueueBody, 1)
		err = decodeJSON(body, &bodies[0], false)
	}
	if err != nil {
		return err
	}
	reqs := make([]db.EnqueueRequest, len(bodies))
	for i, b := range bodies {
		if reqs[i], err = b.request(principalOf(c)); err != nil {
			return err
		}
	}
	results, err := s.store.EnqueueJobs(c.Request().Context(), reqs)
	if err != nil {
		return err
	}
	if !batch {
		status := http.StatusCreated
		if !results[0].Created {
			status = http.StatusOK
		}
		return c.JSON(status, toJobResponse(results[0].Job))
	}
	out := jobsResponse{Jobs: make([]jobResponse, 0, len(results))}
	for _, r := range results {
		out.Jobs = append(out.Jobs, toJobResponse(r.Job))
	}
	return c.JSON(http.StatusCreated, out)
}

func (s *Server) getJob(c echo.Context) error {
	switch c.Param("id") {
	case "heartbeat", "complete", "fail":
		// POST /v1/jobs/heartbeat and the others are batch routes: GET is
		// a method they do not have, not a job id that is not a number.
		c.Response().Header().Set(echo.HeaderAllow, http.MethodPost)
		return &Error{http.StatusMethodNotAllowed, "invalid_argument", "method not allowed on this endpoint"}
	}
	id, err := pathID(c)
	if err != nil {
		return err
	}
	job, err := s.store.GetJob(c.Request().Context(), id)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, toJobResponse(job))
}

func (s *Server) listJobs(c echo.Context) error {
	q := c.QueryParams()
	req := db.ListRequest{Queue: q.Get("queue"), State: db.State(q.Get("state"))}
	if err := queryUint(c, "after", &req.After); err != nil {
		return err
	}
	if err := queryInt(c, "limit", &req.Limit); err != nil {
		return err
	}
	page, err := s.store.ListJobs(c.Request().Context(), req)
	if err != nil {
		return err
	}
	out := toJobsResponse(page.Jobs)
	out.Next = page.Next
	return c.JSON(http.StatusOK, out)
}

type claimBody struct {
	Worker  string   `json:"worker"`
	Queue   string   `json:"queue"`
	Queues  []string `json:"queues"`
	LeaseMs int64    `json:"lease_ms"`
	WaitMs  int64    `json:"wait_ms"`
	Max     *int     `json:"max"`
}

// claim answers the claimed Job, or {"jobs": […]} when "max" was given, or
// 204 when nothing is eligible.
func (s *Server) claim(c echo.Context) error {
	var b claimBody
	err := bindJSON(c, &b)
	if err != nil {
		return err
	}
	req := db.ClaimRequest{Principal: principalOf(c), Worker: b.Worker, Queues: b.Queues}
	if b.Queue != "" {
		req.Queues = append(req.Queues, b.Queue)
	}
	if req.Lease, err = msDuration("lease_ms", b.LeaseMs); err != nil {
		return err
	}
	if req.Wait, err = msDuration("wait_ms", b.WaitMs); err != nil {
		return err
	}
	// A wait beyond the server's limit is shortened, not refused: the
	// client gets a 204 and claims again, as with any empty long-poll.
	req.Wait = min(req.Wait, s.cfg.MaxWait)
	if b.Max != nil {
		if *b.Max < 1 {
			return invalidArgument("max must be at least 1, got %d", *b.Max)
		}
		req.Max = *b.Max
	}
	jobs, err := s.store.ClaimJobs(c.Request().Context(), req)
	if err != nil {
		return err
	}
	if len(jobs) == 0 {
		return c.NoContent(http.StatusNoContent)
	}
	if b.Max != nil {
		return c.JSON(http.StatusOK, toJobsResponse(jobs))
	}
	return c.JSON(http.StatusOK, toJobResponse(jobs[0]))
}

// fenced names the caller of a fenced call from the path, the principal and
// the body's worker and fencing_token.
func fenced(c echo.Context, worker string, token uint64) (db.Fenced, error) {
	id, err := pathID(c)
	return db.Fenced{ID: id, Principal: principalOf(c), Worker: worker, FencingToken: token}, err
}

func (s *Server) heartbeat(c echo.Context) error {
	var b struct {
		Worker       string `json:"worker"`
		FencingToken uint64 `json:"fencing_token"`
		LeaseMs      int64  `json:"lease_ms"`
	}
	err := bindJSON(c, &b)
	if err != nil {
		return err
	}
	req := db.HeartbeatRequest{}
	if req.Fenced, err = fenced(c, b.Worker, b.FencingToken); err != nil {
		return err
	}
	if req.Lease, err = msDuration("lease_ms", b.LeaseMs); err != nil {
		return err
	}
	job, err := s.store.HeartbeatJob(c.Request().Context(), req)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, toJobResponse(job))
}

// claimNextBody asks a completion to claim the next job in the same
// transaction.
type claimNextBody struct {
	Worker  string   `json:"worker"`
	Queues  []string `json:"queues"`
	LeaseMs int64    `json:"lease_ms"`
	Max     int      `json:"max"`
}

func (s *Server) complete(c echo.Context) error {
	var b struct {
		Worker       string          `json:"worker"`
		FencingToken uint64          `json:"fencing_token"`
		Result       json.RawMessage `json:"result"`
		Attestation  json.RawMessage `json:"attestation"`
		ClaimNext    *claimNextBody  `json:"claim_next"`
	}
	err := bindJSON(c, &b)
	if err != nil {
		return err
	}
	req := db.CompleteRequest{Result: b.Result, Attestation: b.Attestation}
	if req.Fenced, err = fenced(c, b.Worker, b.FencingToken); err != nil {
		return err
	}
	if b.ClaimNext == nil {
		job, err := s.store.CompleteJob(c.Request().Context(), req)
		if err != nil {
			return err
		}
		return c.JSON(http.StatusOK, toJobResponse(job))
	}
	next := db.ClaimRequest{Worker: b.ClaimNext.Worker, Queues: b.ClaimNext.Queues, Max: b.ClaimNext.Max}
	if next.Lease, err = msDuration("claim_next.lease_ms", b.ClaimNext.LeaseMs); err != nil {
		return err
	}
	if next.Max < 0 {
		return invalidArgument("claim_next.max must be at least 1, got %d", next.Max)
	}
	job, jobs, err := s.store.CompleteAndClaimJob(c.Request().Context(), req, next)
	if err != nil {
		return err
	}
	// The completed job, plus "next" (the claimed Job, or null when nothing
	// was claimable) or, when claim_next.max was given, "next_jobs".
	if b.ClaimNext.Max > 0 {
		return c.JSON(http.StatusOK, struct {
			jobResponse
			NextJobs []jobResponse `json:"next_jobs"`
		}{toJobResponse(job), toJobsResponse(jobs).Jobs})
	}
	var nextJob *jobResponse
	if len(jobs) > 0 {
		r := toJobResponse(jobs[0])
		nextJob = &r
	}
	return c.JSON(http.StatusOK, struct {
		jobResponse
		Next *jobResponse `json:"next"`
	}{toJobResponse(job), nextJob})
}

func (s *Server) fail(c echo.Context) error {
	var b struct {
		Worker       string `json:"worker"`
		FencingToken uint64 `json:"fencing_token"`
		Error        string `json:"error"`
		RetryDelayMs *int64 `json:"retry_delay_ms"`
		Final        bool   `json:"final"`
	}
	err := bindJSON(c, &b)
	if err != nil {
		return err
	}
	req := db.FailRequest{Error: b.Error, Final: b.Final}
	if req.Fenced, err = fenced(c, b.Worker, b.FencingToken); err != nil {
		return err
	}
	if b.RetryDelayMs != nil {
		d, err := msDuration("retry_delay_ms", *b.RetryDelayMs)
		if err != nil {
			return err
		}
		req.RetryDelay = &d
	}
	job, err := s.store.FailJob(c.Request().Context(), req)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, toJobResponse(job))
}

func (s *Server) cancel(c echo.Context) error {
	return s.adminJob(c, s.store.CancelJob)
}

func (s *Server) retry(c echo.Context) error {
	return s.adminJob(c, s.store.RetryJob)
}

func (s *Server) adminJob(c echo.Context, op func(ctx context.Context, req db.JobRequest) (db.Job, error)) error {
	id, err := pathID(c)
	if err != nil {
		return err
	}
	job, err := op(c.Request().Context(), db.JobRequest{Principal: principalOf(c), ID: id})
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, toJobResponse(job))
}

// queueResponse is a queue's counts and, while it is paused, since when
// and by whom (queues.go).
type queueResponse struct {
	Queue    string              `json:"queue"`
	Counts   map[db.State]uint64 `json:"counts"`
	Paused   bool                `json:"paused"`
	PausedAt *time.Time          `json:"paused_at,omitempty"`
	PausedBy string              `json:"paused_by,omitempty"`
	// LatencyMS is how long the queue's oldest available job has waited
	// for a claim (0 when none is available): the job is OldestJob,
	// available since OldestAvailableAt (see db.QueueWaiting). Only GET
	// /v1/status fills them.
	LatencyMS         *int64     `json:"latency_ms,omitempty"`
	OldestJob         uint64     `json:"oldest_job,omitempty"`
	OldestAvailableAt *time.Time `json:"oldest_available_at,omitempty"`
}

func (s *Server) queues(c echo.Context) error {
	queues, err := s.queueList(c.Request().Context())
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, struct {
		Queues []queueResponse `json:"queues"`
	}{queues})
}

// observedStore is the Store the handlers use: every call goes to the real
// store, and the outcomes of claims and fenced calls go to the observer.
// Refused fenced calls are written to the store (RecordRefusedCalls) before
// the refusal is answered, and the workers heard from at most every
// workerWriteInterval (RecordWorkers); neither write changes a job, and a
// failure to write one is logged, never the caller's error.
type observedStore struct {
	Store
	obs *observer
	log *slog.Logger
}

func (o observedStore) ClaimJobs(ctx context.Context, req db.ClaimRequest) ([]db.Job, error) {
	jobs, err := o.Store.ClaimJobs(ctx, req)
	if err == nil {
		o.obs.claimed(len(jobs))
		o.sighted(ctx, req.Principal, req.Worker, true, len(jobs))
	}
	return jobs, err
}

func (o observedStore) HeartbeatJob(ctx context.Context, req db.HeartbeatRequest) (db.Job, error) {
	job, err := o.Store.HeartbeatJob(ctx, req)
	if err != nil {
		o.refused(ctx, refusal("heartbeat", req.Fenced, err))
	} else {
		o.sighted(ctx, req.Principal, req.Worker, false, 0)
	}
	return job, err
}

func (o observedStore) CompleteJob(ctx context.Context, req db.CompleteRequest) (db.Job, error) {
	job, err := o.Store.CompleteJob(ctx, req)
	if err != nil {
		o.refused(ctx, refusal("complete", req.Fenced, err))
	} else {
		o.obs.completed()
	}
	return job, err
}

func (o observedStore) CompleteAndClaimJob(ctx context.Context, req db.CompleteRequest, next db.ClaimRequest) (db.Job, []db.Job, error) {
	job, jobs, err := o.Store.CompleteAndClaimJob(ctx, req, next)
	if err != nil {
		o.refused(ctx, refusal("complete", req.Fenced, err))
	} else {
		o.obs.completed()
		o.obs.claimed(len(jobs))
		o.sighted(ctx, next.Principal, next.Worker, true, len(jobs))
	}
	return job, jobs, err
}

func (o observedStore) FailJob(ctx context.Context, req db.FailRequest) (db.Job, error) {
	job, err := o.Store.FailJob(ctx, req)
	if err != nil {
		o.refused(ctx, refusal("fail", req.Fenced, err))
	} else {
		o.obs.failed(job.State)
	}
	return job, err
}

func (o observedStore) HeartbeatJobs(ctx context.Context, reqs []db.HeartbeatRequest) ([]db.ItemResult, error) {
	res, err := o.Store.HeartbeatJobs(ctx, reqs)
	var zs []*db.RefusedCall
	var last [2]string
	for i, r := range res {
		f := reqs[i].Fenced
		if r.Err != nil {
			zs = append(zs, refusal("heartbeat", f, r.Err))
		} else if k := [2]string{f.Principal, f.Worker}; k != last {
			last = k
			o.sighted(ctx, f.Principal, f.Worker, false, 0)
		}
	}
	o.refused(ctx, zs...)
	return res, err
}

func (o observedStore) CompleteJobs(ctx context.Context, req db.CompleteBatchRequest) (db.CompleteBatchResult, error) {
	res, err := o.Store.CompleteJobs(ctx, req)
	var zs []*db.RefusedCall
	for i, r := range res.Items {
		if r.Err != nil {
			zs = append(zs, refusal("complete", req.Items[i].Fenced, r.Err))
		} else {
			o.obs.completed()
		}
	}
	o.refused(ctx, zs...)
	if err == nil {
		o.obs.claimed(len(res.Next))
		if req.Next != nil {
			o.sighted(ctx, req.Next.Principal, req.Next.Worker, true, len(res.Next))
		}
	}
	return res, err
}

func (o observedStore) FailJobs(ctx context.Context, reqs []db.FailRequest) ([]db.ItemResult, error) {
	res, err := o.Store.FailJobs(ctx, reqs)
	var zs []*db.RefusedCall
	for i, r := range res {
		if r.Err != nil {
			zs = append(zs, refusal("fail", reqs[i].Fenced, r.Err))
		} else {
			o.obs.failed(r.Job.State)
		}
	}
	o.refused(ctx, zs...)
	return res, err
}

// observationTimeout bounds the write of an observation, which is made
// even when the caller has gone (the refusal happened), within the
// request's own deadline when it has one (Config.WriteTimeout).
const observationTimeout = 5 * time.Second

func observationContext(ctx context.Context) (context.Context, context.CancelFunc) {
	if dl, ok := ctx.Deadline(); ok {
		return context.WithDeadline(context.WithoutCancel(ctx), dl)
	}
	return context.WithTimeout(context.WithoutCancel(ctx), observationTimeout)
}

// refusal is the record of a fenced call refused with not_found or
// failed_precondition — the codes a lost claim produces — or nil for any
// other error (bad input, a closed store, a client that went away): those
// are not zombies.
func refusal(op string, f db.Fenced, err error) *db.RefusedCall {
	apiErr, _ := toAPIError(err)
	if apiErr.Code != "not_found" && apiErr.Code != "failed_precondition" {
		return nil
	}
	return &db.RefusedCall{Principal: f.Principal, Worker: f.Worker, Job: f.ID, Operation: op,
		TokenSent: f.FencingToken, Code: apiErr.Code, Message: apiErr.Message}
}

// refused counts the refusals and writes them to the store in one call.
// The job's state is read when the status is served (withJobNow).
func (o observedStore) refused(ctx context.Context, zs ...*db.RefusedCall) {
	var calls []db.RefusedCall
	var ops []string
	for _, z := range zs {
		if z != nil {
			z.At = o.obs.now().UTC()
			calls = append(calls, *z)
			ops = append(ops, z.Operation)
		}
	}
	if len(calls) == 0 {
		return
	}
	o.obs.refused(ops...)
	ctx, cancel := observationContext(ctx)
	defer cancel()
	if err := o.Store.RecordRefusedCalls(ctx, calls); err != nil {
		o.log.Warn("recording refused calls for the status page failed", "calls", len(calls), "err", err)
	}
}

// sighted notes a claim call or heartbeat of a worker and writes what is
// due (observer.sighted).
func (o observedStore) sighted(ctx context.Context, principal, worker string, claim bool, n int) {
	due := o.obs.sighted(principal, worker, claim, n)
	if len(due) == 0 {
		return
	}
	ctx, cancel := observationContext(ctx)
	defer cancel()
	if err := o.Store.RecordWorkers(ctx, due); err != nil {
		o.log.Warn("recording workers for the status page failed", "workers", len(due), "err", err)
	}
}
