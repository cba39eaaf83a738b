package api_test

// The protobuf front end's cost against the JSON API's, in the same run on
// the same kind of server (a real bbolt file behind a real HTTP server on
// 127.0.0.1): 16 clients enqueueing one job a call, and 16 workers
// draining with a claim then a complete per job. Each client is what a
// process of a real deployment would be, with its own connection: JSON
// over a keep-alive HTTP/1.1 connection, gRPC over an h2c connection of
// its own ("grpc"), Connect over HTTP/1.1. "grpc1conn" puts the 16 gRPC
// clients on one shared h2c connection, as goroutines of one process
// would. One run of the benchmark is a round: the fronts in turn, each on
// a fresh server (-count would repeat each sub-benchmark before the next
// one, not alternate them). Besides jobs/s each reports the bbolt commits
// per job and the process's CPU time per job (clients and server).
// Figures: docs/performance.md ("Protobuf"); five rounds:
//
//	for r in 1 2 3 4 5; do go test -run '^$' -bench 'RPCvsJSON' -benchtime 4000x ./api/; done

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/fenceq/fenceq/api"
	"github.com/fenceq/fenceq/api/fenceqv1"
	"github.com/fenceq/fenceq/api/fenceqv1/fenceqv1connect"
	"github.com/fenceq/fenceq/db"
	"github.com/fenceq/fenceq/internal/apitest"
)

const benchClients = 16

// benchFront is one way to call the server: enqueue one job, claim one
// (0 when none), complete it.
type benchFront struct {
	enqueue  func(ctx context.Context) error
	claim    func(ctx context.Context, worker string) (id, token uint64, err error)
	complete func(ctx context.Context, worker string, id, token uint64) error
}

var benchPayload = []byte(`{"to":"ada@example.com","subject":"hello","n":12345}`)

// A frontFactory gives the benchFront of client i (0 ≤ i < benchClients).
type frontFactory func(b *testing.B, base string) func(i int) benchFront

func jsonFront(b *testing.B, base string) func(int) benchFront {
	// One keep-alive connection per client: the pool keeps them all.
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: benchClients * 2}, Timeout: time.Minute}
	b.Cleanup(hc.CloseIdleConnections)
	post := func(ctx context.Context, path string, body []byte) (int, []byte, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+path, bytes.NewReader(body))
		if err != nil {
			return 0, nil, err
		}
		req.Header.Set("Content-Type", "application/json")
		res, err := hc.Do(req)
		if err != nil {
			return 0, nil, err
		}
		defer res.Body.Close()
		out, err := io.ReadAll(res.Body)
		return res.StatusCode, out, err
	}
	enqueueBody := []byte(`{"queue":"bench","payload":` + string(benchPayload) + `}`)
	f := benchFront{
		enqueue: func(ctx context.Context) error {
			if st, out, err := post(ctx, "/v1/jobs", enqueueBody); err != nil || st != http.StatusCreated {
				return fmt.Errorf("enqueue: %d %s %v", st, out, err)
			}
			return nil
		},
		claim: func(ctx context.Context, worker string) (uint64, uint64, error) {
			st, out, err := post(ctx, "/v1/claim", []byte(`{"worker":"`+worker+`","queues":["bench"]}`))
			if err != nil || st == http.StatusNoContent {
				return 0, 0, err
			}
			var j struct {
				ID           uint64 `json:"id"`
				FencingToken uint64 `json:"fencing_token"`
			}
			if st != http.StatusOK || json.Unmarshal(out, &j) != nil {
				return 0, 0, fmt.Errorf("claim: %d %s", st, out)
			}
			return j.ID, j.FencingToken, nil
		},
		complete: func(ctx context.Context, worker string, id, token uint64) error {
			body := fmt.Appendf(nil, `{"worker":%q,"fencing_token":%d,"result":{"ok":true}}`, worker, token)
			if st, out, err := post(ctx, fmt.Sprintf("/v1/jobs/%d/complete", id), body); err != nil || st != http.StatusOK {
				return fmt.Errorf("complete: %d %s %v", st, out, err)
			}
			return nil
		},
	}
	return func(int) benchFront { return f }
}

// grpcFront: each client has its own h2c connection (its own transport).
func grpcFront(b *testing.B, base string) func(int) benchFront {
	fronts := make([]benchFront, benchClients)
	for i := range fronts {
		hc := h2c()
		b.Cleanup(hc.CloseIdleConnections)
		fronts[i] = rpcFront(fenceqv1connect.NewJobServiceClient(hc, base, connect.WithGRPC()))
	}
	return func(i int) benchFront { return fronts[i] }
}

// grpc1connFront: the clients share one h2c connection.
func grpc1connFront(b *testing.B, base string) func(int) benchFront {
	hc := h2c()
	b.Cleanup(hc.CloseIdleConnections)
	f := rpcFront(fenceqv1connect.NewJobServiceClient(hc, base, connect.WithGRPC()))
	return func(int) benchFront { return f }
}

