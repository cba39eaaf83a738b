package api

// The protobuf RPCs' handlers (rpc.go): each turns its message into the
// store request the JSON handler of the same call builds, with the same
// checks and messages, and the store's answer into messages. Errors are
// returned as they are; the rpcErrors interceptor maps them.

import (
	"context"
	"encoding/json"
	"time"

	"connectrpc.com/connect"
	"github.com/fenceq/fenceq/api/fenceqv1"
	"github.com/fenceq/fenceq/db"
	"google.golang.org/protobuf/types/known/timestamppb"
)

type jobRPC struct{ s *Server }

type leaseRPC struct{ s *Server }

func pbTime(t time.Time) *timestamppb.Timestamp {
	if t.IsZero() {
		return nil
	}
	return timestamppb.New(t)
}

// pbJob is the Job message of j: the JSON Job's fields (toJobResponse).
func pbJob(j db.Job) *fenceqv1.Job {
	r := toJobResponse(j)
	out := &fenceqv1.Job{Id: r.ID, Queue: r.Queue, Kind: r.Kind, Payload: r.Payload, Priority: r.Priority,
		State: string(r.State), Attempts: r.Attempts, MaxAttempts: r.MaxAttempts, FencingToken: r.FencingToken,
		ClaimedBy: r.ClaimedBy, LeaseExpiresAt: pbTime(j.LeaseExpiresAt), RunAt: pbTime(j.RunAt),
		CreatedAt: pbTime(j.CreatedAt), UpdatedAt: pbTime(j.UpdatedAt), CompletedAt: pbTime(j.CompletedAt),
		LastError: r.LastError, Result: r.Result, Attestation: r.Attestation, IdempotencyKey: r.IdempotencyKey,
		Schedule: r.Schedule, ScheduledFor: pbTime(j.ScheduledFor), Backfilled: r.Backfilled}
	for _, e := range r.Errors {
		out.Errors = append(out.Errors, &fenceqv1.JobError{Attempt: e.Attempt, At: pbTime(e.At), Error: e.Error})
	}
	return out
}

func pbJobs(jobs []db.Job) []*fenceqv1.Job {
	out := make([]*fenceqv1.Job, len(jobs))
	for i, j := range jobs {
		out[i] = pbJob(j)
	}
	return out
}

func principalIn(ctx context.Context) string { return callOf(ctx).principal }

// rawJSON keeps an empty bytes field as "not given" (nil), as an absent
// JSON field is.
func rawJSON(b []byte) json.RawMessage {
	if len(b) == 0 {
		return nil
	}
	return json.RawMessage(b)
}

func enqueueRequest(ctx context.Context, m *fenceqv1.EnqueueJobRequest) (db.EnqueueRequest, error) {
	b := enqueueBody{Queue: m.GetQueue(), Kind: m.GetKind(), Payload: rawJSON(m.GetPayload()), Priority: m.GetPriority(),
		MaxAttempts: m.GetMaxAttempts(), DelayMs: m.GetDelayMs(), IdempotencyKey: m.GetIdempotencyKey()}
	if m.RunAt != nil {
		if err := m.RunAt.CheckValid(); err != nil {
			return db.EnqueueRequest{}, invalidArgument("run_at is not a valid time: %v", err)
		}
		b.RunAt = m.RunAt.AsTime().Format(time.RFC3339Nano)
	}
	return b.request(principalIn(ctx))
}

func (h jobRPC) EnqueueJob(ctx context.Context, req *connect.Request[fenceqv1.EnqueueJobRequest]) (*connect.Response[fenceqv1.EnqueueJobResponse], error) {
	r, err := enqueueRequest(ctx, req.Msg)
	if err != nil {
		return nil, err
	}
	res, err := h.s.store.EnqueueJobs(ctx, []db.EnqueueRequest{r})
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&fenceqv1.EnqueueJobResponse{Job: pbJob(res[0].Job), Created: res[0].Created}), nil
}

func (h jobRPC) EnqueueJobs(ctx context.Context, req *connect.Request[fenceqv1.EnqueueJobsRequest]) (*connect.Response[fenceqv1.EnqueueJobsResponse], error) {
	items := req.Msg.GetJobs()
	if len(items) == 0 {
		return nil, invalidArgument("the list of jobs is empty")
	}
	if len(items) > db.MaxEnqueueBatch {
		return nil, invalidArgument("the list of jobs has %d items; at most %d per call", len(items), db.MaxEnqueueBatch)
	}
	reqs := make([]db.EnqueueRequest, len(items))
	for i, m := range items {
		var err error
		if reqs[i], err = enqueueRequest(ctx, m); err != nil {
			return nil, err
		}
	}
	res, err := h.s.store.EnqueueJobs(ctx, reqs)
	if err != nil {
		return nil, err
	}
	out := &fenceqv1.EnqueueJobsResponse{Jobs: make([]*fenceqv1.Job, len(res))}
	for i, r := range res {
		out.Jobs[i] = pbJob(r.Job)
	}
	return connect.NewResponse(out), nil
}

