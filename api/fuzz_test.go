package api_test

// Fuzz targets for every request body the API decodes: enqueue (one job or
// a list), claim, heartbeat, complete (with claim_next), fail, and the
// named-lease actions. Each input goes through the real handler (api.New
// over a real store, no network) and must never panic, never be a 5xx, and
// always answer JSON: an error body with a known code and a message, or,
// for an enqueue that succeeded, jobs that can be read back.
//
// Plain "go test" runs the seeds: the f.Add calls below and the corpus in
// testdata/fuzz/<FuzzName>/ (Go reads it from this package's directory).
// To fuzz, one target at a time:
//
//	go test ./api -run '^$' -fuzz '^FuzzEnqueueBody$' -fuzztime 5m

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"testing"
	"time"

	"github.com/fenceq/fenceq/api"
	"github.com/fenceq/fenceq/db"
	"github.com/fenceq/fenceq/db/bolt"
)

// fuzzAPI is the handler under fuzzing and its store. One job (id 1) is
// claimed by local|w1 with token 1 at the start, so that fenced calls have
// something to act on.
type fuzzAPI struct {
	h     http.Handler
	store *bolt.Store
}

func newFuzzAPI(f *testing.F) *fuzzAPI {
	f.Helper()
	path := filepath.Join(f.TempDir(), "fuzz.db")
	store, err := bolt.Open(path, bolt.Options{LockTimeout: 200 * time.Millisecond})
	if err != nil {
		f.Fatalf("bolt.Open(%s) error = %v", path, err)
	}
	f.Cleanup(func() {
		if err := store.Check(); err != nil {
			f.Errorf("store.Check() after fuzzing = %v", err)
		}
		if rep, err := store.VerifyAudit(context.Background()); err != nil || !rep.OK {
			f.Errorf("store.VerifyAudit() after fuzzing = %+v, %v; want OK", rep, err)
		}
		store.Close()
	})
	fa := &fuzzAPI{store: store,
		h: api.New(store, api.Config{Logger: slog.New(slog.DiscardHandler), MaxWait: time.Millisecond, MaxBodyBytes: 1 << 20})}
	ctx := context.Background()
	if _, err := store.EnqueueJob(ctx, db.EnqueueRequest{Principal: api.LocalPrincipal}); err != nil {
		f.Fatal(err)
	}
	if _, err := store.ClaimJobs(ctx, db.ClaimRequest{Principal: api.LocalPrincipal, Worker: "w1", Lease: time.Hour}); err != nil {
		f.Fatal(err)
	}
	return fa
}

// knownCodes are the error codes of docs/design.md's table (and "cancelled" for
// a request whose context ended).
var knownCodes = map[string]int{
	"invalid_argument": 400, "unauthenticated": 401, "permission_denied": 403, "not_found": 404,
	"failed_precondition": 409, "resource_exhausted": 413, "cancelled": 499,
}

// post sends body to path and checks the answer's shape. It returns the
// status and the raw body; ok is false when path is not a valid URL.
func (fa *fuzzAPI) post(t *testing.T, path string, body []byte) (int, []byte, bool) {
	t.Helper()
	return fa.send(t, http.MethodPost, path, body)
}

// send is post with another method.
func (fa *fuzzAPI) send(t *testing.T, method, path string, body []byte) (int, []byte, bool) {
	t.Helper()
	// A held lease or an empty claim may wait; the fuzzer must not: the
	// server's MaxWait (1 ms) caps every wait. This deadline only stops a
	// hung request, and leaves a commit room on a slow machine: CI's armv7
	// run under qemu took more than 50 ms for one, answered 503 as the
	// deadline passed, which the fuzzer took for a server fault.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, "http://fenceq.test"+path, bytes.NewReader(body))
	if err != nil {
		return 0, nil, false
	}
	req.Header.Set("Content-Type", "application/json")
	rec := httptest.NewRecorder()
	fa.h.ServeHTTP(rec, req)
	raw, _ := io.ReadAll(rec.Result().Body)
	status := rec.Code
	if status >= 500 {
		t.Fatalf("%s %s %q: status %d %s, want no 5xx for any request body", method, path, body, status, raw)
	}
	if status == http.StatusNoContent {
		return status, raw, true
	}
	if !json.Valid(raw) {
		t.Fatalf("%s %s %q: status %d, body %q is not JSON", method, path, body, status, raw)
	}
	if status >= 400 {
		var e struct {
			Error struct {
				Code    string `json:"code"`
				Message string `json:"message"`
			} `json:"error"`
		}
		if err := json.Unmarshal(raw, &e); err != nil || e.Error.Message == "" {
			t.Fatalf("%s %s %q: status %d, body %s is not {\"error\":{\"code\",\"message\"}}", method, path, body, status, raw)
		}
		want, ok := knownCodes[e.Error.Code]
		// A wrong method (a POST on a lease's own path: no action, or not
		// one of the four) is 405 invalid_argument, as the table says.
		if !ok || (want != status && !(e.Error.Code == "resource_exhausted" && status == 429) &&
			!(e.Error.Code == "invalid_argument" && status == http.StatusMethodNotAllowed)) {
			t.Fatalf("%s %s %q: status %d with code %q, want a code from docs/design.md's table with its status", method, path, body, status, e.Error.Code)
		}
	}
	return status, raw, true
}

