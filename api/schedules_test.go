package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/fenceq/fenceq/api"
	"github.com/fenceq/fenceq/api/fenceqv1"
	"github.com/fenceq/fenceq/api/fenceqv1/fenceqv1connect"
	"github.com/fenceq/fenceq/db"
	"github.com/fenceq/fenceq/internal/testclock"
	"github.com/fenceq/fenceq/schedule"
)

// scheduleView is the part of a schedule reply the tests read.
type scheduleView struct {
	Name       string          `json:"name"`
	Cron       string          `json:"cron"`
	EveryMs    int64           `json:"every_ms"`
	Timezone   string          `json:"timezone"`
	Catchup    string          `json:"catchup"`
	Overlap    string          `json:"overlap"`
	Paused     bool            `json:"paused"`
	PausedBy   string          `json:"paused_by"`
	NextFireAt *time.Time      `json:"next_fire_at"`
	NextFires  []time.Time     `json:"next_fires"`
	CreatedBy  string          `json:"created_by"`
	Job        json.RawMessage `json:"job"`
	LastJob    *struct {
		ID           uint64    `json:"id"`
		ScheduledFor time.Time `json:"scheduled_for"`
		State        string    `json:"state"`
	} `json:"last_job"`
	MissedTicks  uint64 `json:"missed_ticks"`
	SkippedTicks uint64 `json:"skipped_ticks"`
}

// scheduledJobView is a job reply's schedule fields.
type scheduledJobView struct {
	ID           uint64          `json:"id"`
	Queue        string          `json:"queue"`
	Payload      json.RawMessage `json:"payload"`
	Schedule     string          `json:"schedule"`
	ScheduledFor *time.Time      `json:"scheduled_for"`
	Backfilled   bool            `json:"backfilled"`
}

func decodeAs[T any](t *testing.T, res response) T {
	t.Helper()
	var v T
	if err := json.Unmarshal(res.body, &v); err != nil {
		t.Fatalf("reply %s: %v", res, err)
	}
	return v
}

// scheduleState is what a refused schedule request must not change: the
// schedules, the jobs and the audit chain's head.
func scheduleState(t *testing.T, st db.Store) string {
	t.Helper()
	page, err := st.ListSchedules(context.Background(), db.ListSchedulesRequest{Limit: db.MaxListLimit})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(page)
	return string(b) + " " + storeState(t, st)
}

func errorOf(t *testing.T, res response) (code, message string) {
	t.Helper()
	var e struct {
		Error struct{ Code, Message string } `json:"error"`
	}
	if err := json.Unmarshal(res.body, &e); err != nil {
		t.Fatalf("reply %s is not an error: %v", res, err)
	}
	return e.Error.Code, e.Error.Message
}

