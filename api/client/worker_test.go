package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fenceq/fenceq/api"
	"github.com/fenceq/fenceq/api/client"
	"github.com/fenceq/fenceq/db"
)

// quiet is a logger that drops everything (the worker logs lost claims
// and failures, which these tests cause on purpose).
var quiet = slog.New(slog.DiscardHandler)

// runner is a Worker running in the background with its own transport.
type runner struct {
	w     *client.Worker
	rt    *recordingTransport
	done  chan client.Done
	runCh chan error
}

// startRunner starts a Worker with handler h; it is stopped at cleanup.
func startRunner(t *testing.T, base string, cfg client.WorkerConfig, h client.Handler) *runner {
	t.Helper()
	r := &runner{rt: newRecordingTransport(), done: make(chan client.Done, 100), runCh: make(chan error, 1)}
	c := mustClient(t, base, client.WithHTTPClient(&http.Client{Transport: r.rt}))
	if cfg.Logger == nil {
		cfg.Logger = quiet
	}
	cfg.OnDone = func(d client.Done) { r.done <- d }
	w, err := client.NewWorker(c, h, cfg)
	if err != nil {
		t.Fatalf("NewWorker() = %v", err)
	}
	r.w = w
	go func() { r.runCh <- w.Run(context.Background()) }()
	t.Cleanup(func() {
		r.rt.resume()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = w.Stop(ctx)
	})
	return r
}

// next waits for the runner's next finished job.
func (r *runner) next(t *testing.T, what string) client.Done {
	t.Helper()
	select {
	case d := <-r.done:
		return d
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: no job finished within 10s", what)
		return client.Done{}
	}
}

// started is a handler's report that it began a job.
type started struct {
	ctx context.Context
	job client.Job
}

func receive[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: nothing within 10s", what)
		var zero T
		return zero
	}
}

// tokenOf decodes the fencing_token and worker of a recorded request body.
func tokenOf(t *testing.T, s sent) (uint64, string) {
	t.Helper()
	// A single call's body, or a batch's of one job (these tests hold one).
	var b struct {
		Worker       string `json:"worker"`
		FencingToken uint64 `json:"fencing_token"`
		Jobs         []struct {
			FencingToken uint64 `json:"fencing_token"`
		} `json:"jobs"`
	}
	if err := json.Unmarshal([]byte(s.Body), &b); err != nil {
		t.Fatalf("%s %s: body %q: %v", s.Method, s.Path, s.Body, err)
	}
	if len(b.Jobs) == 1 {
		return b.Jobs[0].FencingToken, b.Worker
	}
	if len(b.Jobs) > 1 {
		t.Fatalf("%s %s: body %q carries %d jobs, want one", s.Method, s.Path, s.Body, len(b.Jobs))
	}
	return b.FencingToken, b.Worker
}

