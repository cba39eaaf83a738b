package api_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fenceq/fenceq/api"
	"github.com/fenceq/fenceq/db"
	"github.com/fenceq/fenceq/db/bolt"
)

// Issue 18, items 1–4: what an unauthenticated or ordinary caller chooses
// must not grow the server's memory or leave it without a reply.

// Requests with invented methods and paths are counted under labels the
// server chose ("other", "unmatched"), so the refusal counts, the latency
// histogram and GET /v1/stats stay small however many are sent.
func TestInventedMethodsAndPathsDoNotGrowTheCounts(t *testing.T) {
	ts := newTestServer(t, db.Rules{}, api.Config{})
	for i := range 10_000 {
		req := ts.newRequest(fmt.Sprintf("X%dMETHOD", i), fmt.Sprintf("/v1/x%d", i), nil)
		if r := ts.doRequest(req); r.status < 400 || r.status >= 500 {
			t.Fatalf("%s %s = %v, want a 4xx refusal", req.Method, req.URL.Path, r)
		}
	}
	r := ts.get("/v1/stats")
	var stats struct {
		Refusals []struct {
			Route string `json:"route"`
			Count uint64 `json:"count"`
		} `json:"refusals"`
	}
	if err := json.Unmarshal(r.body, &stats); err != nil || r.status != http.StatusOK {
		t.Fatalf("GET /v1/stats = %v (%v), want 200 with refusals", r, err)
	}
	if len(stats.Refusals) > 3 || len(r.body) > 1000 {
		t.Errorf("GET /v1/stats has %d refusal counts in %d bytes after 10,000 invented methods, want at most 3 in under 1000 bytes",
			len(stats.Refusals), len(r.body))
	}
	var total uint64
	for _, rc := range stats.Refusals {
		total += rc.Count
		if !strings.HasPrefix(rc.Route, "other ") {
			t.Errorf("refusal counted under route %q, want method label \"other\"", rc.Route)
		}
	}
	if total != 10_000 {
		t.Errorf("refusals counted = %d, want 10000", total)
	}
	fams := scrape(t, ts.URL)
	if n := len(fams["fenceq_http_request_duration_seconds"].GetMetric()); n > 10 {
		t.Errorf("fenceq_http_request_duration_seconds has %d series after 10,000 invented methods, want at most 10", n)
	}
}

// An enqueue list is capped at db.MaxEnqueueBatch items: one more is
// refused whole with invalid_argument naming the limit, and nothing is
// written; a body of a million tiny items is refused the same way.
func TestAnEnqueueListOverTheLimitIsRefusedWhole(t *testing.T) {
	ts := newTestServer(t, db.Rules{}, api.Config{MaxBodyBytes: 8 << 20})
	ts.enqueue(map[string]any{"queue": "q", "payload": 1})
	items := func(n int) string {
		return "[" + strings.TrimSuffix(strings.Repeat(`{"queue":"q"},`, n), ",") + "]"
	}
	before := ts.snapshot()
	wantError(t, "enqueue of 1001 jobs", ts.post("/v1/jobs", items(db.MaxEnqueueBatch+1)),
		http.StatusBadRequest, "invalid_argument", "1000")
	wantError(t, "enqueue of a million {}", ts.post("/v1/jobs", "["+strings.TrimSuffix(strings.Repeat("{},", 1_000_000), ",")+"]"),
		http.StatusBadRequest, "invalid_argument", "1000")
	wantUnchanged(t, "refused enqueue lists", before, ts.snapshot())

	r := ts.post("/v1/jobs", items(db.MaxEnqueueBatch))
	var out struct {
		Jobs []jobView `json:"jobs"`
	}
	if err := json.Unmarshal(r.body, &out); r.status != http.StatusCreated || err != nil || len(out.Jobs) != db.MaxEnqueueBatch {
		t.Fatalf("enqueue of exactly %d jobs = %d with %d jobs (%v), want 201 with all", db.MaxEnqueueBatch, r.status, len(out.Jobs), err)
	}
}

