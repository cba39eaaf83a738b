package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fenceq/fenceq/api"
	"github.com/fenceq/fenceq/api/client"
	"github.com/fenceq/fenceq/db"
)

// batchSent is the shape of a recorded claim or batch body.
type batchSent struct {
	Max  int `json:"max"`
	Jobs []struct {
		ID           uint64 `json:"id"`
		FencingToken uint64 `json:"fencing_token"`
	} `json:"jobs"`
	ClaimNext *struct {
		Max int `json:"max"`
	} `json:"claim_next"`
}

func decodeSent(t *testing.T, s sent) batchSent {
	t.Helper()
	var b batchSent
	if err := json.Unmarshal([]byte(s.Body), &b); err != nil {
		t.Fatalf("%s %s: body %q: %v", s.Method, s.Path, s.Body, err)
	}
	return b
}

// The worker claims for its free handlers in one long-poll, heartbeats
// every job it holds in one call per interval, and a refused item cancels
// only that job's handler.
func TestWorker_OneClaimForTheFreeHandlersOneHeartbeatForAllAndARefusedItemCancelsOnlyItsJob(t *testing.T) {
	srv := newServer(t, db.Rules{}, api.Config{})
	c := mustClient(t, srv.URL)
	ctx := context.Background()
	const n = 4
	for range n {
		if _, err := c.Enqueue(ctx, client.NewJob{Queue: "b"}); err != nil {
			t.Fatal(err)
		}
	}
	startedCh := make(chan started, n)
	release := make(chan struct{})
	causes := make(chan error, n)
	r := startRunner(t, srv.URL, client.WorkerConfig{Name: "w", Queues: []string{"b"}, Concurrency: n, Lease: time.Second, Wait: time.Second},
		func(ctx context.Context, job client.Job) (any, any, error) {
			startedCh <- started{ctx, job}
			select {
			case <-ctx.Done():
				causes <- context.Cause(ctx)
				return nil, nil, ctx.Err()
			case <-release:
				return "ok", nil, nil
			}
		})
	var jobs []started
	for range n {
		jobs = append(jobs, receive(t, startedCh, "a handler starts"))
	}
	claims := r.rt.matching("/v1/claim")
	if len(claims) != 1 || decodeSent(t, claims[0]).Max != n {
		t.Fatalf("claims sent = %v, want one for max %d", claims, n)
	}

	// Past the lease, kept by heartbeats: each call carries all four jobs.
	time.Sleep(1500 * time.Millisecond)
	hbs := r.rt.matching("/v1/jobs/heartbeat")
	if len(hbs) == 0 {
		t.Fatal("no heartbeat within 1.5 leases")
	}
	for _, s := range hbs {
		if b := decodeSent(t, s); len(b.Jobs) != n {
			t.Errorf("a heartbeat call carried %d jobs, want all %d held", len(b.Jobs), n)
		}
	}
	if len(r.rt.matching("/heartbeat")) != len(hbs) {
		t.Errorf("single heartbeats were sent beside the batched ones")
	}
	if got := r.rt.matching("/v1/claim"); len(got) != 1 {
		t.Errorf("%d claims while every handler was busy, want none beyond the first", len(got)-1)
	}

	// Cancel one job: the next heartbeat refuses its item, and only its
	// handler ends, with ErrClaimLost.
	victim := jobs[0].job.ID
	if _, err := c.CancelJob(ctx, victim); err != nil {
		t.Fatal(err)
	}
	if cause := receive(t, causes, "the cancelled job's handler ends"); !errors.Is(cause, client.ErrClaimLost) {
		t.Fatalf("handler cause = %v, want ErrClaimLost", cause)
	}
	if d := r.next(t, "the lost job"); d.Job.ID != victim || d.Outcome != client.OutcomeLost || !client.IsCode(d.Err, client.CodeNotFound) {
		t.Fatalf("first done = job %d %s %v, want job %d lost with not_found", d.Job.ID, d.Outcome, d.Err, victim)
	}
	for _, s := range jobs[1:] {
		if s.ctx.Err() != nil {
			t.Errorf("job %d's handler was cancelled too (%v)", s.job.ID, context.Cause(s.ctx))
		}
	}
	close(release)
	for range n - 1 {
		if d := r.next(t, "a job"); d.Outcome != client.OutcomeCompleted || d.Job.ID == victim {
			t.Fatalf("done = job %d %s %v, want the others completed", d.Job.ID, d.Outcome, d.Err)
		}
	}
	if j, _ := c.GetJob(ctx, victim); j.State != client.StateCancelled {
		t.Errorf("cancelled job is %s, want cancelled (nothing of the lost handler stored)", j.State)
	}
}

