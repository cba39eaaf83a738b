package postgres

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/fenceq/fenceq/api"
	"github.com/fenceq/fenceq/db"
	"github.com/jackc/pgx/v5"
)

// newLongSchema creates a schema whose name is n bytes long (PostgreSQL
// allows 63) and returns a URL whose search_path is it.
func newLongSchema(t *testing.T, n int) string {
	t.Helper()
	base := testURL(t)
	name := "fenceq_long_" + strings.Repeat("x", n-len("fenceq_long_")-8) + randHex(4)
	exec := func(sql string) error {
		conn, err := pgx.Connect(bg, base)
		if err != nil {
			return err
		}
		defer conn.Close(bg)
		_, err = conn.Exec(bg, sql)
		return err
	}
	if err := exec(`CREATE SCHEMA ` + pgx.Identifier{name}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = exec(`DROP SCHEMA IF EXISTS ` + pgx.Identifier{name}.Sanitize() + ` CASCADE`) })
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("search_path", name)
	u.RawQuery = q.Encode()
	return u.String()
}

// TestNotifyChannel_ALongSchemaNameWritesAndWakesOtherReplicas: a legal
// 60-byte schema name (issue 30 item 7): enqueues succeed, and a long-poll
// on another replica is woken through the notify channel.
func TestNotifyChannel_ALongSchemaNameWritesAndWakesOtherReplicas(t *testing.T) {
	u := newLongSchema(t, 60)
	a, b := mustOpen(t, u, Options{}), mustOpen(t, u, Options{})
	got := make(chan []db.Job, 1)
	go func() {
		jobs, err := b.ClaimJobs(bg, db.ClaimRequest{Principal: "p", Worker: "wb", Queues: []string{"q"}, Wait: 20 * time.Second})
		if err != nil {
			t.Error(err)
		}
		got <- jobs
	}()
	waitSleeping(t, b, "q")
	r, err := a.EnqueueJob(bg, db.EnqueueRequest{Principal: "p", Queue: "q"})
	j := r.Job
	if err != nil {
		t.Fatalf("EnqueueJob() in a 60-byte schema = %v, want a job", err)
	}
	select {
	case jobs := <-got:
		if len(jobs) != 1 || jobs[0].ID != j.ID {
			t.Fatalf("B's long-poll got %+v, want job %d", jobs, j.ID)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("B's long-poll was not woken by the enqueue on A")
	}
}

// TestNotifyChannel_NamesFitAndStayApart: the channel of a short schema is
// what earlier builds used (their replicas hear this one's), a long one
// fits in 63 bytes, and two long names that share their first 63 bytes get
// channels of their own.
func TestNotifyChannel_NamesFitAndStayApart(t *testing.T) {
	for schema, want := range map[string]string{"public": "fenceq", "team_a": "fenceq.team_a",
		strings.Repeat("s", 56): "fenceq." + strings.Repeat("s", 56)} {
		if got := notifyChannel(schema); got != want {
			t.Errorf("notifyChannel(%q) = %q, want %q", schema, got, want)
		}
	}
	seen := map[string]string{}
	for _, schema := range []string{strings.Repeat("s", 57), strings.Repeat("s", 63), strings.Repeat("s", 62) + "t", strings.Repeat("é", 31)} {
		c := notifyChannel(schema)
		if len(c) > 63 {
			t.Errorf("notifyChannel(%q) = %q: %d bytes, want at most 63", schema, c, len(c))
		}
		if other, ok := seen[c]; ok {
			t.Errorf("schemas %q and %q share channel %q", schema, other, c)
		}
		seen[c] = schema
	}
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// TestSchema_ANewerMigrationStopsARunningReplica: a replica that is running
// when a newer build migrates the database (issue 30 item 3) and raises its
// minimum writer version above this replica's (issue 29) serves nothing
// more: every write is 503 unavailable naming both versions (never a 500
// for a column that is not there, never a write under its older rules),
// /readyz fails, and /metrics leaves out the figures it can no longer read
// right. Three newer migrations: one that only adds (the replica's
// statements still succeed: the minimum read with the audit head stops it)
// and two that rename a column the replica writes (its statement fails,
// and the replica looks at the minimum). The replica is built as v0.2.0
// (Options.Version), the newer build's minimum is v0.3.0.
func TestSchema_ANewerMigrationStopsARunningReplica(t *testing.T) {
	for _, tc := range []struct{ name, migration string }{
		{"adds a table", `CREATE TABLE fenceq_newer (id bigint PRIMARY KEY)`},
		{"renames a column", `ALTER TABLE fenceq_jobs RENAME COLUMN payload TO body`},
		{"renames a column of the head", `ALTER TABLE fenceq_audit_head RENAME COLUMN last_time TO newest_time`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u := newTestDB(t)
			s := mustOpen(t, u, Options{Version: "v0.2.0"})
			srv := httptest.NewServer(api.New(s, api.Config{WriteTimeout: 10 * time.Second}))
			defer srv.Close()
			defer s.Close() // before mustOpen's Check, which an outdated replica refuses
			call := func(method, path, body string) (int, string) {
				req, _ := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
				req.Header.Set("Content-Type", "application/json")
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				raw, _ := io.ReadAll(resp.Body)
				return resp.StatusCode, string(raw)
			}
			if status, body := call("POST", "/v1/jobs", `{"queue":"q","payload":{"n":1}}`); status != http.StatusCreated {
				t.Fatalf("enqueue before the migration = %d %s", status, body)
			}
			if status, body := call("GET", "/readyz", ""); status != http.StatusOK {
				t.Fatalf("/readyz before the migration = %d %s", status, body)
			}

			newer := SchemaVersion() + 1
			admin, err := pgx.Connect(bg, u)
			if err != nil {
				t.Fatal(err)
			}
			defer admin.Close(bg)
			if _, err := admin.Exec(bg, tc.migration); err != nil {
				t.Fatal(err)
			}
			if _, err := admin.Exec(bg, `INSERT INTO fenceq_schema (version) VALUES ($1)`, newer); err != nil {
				t.Fatal(err)
			}
			if _, err := admin.Exec(bg, `UPDATE fenceq_audit_head SET min_writer = 'v0.3.0' WHERE id = 1`); err != nil {
				t.Fatal(err)
			}
			jobsIn := func() (n int) {
				if err := admin.QueryRow(bg, `SELECT count(*) FROM fenceq_jobs`).Scan(&n); err != nil {
					t.Fatal(err)
				}
				return n
			}
			wantVersions := "requires fenceq v0.3.0 or newer to write to it (its minimum writer version, raised by a newer fenceq's migration); this fenceq is v0.2.0"
			for i := range 2 {
				status, body := call("POST", "/v1/jobs", `{"queue":"q","payload":{"n":2}}`)
				if status != http.StatusServiceUnavailable || !strings.Contains(body, `"unavailable"`) || !strings.Contains(body, wantVersions) {
					t.Fatalf("enqueue %d after the migration = %d %s, want 503 unavailable saying %q", i, status, body, wantVersions)
				}
			}
			if status, body := call("POST", "/v1/claim", `{"worker":"w","queue":"q"}`); status != http.StatusServiceUnavailable || !strings.Contains(body, wantVersions) {
				t.Fatalf("claim after the migration = %d %s, want 503 naming the versions", status, body)
			}
			if n := jobsIn(); n != 1 {
				t.Fatalf("jobs in the database after the refused writes = %d, want 1", n)
			}
			var claimed int
			if err := admin.QueryRow(bg, `SELECT count(*) FROM fenceq_jobs WHERE state <> 'available'`).Scan(&claimed); err != nil || claimed != 0 {
				t.Fatalf("jobs not available after the refused claim = %d, %v; want 0", claimed, err)
			}
			if status, body := call("GET", "/readyz", ""); status == http.StatusOK || !strings.Contains(body, wantVersions) {
				t.Fatalf("/readyz after the migration = %d %s, want a failure naming the versions", status, body)
			}
			status, body := call("GET", "/metrics", "")
			if status != http.StatusOK {
				t.Fatalf("/metrics after the migration = %d", status)
			}
			for _, figure := range []string{"\nfenceq_jobs{", "\nfenceq_audit_records_total{", "\nfenceq_audit_head_sequence "} {
				if strings.Contains(body, figure) {
					t.Errorf("/metrics after the migration reports %s from a schema this build does not know:\n%s", strings.TrimSpace(figure), body)
				}
			}
			if !strings.Contains(body, fmt.Sprintf(`fenceq_postgres_schema_version{of="database"} %d`, newer)) {
				t.Errorf("/metrics after the migration does not show the database's schema version %d:\n%s", newer, body)
			}
		})
	}
}

// TestBatch_AMutationAtItsDeadlineDoesNotCutTheOthersShort: a batch's
// statements end at its callers' earliest deadline (issue 30 item 2); a
// mutation that reaches its batch with its deadline all but past is
// answered unavailable and applied nowhere, and the others commit.
func TestBatch_AMutationAtItsDeadlineDoesNotCutTheOthersShort(t *testing.T) {
	s := mustOpenStore(t, db.Rules{})
	ran := map[string]bool{}
	insert := func(name string) func(w *writer) error {
		return func(w *writer) error {
			ran[name] = true
			w.audit(db.AuditEvent{Principal: "p", Action: "test", Subject: name})
			return nil
		}
	}
	late := &writeOp{fn: insert("late"), done: make(chan struct{}), deadline: time.Now().Add(time.Millisecond)}
	onTime := &writeOp{fn: insert("on time"), done: make(chan struct{}), deadline: time.Now().Add(time.Minute)}
	none := &writeOp{fn: insert("no deadline"), done: make(chan struct{})}
	if retry := s.commitBatch([]*writeOp{late, onTime, none}); len(retry) != 0 {
		t.Fatalf("commitBatch() retries %d mutations", len(retry))
	}
	for _, op := range []*writeOp{late, onTime, none} {
		<-op.done
	}
	if db.ErrorCode(late.err) != db.CodeUnavailable || ran["late"] {
		t.Fatalf("the late mutation: err %v, ran %v; want CodeUnavailable, not run", late.err, ran["late"])
	}
	if onTime.err != nil || none.err != nil || !ran["on time"] || !ran["no deadline"] {
		t.Fatalf("the others: %v, %v, ran %v; want both committed", onTime.err, none.err, ran)
	}
	recs, err := s.ListAudit(bg, 0, 10)
	if err != nil || len(recs) != 2 {
		t.Fatalf("audit records = %d, %v; want the 2 committed mutations'", len(recs), err)
	}
}
