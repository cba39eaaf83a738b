//go:build linux

package e2e

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/fenceq/fenceq/db/postgres/pgtest"
	"github.com/fenceq/fenceq/internal/buildinfo"
	"github.com/jackc/pgx/v5"
)

// TestMinWriter_ARunningReplicaBelowItStopsWhileANewerOneServes: two real
// servers over one PostgreSQL schema, today's binary and today's source
// built as v0.1.0 (the linker's -X, since no older release has the check).
// Both serve. Once the database's minimum writer version is raised to
// today's (as a migration that older builds cannot honour does), the
// v0.1.0 replica answers every write and read 503 unavailable naming both
// versions, its /readyz fails and /healthz and /metrics still answer, while
// today's replica keeps serving; a restart of the v0.1.0 build is refused.
func TestMinWriter_ARunningReplicaBelowItStopsWhileANewerOneServes(t *testing.T) {
	dbURL := pgtest.NewSchema(t)
	lowered := buildToday(t, "v0.1.0")
	today, _ := startReplicas(t, dbURL, 1)
	old := startWith(t, lowered, "serve", "--db", dbURL, "--listen", "127.0.0.1:0")
	oldBase := old.addr(t)
	for _, base := range []string{today[0], oldBase} {
		st, body := pgCall(t, "POST", base+"/v1/jobs", map[string]any{"queue": "q"})
		decodeJob(t, st, body, http.StatusCreated)
	}
	conn, err := pgx.Connect(context.Background(), dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(context.Background(), `UPDATE fenceq_audit_head SET min_writer = $1 WHERE id = 1`, buildinfo.Source); err != nil {
		t.Fatal(err)
	}
	want := "requires fenceq " + buildinfo.Source + " or newer to write to it (its minimum writer version, raised by a newer fenceq's migration); this fenceq is v0.1.0"
	for _, req := range []struct{ method, path string }{
		{"POST", "/v1/jobs"}, {"POST", "/v1/claim"}, {"GET", "/v1/jobs/1"}, {"GET", "/v1/queues"}, {"GET", "/readyz"},
	} {
		var body any
		if req.method == "POST" {
			body = map[string]any{"queue": "q", "worker": "w", "queues": []string{"q"}}
		}
		st, raw := pgCall(t, req.method, oldBase+req.path, body)
		if st != http.StatusServiceUnavailable || !strings.Contains(string(raw), want) {
			t.Errorf("%s %s through the v0.1.0 replica = %d %s, want 503 saying %q", req.method, req.path, st, raw, want)
		}
	}
	for _, path := range []string{"/healthz", "/metrics"} {
		if st, raw := pgCall(t, "GET", oldBase+path, nil); st != http.StatusOK {
			t.Errorf("GET %s through the v0.1.0 replica = %d %s, want 200", path, st, raw)
		}
	}
	var jobs int
	if err := conn.QueryRow(context.Background(), `SELECT count(*) FROM fenceq_jobs`).Scan(&jobs); err != nil || jobs != 2 {
		t.Fatalf("jobs after the refused writes = %d, %v; want 2", jobs, err)
	}
	st, body := pgCall(t, "POST", today[0]+"/v1/jobs", map[string]any{"queue": "q"})
	decodeJob(t, st, body, http.StatusCreated)
	st, body = pgCall(t, "POST", today[0]+"/v1/claim", map[string]any{"worker": "w", "queues": []string{"q"}})
	decodeJob(t, st, body, http.StatusOK)
	if st, raw := pgCall(t, "GET", today[0]+"/readyz", nil); st != http.StatusOK {
		t.Fatalf("today's /readyz = %d %s, want 200", st, raw)
	}
	restart := startWith(t, lowered, "serve", "--db", dbURL, "--listen", "127.0.0.1:0")
	if code := restart.exit(t, 15e9); code == 0 || !strings.Contains(restart.stderr.String(), "this fenceq is v0.1.0") {
		t.Fatalf("a restart of the v0.1.0 build exited %d; stderr:\n%s\nwant a refusal naming its version", code, restart.stderr)
	}
}