// TestSchedules_BadInputIsRefused400WithNothingWritten: the list
// (an invalid cron, an unknown zone, every below 1 s, both or neither of
// cron and every, a TZ= prefix, a name with control characters) and the
// API's own (a slash in the name, no job, a negative duration, a bad
// start_at) are 400 invalid_argument with a message that names the
// problem, and change no schedule, job or audit record.
func TestSchedules_BadInputIsRefused400WithNothingWritten(t *testing.T) {
	ts := newTestServer(t, db.Rules{}, api.Config{})
	// One schedule exists, so that a refused replace shows it unchanged.
	if res := ts.do(http.MethodPut, "/v1/schedules/existing", `{"every_ms":60000,"job":{"queue":"q","payload":{"v":1}}}`); res.status != http.StatusCreated {
		t.Fatalf("PUT existing: %v", res)
	}
	job := `"job":{"queue":"q","payload":{"v":2}}`
	cases := []struct {
		name, path, body string
		words            []string // the message names the problem: each word is in it
	}{
		{"invalid cron", "/v1/schedules/a", `{"cron":"61 * * * *",` + job + `}`, []string{"cron"}},
		{"cron of four fields", "/v1/schedules/a", `{"cron":"* * * *",` + job + `}`, []string{"cron"}},
		{"unknown zone", "/v1/schedules/a", `{"cron":"0 * * * *","timezone":"Mars/Olympus_Mons",` + job + `}`, []string{"Mars/Olympus_Mons"}},
		{"every below 1 s", "/v1/schedules/a", `{"every_ms":999,` + job + `}`, []string{"every"}},
		{"both cron and every", "/v1/schedules/a", `{"cron":"0 * * * *","every_ms":60000,` + job + `}`, []string{"cron", "every"}},
		{"neither cron nor every", "/v1/schedules/a", `{` + job + `}`, []string{"cron", "every"}},
		{"TZ= prefix", "/v1/schedules/a", `{"cron":"TZ=Europe/Berlin 0 * * * *",` + job + `}`, []string{"TZ"}},
		{"CRON_TZ= prefix", "/v1/schedules/a", `{"cron":"CRON_TZ=UTC 0 * * * *",` + job + `}`, []string{"TZ"}},
		{"@every", "/v1/schedules/a", `{"cron":"@every 1m",` + job + `}`, []string{"every"}},
		{"control character in the name", "/v1/schedules/a%0Ab", `{"every_ms":60000,` + job + `}`, []string{"name"}},
		{"NUL in the name", "/v1/schedules/a%00b", `{"every_ms":60000,` + job + `}`, []string{"name"}},
		{"slash in the name", "/v1/schedules/a%2Fb", `{"every_ms":60000,` + job + `}`, []string{"name"}},
		{"name too long", "/v1/schedules/" + strings.Repeat("n", db.MaxScheduleNameBytes+1), `{"every_ms":60000,` + job + `}`, []string{"name"}},
		{"no job", "/v1/schedules/a", `{"every_ms":60000}`, []string{"job"}},
		{"negative every_ms", "/v1/schedules/a", `{"every_ms":-1000,` + job + `}`, []string{"every_ms"}},
		{"bad start_at", "/v1/schedules/a", `{"every_ms":60000,"start_at":"tomorrow",` + job + `}`, []string{"start_at"}},
		{"bad catchup", "/v1/schedules/a", `{"every_ms":60000,"catchup":"some",` + job + `}`, []string{"catchup"}},
		{"bad overlap", "/v1/schedules/a", `{"every_ms":60000,"overlap":"queue",` + job + `}`, []string{"overlap"}},
		{"wrong type", "/v1/schedules/a", `{"every_ms":"1m",` + job + `}`, []string{"every_ms"}},
		{"payload not JSON", "/v1/schedules/a", `{"every_ms":60000,"job":{"queue":"q","payload":{]}}`, []string{"JSON"}},
		{"bad queue", "/v1/schedules/a", `{"every_ms":60000,"job":{"queue":"no spaces"}}`, []string{"queue"}},
		{"refused replace", "/v1/schedules/existing", `{"cron":"61 * * * *",` + job + `}`, []string{"cron"}},
	}
	before := scheduleState(t, ts.store)
	for _, c := range cases {
		res := ts.do(http.MethodPut, c.path, c.body)
		code, msg := "", ""
		if res.status == http.StatusBadRequest {
			code, msg = errorOf(t, res)
		}
		if res.status != http.StatusBadRequest || code != "invalid_argument" {
			t.Errorf("%s: PUT %s %s = %v, want 400 invalid_argument", c.name, c.path, c.body, res)
			continue
		}
		for _, w := range c.words {
			if !strings.Contains(strings.ToLower(msg), strings.ToLower(w)) {
				t.Errorf("%s: message %q does not name %q", c.name, msg, w)
			}
		}
	}
	if after := scheduleState(t, ts.store); after != before {
		t.Errorf("refused requests changed the store:\nbefore %s\nafter  %s", before, after)
	}
}

