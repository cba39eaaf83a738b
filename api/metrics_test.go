package api_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/fenceq/fenceq/api"
	"github.com/fenceq/fenceq/db"
	"github.com/fenceq/fenceq/db/bolt"
	"github.com/fenceq/fenceq/db/postgres"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// scrape reads GET /metrics (no token) and parses the text format.
func scrape(t *testing.T, url string) map[string]*dto.MetricFamily {
	t.Helper()
	res, err := http.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK || !strings.HasPrefix(res.Header.Get("Content-Type"), "text/plain") {
		t.Fatalf("GET /metrics = %d %s, want 200 text/plain", res.StatusCode, res.Header.Get("Content-Type"))
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(res.Body)
	if err != nil {
		t.Fatalf("GET /metrics does not parse as the Prometheus text format: %v", err)
	}
	return fams
}

// metricValue returns the value of the sample of name whose labels include
// labels ("k=v" each), and whether there is one.
func metricValue(fams map[string]*dto.MetricFamily, name string, labels ...string) (float64, bool) {
	f := fams[name]
	if f == nil {
		return 0, false
	}
next:
	for _, m := range f.GetMetric() {
		have := map[string]string{}
		for _, l := range m.GetLabel() {
			have[l.GetName()] = l.GetValue()
		}
		for _, kv := range labels {
			k, v, _ := strings.Cut(kv, "=")
			if have[k] != v {
				continue next
			}
		}
		switch {
		case m.Counter != nil:
			return m.Counter.GetValue(), true
		case m.Gauge != nil:
			return m.Gauge.GetValue(), true
		case m.Histogram != nil:
			return float64(m.Histogram.GetSampleCount()), true
		}
	}
	return 0, false
}

func wantMetric(t *testing.T, fams map[string]*dto.MetricFamily, want float64, name string, labels ...string) {
	t.Helper()
	got, ok := metricValue(fams, name, labels...)
	if !ok {
		t.Errorf("metric %s%v is missing", name, labels)
	} else if got != want {
		t.Errorf("metric %s%v = %v, want %v", name, labels, got, want)
	}
}

func TestMetrics_JobsOperationsRefusalsLatencyAndFile(t *testing.T) {
	clk := newStatusClock()
	ts := newTestServer(t, db.Rules{Now: clk.Now}, api.Config{Now: clk.Now})
	for i := 0; i < 4; i++ {
		ts.enqueue(map[string]any{"queue": "emails"})
	}
	ts.enqueue(map[string]any{"queue": "reports", "delay_ms": 60000})
	a := ts.claim(map[string]any{"worker": "w", "queues": []string{"emails"}, "lease_ms": 1000})
	b := ts.claim(map[string]any{"worker": "w", "queues": []string{"emails"}, "lease_ms": 60000})
	wantJob(t, "complete", ts.post(fmt.Sprintf("/v1/jobs/%d/complete", b.ID), map[string]any{"worker": "w"}), http.StatusOK)
	c := ts.claim(map[string]any{"worker": "w", "queues": []string{"emails"}, "lease_ms": 60000})
	wantJob(t, "fail", ts.post(fmt.Sprintf("/v1/jobs/%d/fail", c.ID), map[string]any{"worker": "w", "error": "x", "final": true}), http.StatusOK)
	// Job a's lease runs out and w claims it again: an expiry reclaim;
	// the first incarnation's calls are then refused.
	clk.Advance(2 * time.Second)
	if again := ts.claim(map[string]any{"worker": "w", "queues": []string{"emails"}}); again.ID != a.ID {
		t.Fatalf("claim after expiry took job %d, want job %d again", again.ID, a.ID)
	}
	ts.post(fmt.Sprintf("/v1/jobs/%d/heartbeat", a.ID), map[string]any{"worker": "w", "fencing_token": 1})
	ts.post(fmt.Sprintf("/v1/jobs/%d/heartbeat", a.ID), map[string]any{"worker": "w", "fencing_token": 1})
	ts.post(fmt.Sprintf("/v1/jobs/%d/complete", a.ID), map[string]any{"worker": "w", "fencing_token": 1})
	ts.get("/v1/jobs/12345")
	ts.get("/no/such/path")

	fams := scrape(t, ts.URL)
	for state, n := range map[string]float64{"available": 1, "claimed": 1, "completed": 1, "dead": 1, "scheduled": 0, "cancelled": 0} {
		wantMetric(t, fams, n, "fenceq_jobs", "queue=emails", "state="+state)
	}
	wantMetric(t, fams, 1, "fenceq_jobs", "queue=reports", "state=scheduled")
	wantMetric(t, fams, 4, "fenceq_claims_total")
	wantMetric(t, fams, 1, "fenceq_completions_total")
	wantMetric(t, fams, 1, "fenceq_failures_total", "outcome=dead")
	wantMetric(t, fams, 0, "fenceq_failures_total", "outcome=retry")
	wantMetric(t, fams, 2, "fenceq_fencing_refusals_total", "operation=heartbeat")
	wantMetric(t, fams, 1, "fenceq_fencing_refusals_total", "operation=complete")
	wantMetric(t, fams, 0, "fenceq_fencing_refusals_total", "operation=fail")
	wantMetric(t, fams, 1, "fenceq_lease_expiries_total", "outcome=reclaimed")
	wantMetric(t, fams, 0, "fenceq_lease_expiries_total", "outcome=dead")
	wantMetric(t, fams, 4, "fenceq_audit_records_total", "action=claim")
	wantMetric(t, fams, 5, "fenceq_audit_records_total", "action=enqueue")

	// Latency by route template, never by raw path.
	wantMetric(t, fams, 5, "fenceq_http_request_duration_seconds", "method=POST", "route=/v1/jobs", "code=201")
	wantMetric(t, fams, 2, "fenceq_http_request_duration_seconds", "method=POST", "route=/v1/jobs/:id/heartbeat", "code=404")
	wantMetric(t, fams, 1, "fenceq_http_request_duration_seconds", "method=POST", "route=/v1/jobs/:id/complete", "code=409")
	wantMetric(t, fams, 1, "fenceq_http_request_duration_seconds", "method=GET", "route=/v1/jobs/:id", "code=404")
	for _, m := range fams["fenceq_http_request_duration_seconds"].GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == "route" && (strings.Contains(l.GetValue(), "12345") || strings.Contains(l.GetValue(), "/no/such")) {
				t.Errorf("route label %q holds a raw path", l.GetValue())
			}
		}
	}

	commits, ops := ts.store.(interface{ CommitStats() (uint64, uint64) }).CommitStats()
	if v, _ := metricValue(fams, "fenceq_commits_total"); v < 10 || v > float64(commits) {
		t.Errorf("fenceq_commits_total = %v, want at least the 10 changes and at most CommitStats' %d", v, commits)
	}
	if v, _ := metricValue(fams, "fenceq_committed_mutations_total"); v < 10 || v > float64(ops) {
		t.Errorf("fenceq_committed_mutations_total = %v, want between 10 and %d", v, ops)
	}
	if v, ok := metricValue(fams, "fenceq_audit_head_sequence"); !ok || v <= 0 {
		t.Errorf("metric fenceq_audit_head_sequence = %v (present %v), want above 0", v, ok)
	}
	if _, isBolt := ts.store.(*bolt.Store); isBolt { // the bbolt engine's own figures
		for _, name := range []string{"fenceq_bolt_page_writes_total", "fenceq_bolt_read_tx_total", "fenceq_db_file_size_bytes",
			"fenceq_bolt_write_seconds_total"} {
			if v, ok := metricValue(fams, name); !ok || v <= 0 {
				t.Errorf("metric %s = %v (present %v), want above 0", name, v, ok)
			}
		}
		if _, ok := metricValue(fams, "fenceq_bolt_open_read_tx"); !ok {
			t.Errorf("metric fenceq_bolt_open_read_tx is missing")
		}
	}
	if _, isPG := ts.store.(*postgres.Store); isPG { // the PostgreSQL engine's own figures
		// Every commit held the audit head once at least.
		if v, _ := metricValue(fams, "fenceq_postgres_audit_head_turns_total"); v < 10 {
			t.Errorf("fenceq_postgres_audit_head_turns_total = %v, want at least the 10 changes", v)
		}
		if v, ok := metricValue(fams, "fenceq_postgres_audit_head_held_seconds_total"); !ok || v <= 0 {
			t.Errorf("metric fenceq_postgres_audit_head_held_seconds_total = %v (present %v), want above 0", v, ok)
		}
	} else if _, ok := metricValue(fams, "fenceq_postgres_audit_head_turns_total"); ok {
		t.Errorf("a bbolt server reports fenceq_postgres_audit_head_turns_total")
	}
	if _, ok := metricValue(fams, "go_goroutines"); !ok {
		t.Errorf("the Go runtime metrics are missing")
	}
}