// connectFront: the Connect protocol over HTTP/1.1, a keep-alive
// connection per client.
func connectFront(b *testing.B, base string) func(int) benchFront {
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: benchClients * 2}, Timeout: time.Minute}
	b.Cleanup(hc.CloseIdleConnections)
	f := rpcFront(fenceqv1connect.NewJobServiceClient(hc, base))
	return func(int) benchFront { return f }
}

func rpcFront(c fenceqv1connect.JobServiceClient) benchFront {
	return benchFront{
		enqueue: func(ctx context.Context) error {
			_, err := c.EnqueueJob(ctx, connect.NewRequest(&fenceqv1.EnqueueJobRequest{Queue: "bench", Payload: benchPayload}))
			return err
		},
		claim: func(ctx context.Context, worker string) (uint64, uint64, error) {
			res, err := c.ClaimJob(ctx, connect.NewRequest(&fenceqv1.ClaimJobRequest{Worker: worker, Queues: []string{"bench"}}))
			if err != nil || res.Msg.GetJob() == nil {
				return 0, 0, err
			}
			return res.Msg.GetJob().GetId(), res.Msg.GetJob().GetFencingToken(), nil
		},
		complete: func(ctx context.Context, worker string, id, token uint64) error {
			_, err := c.CompleteJob(ctx, connect.NewRequest(&fenceqv1.CompleteJobRequest{Id: id, Worker: worker,
				FencingToken: token, Result: []byte(`{"ok":true}`)}))
			return err
		},
	}
}

// commits is the number of group commits st (bbolt) has made.
func commits(st db.Store) uint64 {
	c, _ := st.(interface{ CommitStats() (commits, ops uint64) }).CommitStats()
	return c
}

// cpuTime is the CPU time (user and system) the process has used: the
// clients' and the server's, which share the machine.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// parallel runs n calls of do spread over benchClients goroutines.
func parallel(b *testing.B, n int, do func(client int) error) {
	var next atomic.Int64
	var wg sync.WaitGroup
	var first atomic.Value
	for c := range benchClients {
		wg.Go(func() {
			for next.Add(1) <= int64(n) {
				if err := do(c); err != nil {
					first.CompareAndSwap(nil, err)
					return
				}
			}
		})
	}
	wg.Wait()
	if err, _ := first.Load().(error); err != nil {
		b.Fatal(err)
	}
}

func BenchmarkRPCvsJSON(b *testing.B) {
	fronts := map[string]frontFactory{"json": jsonFront, "grpc": grpcFront, "grpc1conn": grpc1connFront, "connect": connectFront}
	for _, name := range []string{"json", "grpc", "grpc1conn", "connect"} {
		b.Run("enqueue16/"+name, func(b *testing.B) {
			s := apitest.Serve(b, apitest.Bolt(b, db.Rules{}), api.Config{})
			front := fronts[name](b, s.URL)
			ctx := context.Background()
			b.ResetTimer()
			c0, cpu0 := commits(s.Store), cpuTime()
			parallel(b, b.N, func(c int) error { return front(c).enqueue(ctx) })
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "jobs/s")
			b.ReportMetric(float64(commits(s.Store)-c0)/float64(b.N), "commits/job")
			b.ReportMetric(float64(cpuTime()-cpu0)/float64(time.Microsecond)/float64(b.N), "cpu-µs/job")
		})
		b.Run("drain16/"+name, func(b *testing.B) {
			s := apitest.Serve(b, apitest.Bolt(b, db.Rules{}), api.Config{})
			ctx := context.Background()
			for left := b.N; left > 0; left -= db.MaxEnqueueBatch {
				reqs := make([]db.EnqueueRequest, min(left, db.MaxEnqueueBatch))
				for i := range reqs {
					reqs[i] = db.EnqueueRequest{Principal: "local", Queue: "bench", Payload: benchPayload}
				}
				if _, err := s.Store.EnqueueJobs(ctx, reqs); err != nil {
					b.Fatal(err)
				}
			}
			front := fronts[name](b, s.URL)
			var done atomic.Int64
			c0, cpu0 := commits(s.Store), cpuTime()
			b.ResetTimer()
			var wg sync.WaitGroup
			errs := make(chan error, benchClients)
			for w := range benchClients {
				worker := fmt.Sprintf("w%d", w)
				f := front(w)
				wg.Go(func() {
					for done.Load() < int64(b.N) {
						id, token, err := f.claim(ctx, worker)
						if err != nil {
							errs <- err
							return
						}
						if id == 0 {
							return
						}
						if err := f.complete(ctx, worker, id, token); err != nil {
							errs <- err
							return
						}
						done.Add(1)
					}
				})
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				b.Fatal(err)
			}
			if done.Load() != int64(b.N) {
				b.Fatalf("drained %d of %d jobs", done.Load(), b.N)
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "jobs/s")
			b.ReportMetric(float64(commits(s.Store)-c0)/float64(b.N), "commits/job")
			b.ReportMetric(float64(cpuTime()-cpu0)/float64(time.Microsecond)/float64(b.N), "cpu-µs/job")
		})
	}
}