// jobPath is /v1/jobs/{id}/{action} with id escaped as one path segment.
func jobPath(id, action string) string {
	return "/v1/jobs/" + url.PathEscape(id) + "/" + action
}

// Seeds shared by the fenced calls.
var fencedSeeds = []struct{ id, body string }{
	{"1", `{"worker":"w1","fencing_token":1,"lease_ms":30000}`},
	{"1", `{"worker":"w1","fencing_token":1,"result":{"ok":true},"attestation":{"sig":"abc"}}`},
	{"1", `{"worker":"w1","fencing_token":1,"error":"boom","retry_delay_ms":0,"final":false}`},
	{"1", `{"worker":"w1","fencing_token":4294967296}`},
	{"1", `{"worker":"w1","fencing_token":-1}`},
	{"1", `{"worker":"w1","fencing_token":"1"}`},
	{"1", `{"worker":"w1","fencing_token":1.5}`},
	{"1", `{"worker":"w1","lease_ms":9223372036854775807}`},
	{"1", `{"worker":"w1","retry_delay_ms":-5}`},
	{"1", `{"worker":"w1","result":{"a":`},
	{"1", `{"worker":"w1","fencing_token":1,"claim_next":{"queues":["default"],"lease_ms":1000,"max":2}}`},
	{"1", `{"worker":"w1","claim_next":{"max":-1}}`},
	{"1", `{"worker":"","fencing_token":1}`},
	{"2", `{"worker":"w1","fencing_token":1}`},
	{"0", `{}`},
	{"18446744073709551616", `{}`},
	{"abc", ``},
	{"1", `[]`},
	{"1", `null`},
	{"1", `{"worker":"w1"} {"worker":"w2"}`},
}

func fuzzFenced(f *testing.F, action string) {
	for _, s := range fencedSeeds {
		f.Add(s.id, []byte(s.body))
	}
	fa := newFuzzAPI(f)
	f.Fuzz(func(t *testing.T, id string, body []byte) {
		fa.post(t, jobPath(id, action), body)
	})
}

func FuzzHeartbeatBody(f *testing.F) { fuzzFenced(f, "heartbeat") }
func FuzzCompleteBody(f *testing.F)  { fuzzFenced(f, "complete") }
func FuzzFailBody(f *testing.F)      { fuzzFenced(f, "fail") }