// Completions that finish while a call is in flight go out together; a
// batch whose reply is lost is sent again without claim_next; the jobs
// that lost reply claimed stay claimed only until their lease runs out,
// and there are no more of them than the batch's claim_next.max.
func TestWorker_ALostBatchReplyIsResentWithoutClaimingAndLeavesAtMostItsMaxClaimed(t *testing.T) {
	srv := newServer(t, db.Rules{}, api.Config{})
	c := mustClient(t, srv.URL)
	ctx := context.Background()
	const n, conc = 24, 4
	batch := make([]client.NewJob, n)
	for i := range batch {
		batch[i] = client.NewJob{Queue: "lost"}
	}
	if _, err := c.EnqueueBatch(ctx, batch); err != nil {
		t.Fatal(err)
	}
	var lostOnce atomic.Bool
	var lostMax atomic.Int64
	rt := newRecordingTransport()
	rt.loseReplies(func(s sent) bool {
		if !strings.HasSuffix(s.Path, "/v1/jobs/complete") || !strings.Contains(s.Body, `"claim_next"`) || !lostOnce.CompareAndSwap(false, true) {
			return false
		}
		var b batchSent
		json.Unmarshal([]byte(s.Body), &b)
		lostMax.Store(int64(b.ClaimNext.Max))
		return true
	})
	var mu sync.Mutex
	done := map[uint64]client.Done{}
	all := make(chan struct{})
	w, err := client.NewWorker(mustClient(t, srv.URL, client.WithHTTPClient(&http.Client{Transport: rt})),
		func(context.Context, client.Job) (any, any, error) { return 1, nil, nil },
		client.WorkerConfig{Name: "w", Queues: []string{"lost"}, Concurrency: conc, Lease: 300 * time.Millisecond, Wait: 200 * time.Millisecond, Logger: quiet,
			OnDone: func(d client.Done) {
				mu.Lock()
				defer mu.Unlock()
				if _, seen := done[d.Job.ID]; !seen && d.Outcome == client.OutcomeCompleted {
					done[d.Job.ID] = d
					if len(done) == n {
						close(all)
					}
				}
			}})
	if err != nil {
		t.Fatal(err)
	}
	go w.Run(ctx)
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		w.Stop(sctx)
	})
	receive(t, all, "every job completed")
	if !lostOnce.Load() {
		t.Fatal("no completion with claim_next was sent")
	}
	// The resend of the lost batch carried no claim_next.
	var resent bool
	completes := rt.matching("/v1/jobs/complete")
	for i, s := range completes {
		if strings.Contains(s.Body, `"claim_next"`) || i == 0 {
			continue
		}
		if prev := decodeSent(t, completes[i-1]); prev.ClaimNext != nil && prev.ClaimNext.Max == int(lostMax.Load()) &&
			len(prev.Jobs) == len(decodeSent(t, s).Jobs) && prev.Jobs[0].ID == decodeSent(t, s).Jobs[0].ID {
			resent = true
		}
	}
	if !resent {
		t.Errorf("the lost batch was not sent again as it was without claim_next: %v", completes)
	}
	// Each job completed once; those the lost reply claimed were claimed
	// again after their lease (attempts 2): no more than its max.
	page, err := c.ListJobs(ctx, client.ListParams{Queue: "lost", Limit: n})
	if err != nil {
		t.Fatal(err)
	}
	second := 0
	for _, j := range page.Jobs {
		if j.State != client.StateCompleted {
			t.Errorf("job %d is %s, want completed", j.ID, j.State)
		}
		if j.Attempts > 1 {
			second++
		}
	}
	if max := int(lostMax.Load()); second > max || max > conc {
		t.Errorf("%d jobs needed a second claim after the lost reply, its claim_next.max was %d (Concurrency %d); want at most max <= Concurrency", second, max, conc)
	}
}
