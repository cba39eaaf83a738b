package api

// Batched fenced calls: POST /v1/jobs/heartbeat, /v1/jobs/complete and
// /v1/jobs/fail take {"worker": …, "jobs": [{"id": …, "fencing_token": …,
// …}, …]} and decide every item in one transaction, each exactly as the
// single call on /v1/jobs/{id}/… would (same code, same message). A
// well-formed batch is answered 200 with one result per item, in order,
// even when every item was refused. Only a malformed request is a 400, and
// then nothing is applied: a body that is not an object, no jobs, more
// than db.MaxFencedBatch, one job twice, an item that is not an object or
// has a field of the wrong type, an item without an id.

import (
	"bytes"
	"encoding/json"
	"net/http"

	"github.com/fenceq/fenceq/db"
	"github.com/labstack/echo/v4"
)

// batchBody is the part every batch shares: the default worker of its
// items and the items, decoded one by one so that an error names its item.
type batchBody struct {
	Worker string            `json:"worker"`
	Jobs   []json.RawMessage `json:"jobs"`
}

// batchItem is what every item has. Worker, when given, overrides the
// batch's.
type batchItem struct {
	ID           *uint64 `json:"id"`
	Worker       string  `json:"worker"`
	FencingToken uint64  `json:"fencing_token"`
}

// itemResponse is one item's outcome: the job as written, or the error
// the single call would have answered (nothing of the item was written).
type itemResponse struct {
	ID    uint64       `json:"id"`
	Job   *jobResponse `json:"job,omitempty"`
	Error *itemError   `json:"error,omitempty"`
}

type itemError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

type batchResponse struct {
	Results  []itemResponse `json:"results"`
	NextJobs []jobResponse  `json:"next_jobs,omitempty"`
}

func (it batchItem) item() batchItem { return it }

// decodeItems decodes each raw item into a fresh T (via into) and names the
// item in any error.
func decodeItems[T interface{ item() batchItem }](raw []json.RawMessage, into func(i int, v *T, it batchItem) error) error {
	if len(raw) == 0 {
		return invalidArgument("jobs is empty; give at least one job")
	}
	if len(raw) > db.MaxFencedBatch {
		return invalidArgument("jobs has %d items; at most %d per call", len(raw), db.MaxFencedBatch)
	}
	for i, r := range raw {
		if t := bytes.TrimSpace(r); len(t) == 0 || t[0] != '{' {
			return invalidArgument("jobs[%d] must be a JSON object", i)
		}
		var v T
		if err := decodeJSON(r, &v, false); err != nil {
			return itemInvalid(i, err)
		}
		it := v.item()
		if it.ID == nil || *it.ID == 0 {
			return invalidArgument("jobs[%d]: id must be a positive integer", i)
		}
		if len(it.Worker) > maxWorkerBytes {
			return invalidArgument("jobs[%d]: worker is longer than %d bytes", i, maxWorkerBytes)
		}
		if err := into(i, &v, it); err != nil {
			return itemInvalid(i, err)
		}
	}
	return nil
}

// maxWorkerBytes is the longest worker label (lease.ValidateWorker), the
// document's maxLength of a batch's and an item's worker. A longer one
// breaks the request's schema, so it is a 400 for the whole request, not
// the item's own refusal that the single call's rules would give.
const maxWorkerBytes = 200

// check refuses what makes the whole batch malformed before any item is
// read: a default worker longer than the document allows.
func (b batchBody) check() error {
	if len(b.Worker) > maxWorkerBytes {
		return invalidArgument("worker is longer than %d bytes", maxWorkerBytes)
	}
	return nil
}

func itemInvalid(i int, err error) error {
	apiErr, _ := toAPIError(err)
	return invalidArgument("jobs[%d]: %s", i, apiErr.Message)
}

func (b batchBody) fenced(c echo.Context, it batchItem) db.Fenced {
	w := it.Worker
	if w == "" {
		w = b.Worker
	}
	return db.Fenced{ID: *it.ID, Principal: principalOf(c), Worker: w, FencingToken: it.FencingToken}
}