// FuzzBatchBody sends bodies to the batched fenced calls
// (POST /v1/jobs/{heartbeat,complete,fail}); op picks the route. A 200 must
// carry one result per item, each a job or an error with a known code.
func FuzzBatchBody(f *testing.F) {
	seeds := []string{
		`{"worker":"w1","jobs":[{"id":1,"fencing_token":1,"lease_ms":30000}]}`,
		`{"worker":"w1","jobs":[{"id":1,"fencing_token":1,"result":{"ok":true}},{"id":2}],"claim_next":{"max":3}}`,
		`{"worker":"w1","jobs":[{"id":1,"fencing_token":1,"error":"boom","retry_delay_ms":0}]}`,
		`{"worker":"w1","jobs":[]}`,
		`{"worker":"w1","jobs":[{"id":1},{"id":1}]}`,
		`{"worker":"w1","jobs":[1]}`,
		`{"worker":"w1","jobs":[{"id":"1"}]}`,
		`{"worker":"w1","jobs":[{"fencing_token":1}]}`,
		`{"worker":"w1","jobs":[{"id":1,"fencing_token":4294967296}]}`,
		`{"worker":"w1","jobs":[{"id":1,"worker":"w2"}],"claim_next":{"lease_ms":-1}}`,
		`{"jobs":{"id":1}}`,
		`[]`,
	}
	for i, s := range seeds {
		f.Add(uint8(i), []byte(s))
	}
	fa := newFuzzAPI(f)
	ops := []string{"heartbeat", "complete", "fail"}
	f.Fuzz(func(t *testing.T, op uint8, body []byte) {
		status, raw, _ := fa.post(t, "/v1/jobs/"+ops[int(op)%len(ops)], body)
		if status != http.StatusOK {
			return
		}
		var out struct {
			Results []struct {
				Job   *json.RawMessage `json:"job"`
				Error *struct {
					Code string `json:"code"`
				} `json:"error"`
			} `json:"results"`
		}
		if err := json.Unmarshal(raw, &out); err != nil || len(out.Results) == 0 {
			t.Fatalf("POST %s: 200 with body %s, want results", body, raw)
		}
		for i, r := range out.Results {
			if (r.Job == nil) == (r.Error == nil) {
				t.Fatalf("POST %s: results[%d] = %s, want a job or an error", body, i, raw)
			}
			if r.Error != nil {
				if _, ok := knownCodes[r.Error.Code]; !ok {
					t.Fatalf("POST %s: results[%d] code %q is not in the table", body, i, r.Error.Code)
				}
			}
		}
	})
}

func FuzzEnqueueBody(f *testing.F) {
	for _, s := range []string{
		`{"queue":"emails","kind":"send","payload":{"to":"a@example.com"},"priority":5,"max_attempts":3,"idempotency_key":"k1"}`,
		`{"queue":"emails","payload":{"to":"a@example.com"},"idempotency_key":"k1"}`,
		`{"run_at":"2031-01-02T03:04:05Z"}`,
		`{"run_at":"yesterday"}`,
		`{"delay_ms":1000}`,
		`{"delay_ms":-1}`,
		`{"delay_ms":9223372036854775807}`,
		`{"queue":"bad queue"}`,
		`{"priority":"high"}`,
		`{"max_attempts":-1}`,
		`{"payload":`,
		`[{"queue":"a"},{"queue":"b","payload":[1,2,3]}]`,
		`[{"queue":"a"},{"queue":"bad queue"}]`,
		`[]`,
		`[1]`,
		`{}`,
		``,
		`null`,
		`"job"`,
		`{"queue":"a"} trailing`,
	} {
		f.Add([]byte(s))
	}
	fa := newFuzzAPI(f)
	f.Fuzz(func(t *testing.T, body []byte) {
		status, raw, _ := fa.post(t, "/v1/jobs", body)
		if status != http.StatusCreated && status != http.StatusOK {
			return
		}
		// An acknowledged enqueue can be read back.
		var one struct {
			ID   uint64            `json:"id"`
			Jobs []json.RawMessage `json:"jobs"`
		}
		if err := json.Unmarshal(raw, &one); err != nil {
			t.Fatalf("enqueue %q: answer %s: %v", body, raw, err)
		}
		ids := []uint64{one.ID}
		if one.ID == 0 {
			ids = ids[:0]
			for _, j := range one.Jobs {
				var job struct {
					ID uint64 `json:"id"`
				}
				_ = json.Unmarshal(j, &job)
				ids = append(ids, job.ID)
			}
		}
		if len(ids) == 0 {
			t.Fatalf("enqueue %q: status %d but no job in %s", body, status, raw)
		}
		for _, id := range ids {
			if _, err := fa.store.GetJob(context.Background(), id); err != nil {
				t.Fatalf("enqueue %q acknowledged job %d, GetJob error = %v", body, id, err)
			}
		}
	})
}

