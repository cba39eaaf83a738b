package api_test

// What a new user tripped on (issue 31): a null body that enqueued a job,
// HEAD answered 405, a wrong method on a lease path answered 404, a client's
// own cancelled long-poll counted as a refusal, and a batch's top-level
// worker over 200 bytes answered 200 with a refusal per item.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fenceq/fenceq/api"
	"github.com/fenceq/fenceq/db"
	"github.com/fenceq/fenceq/web"
)

func TestEnqueue_NullBodyIsRefusedAndCreatesNothing(t *testing.T) {
	ts := newTestServer(t, db.Rules{}, api.Config{})
	before := ts.snapshot()
	for _, body := range []string{"null", " null\n", "[null]", `[{"queue":"a"},null]`} {
		wantError(t, "POST /v1/jobs "+body, ts.post("/v1/jobs", body), http.StatusBadRequest, "invalid_argument", "object")
	}
	wantUnchanged(t, "enqueues of null", before, ts.snapshot())

	// The other bodies that must be objects refuse null the same way.
	for _, path := range []string{"/v1/claim", "/v1/jobs/1/heartbeat", "/v1/jobs/complete", "/v1/leases/x/acquire"} {
		wantError(t, "POST "+path+" null", ts.post(path, "null"), http.StatusBadRequest, "invalid_argument", "object")
	}
}

// getPaths are GET routes with a concrete path each; HEAD must answer
// them as GET does, without a body.
var getPaths = []string{"/healthz", "/readyz", "/openapi.json", "/metrics", "/v1/jobs", "/v1/jobs/1",
	"/v1/jobs/999", "/v1/jobs/1/history", "/v1/queues", "/v1/stats", "/v1/audit", "/v1/audit/verify",
	"/v1/leases", "/v1/leases/nobody", "/v1/status", "/v1/whoami", "/", "/jobs/1", "/v1/backup"}

func TestHEAD_IsAnsweredWhereverGETIs(t *testing.T) {
	ts := newTestServer(t, db.Rules{}, api.Config{Index: web.Handler()})
	ts.enqueue(map[string]any{"queue": "q"})
	for _, path := range getPaths {
		get := ts.get(path)
		head := ts.do(http.MethodHead, path, nil)
		if head.status != get.status || head.status == http.StatusMethodNotAllowed {
			t.Errorf("HEAD %s = %d, GET = %d; want the same status, not 405", path, head.status, get.status)
		}
		if g, h := get.header.Get("Content-Type"), head.header.Get("Content-Type"); g != h {
			t.Errorf("HEAD %s Content-Type = %q, GET's = %q", path, h, g)
		}
		if len(head.body) != 0 {
			t.Errorf("HEAD %s sent a body: %.200s", path, head.body)
		}
	}
	// A route without GET has no HEAD either.
	if r := ts.do(http.MethodHead, "/v1/claim", nil); r.status != http.StatusMethodNotAllowed {
		t.Errorf("HEAD /v1/claim = %d, want 405 as GET /v1/claim", r.status)
	}
}

// With an auth file HEAD needs the role GET needs, no more, no less.
func TestHEAD_NeedsTheRoleOfGET(t *testing.T) {
	ps, tokens := principals(t)
	ts := newTestServer(t, db.Rules{}, api.Config{Principals: ps})
	for _, tc := range []struct {
		who, path string
		want      int
	}{
		{"producer", "/v1/queues", http.StatusOK},
		{"worker", "/v1/queues", http.StatusForbidden},
		{"worker", "/v1/leases", http.StatusOK},
		{"producer", "/v1/audit", http.StatusForbidden},
		{"admin", "/v1/audit", http.StatusOK},
		{"", "/v1/queues", http.StatusUnauthorized},
		{"", "/healthz", http.StatusOK},
	} {
		for _, method := range []string{http.MethodGet, http.MethodHead} {
			req := ts.newRequest(method, tc.path, nil)
			if tc.who != "" {
				req.Header.Set("Authorization", "Bearer "+tokens[tc.who])
			}
			if r := ts.doRequest(req); r.status != tc.want {
				t.Errorf("%s %s as %q = %d, want %d", method, tc.path, tc.who, r.status, tc.want)
			}
		}
	}
}

