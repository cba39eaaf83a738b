package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/fenceq/fenceq/api"
	"github.com/fenceq/fenceq/api/client"
	"github.com/fenceq/fenceq/db/bolt"
)

// exampleServer runs fenceq's API over a file in a temporary directory,
// as "fenceq serve" would, and returns its URL and a function that stops
// it.
func exampleServer() (string, func()) {
	dir, err := os.MkdirTemp("", "fenceq-example")
	if err != nil {
		panic(err)
	}
	store, err := bolt.Open(filepath.Join(dir, "fenceq.db"), bolt.Options{})
	if err != nil {
		panic(err)
	}
	srv := httptest.NewServer(api.New(store, api.Config{Logger: slog.New(slog.DiscardHandler)}))
	return srv.URL, func() {
		srv.Close()
		store.Close()
		os.RemoveAll(dir)
	}
}

// A producer enqueues a job; a worker claims it, completes it with the
// claim's fencing token, and cannot complete it a second time.
func Example() {
	base, stop := exampleServer() // e.g. "http://127.0.0.1:7420"
	defer stop()
	ctx := context.Background()

	c, err := client.New(base, client.WithToken(os.Getenv("FENCEQ_TOKEN")))
	if err != nil {
		panic(err)
	}
	res, err := c.Enqueue(ctx, client.NewJob{Queue: "emails", Payload: map[string]string{"to": "ada@example.com"}})
	if err != nil {
		panic(err)
	}
	fmt.Println("enqueued job", res.Job.ID, res.Job.State)

	job, ok, err := c.Claim(ctx, client.ClaimParams{Worker: "w1", Queues: []string{"emails"}, Lease: 30 * time.Second, Wait: 5 * time.Second})
	if err != nil || !ok {
		panic(fmt.Sprint("no job: ", err))
	}
	fmt.Println("claimed job", job.ID, "with fencing token", job.FencingToken, "payload", string(job.Payload))

	done, err := c.Complete(ctx, job.ID, client.CompleteParams{Worker: "w1", FencingToken: job.FencingToken, Result: map[string]bool{"sent": true}})
	if err != nil {
		panic(err)
	}
	fmt.Println("job", done.ID, done.State, "result", string(done.Result))

	// The claim is over: the same token is refused, and changes nothing.
	_, err = c.Complete(ctx, job.ID, client.CompleteParams{Worker: "w1", FencingToken: job.FencingToken, Result: "again"})
	fmt.Println("second completion refused:", client.IsCode(err, client.CodeFailedPrecondition))
	// Output:
	// enqueued job 1 available
	// claimed job 1 with fencing token 1 payload {"to":"ada@example.com"}
	// job 1 completed result {"sent":true}
	// second completion refused: true
}

// A Worker runs two handlers at once. It heartbeats, completes and fails
// with each claim's fencing token; a handler error wrapped in Final makes
// the job dead instead of retried. Cancelling Run's context stops it after
// the jobs in flight finished.
func ExampleWorker() {
	base, stop := exampleServer()
	defer stop()
	ctx := context.Background()
	c, err := client.New(base)
	if err != nil {
		panic(err)
	}
	if _, err := c.EnqueueBatch(ctx, []client.NewJob{
		{Queue: "numbers", Payload: map[string]int{"n": 2}},
		{Queue: "numbers", Payload: map[string]int{"n": -1}},
		{Queue: "numbers", Payload: map[string]int{"n": 21}},
	}); err != nil {
		panic(err)
	}

	runCtx, stopWorker := context.WithCancel(ctx)
	var finished atomic.Int32
	w, err := client.NewWorker(c, func(ctx context.Context, job client.Job) (result, attestation any, err error) {
		var p struct{ N int }
		if err := json.Unmarshal(job.Payload, &p); err != nil {
			return nil, nil, client.Final(err)
		}
		if p.N < 0 {
			return nil, nil, client.Final(errors.New("n must not be negative"))
		}
		return p.N * 2, nil, nil
	}, client.WorkerConfig{
		Name:        "doubler",
		Queues:      []string{"numbers"},
		Concurrency: 2,
		Lease:       10 * time.Second,
		Logger:      slog.New(slog.DiscardHandler),
		OnDone: func(d client.Done) {
			if finished.Add(1) == 3 {
				stopWorker()
			}
		},
	})
	if err != nil {
		panic(err)
	}
	if err := w.Run(runCtx); err != nil {
		panic(err)
	}

	page, err := c.ListJobs(ctx, client.ListParams{Queue: "numbers"})
	if err != nil {
		panic(err)
	}
	for _, j := range page.Jobs {
		if j.LastError != "" {
			fmt.Println(j.ID, j.State, j.LastError)
		} else {
			fmt.Println(j.ID, j.State, string(j.Result))
		}
	}
	// Output:
	// 1 completed 4
	// 2 dead n must not be negative
	// 3 completed 42
}
