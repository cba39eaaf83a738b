package api_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/fenceq/fenceq/api"
	"github.com/fenceq/fenceq/db"
	"github.com/fenceq/fenceq/internal/apitest"
)

// Tests of the status page's operator parts (issue 31): queue latency, the
// jobs waiting for a retry, the workers heard from, and refused stale
// calls kept in the store.

// secondServer is another API server over ts's store: another replica, or
// the same one after a restart (its memory gone, the store kept).
func secondServer(ts *testServer, cfg api.Config) *testServer {
	ts.t.Helper()
	s := apitest.Serve(ts.t, ts.store, cfg)
	return &testServer{t: ts.t, URL: s.URL, store: ts.store, client: s.HTTP.Client()}
}

type observedStatus struct {
	Queues []struct {
		Queue             string     `json:"queue"`
		LatencyMS         *int64     `json:"latency_ms"`
		OldestJob         uint64     `json:"oldest_job"`
		OldestAvailableAt *time.Time `json:"oldest_available_at"`
	} `json:"queues"`
	Scheduled *struct {
		Jobs  []jobView `json:"jobs"`
		Total uint64    `json:"total"`
	} `json:"scheduled"`
	Retrying *struct {
		Jobs []struct {
			jobView
			RunAt time.Time `json:"run_at"`
		} `json:"jobs"`
		Total uint64 `json:"total"`
	} `json:"retrying"`
	Zombies []zombieView `json:"zombies"`
	Workers []struct {
		Principal       string     `json:"principal"`
		Worker          string     `json:"worker"`
		Claims          uint64     `json:"claims"`
		FirstSeen       time.Time  `json:"first_seen"`
		LastSeen        time.Time  `json:"last_seen"`
		LastClaimAt     *time.Time `json:"last_claim_at"`
		LastHeartbeatAt *time.Time `json:"last_heartbeat_at"`
	} `json:"workers"`
}

type zombieView struct {
	Seq          uint64    `json:"seq"`
	At           time.Time `json:"at"`
	Worker       string    `json:"worker"`
	Job          uint64    `json:"job"`
	Operation    string    `json:"operation"`
	TokenSent    uint64    `json:"token_sent"`
	TokenCurrent uint64    `json:"token_current"`
	JobState     string    `json:"job_state"`
}

func (ts *testServer) observed() observedStatus {
	ts.t.Helper()
	r := ts.get("/v1/status")
	if r.status != http.StatusOK {
		ts.t.Fatalf("GET /v1/status = %v, want 200", r)
	}
	var st observedStatus
	if err := json.Unmarshal(r.body, &st); err != nil {
		ts.t.Fatalf("GET /v1/status body %s: %v", r.body, err)
	}
	return st
}

func (ts *testServer) refusals(id uint64) []zombieView {
	ts.t.Helper()
	r := ts.get(fmt.Sprintf("/v1/jobs/%d/refusals", id))
	if r.status != http.StatusOK {
		ts.t.Fatalf("GET /v1/jobs/%d/refusals = %v, want 200", id, r)
	}
	var out struct {
		Refusals []zombieView `json:"refusals"`
	}
	if err := json.Unmarshal(r.body, &out); err != nil || out.Refusals == nil {
		ts.t.Fatalf("GET /v1/jobs/%d/refusals body %s: %v", id, r.body, err)
	}
	return out.Refusals
}

// TestStatus_RefusedStaleCallsAreStoredForEveryServerAndTheJobsPage: a
// stale heartbeat refused by one server is shown by another over the same
// store (a replica, or the first after a restart), in the status and on
// the job's own list, and the refusal changed nothing about the job.
// Before, the zombies lived in the memory of the server that refused them.
func TestStatus_RefusedStaleCallsAreStoredForEveryServerAndTheJobsPage(t *testing.T) {
	clk := newStatusClock()
	a := newTestServer(t, db.Rules{Now: clk.Now}, api.Config{Now: clk.Now})
	job := a.enqueue(map[string]any{"queue": "q"})
	other := a.enqueue(map[string]any{"queue": "q"})
	a.claim(map[string]any{"worker": "w1", "queues": []string{"q"}, "lease_ms": 1000})
	clk.Advance(2 * time.Second)
	if j := a.claim(map[string]any{"worker": "w1", "queues": []string{"q"}, "lease_ms": 60000}); j.ID != job.ID || j.FencingToken != 2 {
		t.Fatalf("second claim = job %d token %d, want job %d token 2", j.ID, j.FencingToken, job.ID)
	}
	before := a.snapshot()
	wantError(t, "stale heartbeat", a.post(fmt.Sprintf("/v1/jobs/%d/heartbeat", job.ID),
		map[string]any{"worker": "w1", "fencing_token": 1}), http.StatusNotFound, "not_found")
	wantError(t, "stale complete", a.post(fmt.Sprintf("/v1/jobs/%d/complete", job.ID),
		map[string]any{"worker": "w1", "fencing_token": 1, "result": "late"}), http.StatusConflict, "failed_precondition")
	wantUnchanged(t, "the refused stale calls", before, a.snapshot())

	b := secondServer(a, api.Config{Now: clk.Now})
	for name, ts := range map[string]*testServer{"the refusing server": a, "another server": b} {
		zs := ts.observed().Zombies
		if len(zs) != 2 || zs[0].Operation != "complete" || zs[1].Operation != "heartbeat" || zs[0].Seq <= zs[1].Seq ||
			zs[1].Job != job.ID || zs[1].TokenSent != 1 || zs[1].TokenCurrent != 2 || zs[1].JobState != "claimed" || !zs[1].At.Equal(clk.Now()) {
			t.Errorf("%s: status zombies = %+v, want the complete then the heartbeat against job %d (sent 1, current 2)", name, zs, job.ID)
		}
		if got := ts.refusals(job.ID); len(got) != 2 || got[0].Operation != "complete" || got[1].Operation != "heartbeat" {
			t.Errorf("%s: GET /v1/jobs/%d/refusals = %+v, want its complete and heartbeat, newest first", name, job.ID, got)
		}
		if got := ts.refusals(other.ID); len(got) != 0 {
			t.Errorf("%s: GET /v1/jobs/%d/refusals = %+v, want none", name, other.ID, got)
		}
	}
	wantError(t, "refusals with a bad limit", b.get(fmt.Sprintf("/v1/jobs/%d/refusals?limit=0", job.ID)), http.StatusBadRequest, "invalid_argument", "limit")
	wantError(t, "refusals of a bad id", b.get("/v1/jobs/x/refusals"), http.StatusBadRequest, "invalid_argument")
}

