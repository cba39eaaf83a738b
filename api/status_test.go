package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fenceq/fenceq/api"
	"github.com/fenceq/fenceq/db"
	"github.com/fenceq/fenceq/db/bolt"
	"github.com/fenceq/fenceq/internal/testclock"
	bbolt "go.etcd.io/bbolt"
)

func newStatusClock() *testclock.Clock {
	return testclock.New(time.Date(2026, 3, 1, 12, 0, 5, 0, time.UTC))
}

// statusView is the part of GET /v1/status the tests read.
type statusView struct {
	Now       time.Time `json:"now"`
	Principal string    `json:"principal"`
	Roles     []string  `json:"roles"`
	Auth      bool      `json:"auth"`
	Can       struct {
		Jobs, Enqueue, Retry, Cancel, Leases, Audit bool
	} `json:"can"`
	Queues []struct {
		Queue  string            `json:"queue"`
		Counts map[string]uint64 `json:"counts"`
	} `json:"queues"`
	Throughput []struct {
		Start       time.Time `json:"start"`
		Claims      uint64    `json:"claims"`
		Completions uint64    `json:"completions"`
		Failures    uint64    `json:"failures"`
	} `json:"throughput"`
	BucketSeconds int          `json:"bucket_seconds"`
	Claimed       *jobListView `json:"claimed"`
	Scheduled     *jobListView `json:"scheduled"`
	Dead          *jobListView `json:"dead"`
	Zombies       []struct {
		At           time.Time `json:"at"`
		Principal    string    `json:"principal"`
		Worker       string    `json:"worker"`
		Job          uint64    `json:"job"`
		Operation    string    `json:"operation"`
		TokenSent    uint64    `json:"token_sent"`
		TokenCurrent uint64    `json:"token_current"`
		JobState     string    `json:"job_state"`
		HeldBy       string    `json:"held_by"`
		Code         string    `json:"code"`
	} `json:"zombies"`
	Leases []struct {
		Name         string `json:"name"`
		Holder       string `json:"holder"`
		FencingToken uint64 `json:"fencing_token"`
	} `json:"leases"`
	Audit *struct {
		HeadSeq  uint64 `json:"head_seq"`
		HeadHash string `json:"head_hash"`
		Verified *struct {
			OK          bool      `json:"ok"`
			Records     uint64    `json:"records"`
			VerifiedSeq uint64    `json:"verified_seq"`
			FirstBroken uint64    `json:"first_broken"`
			CheckedAt   time.Time `json:"checked_at"`
			CatchingUp  bool      `json:"catching_up"`
		} `json:"verified"`
	} `json:"audit"`
}

type jobListView struct {
	Jobs  []jobView `json:"jobs"`
	Total uint64    `json:"total"`
}

func decodeStatus(t testing.TB, status int, body []byte) statusView {
	t.Helper()
	if status != http.StatusOK {
		t.Fatalf("GET /v1/status = %d %s, want 200", status, body)
	}
	var st statusView
	if err := json.Unmarshal(body, &st); err != nil {
		t.Fatalf("GET /v1/status body %s: %v", body, err)
	}
	return st
}

func (ts *testServer) status(query string) statusView {
	ts.t.Helper()
	r := ts.get("/v1/status" + query)
	return decodeStatus(ts.t, r.status, r.body)
}

func jobIDs(l *jobListView) []uint64 {
	if l == nil {
		return nil
	}
	var ids []uint64
	for _, j := range l.Jobs {
		ids = append(ids, j.ID)
	}
	return ids
}