func FuzzClaimBody(f *testing.F) {
	for _, s := range []string{
		`{"worker":"w2","queues":["default"],"lease_ms":1000}`,
		`{"worker":"w2","queue":"default","max":3}`,
		`{"worker":"w2","wait_ms":60000}`,
		`{"worker":"w2","wait_ms":-1}`,
		`{"worker":"w2","max":0}`,
		`{"worker":"w2","max":1000000}`,
		`{"worker":"w2","queues":"default"}`,
		`{"worker":"w2","queues":[1]}`,
		`{"worker":"w2","queues":["bad queue"]}`,
		`{"worker":"w2","lease_ms":1e3}`,
		`{"worker":"w\u0000"}`,
		`{"worker":null}`,
		`{}`,
		``,
		`[`,
	} {
		f.Add([]byte(s))
	}
	fa := newFuzzAPI(f)
	f.Fuzz(func(t *testing.T, body []byte) {
		fa.post(t, "/v1/claim", body)
	})
}

func FuzzLeaseBody(f *testing.F) {
	for _, s := range []struct{ name, action, body string }{
		{"/data/a.csv", "acquire", `{"holder":"etl-1","ttl_ms":30000}`},
		{"/data/a.csv", "acquire", `{"holder":"etl-2","wait_ms":60000}`},
		{"/data/a.csv", "renew", `{"holder":"etl-1","fencing_token":1,"ttl_ms":30000}`},
		{"/data/a.csv", "release", `{"holder":"etl-1","fencing_token":1}`},
		{"/data/a.csv", "check", `{"fencing_token":1}`},
		{"/data/a.csv", "check", `{"fencing_token":0}`},
		{"/data/a.csv", "check", `{"fencing_token":4294967296}`},
		{"x", "acquire", `{"holder":"","ttl_ms":-1}`},
		{"x", "frobnicate", `{}`},
		{"", "acquire", `{"holder":"a"}`},
		{"%zz", "acquire", `{"holder":"a"}`},
		{"a/b//c", "renew", `{"holder":"a","fencing_token":"1"}`},
		{"x", "acquire", ``},
	} {
		f.Add(s.name, s.action, []byte(s.body))
	}
	fa := newFuzzAPI(f)
	f.Fuzz(func(t *testing.T, name, action string, body []byte) {
		// Both ways a client may address a lease: the name as one escaped
		// segment, and with its slashes as they are.
		fa.post(t, "/v1/leases/"+url.PathEscape(name)+"/"+url.PathEscape(action), body)
		fa.post(t, "/v1/leases/"+name+"/"+action, body)
	})
}

// FuzzScheduleBody: PUT /v1/schedules/{name} with any name and body is a
// schedule or a JSON error with a code of the table, never a panic or a
// 5xx; the store checks and its audit chain verify afterwards.
func FuzzScheduleBody(f *testing.F) {
	for _, s := range []struct{ name, body string }{
		{"nightly", `{"cron":"30 2 * * *","timezone":"Europe/Berlin","job":{"queue":"reports","payload":{"r":1}}}`},
		{"every", `{"every_ms":1000,"start_at":"2030-01-01T00:00:00Z","catchup":"all","catchup_window_ms":600000,"overlap":"skip","jitter_ms":500,"job":{"queue":"q"}}`},
		{"bad cron", `{"cron":"61 * * * *","job":{"queue":"q"}}`},
		{"tz", `{"cron":"TZ=UTC * * * * *","job":{"queue":"q"}}`},
		{"every", `{"cron":"@every 1s","job":{"queue":"q"}}`},
		{"both", `{"cron":"@hourly","every_ms":1000,"job":{"queue":"q"}}`},
		{"zone", `{"cron":"@daily","timezone":"Nowhere/City","job":{}}`},
		{"big", `{"every_ms":9223372036854775807,"jitter_ms":-1,"job":{"queue":"q"}}`},
		{"a\x00b", `{"every_ms":1000,"job":{"queue":"q"}}`},
		{"a/b", `{"every_ms":1000,"job":{"queue":"q"}}`},
		{"", `{"every_ms":1000,"job":{"queue":"q"}}`},
		{"x", `{"every_ms":"1s"}`},
		{"x", `null`},
		{"x", ``},
	} {
		f.Add(s.name, []byte(s.body))
	}
	fa := newFuzzAPI(f)
	f.Fuzz(func(t *testing.T, name string, body []byte) {
		fa.send(t, http.MethodPut, "/v1/schedules/"+url.PathEscape(name), body)
		fa.send(t, http.MethodPut, "/v1/schedules/"+name, body)
	})
}