func TestWorker_PausedPastItsLease_CompletionIsRefusedAndTheSecondRunnerCompletes(t *testing.T) {
	srv := newServer(t, db.Rules{}, api.Config{})
	c := mustClient(t, srv.URL)
	ctx := context.Background()
	res, err := c.Enqueue(ctx, client.NewJob{Queue: "pause", Payload: "p"})
	if err != nil {
		t.Fatal(err)
	}
	cfg := client.WorkerConfig{Name: "w", Queues: []string{"pause"}, Lease: 300 * time.Millisecond, Wait: 2 * time.Second}

	// Runner 1: its handler blocks past the lease, and its heartbeats do
	// not get out meanwhile (the process is paused).
	started1, release1 := make(chan started, 1), make(chan struct{})
	r1 := startRunner(t, srv.URL, cfg, func(ctx context.Context, job client.Job) (any, any, error) {
		started1 <- started{ctx, job}
		<-release1
		return "first", "sig-first", nil
	})
	s1 := receive(t, started1, "runner 1 claims")
	if s1.job.ID != res.Job.ID || s1.job.FencingToken != 1 {
		t.Fatalf("runner 1 got job %d token %d, want job %d token 1", s1.job.ID, s1.job.FencingToken, res.Job.ID)
	}
	r1.rt.pause(func(s sent) bool { return strings.HasSuffix(s.Path, "/heartbeat") })

	// Runner 2, same worker name, claims the job again after the lease
	// ran out; its handler runs past its own lease too, kept by heartbeats.
	// Its lease is longer than runner 1's so that a slow machine (a
	// heartbeat late by 200 ms) does not lose it.
	started2, release2 := make(chan started, 1), make(chan struct{})
	cfg2 := cfg
	cfg2.Lease = time.Second
	r2 := startRunner(t, srv.URL, cfg2, func(ctx context.Context, job client.Job) (any, any, error) {
		started2 <- started{ctx, job}
		<-release2
		time.Sleep(1500 * time.Millisecond)
		if err := ctx.Err(); err != nil {
			return nil, nil, err
		}
		return "second", "sig-second", nil
	})
	s2 := receive(t, started2, "runner 2 claims the job again")
	if s2.job.ID != res.Job.ID || s2.job.FencingToken != 2 {
		t.Fatalf("runner 2 got job %d token %d, want job %d token 2", s2.job.ID, s2.job.FencingToken, res.Job.ID)
	}

	// Runner 1 wakes up and completes with its old token: refused.
	close(release1)
	d1 := r1.next(t, "runner 1")
	if d1.Outcome != client.OutcomeLost || !client.IsCode(d1.Err, client.CodeFailedPrecondition) {
		t.Fatalf("runner 1 outcome = %s, %v; want lost with failed_precondition", d1.Outcome, d1.Err)
	}
	if s1.ctx.Err() == nil {
		t.Error("runner 1's handler context is not cancelled after its claim was lost")
	}
	completes := r1.rt.matching("/complete")
	if len(completes) != 1 {
		t.Fatalf("runner 1 sent %d completions, want 1", len(completes))
	}
	if tok, worker := tokenOf(t, completes[0]); tok != 1 || worker != "w" {
		t.Fatalf("runner 1's completion carried token %d worker %q, want 1 and w", tok, worker)
	}
	j, err := c.GetJob(ctx, res.Job.ID)
	if err != nil || j.State != client.StateClaimed || j.Attempts != 2 || j.Result != nil {
		t.Fatalf("job after runner 1's refused completion = %+v, %v; want still claimed by token 2, no result", j, err)
	}

	close(release2)
	d2 := r2.next(t, "runner 2")
	if d2.Outcome != client.OutcomeCompleted {
		t.Fatalf("runner 2 outcome = %s, %v; want completed", d2.Outcome, d2.Err)
	}
	j, err = c.GetJob(ctx, res.Job.ID)
	if err != nil || j.State != client.StateCompleted || string(j.Result) != `"second"` || string(j.Attestation) != `"sig-second"` || j.Attempts != 2 {
		t.Fatalf("job = %+v, %v; want completed by runner 2 with result \"second\"", j, err)
	}
	// Runner 2 heartbeated (its handler ran past the lease) and sent its
	// token every time.
	hbs := r2.rt.matching("/heartbeat")
	if len(hbs) == 0 {
		t.Fatal("runner 2 sent no heartbeat while its handler ran past the lease")
	}
	for _, s := range append(hbs, r2.rt.matching("/complete")...) {
		if tok, worker := tokenOf(t, s); tok != 2 || worker != "w" {
			t.Errorf("runner 2: %s carried token %d worker %q, want 2 and w", s.Path, tok, worker)
		}
	}
}