// A lease acquire's wait is shortened to fit the write timeout, as a
// claim's is: an acquire that would take the lease after the connection
// was cut would leave the lease to a holder that never learned its token.
// Real time: the lease under test must expire while the acquire waits.
func TestALeaseAcquireWaitIsShortenedToFitTheWriteTimeout(t *testing.T) {
	store, err := bolt.Open(filepath.Join(t.TempDir(), "fenceq.db"), bolt.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	const writeTimeout = time.Second
	srv := httptest.NewUnstartedServer(api.New(store, api.Config{Logger: slog.New(slog.DiscardHandler), WriteTimeout: writeTimeout}))
	srv.Config.WriteTimeout = writeTimeout
	srv.Start()
	t.Cleanup(srv.Close)

	post := func(path, body string) (int, []byte, error) {
		res, err := http.Post(srv.URL+path, "application/json", strings.NewReader(body))
		if err != nil {
			return 0, nil, err
		}
		defer res.Body.Close()
		raw, err := io.ReadAll(res.Body)
		return res.StatusCode, raw, err
	}
	// a holds the lease for 1.5 s; b asks to wait 5 s for it.
	if code, body, err := post("/v1/leases/res/acquire", `{"holder":"a","ttl_ms":1500}`); err != nil || code != http.StatusOK {
		t.Fatalf("acquire by a = %d %s %v, want 200", code, body, err)
	}
	start := time.Now()
	code, body, err := post("/v1/leases/res/acquire", `{"holder":"b","ttl_ms":60000,"wait_ms":5000}`)
	if err != nil {
		t.Fatalf("acquire by b waiting 5 s under a %v write timeout: no reply (%v) after %v", writeTimeout, err, time.Since(start))
	}
	if code != http.StatusConflict || !bytes.Contains(body, []byte("failed_precondition")) {
		t.Fatalf("acquire by b = %d %s, want 409 failed_precondition (still held by a)", code, body)
	}
	time.Sleep(time.Until(start.Add(2 * time.Second))) // past a's expiry and b's asked-for wait
	res, err := http.Get(srv.URL + "/v1/leases/res")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var l struct {
		Holder string `json:"holder"`
	}
	if err := json.NewDecoder(res.Body).Decode(&l); err != nil || l.Holder != "local|a" {
		t.Errorf("lease after b's refused acquire: holder %q (%v), want still \"local|a\" (expired, not taken by a caller that got a refusal)", l.Holder, err)
	}
}

// /metrics reports the MetricsMaxQueues largest queues one by one and sums
// the rest as queue "(other)".
func TestMetricsReportTheLargestQueuesAndSumTheRest(t *testing.T) {
	ts := newTestServer(t, db.Rules{}, api.Config{MetricsMaxQueues: 100})
	var jobs []map[string]any
	for i := range 150 {
		n := 1 // the 50 smallest queues, big0..big99 get two jobs each
		q := fmt.Sprintf("small%d", i-100)
		if i < 100 {
			n, q = 2, fmt.Sprintf("big%d", i)
		}
		for range n {
			jobs = append(jobs, map[string]any{"queue": q, "payload": i})
		}
	}
	if r := ts.post("/v1/jobs", jobs); r.status != http.StatusCreated {
		t.Fatalf("enqueue = %v, want 201", r)
	}
	fams := scrape(t, ts.URL)
	queues := map[string]bool{}
	for _, m := range fams["fenceq_jobs"].GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == "queue" {
				queues[l.GetValue()] = true
			}
		}
	}
	if len(queues) != 101 {
		t.Errorf("fenceq_jobs has %d queue labels, want 101 (100 largest and \"(other)\")", len(queues))
	}
	for i := range 100 {
		wantMetric(t, fams, 2, "fenceq_jobs", fmt.Sprintf("queue=big%d", i), "state=available")
	}
	wantMetric(t, fams, 50, "fenceq_jobs", "queue=(other)", "state=available")
	if queues["small0"] {
		t.Errorf("fenceq_jobs reports queue small0, one of the 50 smallest")
	}
}