func (h jobRPC) ClaimJob(ctx context.Context, req *connect.Request[fenceqv1.ClaimJobRequest]) (*connect.Response[fenceqv1.ClaimJobResponse], error) {
	m := req.Msg
	r := db.ClaimRequest{Principal: principalIn(ctx), Worker: m.GetWorker(), Queues: m.GetQueues()}
	var err error
	if r.Lease, err = msDuration("lease_ms", m.GetLeaseMs()); err != nil {
		return nil, err
	}
	if r.Wait, err = msDuration("wait_ms", m.GetWaitMs()); err != nil {
		return nil, err
	}
	r.Wait = min(r.Wait, h.s.cfg.MaxWait) // shortened, not refused, as the JSON claim's
	if m.GetMax() < 0 {
		return nil, invalidArgument("max must be at least 1, got %d", m.GetMax())
	}
	r.Max = int(m.GetMax())
	jobs, err := h.s.store.ClaimJobs(ctx, r)
	if err != nil {
		return nil, err
	}
	out := &fenceqv1.ClaimJobResponse{}
	switch {
	case r.Max > 0:
		out.Jobs = pbJobs(jobs)
	case len(jobs) > 0:
		out.Job = pbJob(jobs[0])
	}
	return connect.NewResponse(out), nil
}

func fencedOf(ctx context.Context, id uint64, worker string, token uint64) (db.Fenced, error) {
	if id == 0 {
		return db.Fenced{}, invalidArgument("id must be a positive integer")
	}
	return db.Fenced{ID: id, Principal: principalIn(ctx), Worker: worker, FencingToken: token}, nil
}

func (h jobRPC) HeartbeatJob(ctx context.Context, req *connect.Request[fenceqv1.HeartbeatJobRequest]) (*connect.Response[fenceqv1.HeartbeatJobResponse], error) {
	m := req.Msg
	var r db.HeartbeatRequest
	var err error
	if r.Fenced, err = fencedOf(ctx, m.GetId(), m.GetWorker(), m.GetFencingToken()); err != nil {
		return nil, err
	}
	if r.Lease, err = msDuration("lease_ms", m.GetLeaseMs()); err != nil {
		return nil, err
	}
	job, err := h.s.store.HeartbeatJob(ctx, r)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&fenceqv1.HeartbeatJobResponse{Job: pbJob(job)}), nil
}

func claimNextOf(ctx context.Context, n *fenceqv1.ClaimNext, worker string) (*db.ClaimRequest, error) {
	if n == nil {
		return nil, nil
	}
	next := &db.ClaimRequest{Principal: principalIn(ctx), Worker: n.GetWorker(), Queues: n.GetQueues(), Max: int(n.GetMax())}
	if next.Worker == "" {
		next.Worker = worker
	}
	var err error
	if next.Lease, err = msDuration("claim_next.lease_ms", n.GetLeaseMs()); err != nil {
		return nil, err
	}
	if n.GetMax() < 0 {
		return nil, invalidArgument("claim_next.max must be at least 1, got %d", n.GetMax())
	}
	return next, nil
}

func (h jobRPC) CompleteJob(ctx context.Context, req *connect.Request[fenceqv1.CompleteJobRequest]) (*connect.Response[fenceqv1.CompleteJobResponse], error) {
	m := req.Msg
	r := db.CompleteRequest{Result: rawJSON(m.GetResult()), Attestation: rawJSON(m.GetAttestation())}
	var err error
	if r.Fenced, err = fencedOf(ctx, m.GetId(), m.GetWorker(), m.GetFencingToken()); err != nil {
		return nil, err
	}
	next, err := claimNextOf(ctx, m.GetClaimNext(), "")
	if err != nil {
		return nil, err
	}
	if next == nil {
		job, err := h.s.store.CompleteJob(ctx, r)
		if err != nil {
			return nil, err
		}
		return connect.NewResponse(&fenceqv1.CompleteJobResponse{Job: pbJob(job)}), nil
	}
	next.Principal = "" // as the JSON call's claim_next: the store takes the completion's principal
	job, jobs, err := h.s.store.CompleteAndClaimJob(ctx, r, *next)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&fenceqv1.CompleteJobResponse{Job: pbJob(job), NextJobs: pbJobs(jobs)}), nil
}