// TestStatus_ShowsQueueLatencyAndMetricsAGaugePerQueue: how long each
// queue's oldest available job has waited, on the status page and in
// /metrics, the queues past the metrics bound as "(other)".
func TestStatus_ShowsQueueLatencyAndMetricsAGaugePerQueue(t *testing.T) {
	clk := newStatusClock()
	ts := newTestServer(t, db.Rules{Now: clk.Now}, api.Config{Now: clk.Now, MetricsMaxQueues: 2})
	t0 := clk.Now()
	old := ts.enqueue(map[string]any{"queue": "a"})
	ts.enqueue(map[string]any{"queue": "a", "priority": 9})
	clk.Advance(30 * time.Second)
	ts.enqueue(map[string]any{"queue": "b"})
	ts.enqueue(map[string]any{"queue": "b"})
	ts.enqueue(map[string]any{"queue": "c"})
	ts.enqueue(map[string]any{"queue": "idle", "delay_ms": 600000})
	clk.Advance(5 * time.Second)

	want := map[string]int64{"a": 35000, "b": 5000, "c": 5000, "idle": 0}
	st := ts.observed()
	if len(st.Queues) != len(want) {
		t.Fatalf("status queues = %+v, want %d", st.Queues, len(want))
	}
	for _, q := range st.Queues {
		if q.LatencyMS == nil || *q.LatencyMS != want[q.Queue] {
			t.Errorf("queue %s latency_ms = %v, want %d", q.Queue, q.LatencyMS, want[q.Queue])
		}
	}
	if q := st.Queues[0]; q.OldestJob != old.ID || q.OldestAvailableAt == nil || !q.OldestAvailableAt.Equal(t0) {
		t.Errorf("queue a oldest = job %d since %v, want job %d since %v", q.OldestJob, q.OldestAvailableAt, old.ID, t0)
	}
	// GET /v1/queues leaves it out: its answer changes only with the queues.
	if r := ts.get("/v1/queues"); strings.Contains(string(r.body), "latency") {
		t.Errorf("GET /v1/queues = %s, want no latency", r.body)
	}

	metrics := string(ts.get("/metrics").body)
	// The two largest queues (a and b, two jobs each), the rest as
	// "(other)": the longest wait among c and idle.
	for _, line := range []string{
		`fenceq_queue_latency_seconds{queue="a"} 35`,
		`fenceq_queue_latency_seconds{queue="b"} 5`,
		`fenceq_queue_latency_seconds{queue="(other)"} 5`,
	} {
		if !strings.Contains(metrics, line+"\n") {
			t.Errorf("/metrics has no line %q", line)
		}
	}
	if n := strings.Count(metrics, "fenceq_queue_latency_seconds{"); n != 3 {
		t.Errorf("/metrics has %d fenceq_queue_latency_seconds series, want 3 (the bound of fenceq_jobs)", n)
	}
	// Claiming the waiting jobs brings it to 0.
	for i := 0; i < 2; i++ {
		ts.claim(map[string]any{"worker": "w", "queues": []string{"a"}})
	}
	if !strings.Contains(string(ts.get("/metrics").body), `fenceq_queue_latency_seconds{queue="a"} 0`+"\n") {
		t.Errorf("/metrics after queue a was drained has no latency 0 for it")
	}
}