// results turns the store's outcomes into the reply, and counts and logs
// each refused item as the single call's refusal would be.
func (s *Server) results(c echo.Context, items []db.ItemResult, ids []uint64) []itemResponse {
	out := make([]itemResponse, len(items))
	for i, r := range items {
		out[i].ID = ids[i]
		if r.Err == nil {
			j := toJobResponse(r.Job)
			out[i].Job = &j
			continue
		}
		apiErr, known := toAPIError(r.Err)
		if !known {
			s.log.Error("internal error", "path", c.Request().URL.Path, "item", i, "err", r.Err)
		} else {
			s.refusals.add(c.Request().Method+" "+c.Path(), apiErr.Code)
		}
		out[i].Error = &itemError{Code: apiErr.Code, Message: apiErr.Message}
	}
	return out
}

func (s *Server) heartbeatBatch(c echo.Context) error {
	var b batchBody
	if err := bindJSON(c, &b); err != nil {
		return err
	}
	if err := b.check(); err != nil {
		return err
	}
	reqs := make([]db.HeartbeatRequest, len(b.Jobs))
	ids := make([]uint64, len(b.Jobs))
	type item struct {
		batchItem
		LeaseMs int64 `json:"lease_ms"`
	}
	err := decodeItems(b.Jobs, func(i int, v *item, it batchItem) error {
		reqs[i].Fenced, ids[i] = b.fenced(c, it), *it.ID
		var err error
		reqs[i].Lease, err = msDuration("lease_ms", v.LeaseMs)
		return err
	})
	if err != nil {
		return err
	}
	res, err := s.store.HeartbeatJobs(c.Request().Context(), reqs)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, batchResponse{Results: s.results(c, res, ids)})
}

func (s *Server) completeBatch(c echo.Context) error {
	var b struct {
		batchBody
		ClaimNext *claimNextBody `json:"claim_next"`
	}
	if err := bindJSON(c, &b); err != nil {
		return err
	}
	if err := b.check(); err != nil {
		return err
	}
	req := db.CompleteBatchRequest{Items: make([]db.CompleteRequest, len(b.Jobs))}
	ids := make([]uint64, len(b.Jobs))
	type item struct {
		batchItem
		Result      json.RawMessage `json:"result"`
		Attestation json.RawMessage `json:"attestation"`
	}
	err := decodeItems(b.Jobs, func(i int, v *item, it batchItem) error {
		req.Items[i] = db.CompleteRequest{Fenced: b.fenced(c, it), Result: v.Result, Attestation: v.Attestation}
		ids[i] = *it.ID
		return nil
	})
	if err != nil {
		return err
	}
	if n := b.ClaimNext; n != nil {
		next := db.ClaimRequest{Principal: principalOf(c), Worker: n.Worker, Queues: n.Queues, Max: n.Max}
		if next.Worker == "" {
			next.Worker = b.Worker
		}
		if next.Lease, err = msDuration("claim_next.lease_ms", n.LeaseMs); err != nil {
			return err
		}
		if n.Max < 0 {
			return invalidArgument("claim_next.max must be at least 1, got %d", n.Max)
		}
		req.Next = &next
	}
	res, err := s.store.CompleteJobs(c.Request().Context(), req)
	if err != nil {
		return err
	}
	out := batchResponse{Results: s.results(c, res.Items, ids)}
	if req.Next != nil {
		out.NextJobs = toJobsResponse(res.Next).Jobs
	}
	return c.JSON(http.StatusOK, out)
}

func (s *Server) failBatch(c echo.Context) error {
	var b batchBody
	if err := bindJSON(c, &b); err != nil {
		return err
	}
	if err := b.check(); err != nil {
		return err
	}
	reqs := make([]db.FailRequest, len(b.Jobs))
	ids := make([]uint64, len(b.Jobs))
	type item struct {
		batchItem
		Error        string `json:"error"`
		RetryDelayMs *int64 `json:"retry_delay_ms"`
		Final        bool   `json:"final"`
	}
	err := decodeItems(b.Jobs, func(i int, v *item, it batchItem) error {
		reqs[i] = db.FailRequest{Fenced: b.fenced(c, it), Error: v.Error, Final: v.Final}
		ids[i] = *it.ID
		if v.RetryDelayMs != nil {
			d, err := msDuration("retry_delay_ms", *v.RetryDelayMs)
			if err != nil {
				return err
			}
			reqs[i].RetryDelay = &d
		}
		return nil
	})
	if err != nil {
		return err
	}
	res, err := s.store.FailJobs(c.Request().Context(), reqs)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, batchResponse{Results: s.results(c, res, ids)})
}
