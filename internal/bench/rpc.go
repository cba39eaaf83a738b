package bench

// --protocol grpc and connect: the calls of a producer or worker through
// the protobuf API's generated connect client, each caller with an HTTP
// client (and so a connection) of its own, as each process of a
// deployment would have.

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"time"

	"connectrpc.com/connect"
	"github.com/fenceq/fenceq/api/fenceqv1"
	"github.com/fenceq/fenceq/api/fenceqv1/fenceqv1connect"
)

// rpcCaller calls the protobuf API.
type rpcCaller struct {
	b      *bencher
	ctx    context.Context
	hc     *http.Client
	jobs   fenceqv1connect.JobServiceClient
	worker string
	claimM *fenceqv1.ClaimJobRequest
	next   *fenceqv1.ClaimNext
	buf    []byte
}

// newRPCCaller gives the caller its own transport: one connection, h2c
// (HTTP/2 without TLS) or HTTP/2 over TLS for gRPC, HTTP/1.1 (or what TLS
// negotiates) for Connect.
func (b *bencher) newRPCCaller(ctx context.Context, worker string) *rpcCaller {
	tr := &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConnsPerHost:   1,
		MaxConnsPerHost:       1,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ExpectContinueTimeout: time.Second,
		DisableCompression:    true,
	}
	opts := []connect.ClientOption{}
	if b.cfg.Protocol == "grpc" {
		tr.Protocols = new(http.Protocols)
		tr.Protocols.SetHTTP2(true)
		tr.Protocols.SetUnencryptedHTTP2(true)
		opts = append(opts, connect.WithGRPC())
	}
	if token := b.cfg.Token; token != "" {
		opts = append(opts, connect.WithInterceptors(connect.UnaryInterceptorFunc(func(next connect.UnaryFunc) connect.UnaryFunc {
			return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
				req.Header().Set("Authorization", "Bearer "+token)
				return next(ctx, req)
			}
		})))
	}
	hc := &http.Client{Transport: tr, Timeout: time.Duration(b.cfg.WaitMs)*time.Millisecond + time.Minute}
	cfg := b.cfg
	c := &rpcCaller{b: b, ctx: ctx, hc: hc, worker: worker,
		jobs: fenceqv1connect.NewJobServiceClient(hc, cfg.Server, opts...),
		claimM: &fenceqv1.ClaimJobRequest{Worker: worker, Queues: []string{cfg.Queue}, LeaseMs: cfg.LeaseMs,
			WaitMs: cfg.WaitMs, Max: int32(min(cfg.ClaimMax, 1<<30))},
		next: &fenceqv1.ClaimNext{Queues: []string{cfg.Queue}, LeaseMs: cfg.LeaseMs, Max: int32(min(cfg.ClaimMax, 1<<30))},
	}
	return c
}

func (c *rpcCaller) close() { c.hc.CloseIdleConnections() }

// rpcError names the procedure of a failed call, as the JSON calls'
// errors name their route.
func rpcError(procedure string, err error) error {
	return fmt.Errorf("%s: %w", procedure, err)
}

func (c *rpcCaller) enqueue(n int64, due time.Duration, list bool) (int64, error) {
	payload := func() []byte {
		c.buf = c.b.appendPayload(c.buf[:0], due)
		return append([]byte(nil), c.buf...) // the message keeps it until sent
	}
	if !list {
		_, err := c.jobs.EnqueueJob(c.ctx, connect.NewRequest(&fenceqv1.EnqueueJobRequest{Queue: c.b.cfg.Queue, Payload: payload()}))
		if err != nil {
			return 0, rpcError(fenceqv1connect.JobServiceEnqueueJobProcedure, err)
		}
		return 1, nil
	}
	m := &fenceqv1.EnqueueJobsRequest{Jobs: make([]*fenceqv1.EnqueueJobRequest, n)}
	for i := range m.Jobs {
		m.Jobs[i] = &fenceqv1.EnqueueJobRequest{Queue: c.b.cfg.Queue, Payload: payload()}
	}
	res, err := c.jobs.EnqueueJobs(c.ctx, connect.NewRequest(m))
	if err != nil {
		return 0, rpcError(fenceqv1connect.JobServiceEnqueueJobsProcedure, err)
	}
	return int64(len(res.Msg.GetJobs())), nil
}

func benchJobOf(j *fenceqv1.Job) benchJob {
	return benchJob{ID: j.GetId(), Attempts: j.GetAttempts(), FencingToken: j.GetFencingToken(), Payload: json.RawMessage(j.GetPayload())}
}

func benchJobsOf(jobs []*fenceqv1.Job) []benchJob {
	out := make([]benchJob, len(jobs))
	for i, j := range jobs {
		out[i] = benchJobOf(j)
	}
	return out
}

func (c *rpcCaller) claim() ([]benchJob, error) {
	res, err := c.jobs.ClaimJob(c.ctx, connect.NewRequest(c.claimM))
	if err != nil {
		return nil, rpcError(fenceqv1connect.JobServiceClaimJobProcedure, err)
	}
	if j := res.Msg.GetJob(); j != nil {
		return []benchJob{benchJobOf(j)}, nil
	}
	return benchJobsOf(res.Msg.GetJobs()), nil
}

func (c *rpcCaller) complete(j benchJob, next bool) ([]benchJob, bool, error) {
	m := &fenceqv1.CompleteJobRequest{Id: j.ID, Worker: c.worker, FencingToken: j.token()}
	if next {
		m.ClaimNext = c.next
	}
	res, err := c.jobs.CompleteJob(c.ctx, connect.NewRequest(m))
	if err != nil {
		if connect.CodeOf(err) == connect.CodeFailedPrecondition {
			return nil, true, nil // the JSON API's 409
		}
		return nil, false, rpcError(fenceqv1connect.JobServiceCompleteJobProcedure, err)
	}
	return benchJobsOf(res.Msg.GetNextJobs()), false, nil
}