// TestSchedules_PastTheLimitIs413WithNothingWritten: with db.MaxSchedules
// schedules, one more is 413 resource_exhausted and writes nothing, while
// replacing one of them is still fine.
func TestSchedules_PastTheLimitIs413WithNothingWritten(t *testing.T) {
	ts := newTestServer(t, db.Rules{}, api.Config{})
	ctx := context.Background()
	for i := range db.MaxSchedules {
		if _, err := ts.store.PutSchedule(ctx, db.PutScheduleRequest{Principal: "t", Name: fmt.Sprintf("s%04d", i),
			Spec: schedule.Spec{Every: time.Hour}, Job: db.ScheduleTemplate{Queue: "q"}}); err != nil {
			t.Fatalf("PutSchedule(%d) error = %v", i, err)
		}
	}
	before := scheduleState(t, ts.store)
	res := ts.do(http.MethodPut, "/v1/schedules/one-more", `{"every_ms":60000,"job":{"queue":"q"}}`)
	if code, _ := errorOf(t, res); res.status != http.StatusRequestEntityTooLarge || code != "resource_exhausted" {
		t.Fatalf("PUT the %dth schedule = %v, want 413 resource_exhausted", db.MaxSchedules+1, res)
	}
	if after := scheduleState(t, ts.store); after != before {
		t.Errorf("the refused schedule changed the store:\nbefore %s\nafter  %s", before, after)
	}
	if res := ts.do(http.MethodPut, "/v1/schedules/s0007", `{"every_ms":60000,"job":{"queue":"q"}}`); res.status != http.StatusOK {
		t.Errorf("replacing a schedule at the limit = %v, want 200", res)
	}
}