// TestStatus_ListsJobsWaitingForARetryApart: a failed job scheduled for its
// next attempt is listed in retrying, with its last error and next attempt
// time, not among the scheduled jobs that never ran.
func TestStatus_ListsJobsWaitingForARetryApart(t *testing.T) {
	clk := newStatusClock()
	ts := newTestServer(t, db.Rules{Now: clk.Now}, api.Config{Now: clk.Now})
	failing := ts.enqueue(map[string]any{"queue": "q"})
	delayed := ts.enqueue(map[string]any{"queue": "q", "delay_ms": 600000})
	ts.claim(map[string]any{"worker": "w", "queues": []string{"q"}})
	wantJob(t, "fail", ts.post(fmt.Sprintf("/v1/jobs/%d/fail", failing.ID),
		map[string]any{"worker": "w", "error": "disk full", "retry_delay_ms": 60000}), http.StatusOK)

	st := ts.observed()
	if st.Retrying == nil || len(st.Retrying.Jobs) != 1 || st.Retrying.Jobs[0].ID != failing.ID ||
		st.Retrying.Jobs[0].LastError != "disk full" || !st.Retrying.Jobs[0].RunAt.Equal(clk.Now().Add(time.Minute)) {
		t.Errorf("status retrying = %+v, want job %d with its last error and next attempt at %v", st.Retrying, failing.ID, clk.Now().Add(time.Minute))
	}
	if st.Scheduled == nil || len(st.Scheduled.Jobs) != 1 || st.Scheduled.Jobs[0].ID != delayed.ID || st.Scheduled.Total != 2 {
		t.Errorf("status scheduled = %+v, want only job %d (of 2 scheduled)", st.Scheduled, delayed.ID)
	}
}

// TestStatus_ShowsWorkersHeardFromAcrossServers: a worker's claims and
// heartbeats on one server are listed by another over the same store. A
// server writes a worker at its first call and then at most every ten
// seconds: a heartbeat a second later shows on its own server (which adds
// what it has not written) and reaches the other after the interval.
func TestStatus_ShowsWorkersHeardFromAcrossServers(t *testing.T) {
	clk := newStatusClock()
	a := newTestServer(t, db.Rules{Now: clk.Now}, api.Config{Now: clk.Now})
	b := secondServer(a, api.Config{Now: clk.Now})
	t0 := clk.Now()
	a.enqueue(map[string]any{"queue": "q"})
	j := a.claim(map[string]any{"worker": "w1", "queues": []string{"q"}, "lease_ms": 60000})
	if r := a.post("/v1/claim", map[string]any{"worker": "idle", "queues": []string{"q"}}); r.status != http.StatusNoContent {
		t.Fatalf("empty claim = %v, want 204", r)
	}
	clk.Advance(time.Second)
	wantJob(t, "heartbeat", a.post(fmt.Sprintf("/v1/jobs/%d/heartbeat", j.ID), map[string]any{"worker": "w1", "fencing_token": 1}), http.StatusOK)

	type seen struct {
		claims          uint64
		claim, hearbeat bool
	}
	look := func(ts *testServer) map[string]seen {
		out := map[string]seen{}
		for _, w := range ts.observed().Workers {
			if w.Principal != "local" || !w.FirstSeen.Equal(t0) {
				t.Errorf("worker %+v, want principal local first seen %v", w, t0)
			}
			out[w.Worker] = seen{w.Claims, w.LastClaimAt != nil, w.LastHeartbeatAt != nil}
		}
		return out
	}
	if got, want := look(a), map[string]seen{"w1": {1, true, true}, "idle": {0, true, false}}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("workers on the server they called = %v, want %v", got, want)
	}
	if got, want := look(b), map[string]seen{"w1": {1, true, false}, "idle": {0, true, false}}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("workers on another server before the write interval = %v, want %v", got, want)
	}
	// More heartbeats within the interval write nothing but themselves.
	cs, ok := a.store.(interface{ CommitStats() (commits, ops uint64) })
	if !ok {
		t.Fatalf("%T does not count its commits", a.store)
	}
	_, before := cs.CommitStats()
	const beats = 20
	for i := 0; i < beats; i++ {
		wantJob(t, "heartbeat", a.post(fmt.Sprintf("/v1/jobs/%d/heartbeat", j.ID), map[string]any{"worker": "w1", "fencing_token": 1}), http.StatusOK)
	}
	if _, after := cs.CommitStats(); after-before != beats {
		t.Errorf("%d heartbeats within the write interval committed %d mutations, want %d (no worker write)", beats, after-before, beats)
	}
	clk.Advance(10 * time.Second)
	wantJob(t, "heartbeat", a.post(fmt.Sprintf("/v1/jobs/%d/heartbeat", j.ID), map[string]any{"worker": "w1", "fencing_token": 1}), http.StatusOK)
	if got, want := look(b), map[string]seen{"w1": {1, true, true}, "idle": {0, true, false}}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("workers on another server after the write interval = %v, want %v", got, want)
	}
	if ws := b.observed().Workers; len(ws) != 2 || ws[0].Worker != "w1" || !ws[0].LastSeen.Equal(clk.Now()) {
		t.Errorf("workers = %+v, want w1 first, last seen %v", ws, clk.Now())
	}
}
