package client

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"time"
)

// MaxBatch is the most jobs one batched heartbeat, completion or failure
// may carry (the server refuses more with CodeInvalidArgument).
const MaxBatch = 1000

// ItemResult is one item's outcome in a batched call: the job as the
// server stored it, or Err, the error the single call would have returned
// (an *Error with that call's status and code, so IsCode and StatusCode
// work on it as on a single call's error). A refused item changed nothing.
type ItemResult struct {
	ID  uint64
	Job Job
	Err error
}

// HeartbeatItem extends one claim's lease in a batch.
type HeartbeatItem struct {
	ID           uint64
	FencingToken uint64        // the claim's token; 0 sends none
	Lease        time.Duration // 0: the server's default
}

// CompleteItem completes one claim in a batch. Result and Attestation are
// marshalled to JSON (a json.RawMessage is sent as it is); nil is absent.
type CompleteItem struct {
	ID           uint64
	FencingToken uint64
	Result       any
	Attestation  any
}

// FailItem reports one failed attempt in a batch (see FailParams).
type FailItem struct {
	ID           uint64
	FencingToken uint64
	Error        string
	RetryDelay   *time.Duration
	Final        bool
}

type batchItemBody struct {
	ID           uint64          `json:"id"`
	FencingToken uint64          `json:"fencing_token,omitempty"`
	LeaseMs      int64           `json:"lease_ms,omitempty"`
	Result       json.RawMessage `json:"result,omitempty"`
	Attestation  json.RawMessage `json:"attestation,omitempty"`
	Error        string          `json:"error,omitempty"`
	RetryDelayMs *int64          `json:"retry_delay_ms,omitempty"`
	Final        bool            `json:"final,omitempty"`
}

type batchBody struct {
	Worker    string          `json:"worker"`
	Jobs      []batchItemBody `json:"jobs"`
	ClaimNext *claimNextBody  `json:"claim_next,omitempty"`
}

type batchAnswer struct {
	Results []struct {
		ID    uint64 `json:"id"`
		Job   *Job   `json:"job"`
		Error *struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	} `json:"results"`
	NextJobs []Job `json:"next_jobs"`
}

// statusForCode is the status the single call answers with code.
func statusForCode(code string) int {
	switch code {
	case CodeInvalidArgument:
		return http.StatusBadRequest
	case CodeNotFound:
		return http.StatusNotFound
	case CodeFailedPrecondition, CodeAlreadyExists:
		return http.StatusConflict
	case CodeResourceExhausted:
		return http.StatusRequestEntityTooLarge
	case CodeUnavailable:
		return http.StatusServiceUnavailable
	case CodePermissionDenied:
		return http.StatusForbidden
	case CodeUnauthenticated:
		return http.StatusUnauthorized
	}
	return http.StatusInternalServerError
}

func (c *Client) batch(ctx context.Context, op string, body batchBody) ([]ItemResult, []Job, error) {
	var out batchAnswer
	path := "/v1/jobs/" + op
	if _, err := c.do(ctx, request{method: http.MethodPost, escapedPath: path, body: body}, &out); err != nil {
		return nil, nil, err
	}
	if len(out.Results) != len(body.Jobs) {
		return nil, nil, fmt.Errorf("fenceq: POST %s: %d results for %d jobs", path, len(out.Results), len(body.Jobs))
	}
	res := make([]ItemResult, len(out.Results))
	for i, r := range out.Results {
		res[i].ID = r.ID
		switch {
		case r.Error != nil:
			res[i].Err = &Error{StatusCode: statusForCode(r.Error.Code), Code: r.Error.Code, Message: r.Error.Message,
				Method: http.MethodPost, Path: fmt.Sprintf("%s (job %d)", path, r.ID)}
		case r.Job != nil:
			res[i].Job = *r.Job
		default:
			return nil, nil, fmt.Errorf("fenceq: POST %s: result %d has neither a job nor an error", path, i)
		}
	}
	return res, out.NextJobs, nil
}

// HeartbeatMany extends several claims of worker in one call and one
// transaction (POST /v1/jobs/heartbeat). Each item is decided as Heartbeat
// would decide it alone: a refused item's Err is that call's error (a lost
// claim is CodeNotFound). err is for the call as a whole: a malformed
// batch (none, more than MaxBatch, a job twice), or no answer.
func (c *Client) HeartbeatMany(ctx context.Context, worker string, items []HeartbeatItem) ([]ItemResult, error) {
	body := batchBody{Worker: worker, Jobs: make([]batchItemBody, len(items))}
	for i, it := range items {
		body.Jobs[i] = batchItemBody{ID: it.ID, FencingToken: it.FencingToken, LeaseMs: millis(it.Lease)}
	}
	res, _, err := c.batch(ctx, "heartbeat", body)
	return res, err
}

// CompleteMany completes several claims of worker in one call and one
// transaction (POST /v1/jobs/complete), each item decided as Complete
// would (a lost claim is CodeFailedPrecondition). With next, the same
// transaction then claims up to next.Max jobs (0: one), whatever the
// items' outcomes; they are returned as claimed.
func (c *Client) CompleteMany(ctx context.Context, worker string, items []CompleteItem, next *ClaimNext) ([]ItemResult, []Job, error) {
	body := batchBody{Worker: worker, Jobs: make([]batchItemBody, len(items))}
	for i, it := range items {
		r, err := jsonValue(fmt.Sprintf("jobs[%d].result", i), it.Result)
		if err != nil {
			return nil, nil, err
		}
		a, err := jsonValue(fmt.Sprintf("jobs[%d].attestation", i), it.Attestation)
		if err != nil {
			return nil, nil, err
		}
		body.Jobs[i] = batchItemBody{ID: it.ID, FencingToken: it.FencingToken, Result: r, Attestation: a}
	}
	if next != nil {
		body.ClaimNext = &claimNextBody{Worker: next.Worker, Queues: next.Queues, LeaseMs: millis(next.Lease), Max: next.Max}
	}
	return c.batch(ctx, "complete", body)
}

// FailMany records several failed attempts of worker in one call and one
// transaction (POST /v1/jobs/fail), each item decided as Fail would (a
// lost claim is CodeNotFound).
func (c *Client) FailMany(ctx context.Context, worker string, items []FailItem) ([]ItemResult, error) {
	body := batchBody{Worker: worker, Jobs: make([]batchItemBody, len(items))}
	for i, it := range items {
		body.Jobs[i] = batchItemBody{ID: it.ID, FencingToken: it.FencingToken, Error: it.Error, Final: it.Final}
		if it.RetryDelay != nil {
			ms := millis(*it.RetryDelay)
			body.Jobs[i].RetryDelayMs = &ms
		}
	}
	res, _, err := c.batch(ctx, "fail", body)
	return res, err
}