// The handler itself writes no body for HEAD (curl -I on a proxy that
// passes bodies through, or a test recorder, sees none).
func TestHEAD_HandlerWritesNoBody(t *testing.T) {
	ts := newTestServer(t, db.Rules{}, api.Config{})
	srv := api.New(ts.store, api.Config{})
	for _, path := range []string{"/healthz", "/openapi.json", "/v1/queues", "/v1/jobs/12345"} {
		rec := httptest.NewRecorder()
		srv.ServeHTTP(rec, httptest.NewRequest(http.MethodHead, path, nil))
		getRec := httptest.NewRecorder()
		srv.ServeHTTP(getRec, httptest.NewRequest(http.MethodGet, path, nil))
		if rec.Code != getRec.Code || rec.Body.Len() != 0 {
			t.Errorf("HEAD %s: %d with %d body bytes; want GET's %d and no body", path, rec.Code, rec.Body.Len(), getRec.Code)
		}
	}
}

// Every documented path answers a method it does not have with 405
// invalid_argument (docs/api.md), never 404.
func TestWrongMethod_OnEveryKnownPathIs405(t *testing.T) {
	ts := newTestServer(t, db.Rules{}, api.Config{Index: web.Handler()})
	var doc struct {
		Paths map[string]map[string]json.RawMessage `json:"paths"`
	}
	if err := json.Unmarshal(api.OpenAPIDocument(), &doc); err != nil {
		t.Fatal(err)
	}
	param := regexp.MustCompile(`\{(\w+)\}`)
	samples := map[string]string{"id": "1", "name": "x", "queue": "q"}
	n := 0
	for path, item := range doc.Paths {
		concrete := param.ReplaceAllStringFunc(path, func(m string) string { return samples[m[1:len(m)-1]] })
		for _, method := range []string{"GET", "POST", "PUT", "DELETE", "PATCH"} {
			if _, ok := item[strings.ToLower(method)]; ok {
				continue
			}
			// A lease name may hold slashes: GET /v1/leases/x/acquire
			// reads the lease "x/acquire", a path it does have.
			if method == "GET" && strings.HasPrefix(path, "/v1/leases/{name}/") {
				continue
			}
			n++
			wantError(t, method+" "+concrete, ts.do(method, concrete, nil), http.StatusMethodNotAllowed, "invalid_argument")
		}
	}
	// A lease path without an action, or with one that does not exist, is
	// the GET path of a lease: POST is not a method it has.
	for _, path := range []string{"/v1/leases/x", "/v1/leases/x/bogus", "/v1/leases/%2Fdata%2Fa.csv"} {
		n++
		wantError(t, "POST "+path, ts.post(path, `{}`), http.StatusMethodNotAllowed, "invalid_argument", "acquire")
	}
	if n < 60 {
		t.Errorf("checked %d wrong methods, want the document's every path", n)
	}
}

// A worker that stops its own long-poll (a shutdown) is not refused: the
// stats list no "cancelled" refusal, though the request is still measured.
func TestClaim_ClientCancelledLongPollIsNotARefusal(t *testing.T) {
	ts := newTestServer(t, db.Rules{}, api.Config{})
	for i := 0; i < 3; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), 150*time.Millisecond)
		req := ts.newRequest(http.MethodPost, "/v1/claim", strings.NewReader(`{"worker":"w1","queues":["idle"],"wait_ms":30000}`))
		if _, err := ts.client.Do(req.WithContext(ctx)); err == nil {
			t.Fatal("the long-poll answered before its client gave up")
		}
		cancel()
	}
	// The server has finished with the three requests once /metrics counts
	// them (status 499).
	re := regexp.MustCompile(`fenceq_http_request_duration_seconds_count\{[^}]*code="499"[^}]*\} 3|fenceq_http_request_duration_seconds_count\{[^}]*route="/v1/claim"[^}]*status="499"[^}]*\} 3`)
	deadline := time.Now().Add(10 * time.Second)
	for !re.Match(ts.get("/metrics").body) {
		if time.Now().After(deadline) {
			t.Fatalf("/metrics never counted three 499 claims:\n%s", grepLines(string(ts.get("/metrics").body), "duration_seconds_count"))
		}
		time.Sleep(20 * time.Millisecond)
	}
	var stats struct {
		Refusals []struct {
			Route, Code string
			Count       uint64
		} `json:"refusals"`
	}
	if err := json.Unmarshal(ts.get("/v1/stats").body, &stats); err != nil {
		t.Fatal(err)
	}
	for _, r := range stats.Refusals {
		if r.Code == "cancelled" {
			t.Errorf("GET /v1/stats lists refusal %+v: a client cancelling its own long-poll is not a refusal", r)
		}
	}
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// A batch's top-level worker over 200 bytes breaks the document
// (maxLength 200): the whole request is 400, nothing applied, as for an
// item's own worker of any other malformed field.
func TestBatch_TopLevelWorkerTooLongIsAWhole400(t *testing.T) {
	ts := newTestServer(t, db.Rules{}, api.Config{})
	job := ts.enqueue(map[string]any{"queue": "q"})
	ts.claim(map[string]any{"worker": "w1", "queues": []string{"q"}})
	long := strings.Repeat("w", 201)
	before := ts.snapshot()
	for _, op := range []string{"heartbeat", "complete", "fail"} {
		body := fmt.Sprintf(`{"worker":%q,"jobs":[{"id":%d,"worker":"w1","fencing_token":1}]}`, long, job.ID)
		wantError(t, "POST /v1/jobs/"+op+" with a 201-byte worker", ts.post("/v1/jobs/"+op, body), http.StatusBadRequest, "invalid_argument", "worker")
		body = fmt.Sprintf(`{"jobs":[{"id":%d,"worker":%q,"fencing_token":1}]}`, job.ID, long)
		wantError(t, "POST /v1/jobs/"+op+" with an item's 201-byte worker", ts.post("/v1/jobs/"+op, body), http.StatusBadRequest, "invalid_argument", "jobs[0]", "worker")
	}
	wantUnchanged(t, "batches with a worker over 200 bytes", before, ts.snapshot())
	if ok := slices.Contains([]string{"claimed"}, string(wantJob(t, "GET", ts.get(fmt.Sprint("/v1/jobs/", job.ID)), 200).State)); !ok {
		t.Errorf("the job is no longer claimed")
	}
}