func TestWorker_HeartbeatRefused_CancelsTheHandlerAndDoesNotComplete(t *testing.T) {
	srv := newServer(t, db.Rules{}, api.Config{})
	c := mustClient(t, srv.URL)
	ctx := context.Background()
	res, err := c.Enqueue(ctx, client.NewJob{Queue: "pause"})
	if err != nil {
		t.Fatal(err)
	}
	cfg := client.WorkerConfig{Name: "w", Queues: []string{"pause"}, Lease: 300 * time.Millisecond, Wait: 2 * time.Second}

	// Runner 1's handler works until its context ends.
	started1 := make(chan started, 1)
	cause1 := make(chan error, 1)
	r1 := startRunner(t, srv.URL, cfg, func(ctx context.Context, job client.Job) (any, any, error) {
		started1 <- started{ctx, job}
		select {
		case <-ctx.Done():
			cause1 <- context.Cause(ctx)
		case <-time.After(10 * time.Second):
			cause1 <- nil
		}
		return "first", nil, nil
	})
	receive(t, started1, "runner 1 claims")
	r1.rt.pause(func(sent) bool { return true }) // runner 1 is paused: nothing gets out

	// Runner 2 holds the job on a long lease: it must not run out while
	// runner 1 resumes (runner 1 would claim it again, token 3).
	started2, release2 := make(chan started, 1), make(chan struct{})
	cfg2 := cfg
	cfg2.Lease = 30 * time.Second
	r2 := startRunner(t, srv.URL, cfg2, func(ctx context.Context, job client.Job) (any, any, error) {
		started2 <- started{ctx, job}
		<-release2
		return "second", nil, nil
	})
	s2 := receive(t, started2, "runner 2 claims the job again")
	if s2.job.FencingToken != 2 {
		t.Fatalf("runner 2 got token %d, want 2", s2.job.FencingToken)
	}

	// Runner 1 resumes: its held heartbeat (token 1) is refused, so its
	// handler's context is cancelled with ErrClaimLost and it does not
	// complete.
	r1.rt.resume()
	cause := receive(t, cause1, "runner 1's handler context ends")
	if !errors.Is(cause, client.ErrClaimLost) {
		t.Fatalf("runner 1's handler context cause = %v, want ErrClaimLost", cause)
	}
	d1 := r1.next(t, "runner 1")
	if d1.Outcome != client.OutcomeLost || !client.IsCode(d1.Err, client.CodeNotFound) {
		t.Fatalf("runner 1 outcome = %s, %v; want lost with not_found", d1.Outcome, d1.Err)
	}
	if n := len(r1.rt.matching("/complete")); n != 0 {
		t.Fatalf("runner 1 sent %d completions after its claim was lost, want 0", n)
	}
	for _, s := range r1.rt.matching("/heartbeat") {
		if tok, _ := tokenOf(t, s); tok != 1 {
			t.Errorf("runner 1's heartbeat carried token %d, want 1", tok)
		}
	}

	close(release2)
	if d := r2.next(t, "runner 2"); d.Outcome != client.OutcomeCompleted {
		t.Fatalf("runner 2 outcome = %s, %v", d.Outcome, d.Err)
	}
	j, err := c.GetJob(ctx, res.Job.ID)
	if err != nil || j.State != client.StateCompleted || string(j.Result) != `"second"` {
		t.Fatalf("job = %+v, %v; want completed with \"second\"", j, err)
	}
}

