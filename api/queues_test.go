package api_test

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/fenceq/fenceq/api"
	"github.com/fenceq/fenceq/db"
)

type pauseView struct {
	Queue    string     `json:"queue"`
	Paused   bool       `json:"paused"`
	PausedAt *time.Time `json:"paused_at"`
	PausedBy string     `json:"paused_by"`
	Changed  bool       `json:"changed"`
}

type queueView struct {
	Queue    string            `json:"queue"`
	Counts   map[string]uint64 `json:"counts"`
	Paused   bool              `json:"paused"`
	PausedAt *time.Time        `json:"paused_at"`
	PausedBy string            `json:"paused_by"`
}

func (ts *testServer) setPaused(queue, action string) pauseView {
	ts.t.Helper()
	r := ts.post("/v1/queues/"+queue+"/"+action, nil)
	if r.status != http.StatusOK {
		ts.t.Fatalf("POST /v1/queues/%s/%s = %v, want 200", queue, action, r)
	}
	var v pauseView
	if err := json.Unmarshal(r.body, &v); err != nil {
		ts.t.Fatalf("POST /v1/queues/%s/%s: %s: %v", queue, action, r.body, err)
	}
	return v
}

func (ts *testServer) queueViews() []queueView {
	ts.t.Helper()
	r := ts.get("/v1/queues")
	var out struct {
		Queues []queueView `json:"queues"`
	}
	if r.status != http.StatusOK || json.Unmarshal(r.body, &out) != nil {
		ts.t.Fatalf("GET /v1/queues = %v", r)
	}
	return out.Queues
}