// readsCounted is a real store that counts what its streamed reads write:
// a HEAD of a download must stop the read at its first write.
type readsCounted struct {
	db.Store
	writes, bytes atomic.Int64
}

type countingWriter struct {
	r *readsCounted
	w io.Writer
}

func (c countingWriter) Write(p []byte) (int, error) {
	c.r.writes.Add(1)
	c.r.bytes.Add(int64(len(p)))
	return c.w.Write(p)
}

func (r *readsCounted) Backup(ctx context.Context, w io.Writer) (int64, error) {
	return r.Store.(db.Backuper).Backup(ctx, countingWriter{r, w})
}

// HEAD of a streamed download answers GET's status and headers and
// stops the store's read at its first write: before, HEAD /v1/backup
// wrote the whole file into the void. On an engine that cannot back up
// (PostgreSQL: 409) HEAD answers GET's refusal.
func TestHEAD_OfADownloadReadsNoSnapshot(t *testing.T) {
	ts := newTestServer(t, db.Rules{}, api.Config{})
	for i := range 50 {
		ts.enqueue(map[string]any{"queue": "q", "payload": strings.Repeat("x", 1000+i)})
	}
	store := &readsCounted{Store: ts.store}
	srv := api.New(store, api.Config{AuditRetention: time.Nanosecond})
	for _, path := range []string{"/v1/backup", "/v1/audit/archive"} {
		get := httptest.NewRecorder()
		srv.ServeHTTP(get, httptest.NewRequest(http.MethodGet, path, nil))
		head := httptest.NewRecorder()
		store.writes.Store(0)
		store.bytes.Store(0)
		srv.ServeHTTP(head, httptest.NewRequest(http.MethodHead, path, nil))
		if head.Code != get.Code || head.Body.Len() != 0 {
			t.Errorf("HEAD %s = %d with %d body bytes; want GET's %d and no body", path, head.Code, head.Body.Len(), get.Code)
		}
		// The file names carry the time to the second: compare them without it.
		stamp := regexp.MustCompile(`[0-9]{8}T[0-9]{6}Z`)
		for _, h := range []string{"Content-Type", "Content-Disposition"} {
			g, hh := stamp.ReplaceAllString(get.Header().Get(h), "T"), stamp.ReplaceAllString(head.Header().Get(h), "T")
			if g != hh {
				t.Errorf("HEAD %s %s = %q, GET's %q", path, h, hh, g)
			}
		}
		if path == "/v1/backup" && get.Code == http.StatusOK {
			if w, b := store.writes.Load(), store.bytes.Load(); w > 1 || b >= int64(get.Body.Len()) {
				t.Errorf("HEAD %s: the store wrote %d times, %d bytes (GET's file: %d bytes); want the read stopped at its first write", path, w, b, get.Body.Len())
			}
		}
	}
}