func TestWorker_HandlerErrorsFailTheJob(t *testing.T) {
	srv := newServer(t, db.Rules{}, api.Config{})
	c := mustClient(t, srv.URL)
	ctx := context.Background()
	kinds := []string{"plain", "delay", "immediate", "final", "panic", "unmarshalable"}
	for _, k := range kinds {
		if _, err := c.Enqueue(ctx, client.NewJob{Queue: "errs", Kind: k}); err != nil {
			t.Fatal(err)
		}
	}
	r := startRunner(t, srv.URL, client.WorkerConfig{Name: "w", Queues: []string{"errs"}, Concurrency: 3, Lease: time.Second, Wait: time.Second},
		func(ctx context.Context, job client.Job) (any, any, error) {
			switch job.Kind {
			case "plain":
				return nil, nil, errors.New("plain failure")
			case "delay":
				return nil, nil, client.RetryAfter(errors.New("rate limited"), 2*time.Hour)
			case "immediate":
				if job.Attempts > 1 {
					return "second try", nil, nil
				}
				return nil, nil, client.RetryAfter(errors.New("try again now"), 0)
			case "final":
				return nil, nil, fmt.Errorf("wrapped: %w", client.Final(errors.New("bad input")))
			case "panic":
				panic("handler bug")
			}
			return make(chan int), nil, nil
		})
	// Judge each kind by its first report (the immediate retry is claimed
	// again at once and then succeeds).
	got := map[string]client.Done{}
	for len(got) < len(kinds) {
		d := r.next(t, "a failing job")
		if _, seen := got[d.Job.Kind]; !seen {
			got[d.Job.Kind] = d
		}
	}
	for _, k := range kinds {
		d := got[k]
		if d.Outcome != client.OutcomeFailed {
			t.Errorf("%s: outcome %s (%v), want failed", k, d.Outcome, d.Err)
			continue
		}
		wait := d.Stored.RunAt.Sub(d.Stored.UpdatedAt)
		switch k {
		case "plain", "panic", "unmarshalable":
			// The server's backoff after a first attempt: 0.5s to 1s.
			if d.Stored.State != client.StateScheduled || wait < 400*time.Millisecond || wait > 1100*time.Millisecond {
				t.Errorf("%s: state %s, retry in %v; want scheduled with the server's first backoff (0.5s to 1s)", k, d.Stored.State, wait)
			}
		case "delay":
			if d.Stored.State != client.StateScheduled || wait < 2*time.Hour-time.Second || wait > 2*time.Hour+time.Second {
				t.Errorf("delay: state %s, retry in %v; want scheduled in 2h", d.Stored.State, wait)
			}
		case "immediate":
			if wait > 50*time.Millisecond {
				t.Errorf("immediate: retry in %v, want at once", wait)
			}
		case "final":
			if d.Stored.State != client.StateDead {
				t.Errorf("final: state %s, want dead", d.Stored.State)
			}
		}
	}
	for k, want := range map[string]string{"plain": "plain failure", "final": "wrapped: bad input", "panic": "handler panicked: handler bug", "unmarshalable": "cannot be sent"} {
		if !strings.Contains(got[k].Stored.LastError, want) {
			t.Errorf("%s: last_error %q, want it to contain %q", k, got[k].Stored.LastError, want)
		}
	}
}

func TestWorker_StopDrainsInFlightJobs(t *testing.T) {
	srv := newServer(t, db.Rules{}, api.Config{})
	c := mustClient(t, srv.URL)
	ctx := context.Background()
	first, _ := c.Enqueue(ctx, client.NewJob{Queue: "drain"})

	startedCh, release := make(chan started, 1), make(chan struct{})
	r := startRunner(t, srv.URL, client.WorkerConfig{Name: "w", Queues: []string{"drain"}, Lease: time.Second, Wait: time.Second},
		func(ctx context.Context, job client.Job) (any, any, error) {
			startedCh <- started{ctx, job}
			<-release
			time.Sleep(1300 * time.Millisecond) // past the lease: heartbeats keep it
			return "drained", nil, ctx.Err()
		})
	receive(t, startedCh, "the first job starts")
	second, _ := c.Enqueue(ctx, client.NewJob{Queue: "drain"})

	stopped := make(chan error, 1)
	go func() {
		sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		stopped <- r.w.Stop(sctx)
	}()
	receive(t, r.w.Stopping(), "the worker stops claiming")
	close(release)
	if err := receive(t, stopped, "Stop returns"); err != nil {
		t.Fatalf("Stop() = %v, want nil after draining", err)
	}
	if err := receive(t, r.runCh, "Run returns"); err != nil {
		t.Fatalf("Run() = %v, want nil", err)
	}
	if d := r.next(t, "the drained job"); d.Outcome != client.OutcomeCompleted {
		t.Fatalf("drained job outcome = %s, %v", d.Outcome, d.Err)
	}
	if j, _ := c.GetJob(ctx, first.Job.ID); j.State != client.StateCompleted || string(j.Result) != `"drained"` {
		t.Fatalf("first job = %s %s, want completed with \"drained\"", j.State, j.Result)
	}
	if j, _ := c.GetJob(ctx, second.Job.ID); j.State != client.StateAvailable || j.Attempts != 0 {
		t.Fatalf("job enqueued while stopping = %s attempts %d, want available and never claimed", j.State, j.Attempts)
	}
}