func (h jobRPC) FailJob(ctx context.Context, req *connect.Request[fenceqv1.FailJobRequest]) (*connect.Response[fenceqv1.FailJobResponse], error) {
	m := req.Msg
	r := db.FailRequest{Error: m.GetError(), Final: m.GetFinal()}
	var err error
	if r.Fenced, err = fencedOf(ctx, m.GetId(), m.GetWorker(), m.GetFencingToken()); err != nil {
		return nil, err
	}
	if m.RetryDelayMs != nil {
		d, err := msDuration("retry_delay_ms", m.GetRetryDelayMs())
		if err != nil {
			return nil, err
		}
		r.RetryDelay = &d
	}
	job, err := h.s.store.FailJob(ctx, r)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&fenceqv1.FailJobResponse{Job: pbJob(job)}), nil
}

// checkBatch applies the JSON batches' rules for the whole request
// (batch.go): a default worker within the limit, 1 to db.MaxFencedBatch
// items, each with an id and a worker within the limit.
func checkBatch(worker string, n int, item func(i int) (id uint64, worker string)) error {
	if len(worker) > maxWorkerBytes {
		return invalidArgument("worker is longer than %d bytes", maxWorkerBytes)
	}
	if n == 0 {
		return invalidArgument("jobs is empty; give at least one job")
	}
	if n > db.MaxFencedBatch {
		return invalidArgument("jobs has %d items; at most %d per call", n, db.MaxFencedBatch)
	}
	for i := range n {
		id, w := item(i)
		if id == 0 {
			return invalidArgument("jobs[%d]: id must be a positive integer", i)
		}
		if len(w) > maxWorkerBytes {
			return invalidArgument("jobs[%d]: worker is longer than %d bytes", i, maxWorkerBytes)
		}
	}
	return nil
}

func batchFenced(ctx context.Context, batchWorker string, id uint64, worker string, token uint64) db.Fenced {
	if worker == "" {
		worker = batchWorker
	}
	return db.Fenced{ID: id, Principal: principalIn(ctx), Worker: worker, FencingToken: token}
}

// pbResults are the items' outcomes; refused items are counted and logged
// as the JSON batch's are (Server.results).
func (s *Server) pbResults(ctx context.Context, procedure string, items []db.ItemResult, ids []uint64) []*fenceqv1.ItemResult {
	out := make([]*fenceqv1.ItemResult, len(items))
	for i, r := range items {
		out[i] = &fenceqv1.ItemResult{Id: ids[i]}
		if r.Err == nil {
			out[i].Job = pbJob(r.Job)
			continue
		}
		apiErr, known := toAPIError(r.Err)
		if !known {
			s.log.ErrorContext(ctx, "internal error", "path", procedure, "item", i, "err", r.Err)
		} else {
			s.refusals.add("POST "+procedure, apiErr.Code)
		}
		out[i].Error = &fenceqv1.ItemError{Code: apiErr.Code, Message: apiErr.Message}
	}
	return out
}

func (h jobRPC) HeartbeatJobs(ctx context.Context, req *connect.Request[fenceqv1.HeartbeatJobsRequest]) (*connect.Response[fenceqv1.HeartbeatJobsResponse], error) {
	m := req.Msg
	items := m.GetJobs()
	if err := checkBatch(m.GetWorker(), len(items), func(i int) (uint64, string) { return items[i].GetId(), items[i].GetWorker() }); err != nil {
		return nil, err
	}
	reqs := make([]db.HeartbeatRequest, len(items))
	ids := make([]uint64, len(items))
	for i, it := range items {
		reqs[i].Fenced, ids[i] = batchFenced(ctx, m.GetWorker(), it.GetId(), it.GetWorker(), it.GetFencingToken()), it.GetId()
		var err error
		if reqs[i].Lease, err = msDuration("lease_ms", it.GetLeaseMs()); err != nil {
			return nil, itemInvalid(i, err)
		}
	}
	res, err := h.s.store.HeartbeatJobs(ctx, reqs)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&fenceqv1.HeartbeatJobsResponse{Results: h.s.pbResults(ctx, req.Spec().Procedure, res, ids)}), nil
}

