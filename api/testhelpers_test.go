package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/fenceq/fenceq/api"
	"github.com/fenceq/fenceq/db"
	"github.com/fenceq/fenceq/internal/apitest"
)

// testServer is the real API over HTTP on 127.0.0.1:0, backed by a real
// store from newStore.
type testServer struct {
	t      testing.TB
	URL    string
	store  db.Store
	client *http.Client
}

// newStore opens the store the HTTP tests run on, with rules (the clock and
// limits): the engine's factory. The tests run on whichever engine it opens;
// the default is a bbolt file in tb.TempDir(), checked on cleanup.
var newStore apitest.Factory = apitest.Bolt

// newTestServer serves the API over a fresh store from newStore with rules
// (apitest.StartWith).
func newTestServer(tb testing.TB, rules db.Rules, cfg api.Config) *testServer {
	tb.Helper()
	s := apitest.StartWith(tb, newStore, rules, cfg)
	client := s.HTTP.Client()
	client.Timeout = 20 * time.Second
	return &testServer{t: tb, URL: s.URL, store: s.Store, client: client}
}

// response is a finished HTTP exchange.
type response struct {
	status int
	header http.Header
	body   []byte
}

func (r response) String() string { return fmt.Sprintf("%d %s", r.status, bytes.TrimSpace(r.body)) }

// bodyReader turns a test body into a reader: nil is no body, a string or
// []byte is sent as is, anything else is marshalled to JSON.
func bodyReader(tb testing.TB, body any) io.Reader {
	tb.Helper()
	switch b := body.(type) {
	case nil:
		return nil
	case string:
		return strings.NewReader(b)
	case []byte:
		return bytes.NewReader(b)
	default:
		raw, err := json.Marshal(b)
		if err != nil {
			tb.Fatalf("json.Marshal(%#v) error = %v", body, err)
		}
		return bytes.NewReader(raw)
	}
}

// do sends one request and reads the whole response.
func (ts *testServer) do(method, path string, body any) response {
	ts.t.Helper()
	return ts.doRequest(ts.newRequest(method, path, bodyReader(ts.t, body)))
}