func TestWorker_StopDeadlineCancelsHandlersAndReleasesTheirJobs(t *testing.T) {
	srv := newServer(t, db.Rules{}, api.Config{})
	c := mustClient(t, srv.URL)
	ctx := context.Background()
	res, _ := c.Enqueue(ctx, client.NewJob{Queue: "slow"})

	startedCh := make(chan started, 1)
	r := startRunner(t, srv.URL, client.WorkerConfig{Name: "w", Queues: []string{"slow"}, Lease: 5 * time.Second, Wait: time.Second},
		func(ctx context.Context, job client.Job) (any, any, error) {
			startedCh <- started{ctx, job}
			<-ctx.Done()
			return nil, nil, context.Cause(ctx)
		})
	s := receive(t, startedCh, "the job starts")
	sctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	if err := r.w.Stop(sctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Stop() past its deadline = %v, want DeadlineExceeded", err)
	}
	if cause := context.Cause(s.ctx); !errors.Is(cause, client.ErrWorkerStopped) {
		t.Fatalf("handler context cause = %v, want ErrWorkerStopped", cause)
	}
	d := r.next(t, "the cut job")
	if d.Outcome != client.OutcomeFailed {
		t.Fatalf("outcome = %s, %v; want failed", d.Outcome, d.Err)
	}
	j, err := c.GetJob(ctx, res.Job.ID)
	if err != nil || (j.State != client.StateAvailable && j.State != client.StateScheduled) || j.RunAt.Sub(j.UpdatedAt) > 50*time.Millisecond || !strings.Contains(j.LastError, "worker stopped") {
		t.Fatalf("job = %+v, %v; want claimable at once with a \"worker stopped\" error (the lease was 5s)", j, err)
	}
}