func (h jobRPC) CompleteJobs(ctx context.Context, req *connect.Request[fenceqv1.CompleteJobsRequest]) (*connect.Response[fenceqv1.CompleteJobsResponse], error) {
	m := req.Msg
	items := m.GetJobs()
	if err := checkBatch(m.GetWorker(), len(items), func(i int) (uint64, string) { return items[i].GetId(), items[i].GetWorker() }); err != nil {
		return nil, err
	}
	r := db.CompleteBatchRequest{Items: make([]db.CompleteRequest, len(items))}
	ids := make([]uint64, len(items))
	for i, it := range items {
		r.Items[i] = db.CompleteRequest{Fenced: batchFenced(ctx, m.GetWorker(), it.GetId(), it.GetWorker(), it.GetFencingToken()),
			Result: rawJSON(it.GetResult()), Attestation: rawJSON(it.GetAttestation())}
		ids[i] = it.GetId()
	}
	next, err := claimNextOf(ctx, m.GetClaimNext(), m.GetWorker())
	if err != nil {
		return nil, err
	}
	r.Next = next
	res, err := h.s.store.CompleteJobs(ctx, r)
	if err != nil {
		return nil, err
	}
	out := &fenceqv1.CompleteJobsResponse{Results: h.s.pbResults(ctx, req.Spec().Procedure, res.Items, ids)}
	if r.Next != nil {
		out.NextJobs = pbJobs(res.Next)
	}
	return connect.NewResponse(out), nil
}

func (h jobRPC) FailJobs(ctx context.Context, req *connect.Request[fenceqv1.FailJobsRequest]) (*connect.Response[fenceqv1.FailJobsResponse], error) {
	m := req.Msg
	items := m.GetJobs()
	if err := checkBatch(m.GetWorker(), len(items), func(i int) (uint64, string) { return items[i].GetId(), items[i].GetWorker() }); err != nil {
		return nil, err
	}
	reqs := make([]db.FailRequest, len(items))
	ids := make([]uint64, len(items))
	for i, it := range items {
		reqs[i] = db.FailRequest{Fenced: batchFenced(ctx, m.GetWorker(), it.GetId(), it.GetWorker(), it.GetFencingToken()),
			Error: it.GetError(), Final: it.GetFinal()}
		ids[i] = it.GetId()
		if it.RetryDelayMs != nil {
			d, err := msDuration("retry_delay_ms", it.GetRetryDelayMs())
			if err != nil {
				return nil, itemInvalid(i, err)
			}
			reqs[i].RetryDelay = &d
		}
	}
	res, err := h.s.store.FailJobs(ctx, reqs)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&fenceqv1.FailJobsResponse{Results: h.s.pbResults(ctx, req.Spec().Procedure, res, ids)}), nil
}

func checkID(id uint64) error {
	if id == 0 {
		return invalidArgument("id must be a positive integer")
	}
	return nil
}

func (h jobRPC) GetJob(ctx context.Context, req *connect.Request[fenceqv1.GetJobRequest]) (*connect.Response[fenceqv1.GetJobResponse], error) {
	if err := checkID(req.Msg.GetId()); err != nil {
		return nil, err
	}
	job, err := h.s.store.GetJob(ctx, req.Msg.GetId())
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&fenceqv1.GetJobResponse{Job: pbJob(job)}), nil
}

func (h jobRPC) CancelJob(ctx context.Context, req *connect.Request[fenceqv1.CancelJobRequest]) (*connect.Response[fenceqv1.CancelJobResponse], error) {
	if err := checkID(req.Msg.GetId()); err != nil {
		return nil, err
	}
	job, err := h.s.store.CancelJob(ctx, db.JobRequest{Principal: principalIn(ctx), ID: req.Msg.GetId()})
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&fenceqv1.CancelJobResponse{Job: pbJob(job)}), nil
}

func (h jobRPC) RetryJob(ctx context.Context, req *connect.Request[fenceqv1.RetryJobRequest]) (*connect.Response[fenceqv1.RetryJobResponse], error) {
	if err := checkID(req.Msg.GetId()); err != nil {
		return nil, err
	}
	job, err := h.s.store.RetryJob(ctx, db.JobRequest{Principal: principalIn(ctx), ID: req.Msg.GetId()})
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&fenceqv1.RetryJobResponse{Job: pbJob(job)}), nil
}