// TestSchedules_LifecycleOverJSON: create (201) and replace (200) with a
// payload kept byte for byte, names with spaces, unicode and "%" sent
// percent-encoded, reads with next fire times, pause (no next fire),
// resume, trigger (a job with schedule and scheduled_for, the next tick
// unmoved), list pages, delete (404 after), every change audited.
func TestSchedules_LifecycleOverJSON(t *testing.T) {
	clk := testclock.New(time.Date(2026, 3, 1, 12, 0, 5, 0, time.UTC))
	ts := newTestServer(t, db.Rules{Now: clk.Now}, api.Config{Now: clk.Now})
	name := "nightly report ü 50%"
	path := "/v1/schedules/" + url.PathEscape(name)
	payload := `{"b":1,"a":[1.50,"x"],"c":12345678901234567890}` // key order, 1.50 and a big integer kept
	res := ts.do(http.MethodPut, path, `{"cron":"30 2 * * *","timezone":"Europe/Berlin","job":{"queue":"reports","kind":"nightly","payload":`+payload+`,"priority":3,"max_attempts":2}}`)
	if res.status != http.StatusCreated {
		t.Fatalf("PUT %s = %v, want 201", path, res)
	}
	sc := decodeAs[scheduleView](t, res)
	if sc.Name != name || sc.Timezone != "Europe/Berlin" || sc.Catchup != "latest" || sc.Overlap != "allow" || sc.CreatedBy != api.LocalPrincipal {
		t.Errorf("created schedule = %+v", sc)
	}
	var tmpl struct {
		Payload json.RawMessage `json:"payload"`
	}
	_ = json.Unmarshal(sc.Job, &tmpl)
	if string(tmpl.Payload) != payload {
		t.Errorf("job.payload = %s, want %s byte for byte", tmpl.Payload, payload)
	}
	// 02:30 in Berlin (UTC+1 in March before the 29th) is 01:30 UTC.
	wantNext := time.Date(2026, 3, 2, 1, 30, 0, 0, time.UTC)
	if sc.NextFireAt == nil || !sc.NextFireAt.Equal(wantNext) || len(sc.NextFires) != db.NextFireCount || !sc.NextFires[0].Equal(wantNext) {
		t.Errorf("next_fire_at = %v, next_fires = %v; want %v first of %d", sc.NextFireAt, sc.NextFires, wantNext, db.NextFireCount)
	}
	if res := ts.do(http.MethodPut, path, `{"cron":"0 3 * * *","timezone":"Europe/Berlin","job":{"queue":"reports","payload":`+payload+`}}`); res.status != http.StatusOK {
		t.Fatalf("PUT again = %v, want 200 (replaced)", res)
	}
	if got := decodeAs[scheduleView](t, ts.do(http.MethodGet, path, nil)); got.Cron != "0 3 * * *" {
		t.Errorf("GET after the replace: cron %q, want the new one", got.Cron)
	}
	// The name escaped by hand (every byte that needs it) is the same
	// schedule.
	if res := ts.do(http.MethodGet, "/v1/schedules/nightly%20report%20%C3%BC%2050%25", nil); res.status != http.StatusOK {
		t.Errorf("GET with an equivalent escaping = %v", res)
	}

	paused := decodeAs[scheduleView](t, ts.do(http.MethodPost, path+"/pause", nil))
	if !paused.Paused || paused.PausedBy != api.LocalPrincipal || paused.NextFireAt != nil || len(paused.NextFires) != 0 {
		t.Errorf("paused schedule = %+v, want paused with no next fire", paused)
	}
	clk.Advance(time.Hour)
	resumed := decodeAs[scheduleView](t, ts.do(http.MethodPost, path+"/resume", nil))
	if resumed.Paused || resumed.NextFireAt == nil {
		t.Errorf("resumed schedule = %+v, want running with a next fire", resumed)
	}

	res = ts.do(http.MethodPost, path+"/trigger", nil)
	if res.status != http.StatusCreated {
		t.Fatalf("trigger = %v, want 201", res)
	}
	j := decodeAs[scheduledJobView](t, res)
	if j.Schedule != name || j.ScheduledFor == nil || !j.ScheduledFor.Equal(clk.Now()) || j.Backfilled || string(j.Payload) != payload || j.Queue != "reports" {
		t.Errorf("triggered job = %+v, want schedule %q, scheduled_for %v, the payload byte for byte", j, name, clk.Now())
	}
	if got := decodeAs[scheduledJobView](t, ts.do(http.MethodGet, fmt.Sprintf("/v1/jobs/%d", j.ID), nil)); got.Schedule != name || got.ScheduledFor == nil {
		t.Errorf("GET /v1/jobs/%d = %+v, want the schedule fields", j.ID, got)
	}
	after := decodeAs[scheduleView](t, ts.do(http.MethodGet, path, nil))
	if after.NextFireAt == nil || !after.NextFireAt.Equal(*resumed.NextFireAt) {
		t.Errorf("after a trigger next_fire_at = %v, want unmoved %v", after.NextFireAt, resumed.NextFireAt)
	}
	if after.LastJob == nil || after.LastJob.ID != j.ID || after.LastJob.State != "available" {
		t.Errorf("after a trigger last_job = %+v, want job %d available", after.LastJob, j.ID)
	}
	// A job a client enqueued has none of the schedule fields.
	res = ts.do(http.MethodPost, "/v1/jobs", `{"queue":"reports"}`)
	if strings.Contains(string(res.body), "schedule") || strings.Contains(string(res.body), "backfilled") {
		t.Errorf("a client's job has schedule fields: %s", res.body)
	}

	// Paging: three schedules, two a page.
	for _, n := range []string{"a", "b"} {
		if res := ts.do(http.MethodPut, "/v1/schedules/"+n, `{"every_ms":1000,"job":{"queue":"q"}}`); res.status != http.StatusCreated {
			t.Fatalf("PUT %s = %v", n, res)
		}
	}
	var page struct {
		Schedules []scheduleView `json:"schedules"`
		Next      string         `json:"next"`
	}
	page = decodeAs[struct {
		Schedules []scheduleView `json:"schedules"`
		Next      string         `json:"next"`
	}](t, ts.do(http.MethodGet, "/v1/schedules?limit=2", nil))
	if len(page.Schedules) != 2 || page.Schedules[0].Name != "a" || page.Next != "b" {
		t.Errorf("first page = %+v, want a, b and next b", page)
	}
	page2 := decodeAs[struct {
		Schedules []scheduleView `json:"schedules"`
		Next      string         `json:"next"`
	}](t, ts.do(http.MethodGet, "/v1/schedules?limit=2&after="+url.QueryEscape(page.Next), nil))
	if len(page2.Schedules) != 1 || page2.Schedules[0].Name != name || page2.Next != "" {
		t.Errorf("second page = %+v, want %q alone", page2, name)
	}

	if res := ts.do(http.MethodDelete, path, nil); res.status != http.StatusOK {
		t.Fatalf("DELETE = %v", res)
	}
	if res := ts.do(http.MethodGet, path, nil); res.status != http.StatusNotFound {
		t.Errorf("GET after DELETE = %v, want 404", res)
	}
	if got := decodeAs[scheduledJobView](t, ts.do(http.MethodGet, fmt.Sprintf("/v1/jobs/%d", j.ID), nil)); got.ID != j.ID {
		t.Errorf("the deleted schedule's job is gone: %+v", got)
	}

	// Every change is audited under subject schedule:<name>.
	recs, err := ts.store.ListAudit(context.Background(), 0, 1000)
	if err != nil {
		t.Fatal(err)
	}
	var actions []string
	for _, r := range recs {
		if r.Subject == "schedule:"+name {
			actions = append(actions, r.Action)
		}
	}
	want := "schedule_put schedule_put schedule_pause schedule_resume schedule_trigger schedule_delete"
	if got := strings.Join(actions, " "); got != want {
		t.Errorf("audit actions of schedule:%s = %q, want %q", name, got, want)
	}
}

