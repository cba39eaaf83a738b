package client_test

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fenceq/fenceq/api"
	"github.com/fenceq/fenceq/api/client"
	"github.com/fenceq/fenceq/db"
)

// A worker's calls reuse their connections: the answers to batches of
// jobs are large enough to be sent chunked, and a body closed before its
// last chunk was read takes its connection with it, so that every call
// would dial anew (and the server set up a connection per call).
func TestWorker_BatchCallsReuseTheirConnections(t *testing.T) {
	srv := newServer(t, db.Rules{}, api.Config{})
	var dials atomic.Int64
	tr := &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			dials.Add(1)
			return (&net.Dialer{}).DialContext(ctx, network, addr)
		},
		MaxIdleConnsPerHost: 8,
	}
	t.Cleanup(tr.CloseIdleConnections)
	c := mustClient(t, srv.URL, client.WithHTTPClient(&http.Client{Transport: tr}))
	ctx := context.Background()
	const n, concurrency = 320, 16
	payload := json.RawMessage(`{"pad":"` + strings.Repeat("x", 1000) + `"}`)
	jobs := make([]client.NewJob, 0, n)
	for range n {
		jobs = append(jobs, client.NewJob{Queue: "reuse", Payload: payload})
	}
	if _, err := c.EnqueueBatch(ctx, jobs); err != nil {
		t.Fatal(err)
	}
	done := make(chan client.Done, n)
	w, err := client.NewWorker(c, func(context.Context, client.Job) (any, any, error) { return nil, nil, nil },
		client.WorkerConfig{Name: "w", Queues: []string{"reuse"}, Concurrency: concurrency, Lease: 30 * time.Second, Wait: 100 * time.Millisecond,
			OnDone: func(d client.Done) { done <- d }})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	ran := make(chan error, 1)
	go func() { ran <- w.Run(runCtx) }()
	for i := range n {
		select {
		case d := <-done:
			if d.Outcome != client.OutcomeCompleted {
				t.Fatalf("job %d: outcome %s (%v), want completed", d.Job.ID, d.Outcome, d.Err)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("%d of %d jobs done after 30s", i, n)
		}
	}
	stop()
	if err := <-ran; err != nil {
		t.Fatalf("Run() = %v", err)
	}
	// At least n/concurrency finish calls went out; the worker has at most
	// three calls in flight at once (claim, finish, heartbeat), and the
	// enqueue went first.
	calls := n / concurrency
	if got := dials.Load(); got > 5 {
		t.Errorf("%d connections dialed for at least %d calls, want at most 5: connections are not reused", got, calls)
	}
}