func (ts *testServer) newRequest(method, path string, body io.Reader) *http.Request {
	ts.t.Helper()
	req, err := http.NewRequest(method, ts.URL+path, body)
	if err != nil {
		ts.t.Fatalf("http.NewRequest(%s %s) error = %v", method, path, err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	return req
}

func (ts *testServer) doRequest(req *http.Request) response {
	ts.t.Helper()
	resp, err := ts.client.Do(req)
	if err != nil {
		ts.t.Fatalf("%s %s error = %v", req.Method, req.URL.Path, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		ts.t.Fatalf("%s %s: reading body: %v", req.Method, req.URL.Path, err)
	}
	return response{status: resp.StatusCode, header: resp.Header, body: raw}
}

func (ts *testServer) post(path string, body any) response {
	ts.t.Helper()
	return ts.do(http.MethodPost, path, body)
}

func (ts *testServer) get(path string) response {
	ts.t.Helper()
	return ts.do(http.MethodGet, path, nil)
}

// jobView is the part of a job's JSON the tests look at.
type jobView struct {
	ID             uint64          `json:"id"`
	Queue          string          `json:"queue"`
	Payload        json.RawMessage `json:"payload"`
	Priority       int64           `json:"priority"`
	State          string          `json:"state"`
	Attempts       uint64          `json:"attempts"`
	MaxAttempts    uint64          `json:"max_attempts"`
	FencingToken   uint64          `json:"fencing_token"`
	ClaimedBy      string          `json:"claimed_by"`
	LeaseExpiresAt *time.Time      `json:"lease_expires_at"`
	CompletedAt    *time.Time      `json:"completed_at"`
	LastError      string          `json:"last_error"`
	Result         json.RawMessage `json:"result"`
	Attestation    json.RawMessage `json:"attestation"`
}

// wantJob checks the status and decodes the body as a job.
func wantJob(tb testing.TB, what string, r response, status int) jobView {
	tb.Helper()
	if r.status != status {
		tb.Fatalf("%s: got %v, want status %d", what, r, status)
	}
	var j jobView
	if err := json.Unmarshal(r.body, &j); err != nil {
		tb.Fatalf("%s: body %s is not a job: %v", what, r.body, err)
	}
	if j.ID == 0 {
		tb.Fatalf("%s: body %s has no job id", what, r.body)
	}
	return j
}

// enqueue enqueues one job and returns it.
func (ts *testServer) enqueue(body any) jobView {
	ts.t.Helper()
	return wantJob(ts.t, "enqueue", ts.post("/v1/jobs", body), http.StatusCreated)
}

// claim claims one job and returns it; it fails the test on 204.
func (ts *testServer) claim(body any) jobView {
	ts.t.Helper()
	return wantJob(ts.t, "claim", ts.post("/v1/claim", body), http.StatusOK)
}

// jobRaw returns GET /v1/jobs/{id}'s body, which must be 200.
func (ts *testServer) jobRaw(id uint64) []byte {
	ts.t.Helper()
	r := ts.get(fmt.Sprintf("/v1/jobs/%d", id))
	if r.status != http.StatusOK {
		ts.t.Fatalf("GET /v1/jobs/%d: got %v, want 200", id, r)
	}
	return r.body
}

// snapshot is everything a client and the audit log can see of the store.
type snapshot struct {
	jobs      string // GET /v1/jobs?limit=1000
	queues    string // GET /v1/queues
	auditHead uint64
	auditHash string
}

// snapshot takes a snapshot. Two equal snapshots mean no job, count or
// audit record changed in between.
func (ts *testServer) snapshot() snapshot {
	ts.t.Helper()
	jobs := ts.get("/v1/jobs?limit=1000")
	queues := ts.get("/v1/queues")
	if jobs.status != http.StatusOK || queues.status != http.StatusOK {
		ts.t.Fatalf("snapshot: GET /v1/jobs = %v, GET /v1/queues = %v; want 200 both", jobs, queues)
	}
	rep, err := ts.store.VerifyAudit(context.Background())
	if err != nil || !rep.OK {
		ts.t.Fatalf("snapshot: VerifyAudit() = %+v, %v; want OK", rep, err)
	}
	return snapshot{jobs: string(jobs.body), queues: string(queues.body), auditHead: rep.HeadSeq, auditHash: rep.HeadHash}
}

// wantUnchanged fails when after differs from before.
func wantUnchanged(tb testing.TB, what string, before, after snapshot) {
	tb.Helper()
	if before.jobs != after.jobs {
		tb.Errorf("%s changed the jobs:\nbefore %s\nafter  %s", what, before.jobs, after.jobs)
	}
	if before.queues != after.queues {
		tb.Errorf("%s changed the queue counts:\nbefore %s\nafter  %s", what, before.queues, after.queues)
	}
	if before.auditHead != after.auditHead || before.auditHash != after.auditHash {
		tb.Errorf("%s appended to the audit log: head %d %s, was %d %s", what, after.auditHead, after.auditHash, before.auditHead, before.auditHash)
	}
}

// wantError checks that r is exactly {"error":{"code":…,"message":…}} with
// the given status and code, and that the message mentions every one of
// mentions (case-insensitive). It returns the message.
func wantError(tb testing.TB, what string, r response, status int, code string, mentions ...string) string {
	tb.Helper()
	if r.status != status {
		tb.Errorf("%s: got %v, want status %d %s", what, r, status, code)
		return ""
	}
	if ct := r.header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		tb.Errorf("%s: Content-Type = %q, want application/json", what, ct)
	}
	var shape map[string]map[string]any
	if err := json.Unmarshal(r.body, &shape); err != nil || len(shape) != 1 || shape["error"] == nil || len(shape["error"]) != 2 {
		tb.Errorf("%s: body %s is not exactly {\"error\":{\"code\":…,\"message\":…}}", what, r.body)
		return ""
	}
	var body struct {
		Error struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	dec := json.NewDecoder(bytes.NewReader(r.body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&body); err != nil {
		tb.Errorf("%s: body %s: %v", what, r.body, err)
		return ""
	}
	if body.Error.Code != code {
		tb.Errorf("%s: error code = %q, want %q (body %s)", what, body.Error.Code, code, r.body)
	}
	if body.Error.Message == "" {
		tb.Errorf("%s: error message is empty", what)
	}
	if strings.Contains(body.Error.Message, "db: ") || strings.Contains(body.Error.Message, "invalid argument: ") {
		tb.Errorf("%s: error message %q leaks the store's sentinel prefix", what, body.Error.Message)
	}
	for _, m := range mentions {
		if !strings.Contains(strings.ToLower(body.Error.Message), strings.ToLower(m)) {
			tb.Errorf("%s: error message %q does not mention %q", what, body.Error.Message, m)
		}
	}
	return body.Error.Message
}

// compactJSON returns s in encoding/json's compact form, for comparing
// stored JSON values with what was sent.
func compactJSON(tb testing.TB, s string) string {
	tb.Helper()
	var buf bytes.Buffer
	if err := json.Compact(&buf, []byte(s)); err != nil {
		tb.Fatalf("json.Compact(%s) error = %v", s, err)
	}
	return buf.String()
}