// TestSchedules_FiredJobsCarryTheirTickInEveryReply: a tick the store
// fires (FireSchedules, as the tick loop calls it) is a job whose
// schedule, scheduled_for and backfilled show in GET /v1/jobs/{id} and in
// a claim's reply; /metrics has the schedule's lag while the tick is due
// and not fired, and its dropped ticks.
func TestSchedules_FiredJobsCarryTheirTickInEveryReply(t *testing.T) {
	clk := testclock.New(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	ts := newTestServer(t, db.Rules{Now: clk.Now}, api.Config{Now: clk.Now})
	if res := ts.do(http.MethodPut, "/v1/schedules/minutely", `{"every_ms":60000,"job":{"queue":"ticks","payload":{"n":1}}}`); res.status != http.StatusCreated {
		t.Fatalf("PUT = %v", res)
	}
	fams := scrape(t, ts.URL)
	wantMetric(t, fams, 0, "fenceq_schedule_lag_seconds", "schedule=minutely")
	clk.Advance(90 * time.Second) // the 12:01 tick is due, 30 s late
	fams = scrape(t, ts.URL)
	wantMetric(t, fams, 30, "fenceq_schedule_lag_seconds", "schedule=minutely")

	if _, err := ts.store.FireSchedules(context.Background(), 100); err != nil {
		t.Fatalf("FireSchedules() error = %v", err)
	}
	fams = scrape(t, ts.URL)
	wantMetric(t, fams, 0, "fenceq_schedule_lag_seconds", "schedule=minutely")
	wantMetric(t, fams, 0, "fenceq_schedule_ticks_dropped_total", "schedule=minutely", "reason=missed")
	wantMetric(t, fams, 0, "fenceq_schedule_ticks_dropped_total", "schedule=minutely", "reason=skipped")

	res := ts.do(http.MethodPost, "/v1/claim", `{"worker":"w","queues":["ticks"],"lease_ms":10000}`)
	j := decodeAs[scheduledJobView](t, res)
	tick := time.Date(2026, 3, 1, 12, 1, 0, 0, time.UTC)
	if j.Schedule != "minutely" || j.ScheduledFor == nil || !j.ScheduledFor.Equal(tick) || j.Backfilled {
		t.Errorf("claimed job = %+v (%s), want schedule minutely, scheduled_for %v, not backfilled", j, res.body, tick)
	}
	sc := decodeAs[scheduleView](t, ts.do(http.MethodGet, "/v1/schedules/minutely", nil))
	if sc.LastJob == nil || sc.LastJob.ID != j.ID || !sc.LastJob.ScheduledFor.Equal(tick) || sc.LastJob.State != "claimed" {
		t.Errorf("last_job = %+v, want job %d for %v, claimed", sc.LastJob, j.ID, tick)
	}
}

// TestSchedules_MetricsAreBoundedAsQueuesAre: with MetricsMaxQueues 2 and
// four schedules, /metrics has two schedules by name and the rest as
// "(other)" with the largest lag.
func TestSchedules_MetricsAreBoundedAsQueuesAre(t *testing.T) {
	clk := testclock.New(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	ts := newTestServer(t, db.Rules{Now: clk.Now}, api.Config{Now: clk.Now, MetricsMaxQueues: 2})
	for i, every := range []int{60, 60, 60, 10} {
		if res := ts.do(http.MethodPut, fmt.Sprintf("/v1/schedules/s%d", i), fmt.Sprintf(`{"every_ms":%d,"job":{"queue":"q"}}`, every*1000)); res.status != http.StatusCreated {
			t.Fatalf("PUT = %v", res)
		}
	}
	clk.Advance(70 * time.Second)
	fams := scrape(t, ts.URL)
	series := map[string]bool{}
	for _, m := range fams["fenceq_schedule_lag_seconds"].GetMetric() {
		for _, l := range m.GetLabel() {
			series[l.GetValue()] = true
		}
	}
	if len(series) != 3 || !series["s0"] || !series["s1"] || !series["(other)"] {
		t.Errorf("fenceq_schedule_lag_seconds series = %v, want s0, s1 and (other)", series)
	}
	wantMetric(t, fams, 10, "fenceq_schedule_lag_seconds", "schedule=s0")
	wantMetric(t, fams, 60, "fenceq_schedule_lag_seconds", "schedule=(other)") // s3's first tick at +10 s
}

// TestSchedules_StatusShowsSchedulesToThoseWhoMayReadThem: GET /v1/status
// has the schedules for a producer, not for a worker.
func TestSchedules_StatusShowsSchedulesToThoseWhoMayReadThem(t *testing.T) {
	s := newRPCAuthServer(t)
	if code, _, msg := s.jsonAs(t, "boss", http.MethodPut, "/v1/schedules/hourly", `{"cron":"@hourly","job":{"queue":"q"}}`); code != http.StatusCreated {
		t.Fatalf("PUT as admin = %d %s", code, msg)
	}
	for who, want := range map[string]bool{"prod": true, "work": false, "boss": true} {
		req := s.newRequest(http.MethodGet, "/v1/status", nil)
		req.Header.Set("Authorization", "Bearer "+s.tokens[who])
		res := s.doRequest(req)
		var st struct {
			Can struct {
				Schedules bool `json:"schedules"`
			} `json:"can"`
			Schedules []scheduleView `json:"schedules"`
		}
		if err := json.Unmarshal(res.body, &st); err != nil {
			t.Fatal(err)
		}
		if st.Can.Schedules != want || (len(st.Schedules) == 1) != want {
			t.Errorf("GET /v1/status as %s: can.schedules %v, %d schedules; want %v", who, st.Can.Schedules, len(st.Schedules), want)
		}
	}
	if code, _, _ := s.jsonAs(t, "prod", http.MethodPost, "/v1/schedules/hourly/trigger", ""); code != http.StatusForbidden {
		t.Errorf("trigger as producer = %d, want 403", code)
	}
}

// TestRPC_SchedulesOverConnect: put, get and trigger through the
// generated Connect client, with the JSON route's roles (a producer may
// read but not put) and the same refusals (a bad cron is
// invalid_argument, nothing written).
func TestRPC_SchedulesOverConnect(t *testing.T) {
	s := newRPCAuthServer(t)
	as := func(who string) fenceqv1connect.ScheduleServiceClient {
		return fenceqv1connect.NewScheduleServiceClient(s.client, s.URL, bearer(s.tokens[who]))
	}
	ctx := context.Background()
	put := &fenceqv1.PutScheduleRequest{Name: "every minute", Spec: &fenceqv1.ScheduleSpec{EveryMs: 60000, Overlap: "skip"},
		Job: &fenceqv1.ScheduleJob{Queue: "q", Payload: []byte(`{"x": 1}`), Priority: 4}}
	if _, err := as("prod").PutSchedule(ctx, connect.NewRequest(put)); connect.CodeOf(err) != connect.CodePermissionDenied {
		t.Errorf("PutSchedule as producer: %v, want permission_denied", err)
	}
	before := scheduleState(t, s.store)
	bad := &fenceqv1.PutScheduleRequest{Name: "bad", Spec: &fenceqv1.ScheduleSpec{Cron: "TZ=UTC * * * * *"}, Job: &fenceqv1.ScheduleJob{Queue: "q"}}
	if _, err := as("boss").PutSchedule(ctx, connect.NewRequest(bad)); connect.CodeOf(err) != connect.CodeInvalidArgument {
		t.Errorf("PutSchedule with TZ=: %v, want invalid_argument", err)
	}
	if after := scheduleState(t, s.store); after != before {
		t.Errorf("a refused PutSchedule changed the store")
	}
	created, err := as("boss").PutSchedule(ctx, connect.NewRequest(put))
	if err != nil || !created.Msg.GetCreated() || created.Msg.GetSchedule().GetSpec().GetOverlap() != "skip" {
		t.Fatalf("PutSchedule = %v, %v; want created with overlap skip", created, err)
	}
	got, err := as("prod").GetSchedule(ctx, connect.NewRequest(&fenceqv1.GetScheduleRequest{Name: "every minute"}))
	if err != nil || got.Msg.GetSchedule().GetSpec().GetEveryMs() != 60000 || len(got.Msg.GetSchedule().GetNextFires()) != db.NextFireCount ||
		string(got.Msg.GetSchedule().GetJob().GetPayload()) != `{"x": 1}` {
		t.Fatalf("GetSchedule = %v, %v", got, err)
	}
	trig, err := as("boss").TriggerSchedule(ctx, connect.NewRequest(&fenceqv1.TriggerScheduleRequest{Name: "every minute"}))
	if err != nil || trig.Msg.GetJob().GetSchedule() != "every minute" || trig.Msg.GetJob().GetScheduledFor() == nil ||
		trig.Msg.GetJob().GetPriority() != 4 || string(trig.Msg.GetJob().GetPayload()) != `{"x": 1}` {
		t.Fatalf("TriggerSchedule = %v, %v; want a job of schedule \"every minute\" with scheduled_for", trig, err)
	}
	if _, err := as("boss").GetSchedule(ctx, connect.NewRequest(&fenceqv1.GetScheduleRequest{Name: "nope"})); connect.CodeOf(err) != connect.CodeNotFound {
		t.Errorf("GetSchedule(nope): %v, want not_found", err)
	}
}

// TestSchedules_PutAndResumeWakeTheTickLoop: the server calls the waker
// set with SetScheduleWaker after a put (created or replaced) and a
// resume, over JSON and over protobuf, and not after a read, a pause, a
// trigger, a delete or a refused put.
func TestSchedules_PutAndResumeWakeTheTickLoop(t *testing.T) {
	store := newStore(t, db.Rules{})
	srv := api.New(store, api.Config{})
	var wakes atomic.Int64
	srv.SetScheduleWaker(func() { wakes.Add(1) })
	h := httptest.NewServer(srv)
	t.Cleanup(h.Close)
	ts := &testServer{t: t, URL: h.URL, store: store, client: h.Client()}
	steps := []struct {
		method, path, body string
		wake               bool
	}{
		{http.MethodPut, "/v1/schedules/s", `{"every_ms":60000,"job":{"queue":"q"}}`, true},
		{http.MethodPut, "/v1/schedules/s", `{"every_ms":30000,"job":{"queue":"q"}}`, true},
		{http.MethodPut, "/v1/schedules/s", `{"every_ms":10,"job":{"queue":"q"}}`, false},
		{http.MethodGet, "/v1/schedules/s", ``, false},
		{http.MethodPost, "/v1/schedules/s/pause", ``, false},
		{http.MethodPost, "/v1/schedules/s/resume", ``, true},
		{http.MethodPost, "/v1/schedules/s/trigger", ``, false},
		{http.MethodDelete, "/v1/schedules/s", ``, false},
	}
	for _, s := range steps {
		before := wakes.Load()
		var body any
		if s.body != "" {
			body = s.body
		}
		res := ts.do(s.method, s.path, body)
		if woke := wakes.Load() > before; woke != s.wake {
			t.Errorf("%s %s (%d): woke the tick loop %v, want %v", s.method, s.path, res.status, woke, s.wake)
		}
	}
	c := fenceqv1connect.NewScheduleServiceClient(h.Client(), h.URL)
	before := wakes.Load()
	if _, err := c.PutSchedule(context.Background(), connect.NewRequest(&fenceqv1.PutScheduleRequest{Name: "r",
		Spec: &fenceqv1.ScheduleSpec{EveryMs: 1000}, Job: &fenceqv1.ScheduleJob{Queue: "q"}})); err != nil || wakes.Load() != before+1 {
		t.Errorf("PutSchedule over protobuf: %v, wakes %d → %d; want one wake", err, before, wakes.Load())
	}
}