func (h jobRPC) CheckJob(ctx context.Context, req *connect.Request[fenceqv1.CheckJobRequest]) (*connect.Response[fenceqv1.CheckJobResponse], error) {
	if err := checkID(req.Msg.GetId()); err != nil {
		return nil, err
	}
	job, err := h.s.store.CheckJob(ctx, req.Msg.GetId(), req.Msg.GetFencingToken())
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&fenceqv1.CheckJobResponse{Id: job.ID, FencingToken: job.Attempts, Current: true,
		LeaseExpiresAt: pbTime(job.LeaseExpiresAt)}), nil
}

// pbLease is the Lease message of l (toLeaseResponse).
func pbLease(l db.Lease) *fenceqv1.Lease {
	return &fenceqv1.Lease{Name: l.Name, Holder: l.Holder, FencingToken: l.FencingToken, Held: l.Held,
		ExpiresAt: pbTime(l.ExpiresAt), AcquiredAt: pbTime(l.AcquiredAt), UpdatedAt: pbTime(l.UpdatedAt)}
}

func checkLeaseName(name string) error {
	if name == "" {
		return invalidArgument("lease name is empty")
	}
	return nil
}

func (h leaseRPC) AcquireLease(ctx context.Context, req *connect.Request[fenceqv1.AcquireLeaseRequest]) (*connect.Response[fenceqv1.AcquireLeaseResponse], error) {
	m := req.Msg
	if err := checkLeaseName(m.GetName()); err != nil {
		return nil, err
	}
	r := db.AcquireLeaseRequest{Principal: principalIn(ctx), Name: m.GetName(), Holder: m.GetHolder()}
	var err error
	if r.TTL, err = msDuration("ttl_ms", m.GetTtlMs()); err != nil {
		return nil, err
	}
	if r.Wait, err = msDuration("wait_ms", m.GetWaitMs()); err != nil {
		return nil, err
	}
	if r.Wait <= db.MaxLeaseWait {
		r.Wait = min(r.Wait, h.s.cfg.MaxWait) // as the JSON acquire (leases.go)
	}
	l, err := h.s.store.AcquireLease(ctx, r)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&fenceqv1.AcquireLeaseResponse{Lease: pbLease(l)}), nil
}

func (h leaseRPC) RenewLease(ctx context.Context, req *connect.Request[fenceqv1.RenewLeaseRequest]) (*connect.Response[fenceqv1.RenewLeaseResponse], error) {
	m := req.Msg
	if err := checkLeaseName(m.GetName()); err != nil {
		return nil, err
	}
	r := db.RenewLeaseRequest{Principal: principalIn(ctx), Name: m.GetName(), Holder: m.GetHolder(), FencingToken: m.GetFencingToken()}
	var err error
	if r.TTL, err = msDuration("ttl_ms", m.GetTtlMs()); err != nil {
		return nil, err
	}
	l, err := h.s.store.RenewLease(ctx, r)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&fenceqv1.RenewLeaseResponse{Lease: pbLease(l)}), nil
}

func (h leaseRPC) ReleaseLease(ctx context.Context, req *connect.Request[fenceqv1.ReleaseLeaseRequest]) (*connect.Response[fenceqv1.ReleaseLeaseResponse], error) {
	m := req.Msg
	if err := checkLeaseName(m.GetName()); err != nil {
		return nil, err
	}
	l, err := h.s.store.ReleaseLease(ctx, db.ReleaseLeaseRequest{Principal: principalIn(ctx), Name: m.GetName(),
		Holder: m.GetHolder(), FencingToken: m.GetFencingToken()})
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&fenceqv1.ReleaseLeaseResponse{Lease: pbLease(l)}), nil
}

func (h leaseRPC) GetLease(ctx context.Context, req *connect.Request[fenceqv1.GetLeaseRequest]) (*connect.Response[fenceqv1.GetLeaseResponse], error) {
	if err := checkLeaseName(req.Msg.GetName()); err != nil {
		return nil, err
	}
	l, err := h.s.store.GetLease(ctx, req.Msg.GetName())
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&fenceqv1.GetLeaseResponse{Lease: pbLease(l)}), nil
}

func (h leaseRPC) CheckLease(ctx context.Context, req *connect.Request[fenceqv1.CheckLeaseRequest]) (*connect.Response[fenceqv1.CheckLeaseResponse], error) {
	if err := checkLeaseName(req.Msg.GetName()); err != nil {
		return nil, err
	}
	l, err := h.s.store.CheckLease(ctx, req.Msg.GetName(), req.Msg.GetFencingToken())
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&fenceqv1.CheckLeaseResponse{Name: l.Name, FencingToken: l.FencingToken, Current: true,
		ExpiresAt: pbTime(l.ExpiresAt)}), nil
}
