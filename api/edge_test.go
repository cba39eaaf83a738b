package api_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/fenceq/fenceq/api"
	"github.com/fenceq/fenceq/db"
	"github.com/fenceq/fenceq/db/bolt"
	"github.com/fenceq/fenceq/internal/apitest"
)

// A store bounded by --max-db-size answers the write that would grow the
// file past it with 507 resource_exhausted naming the flag; nothing changed,
// and reads go on.
func TestAPI_MaxDBSize(t *testing.T) {
	srv := apitest.Serve(t, apitest.BoltWith(t, bolt.Options{MaxSize: 1 << 20}), api.Config{})
	ts := &testServer{t: t, URL: srv.URL, store: srv.Store, client: srv.HTTP.Client()}
	body := map[string]any{"payload": strings.Repeat("x", 60<<10)}
	var full response
	var last jobView
	for i := 0; i < 64; i++ {
		r := ts.post("/v1/jobs", body)
		if r.status != http.StatusCreated {
			full = r
			break
		}
		last = wantJob(t, "enqueue", r, http.StatusCreated)
	}
	if last.ID == 0 {
		t.Fatalf("the first enqueue was refused: %v", full)
	}
	wantError(t, "enqueue into a full file", full, http.StatusInsufficientStorage, "resource_exhausted", "--max-db-size")

	before := ts.snapshot()
	r := ts.post("/v1/jobs", body)
	wantError(t, "enqueue into a full file, again", r, http.StatusInsufficientStorage, "resource_exhausted", "--max-db-size")
	wantUnchanged(t, "a refused enqueue into a full file", before, ts.snapshot())
	if got := ts.jobRaw(last.ID); !bytes.Contains(got, []byte(`"id":`+fmt.Sprint(last.ID))) {
		t.Fatalf("GET /v1/jobs/%d in a full file = %s", last.ID, got)
	}
}

// logBuffer collects JSON log lines.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// lines returns the log records whose request_id is id.
func (b *logBuffer) lines(t *testing.T, id string) []map[string]any {
	t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []map[string]any
	for _, line := range bytes.Split(bytes.TrimSpace(b.buf.Bytes()), []byte("\n")) {
		if len(line) == 0 {
			continue
		}
		var rec map[string]any
		if err := json.Unmarshal(line, &rec); err != nil {
			t.Fatalf("log line %s is not JSON: %v", line, err)
		}
		if rec["request_id"] == id {
			out = append(out, rec)
		}
	}
	return out
}

func newLoggedServer(t *testing.T, level slog.Level) (*testServer, *logBuffer) {
	logs := &logBuffer{}
	ts := newTestServer(t, db.Rules{}, api.Config{Logger: slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: level}))})
	return ts, logs
}

var generatedID = regexp.MustCompile(`^[A-Za-z0-9]{32}$`)

// Every reply carries a request id: the caller's own when it is a sane
// token, a generated one otherwise; a refusal's log line carries it too.
func TestAPI_RequestID(t *testing.T) {
	ts, logs := newLoggedServer(t, slog.LevelInfo)

	t.Run("caller's id is echoed and logged with the refusal", func(t *testing.T) {
		const id = "3f2c9a1e-5b7d-4c2e-9f10-abcdef012345"
		req := ts.newRequest(http.MethodGet, "/v1/jobs/999999", nil)
		req.Header.Set(api.RequestIDHeader, id)
		r := ts.doRequest(req)
		wantError(t, "GET a missing job", r, http.StatusNotFound, "not_found")
		if got := r.header.Get(api.RequestIDHeader); got != id {
			t.Fatalf("reply %s = %q, want the caller's %q", api.RequestIDHeader, got, id)
		}
		recs := logs.lines(t, id)
		if len(recs) != 1 || recs[0]["msg"] != "refused" || recs[0]["code"] != "not_found" {
			t.Fatalf("log lines with request_id %q = %v, want one \"refused\" not_found line", id, recs)
		}
	})

	t.Run("generated when absent, different each time", func(t *testing.T) {
		a := ts.get("/healthz").header.Get(api.RequestIDHeader)
		b := ts.get("/healthz").header.Get(api.RequestIDHeader)
		if !generatedID.MatchString(a) || !generatedID.MatchString(b) || a == b {
			t.Fatalf("generated request ids %q, %q: want two different 32-character ids", a, b)
		}
	})

	for _, bad := range []string{
		`has space`, `quote"d`, "tab\tin", strings.Repeat("a", 129), `a;b`, `ünï`,
	} {
		t.Run(fmt.Sprintf("insane id %.20q is replaced", bad), func(t *testing.T) {
			req := ts.newRequest(http.MethodPost, "/v1/jobs", strings.NewReader(`{"queue":"bad queue!"}`))
			req.Header.Set(api.RequestIDHeader, bad)
			r := ts.doRequest(req)
			wantError(t, "enqueue with a bad queue name", r, http.StatusBadRequest, "invalid_argument")
			got := r.header.Get(api.RequestIDHeader)
			if !generatedID.MatchString(got) {
				t.Fatalf("reply %s = %q for the caller's %q, want a generated id", api.RequestIDHeader, got, bad)
			}
			if recs := logs.lines(t, got); len(recs) != 1 || recs[0]["msg"] != "refused" {
				t.Fatalf("log lines with the generated id %q = %v, want the refusal", got, recs)
			}
			if recs := logs.lines(t, bad); len(recs) != 0 {
				t.Fatalf("the caller's insane id %q reached the log: %v", bad, recs)
			}
		})
	}
}

// With --log-level debug every request gets a line of its own, with its id.
func TestAPI_RequestID_DebugRequestLine(t *testing.T) {
	ts, logs := newLoggedServer(t, slog.LevelDebug)
	req := ts.newRequest(http.MethodPost, "/v1/jobs", strings.NewReader(`{"payload":1}`))
	req.Header.Set(api.RequestIDHeader, "req-1")
	r := ts.doRequest(req)
	wantJob(t, "enqueue", r, http.StatusCreated)
	recs := logs.lines(t, "req-1")
	if len(recs) != 1 || recs[0]["msg"] != "request" || recs[0]["status"] != float64(http.StatusCreated) || recs[0]["path"] != "/v1/jobs" {
		t.Fatalf("log lines with request_id req-1 = %v, want one request line with status 201", recs)
	}
}