func TestStatus_ShowsCountsListsLeasesAndTheAuditHead(t *testing.T) {
	ts := newTestServer(t, db.Rules{}, api.Config{})
	for i := 0; i < 3; i++ {
		ts.enqueue(map[string]any{"queue": "emails"})
	}
	later := ts.enqueue(map[string]any{"queue": "reports", "delay_ms": 600000})
	doomed := ts.enqueue(map[string]any{"queue": "images", "max_attempts": 1})
	claimed := ts.claim(map[string]any{"worker": "w1", "queues": []string{"emails"}, "lease_ms": 60000})
	ts.claim(map[string]any{"worker": "w2", "queues": []string{"images"}})
	wantJob(t, "fail", ts.post(fmt.Sprintf("/v1/jobs/%d/fail", doomed.ID),
		map[string]any{"worker": "w2", "error": "decoder crashed", "final": true}), http.StatusOK)
	if r := ts.post("/v1/leases/%2Fdata%2Fa.csv/acquire", map[string]any{"holder": "etl", "ttl_ms": 60000}); r.status != http.StatusOK {
		t.Fatalf("acquire = %v", r)
	}

	st := ts.status("")
	counts := map[string]map[string]uint64{}
	for _, q := range st.Queues {
		counts[q.Queue] = q.Counts
		if len(q.Counts) != len(db.States) {
			t.Errorf("queue %s counts = %v, want every state", q.Queue, q.Counts)
		}
	}
	want := map[string]map[string]uint64{
		"emails":  {"available": 2, "claimed": 1},
		"reports": {"scheduled": 1},
		"images":  {"dead": 1},
	}
	for q, states := range want {
		for state, n := range states {
			if counts[q][state] != n {
				t.Errorf("status counts[%s][%s] = %d, want %d (all: %v)", q, state, counts[q][state], n, counts)
			}
		}
	}
	if len(st.Claimed.Jobs) != 1 || st.Claimed.Total != 1 || st.Claimed.Jobs[0].ID != claimed.ID ||
		st.Claimed.Jobs[0].ClaimedBy != "local|w1" || st.Claimed.Jobs[0].FencingToken != 1 || st.Claimed.Jobs[0].LeaseExpiresAt == nil {
		t.Errorf("status claimed = %+v, want job %d held by local|w1 with token 1 and a lease", st.Claimed, claimed.ID)
	}
	if got := jobIDs(st.Scheduled); len(got) != 1 || got[0] != later.ID {
		t.Errorf("status scheduled = %v, want [%d]", got, later.ID)
	}
	if len(st.Dead.Jobs) != 1 || st.Dead.Jobs[0].ID != doomed.ID || st.Dead.Jobs[0].LastError != "decoder crashed" {
		t.Errorf("status dead = %+v, want job %d with its last error", st.Dead, doomed.ID)
	}
	if len(st.Leases) != 1 || st.Leases[0].Name != "/data/a.csv" || st.Leases[0].Holder != "local|etl" || st.Leases[0].FencingToken != 1 {
		t.Errorf("status leases = %+v, want /data/a.csv held by local|etl with token 1", st.Leases)
	}
	rep, err := ts.store.VerifyAudit(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if st.Audit == nil || st.Audit.HeadSeq != rep.HeadSeq || st.Audit.HeadHash != rep.HeadHash ||
		st.Audit.Verified == nil || !st.Audit.Verified.OK || st.Audit.Verified.Records != rep.Records {
		t.Errorf("status audit = %+v, want head %d %s verified over %d records", st.Audit, rep.HeadSeq, rep.HeadHash, rep.Records)
	}
	if !st.Can.Jobs || !st.Can.Retry || !st.Can.Cancel || !st.Can.Leases || !st.Can.Audit || st.Auth || st.Principal != "local" {
		t.Errorf("status without principals: principal %q auth %v can %+v, want local with every permission", st.Principal, st.Auth, st.Can)
	}
	var claims, failures uint64
	for _, b := range st.Throughput {
		claims += b.Claims
		failures += b.Failures
	}
	if len(st.Throughput) != 60 || st.BucketSeconds != 10 || claims != 2 || failures != 1 {
		t.Errorf("status throughput: %d buckets of %d s, %d claims, %d failures; want 60 of 10 s, 2 claims, 1 failure",
			len(st.Throughput), st.BucketSeconds, claims, failures)
	}
}

func TestStatus_ListsAreBoundedByLimit(t *testing.T) {
	ts := newTestServer(t, db.Rules{}, api.Config{})
	for i := 0; i < 5; i++ {
		ts.enqueue(map[string]any{"queue": "q", "delay_ms": 60000 + i})
		ts.enqueue(map[string]any{"queue": "q"})
	}
	for i := 0; i < 5; i++ {
		ts.claim(map[string]any{"worker": "w", "queues": []string{"q"}})
	}
	st := ts.status("?limit=2")
	if len(st.Claimed.Jobs) != 2 || st.Claimed.Total != 5 || len(st.Scheduled.Jobs) != 2 || st.Scheduled.Total != 5 {
		t.Errorf("status?limit=2: claimed %d of %d, scheduled %d of %d; want 2 of 5 each",
			len(st.Claimed.Jobs), st.Claimed.Total, len(st.Scheduled.Jobs), st.Scheduled.Total)
	}
	for _, bad := range []string{"0", "-1", "1001", "x"} {
		wantError(t, "status?limit="+bad, ts.get("/v1/status?limit="+bad), http.StatusBadRequest, "invalid_argument", "limit")
	}
}

// TestStatus_RefusedStaleCallsAreZombies: a worker paused past its lease,
// whose job a restart of itself claimed again, heartbeats, completes and
// fails with its old token; the status shows each refusal with the token
// it sent and the job's current one. Bad input is not a zombie.
func TestStatus_RefusedStaleCallsAreZombies(t *testing.T) {
	clk := newStatusClock()
	ts := newTestServer(t, db.Rules{Now: clk.Now}, api.Config{Now: clk.Now})
	job := ts.enqueue(map[string]any{"queue": "q"})
	first := ts.claim(map[string]any{"worker": "w1", "queues": []string{"q"}, "lease_ms": 1000})
	clk.Advance(2 * time.Second)
	second := ts.claim(map[string]any{"worker": "w1", "queues": []string{"q"}, "lease_ms": 60000})
	if first.FencingToken != 1 || second.FencingToken != 2 || second.ID != job.ID {
		t.Fatalf("claims = token %d then %d on job %d, want 1 then 2 on job %d", first.FencingToken, second.FencingToken, second.ID, job.ID)
	}
	path := fmt.Sprintf("/v1/jobs/%d/", job.ID)
	calls := []struct {
		op, code string
		status   int
		body     map[string]any
	}{
		{"heartbeat", "not_found", http.StatusNotFound, map[string]any{"worker": "w1", "fencing_token": 1}},
		{"complete", "failed_precondition", http.StatusConflict, map[string]any{"worker": "w1", "fencing_token": 1, "result": "late"}},
		{"fail", "not_found", http.StatusNotFound, map[string]any{"worker": "w1", "fencing_token": 1, "error": "late"}},
		{"complete", "failed_precondition", http.StatusConflict, map[string]any{"worker": "w9"}},
	}
	for _, c := range calls {
		wantError(t, c.op, ts.post(path+c.op, c.body), c.status, c.code)
	}
	// Not zombies: a malformed token, and a call that succeeds.
	wantError(t, "heartbeat with a huge token", ts.post(path+"heartbeat", map[string]any{"worker": "w1", "fencing_token": uint64(1) << 40}),
		http.StatusBadRequest, "invalid_argument")
	wantJob(t, "current heartbeat", ts.post(path+"heartbeat", map[string]any{"worker": "w1", "fencing_token": 2}), http.StatusOK)

	st := ts.status("")
	if len(st.Zombies) != len(calls) {
		t.Fatalf("status zombies = %+v, want %d", st.Zombies, len(calls))
	}
	for i, z := range st.Zombies {
		c := calls[len(calls)-1-i] // newest first
		sent := uint64(0)
		if v, ok := c.body["fencing_token"].(int); ok {
			sent = uint64(v)
		}
		if z.Operation != c.op || z.Code != c.code || z.Worker != c.body["worker"] || z.Principal != "local" ||
			z.Job != job.ID || z.TokenSent != sent || z.TokenCurrent != 2 || z.JobState != "claimed" ||
			z.HeldBy != "local|w1" || !z.At.Equal(clk.Now()) {
			t.Errorf("zombie %d = %+v, want %s %s by local|%v sending %d, current 2, claimed by local|w1", i, z, c.op, c.code, c.body["worker"], sent)
		}
	}
	if job := wantJob(t, "get", ts.get(path[:len(path)-1]), http.StatusOK); job.Result != nil || job.Attempts != 2 {
		t.Errorf("job after the stale calls = %+v, want still on its second claim with no result", job)
	}
}

func TestStatus_ListsTheZombiesTheStoreKeeps(t *testing.T) {
	ts := newTestServer(t, db.Rules{}, api.Config{})
	for i := 1; i <= 105; i++ {
		wantError(t, "heartbeat", ts.post(fmt.Sprintf("/v1/jobs/%d/heartbeat", i), map[string]any{"worker": "w"}),
			http.StatusNotFound, "not_found")
	}
	st := ts.status("?limit=1000")
	if len(st.Zombies) != 105 || st.Zombies[0].Job != 105 || st.Zombies[104].Job != 1 {
		t.Fatalf("status zombies: %d, first job %d, last job %d; want 105 from job 105 down to 1 (the store keeps 1000)",
			len(st.Zombies), st.Zombies[0].Job, st.Zombies[len(st.Zombies)-1].Job)
	}
	if z := st.Zombies[0]; z.TokenCurrent != 0 || z.JobState != "" {
		t.Errorf("zombie of a job that does not exist = %+v, want no current token or state", z)
	}
}

// TestStatus_ThroughputIsCountedPerTenSeconds runs claims, completions and
// failures in different 10-second buckets and checks each bucket, then
// that they age out of the ten-minute window.
func TestStatus_ThroughputIsCountedPerTenSeconds(t *testing.T) {
	clk := newStatusClock() // 12:00:05
	ts := newTestServer(t, db.Rules{Now: clk.Now}, api.Config{Now: clk.Now})
	for i := 0; i < 4; i++ {
		ts.enqueue(map[string]any{"queue": "q"})
	}
	a := ts.claim(map[string]any{"worker": "w", "queues": []string{"q"}})
	b := ts.claim(map[string]any{"worker": "w", "queues": []string{"q"}})
	clk.Advance(10 * time.Second) // 12:00:15
	r := ts.post(fmt.Sprintf("/v1/jobs/%d/complete", a.ID), map[string]any{"worker": "w",
		"claim_next": map[string]any{"queues": []string{"q"}}})
	wantJob(t, "complete with claim_next", r, http.StatusOK)
	clk.Advance(20 * time.Second) // 12:00:35
	wantJob(t, "fail", ts.post(fmt.Sprintf("/v1/jobs/%d/fail", b.ID), map[string]any{"worker": "w", "error": "x"}), http.StatusOK)

	st := ts.status("")
	n := len(st.Throughput)
	type counts struct{ claims, completions, failures uint64 }
	got := func(i int) counts {
		b := st.Throughput[i]
		return counts{b.Claims, b.Completions, b.Failures}
	}
	base := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	wantBuckets := map[int]struct {
		start time.Time
		c     counts
	}{
		n - 1: {base.Add(30 * time.Second), counts{0, 0, 1}},
		n - 2: {base.Add(20 * time.Second), counts{}},
		n - 3: {base.Add(10 * time.Second), counts{1, 1, 0}},
		n - 4: {base, counts{2, 0, 0}},
	}
	for i, w := range wantBuckets {
		if !st.Throughput[i].Start.Equal(w.start) || got(i) != w.c {
			t.Errorf("throughput[%d] = %v %+v, want %v %+v", i, st.Throughput[i].Start, got(i), w.start, w.c)
		}
	}
	clk.Advance(10 * time.Minute)
	for i, b := range ts.status("").Throughput {
		if b.Claims+b.Completions+b.Failures != 0 {
			t.Errorf("throughput[%d] ten minutes later = %+v, want zeros", i, b)
		}
	}
}

// TestStatus_PartsFollowTheCallersRoles: with principals, the page's data
// holds only what the caller's roles may fetch, and says which buttons to
// show.
func TestStatus_PartsFollowTheCallersRoles(t *testing.T) {
	f := newAuthFixture(t)
	if _, err := f.store.EnqueueJob(context.Background(), db.EnqueueRequest{Principal: "prod", Queue: "q"}); err != nil {
		t.Fatal(err)
	}
	for _, who := range []string{"", "wrong"} {
		for _, path := range []string{"/v1/status", "/v1/whoami"} {
			if status, body := f.call(t, who, "GET", path, ""); status != http.StatusUnauthorized {
				t.Errorf("GET %s as %q = %d %s, want 401", path, who, status, body)
			}
		}
	}
	tests := []struct {
		who                                  string
		jobs, retry, leases, audit, hasRoles bool
	}{
		{who: "prod", jobs: true},
		{who: "work", leases: true},
		{who: "boss", jobs: true, retry: true, leases: true, audit: true},
	}
	for _, tt := range tests {
		status, body := f.call(t, tt.who, "GET", "/v1/status", "")
		st := decodeStatus(t, status, body)
		if !st.Auth || st.Principal != tt.who || st.Can.Jobs != tt.jobs || st.Can.Retry != tt.retry ||
			st.Can.Cancel != tt.retry || st.Can.Leases != tt.leases || st.Can.Audit != tt.audit {
			t.Errorf("status as %s: principal %q auth %v can %+v; want jobs %v retry/cancel %v leases %v audit %v",
				tt.who, st.Principal, st.Auth, st.Can, tt.jobs, tt.retry, tt.leases, tt.audit)
		}
		if (st.Queues != nil) != tt.jobs || (st.Claimed != nil) != tt.jobs || (st.Dead != nil) != tt.jobs ||
			(st.Leases != nil) != tt.leases || (st.Audit != nil) != tt.audit {
			t.Errorf("status as %s has queues %v, claimed %v, dead %v, leases %v, audit %v; want jobs %v leases %v audit %v",
				tt.who, st.Queues != nil, st.Claimed != nil, st.Dead != nil, st.Leases != nil, st.Audit != nil, tt.jobs, tt.leases, tt.audit)
		}
		status, body = f.call(t, tt.who, "GET", "/v1/whoami", "")
		var who struct {
			Principal string
			Roles     []string
			Can       struct{ Retry bool }
		}
		if err := json.Unmarshal(body, &who); status != http.StatusOK || err != nil || who.Principal != tt.who ||
			len(who.Roles) != 1 || who.Can.Retry != tt.retry {
			t.Errorf("whoami as %s = %d %s, want the principal, its one role and retry %v", tt.who, status, body, tt.retry)
		}
	}
	// The job history is a producer's read, like the job itself.
	for who, want := range map[string]int{"prod": 200, "work": 403, "boss": 200} {
		if status, body := f.call(t, who, "GET", "/v1/jobs/1/history", ""); status != want {
			t.Errorf("GET /v1/jobs/1/history as %s = %d %s, want %d", who, status, body, want)
		}
	}
}

type historyView struct {
	Records []struct {
		Seq     uint64            `json:"seq"`
		Action  string            `json:"action"`
		Subject string            `json:"subject"`
		Token   uint64            `json:"token"`
		Details map[string]string `json:"details"`
	} `json:"records"`
	Next uint64 `json:"next"`
}

func (ts *testServer) history(id uint64, query string) historyView {
	ts.t.Helper()
	r := ts.get(fmt.Sprintf("/v1/jobs/%d/history%s", id, query))
	if r.status != http.StatusOK {
		ts.t.Fatalf("history of job %d%s = %v, want 200", id, query, r)
	}
	var h historyView
	if err := json.Unmarshal(r.body, &h); err != nil {
		ts.t.Fatalf("history body %s: %v", r.body, err)
	}
	return h
}

// TestJobHistory_IsTheJobsAuditRecordsNewestFirst compares the history of
// each job, read page by page through the subject index, with a full scan
// of the audit log; ids 1, 10 and 11 share decimal prefixes.
func TestJobHistory_IsTheJobsAuditRecordsNewestFirst(t *testing.T) {
	ts := newTestServer(t, db.Rules{}, api.Config{})
	for i := 0; i < 12; i++ {
		ts.enqueue(map[string]any{"queue": "q"})
	}
	for i := 0; i < 3; i++ {
		j := ts.claim(map[string]any{"worker": "w", "queues": []string{"q"}, "lease_ms": 60000})
		for k := 0; k < 3; k++ {
			wantJob(t, "heartbeat", ts.post(fmt.Sprintf("/v1/jobs/%d/heartbeat", j.ID),
				map[string]any{"worker": "w", "fencing_token": j.FencingToken}), http.StatusOK)
		}
		wantJob(t, "fail", ts.post(fmt.Sprintf("/v1/jobs/%d/fail", j.ID),
			map[string]any{"worker": "w", "error": "e", "retry_delay_ms": 0}), http.StatusOK)
	}
	for _, id := range []uint64{10, 11} {
		wantJob(t, "cancel", ts.post(fmt.Sprintf("/v1/jobs/%d/cancel", id), nil), http.StatusOK)
	}
	all, err := ts.store.ListAudit(context.Background(), 0, 1000)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []uint64{1, 2, 10, 11, 12, 99} {
		var want []uint64
		for i := len(all) - 1; i >= 0; i-- {
			if all[i].Subject == fmt.Sprintf("job:%d", id) {
				want = append(want, all[i].Seq)
			}
		}
		var got []uint64
		before := uint64(0)
		for pages := 0; ; pages++ {
			h := ts.history(id, fmt.Sprintf("?limit=2&before=%d", before))
			for _, r := range h.Records {
				if r.Subject != fmt.Sprintf("job:%d", id) {
					t.Errorf("history of job %d has record %d of %s", id, r.Seq, r.Subject)
				}
				got = append(got, r.Seq)
			}
			if h.Next == 0 || pages > 20 {
				break
			}
			before = h.Next
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("history of job %d = %v, want %v", id, got, want)
		}
	}
	h := ts.history(1, "")
	if len(h.Records) == 0 || h.Records[0].Action != "fail" || h.Records[len(h.Records)-1].Action != "enqueue" {
		t.Errorf("history of job 1 = %+v, want fail first and enqueue last", h.Records)
	}
	for _, bad := range []string{"?limit=-1", "?limit=1001", "?before=x", "?limit=x"} {
		wantError(t, "history"+bad, ts.get("/v1/jobs/1/history"+bad), http.StatusBadRequest, "invalid_argument")
	}
}

// TestStatus_ABrokenAuditChainIsShown opens a file whose audit record 2
// was altered: the status says the chain does not verify, and where.
func TestStatus_ABrokenAuditChainIsShown(t *testing.T) {
	path := filepath.Join(t.TempDir(), "fenceq.db")
	store, err := bolt.Open(path, bolt.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		if _, err := store.EnqueueJob(context.Background(), db.EnqueueRequest{Principal: "local"}); err != nil {
			t.Fatal(err)
		}
	}
	store.Close()
	raw, err := bbolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = raw.Update(func(tx *bbolt.Tx) error {
		b := tx.Bucket([]byte("audit"))
		k := []byte{0, 0, 0, 0, 0, 0, 0, 2}
		v := append([]byte(nil), b.Get(k)...)
		i := strings.Index(string(v), "local")
		if i < 0 {
			return fmt.Errorf("record 2 has no principal local")
		}
		v[i] ^= 1
		return b.Put(k, v)
	})
	raw.Close()
	if err != nil {
		t.Fatal(err)
	}
	store, err = bolt.Open(path, bolt.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	srv := httptest.NewServer(api.New(store, api.Config{Logger: discardLogger()}))
	defer srv.Close()
	res, err := http.Get(srv.URL + "/v1/status")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var st statusView
	if err := json.NewDecoder(res.Body).Decode(&st); err != nil {
		t.Fatal(err)
	}
	if st.Audit == nil || st.Audit.HeadSeq != 3 || st.Audit.Verified == nil || st.Audit.Verified.OK || st.Audit.Verified.FirstBroken != 2 {
		t.Errorf("status audit of an altered chain = %+v, want head 3, not OK, first broken 2", st.Audit)
	}
}

// walkCounter is a real store that counts the audit records its
// verifications walk: the whole walks (VerifyAudit) apart from the
// incremental steps.
type walkCounter struct {
	db.Store
	mu          sync.Mutex
	wholeWalks  int
	stepped     uint64
	biggestStep uint64
}

func (w *walkCounter) VerifyAudit(ctx context.Context) (db.AuditReport, error) {
	w.mu.Lock()
	w.wholeWalks++
	w.mu.Unlock()
	return w.Store.VerifyAudit(ctx)
}

func (w *walkCounter) VerifyAuditFrom(ctx context.Context, req db.AuditVerifyRequest) (db.AuditReport, error) {
	rep, err := w.Store.VerifyAuditFrom(ctx, req)
	w.mu.Lock()
	defer w.mu.Unlock()
	w.stepped += rep.Records
	w.biggestStep = max(w.biggestStep, rep.Records)
	return rep, err
}

func (w *walkCounter) counts() (whole int, stepped uint64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.wholeWalks, w.stepped
}

// TestStatus_AuditVerificationWalksOnlyNewRecordsAndNoRequestWaitsForAWalk:
// the status page's "chain verifies" never walks the whole chain on a
// request. The first request verifies at most api.AuditRequestStep records
// and answers; a background walk verifies the rest. Later polls verify
// only the records appended since, once the interval passed; with nothing
// new, nothing is walked, however long it has been.
func TestStatus_AuditVerificationWalksOnlyNewRecordsAndNoRequestWaitsForAWalk(t *testing.T) {
	clk := newStatusClock()
	store := &walkCounter{Store: newStore(t, db.Rules{Now: clk.Now})}
	n := api.AuditRequestStep*2 + 500
	for done := 0; done < n; done += db.MaxListLimit {
		reqs := make([]db.EnqueueRequest, min(db.MaxListLimit, n-done))
		for i := range reqs {
			reqs[i] = db.EnqueueRequest{Principal: "local", Queue: "q"}
		}
		if _, err := store.EnqueueJobs(context.Background(), reqs); err != nil {
			t.Fatal(err)
		}
	}
	srv := api.New(store, api.Config{Logger: discardLogger(), Now: clk.Now, AuditVerifyInterval: time.Minute})
	hs := httptest.NewServer(srv)
	t.Cleanup(hs.Close)
	ts := &testServer{t: t, URL: hs.URL, store: store, client: hs.Client()}

	first := ts.status("").Audit
	if v := first.Verified; first.HeadSeq != uint64(n) || v == nil || !v.OK || v.VerifiedSeq != api.AuditRequestStep || v.Records != api.AuditRequestStep {
		t.Fatalf("first status: head %d, verified %+v; want head %d verified through %d (one request's step), not the whole chain",
			first.HeadSeq, first.Verified, n, api.AuditRequestStep)
	}
	api.WaitAuditVerificationForTest(srv)
	if whole, stepped := store.counts(); whole != 0 || stepped != uint64(n) {
		t.Errorf("after the background walk: %d whole walks, %d records stepped; want 0 and %d", whole, stepped, n)
	}
	if v := ts.status("").Audit.Verified; !v.OK || v.VerifiedSeq != uint64(n) || v.CatchingUp || v.Records != uint64(n) {
		t.Errorf("status after the background walk: %+v, want verified through %d, not catching up", v, n)
	}

	ts.enqueue(map[string]any{"queue": "q"})
	clk.Advance(30 * time.Second)
	if v := ts.status("").Audit; v.HeadSeq != uint64(n+1) || v.Verified.VerifiedSeq != uint64(n) {
		t.Errorf("within the interval: head %d, verified %+v; want head %d and the last verification", v.HeadSeq, v.Verified, n+1)
	}
	clk.Advance(31 * time.Second)
	if v := ts.status("").Audit.Verified; !v.OK || v.VerifiedSeq != uint64(n+1) || !v.CheckedAt.Equal(clk.Now()) {
		t.Errorf("after the interval, with a new record: %+v, want verified through %d now", v, n+1)
	}
	if _, stepped := store.counts(); stepped != uint64(n+1) {
		t.Errorf("records walked after one was appended = %d, want %d (only the new one)", stepped, n+1)
	}
	clk.Advance(20 * time.Minute)
	ts.status("")
	if whole, stepped := store.counts(); whole != 0 || stepped != uint64(n+1) {
		t.Errorf("twenty minutes later with nothing appended: %d whole walks, %d records walked; want 0 and %d", whole, stepped, n+1)
	}
	if store.biggestStep > db.DefaultVerifyStep {
		t.Errorf("largest step = %d records, want at most %d (one read transaction each)", store.biggestStep, db.DefaultVerifyStep)
	}
}

// TestStatus_ZombiesShowTheJobAsItIsNow: a refused stale call lists the
// job's state when the status is read, not when the call was refused: once
// the current holder completed it, it reads completed, held by nobody; once
// it is gone, it has no state.
func TestStatus_ZombiesShowTheJobAsItIsNow(t *testing.T) {
	clk := newStatusClock()
	ts := newTestServer(t, db.Rules{Now: clk.Now}, api.Config{Now: clk.Now})
	job := ts.enqueue(map[string]any{"queue": "q"})
	ts.claim(map[string]any{"worker": "w1", "queues": []string{"q"}, "lease_ms": 1000})
	clk.Advance(2 * time.Second)
	second := ts.claim(map[string]any{"worker": "w2", "queues": []string{"q"}, "lease_ms": 60000})
	path := fmt.Sprintf("/v1/jobs/%d/", job.ID)
	wantError(t, "stale heartbeat", ts.post(path+"heartbeat", map[string]any{"worker": "w1", "fencing_token": 1}), http.StatusNotFound, "not_found")
	if st := ts.status(""); len(st.Zombies) != 1 || st.Zombies[0].JobState != "claimed" || st.Zombies[0].HeldBy != "local|w2" {
		t.Fatalf("zombies while w2 holds the job = %+v, want one, claimed by local|w2", st.Zombies)
	}
	wantJob(t, "complete by w2", ts.post(path+"complete", map[string]any{"worker": "w2", "fencing_token": second.FencingToken}), http.StatusOK)
	st := ts.status("")
	if len(st.Zombies) != 1 {
		t.Fatalf("zombies = %+v, want one", st.Zombies)
	}
	if z := st.Zombies[0]; z.JobState != "completed" || z.HeldBy != "" || z.TokenCurrent != 2 || z.TokenSent != 1 {
		t.Errorf("zombie after the job completed = %+v, want job_state completed, no holder, token sent 1, current 2", z)
	}
}