func TestQueuePause_OverHTTP(t *testing.T) {
	clk := newStatusClock()
	ts := newTestServer(t, db.Rules{Now: clk.Now}, api.Config{Now: clk.Now})
	ts.enqueue(map[string]any{"queue": "emails", "priority": 5})
	other := ts.enqueue(map[string]any{"queue": "other"})

	p := ts.setPaused("emails", "pause")
	if !p.Paused || !p.Changed || p.PausedBy != api.LocalPrincipal || p.PausedAt == nil || !p.PausedAt.Equal(clk.Now()) || p.Queue != "emails" {
		t.Fatalf("pause = %+v, want paused and changed by local now", p)
	}
	// Idempotent: 200, changed false, nothing written or audited.
	before := ts.snapshot()
	clk.Advance(time.Second)
	if again := ts.setPaused("emails", "pause"); again.Changed || !again.Paused || !again.PausedAt.Equal(*p.PausedAt) {
		t.Errorf("a second pause = %+v, want changed false and the first pause's time", again)
	}
	wantUnchanged(t, "a second pause", before, ts.snapshot())
	ts.setPaused("idle", "pause") // a queue without jobs

	qs := ts.queueViews()
	if len(qs) != 3 || qs[0].Queue != "emails" || !qs[0].Paused || qs[0].Counts["available"] != 1 || qs[0].PausedBy != "local" ||
		qs[1].Queue != "idle" || !qs[1].Paused || len(qs[1].Counts) != len(db.States) || qs[1].Counts["available"] != 0 ||
		qs[2].Queue != "other" || qs[2].Paused || qs[2].PausedAt != nil {
		t.Errorf("GET /v1/queues = %+v; want emails (paused, 1 available), idle (paused, zeros), other (running)", qs)
	}

	// Claims skip the paused queue; enqueues to it are taken.
	if r := ts.post("/v1/claim", map[string]any{"worker": "w", "queues": []string{"emails"}}); r.status != http.StatusNoContent {
		t.Errorf("claim of the paused queue = %v, want 204", r)
	}
	if got := ts.claim(map[string]any{"worker": "w", "queues": []string{"emails", "other"}}); got.ID != other.ID {
		t.Errorf("claim of emails and other = job %d, want job %d of other", got.ID, other.ID)
	}
	ts.enqueue(map[string]any{"queue": "emails"})

	fams := scrape(t, ts.URL)
	wantMetric(t, fams, 1, "fenceq_queue_paused", "queue=emails")
	wantMetric(t, fams, 1, "fenceq_queue_paused", "queue=idle")
	wantMetric(t, fams, 0, "fenceq_queue_paused", "queue=other")
	wantMetric(t, fams, 2, "fenceq_jobs", "queue=emails", "state=available")
	wantMetric(t, fams, 0, "fenceq_jobs", "queue=idle", "state=available")

	var st struct {
		Can    struct{ Pause bool } `json:"can"`
		Queues []queueView          `json:"queues"`
	}
	if r := ts.get("/v1/status"); r.status != http.StatusOK || json.Unmarshal(r.body, &st) != nil {
		t.Fatalf("GET /v1/status = %v", r)
	}
	if !st.Can.Pause || len(st.Queues) != 3 || !st.Queues[0].Paused || !st.Queues[1].Paused || st.Queues[2].Paused {
		t.Errorf("GET /v1/status can.pause = %v, queues = %+v; want pause allowed and emails, idle paused", st.Can.Pause, st.Queues)
	}

	r := ts.setPaused("emails", "resume")
	if r.Paused || !r.Changed || r.PausedAt != nil {
		t.Errorf("resume = %+v, want running and changed", r)
	}
	if got := ts.claim(map[string]any{"worker": "w", "queues": []string{"emails"}}); got.Queue != "emails" || got.Priority != 5 {
		t.Errorf("claim after the resume = %+v, want the priority 5 job of emails", got)
	}
	if again := ts.setPaused("emails", "resume"); again.Changed || again.Paused {
		t.Errorf("a second resume = %+v, want changed false", again)
	}
	page, err := ts.store.ListAuditBySubject(context.Background(), db.AuditSubjectRequest{Subject: db.QueueSubject("emails")})
	if err != nil || len(page.Records) != 2 || page.Records[0].Action != "resume" || page.Records[1].Action != "pause" || page.Records[1].Principal != "local" {
		t.Errorf("audit of queue emails = %+v, %v; want a pause and a resume by local", page.Records, err)
	}

	// A bad queue name is refused and changes nothing.
	before = ts.snapshot()
	wantError(t, "pause of a bad queue name", ts.post("/v1/queues/a%20b/pause", nil), http.StatusBadRequest, "invalid_argument", "queue")
	wantUnchanged(t, "a refused pause", before, ts.snapshot())
}

// /metrics reports every paused queue by name, also when the per-queue
// bound sums the smaller running queues as "(other)".
func TestMetrics_PausedQueuesAreReportedBeyondTheQueueBound(t *testing.T) {
	ts := newTestServer(t, db.Rules{}, api.Config{MetricsMaxQueues: 2})
	for q, n := range map[string]int{"a": 5, "b": 4, "c": 3, "d": 1} {
		for i := 0; i < n; i++ {
			ts.enqueue(map[string]any{"queue": q})
		}
	}
	ts.setPaused("d", "pause")
	ts.setPaused("empty", "pause")
	fams := scrape(t, ts.URL)
	wantMetric(t, fams, 5, "fenceq_jobs", "queue=a", "state=available")
	wantMetric(t, fams, 4, "fenceq_jobs", "queue=b", "state=available")
	wantMetric(t, fams, 3, "fenceq_jobs", "queue=(other)", "state=available") // c alone
	wantMetric(t, fams, 1, "fenceq_jobs", "queue=d", "state=available")
	wantMetric(t, fams, 1, "fenceq_queue_paused", "queue=d")
	wantMetric(t, fams, 1, "fenceq_queue_paused", "queue=empty")
	wantMetric(t, fams, 0, "fenceq_queue_paused", "queue=a")
	wantMetric(t, fams, 0, "fenceq_queue_paused", "queue=(other)")
	if _, ok := metricValue(fams, "fenceq_jobs", "queue=c"); ok {
		t.Errorf("queue c is reported by name; want it in (other), past the bound of 2")
	}
}