func TestWorker_RunDrainsWhenItsContextEnds(t *testing.T) {
	srv := newServer(t, db.Rules{}, api.Config{})
	c := mustClient(t, srv.URL)
	ctx := context.Background()
	res, _ := c.Enqueue(ctx, client.NewJob{Queue: "ctx"})

	startedCh := make(chan started, 1)
	cl := mustClient(t, srv.URL)
	w, err := client.NewWorker(cl, func(ctx context.Context, job client.Job) (any, any, error) {
		startedCh <- started{ctx, job}
		time.Sleep(300 * time.Millisecond)
		return 42, nil, ctx.Err()
	}, client.WorkerConfig{Name: "w", Queues: []string{"ctx"}, Lease: time.Second, Wait: time.Second, DrainTimeout: 5 * time.Second, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, cancelRun := context.WithCancel(ctx)
	runErr := make(chan error, 1)
	go func() { runErr <- w.Run(runCtx) }()
	receive(t, startedCh, "the job starts")
	cancelRun()
	if err := receive(t, runErr, "Run returns"); err != nil {
		t.Fatalf("Run() = %v, want nil", err)
	}
	if j, _ := c.GetJob(ctx, res.Job.ID); j.State != client.StateCompleted || string(j.Result) != "42" {
		t.Fatalf("job = %s %s, want completed with 42 after the drain", j.State, j.Result)
	}
}

func TestWorker_StopsWhenTheServerRefusesTheClaimItself(t *testing.T) {
	srv := newServer(t, db.Rules{}, api.Config{})
	w, err := client.NewWorker(mustClient(t, srv.URL), func(context.Context, client.Job) (any, any, error) { return nil, nil, nil },
		client.WorkerConfig{Name: "w", Queues: []string{"not a queue!"}, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- w.Run(context.Background()) }()
	if err := receive(t, done, "Run returns"); !client.IsCode(err, client.CodeInvalidArgument) {
		t.Fatalf("Run() with a bad queue name = %v, want invalid_argument", err)
	}
}

func TestWorker_StartTimeout_StopsWhenTheServerNeverAnswersNamingTheURL(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + ln.Addr().String()
	ln.Close() // nothing listens there now
	w, err := client.NewWorker(mustClient(t, url), func(context.Context, client.Job) (any, any, error) { return nil, nil, nil },
		client.WorkerConfig{Name: "w", StartTimeout: 300 * time.Millisecond, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- w.Run(context.Background()) }()
	err = receive(t, done, "Run returns")
	if err == nil || !strings.Contains(err.Error(), url) {
		t.Fatalf("Run() against nothing = %v, want an error naming %s", err, url)
	}
}

func TestWorker_StartTimeout_AServerThatAnsweredIsWaitedFor(t *testing.T) {
	srv := newServer(t, db.Rules{}, api.Config{})
	c := mustClient(t, srv.URL)
	done := make(chan client.Done, 1)
	w, err := client.NewWorker(c, func(context.Context, client.Job) (any, any, error) { return "ok", nil, nil },
		client.WorkerConfig{Name: "w", StartTimeout: 100 * time.Millisecond, Wait: 50 * time.Millisecond, Logger: quiet,
			OnDone: func(d client.Done) { done <- d }})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ran := make(chan error, 1)
	go func() { ran <- w.Run(ctx) }()
	// Long-polls that found nothing are answers: past the StartTimeout,
	// the worker still runs and takes a job.
	time.Sleep(300 * time.Millisecond)
	if _, err := c.Enqueue(context.Background(), client.NewJob{Queue: "default", Payload: map[string]int{"n": 1}}); err != nil {
		t.Fatal(err)
	}
	if d := receive(t, done, "the job done"); d.Outcome != client.OutcomeCompleted {
		t.Fatalf("outcome %s (%v), want completed", d.Outcome, d.Err)
	}
	cancel()
	if err := receive(t, ran, "Run returns"); err != nil {
		t.Fatalf("Run() = %v after its context ended, want nil", err)
	}
}

func TestWorker_ConcurrentHandlersCompleteEveryJobOnce(t *testing.T) {
	srv := newServer(t, db.Rules{}, api.Config{})
	c := mustClient(t, srv.URL)
	ctx := context.Background()
	const n = 30
	jobs := make([]client.NewJob, n)
	for i := range jobs {
		jobs[i] = client.NewJob{Queue: "many", Payload: i}
	}
	if _, err := c.EnqueueBatch(ctx, jobs); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	running, most := 0, 0
	r := startRunner(t, srv.URL, client.WorkerConfig{Name: "w", Queues: []string{"many"}, Concurrency: 4, Lease: time.Second, Wait: 200 * time.Millisecond},
		func(ctx context.Context, job client.Job) (any, any, error) {
			mu.Lock()
			running++
			most = max(most, running)
			mu.Unlock()
			time.Sleep(20 * time.Millisecond)
			mu.Lock()
			running--
			mu.Unlock()
			var i int
			if err := json.Unmarshal(job.Payload, &i); err != nil {
				return nil, nil, err
			}
			return i * i, nil, nil
		})
	for range n {
		if d := r.next(t, "a job"); d.Outcome != client.OutcomeCompleted {
			t.Fatalf("job %d outcome = %s, %v", d.Job.ID, d.Outcome, d.Err)
		}
	}
	page, err := c.ListJobs(ctx, client.ListParams{Queue: "many", Limit: n})
	if err != nil {
		t.Fatal(err)
	}
	for _, j := range page.Jobs {
		var i, sq int
		json.Unmarshal(j.Payload, &i)
		json.Unmarshal(j.Result, &sq)
		if j.State != client.StateCompleted || j.Attempts != 1 || sq != i*i {
			t.Errorf("job %d = %s attempts %d result %s, want completed once with %d", j.ID, j.State, j.Attempts, j.Result, i*i)
		}
	}
	if most < 2 || most > 4 {
		t.Errorf("at most %d handlers ran at once, want between 2 and 4", most)
	}
	// Completions claimed the next jobs in the same transaction, and went
	// out in batches (no single-job completion at all).
	claims := len(r.rt.matching("/v1/claim"))
	if claims >= n {
		t.Errorf("%d claim requests for %d jobs; completions should have claimed most next jobs", claims, n)
	}
	completes := r.rt.matching("/v1/jobs/complete")
	items := 0
	for _, s := range completes {
		items += len(decodeSent(t, s).Jobs)
	}
	if items != n || len(completes) > n {
		t.Errorf("%d completion calls carried %d jobs, want %d jobs in at most %d calls", len(completes), items, n, n)
	}
	if single := len(r.rt.matching("/complete")) - len(completes); single != 0 {
		t.Errorf("%d single-job completions, want none", single)
	}
}