// TestMetrics_NeedNoTokenAndCountRefusedCallers: with principals, /metrics
// is open like /healthz; 401 and 403 replies are timed too.
func TestMetrics_NeedNoTokenAndCountRefusedCallers(t *testing.T) {
	f := newAuthFixture(t)
	f.call(t, "", "GET", "/v1/jobs", "")
	f.call(t, "work", "GET", "/v1/jobs", "")
	f.call(t, "prod", "GET", "/v1/jobs", "")
	fams := scrape(t, f.url)
	wantMetric(t, fams, 1, "fenceq_http_request_duration_seconds", "route=/v1/jobs", "code=401")
	wantMetric(t, fams, 1, "fenceq_http_request_duration_seconds", "route=/v1/jobs", "code=403")
	wantMetric(t, fams, 1, "fenceq_http_request_duration_seconds", "route=/v1/jobs", "code=200")
}

// TestMetrics_TwoServersDoNotShareCounts: each server has its own registry.
func TestMetrics_TwoServersDoNotShareCounts(t *testing.T) {
	one := newTestServer(t, db.Rules{}, api.Config{})
	two := newTestServer(t, db.Rules{}, api.Config{})
	one.enqueue(map[string]any{"queue": "q"})
	one.claim(map[string]any{"worker": "w", "queues": []string{"q"}})
	wantMetric(t, scrape(t, one.URL), 1, "fenceq_claims_total")
	wantMetric(t, scrape(t, two.URL), 0, "fenceq_claims_total")
}
