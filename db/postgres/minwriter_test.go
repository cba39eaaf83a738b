package postgres

import (
	"errors"
	"strings"
	"testing"

	"github.com/fenceq/fenceq/db"
)

func TestVersionLess(t *testing.T) {
	for _, tt := range []struct {
		a, b string
		want bool
	}{
		{"v0.1.0", "v0.2.0", true},
		{"v0.2.0", "v0.1.0", false},
		{"v0.2.0", "v0.2.0", false},
		{"v0.9.0", "v0.10.0", true},
		{"v1.0.0", "v0.99.99", false},
		{"v0.0.0", "v0.0.1", true},
		{"v0.2.0-rc1", "v0.2.0", false}, // what follows the patch is ignored
		{"(devel)", "v0.0.0", true},     // does not parse: below every release
		{"v0.1.0", "junk", false},
	} {
		if got := versionLess(tt.a, tt.b); got != tt.want {
			t.Errorf("versionLess(%q, %q) = %v, want %v", tt.a, tt.b, got, tt.want)
		}
	}
}

// TestMinWriter_AnExpandOnlyNewerMigrationKeepsAReplicaServing: a newer
// build's migration that only adds (and leaves the minimum writer version)
// does not stop a running replica of this build, and this build still
// starts on the newer schema: a replica of release N-1 runs with one of N.
// Before issue 29 the newer schema version alone stopped it (503) and
// refused its start.
func TestMinWriter_AnExpandOnlyNewerMigrationKeepsAReplicaServing(t *testing.T) {
	u := newTestDB(t)
	s := mustOpen(t, u, Options{Version: "v0.2.0"})
	if _, err := s.EnqueueJob(bg, db.EnqueueRequest{Queue: "q", Payload: []byte(`1`)}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.pool.Exec(bg, `CREATE TABLE fenceq_newer (id bigint PRIMARY KEY)`); err != nil {
		t.Fatal(err)
	}
	if _, err := s.pool.Exec(bg, `INSERT INTO fenceq_schema (version) VALUES ($1)`, SchemaVersion()+1); err != nil {
		t.Fatal(err)
	}
	if _, err := s.EnqueueJob(bg, db.EnqueueRequest{Queue: "q", Payload: []byte(`2`)}); err != nil {
		t.Fatalf("Enqueue() after an expand-only newer migration = %v, want it to succeed", err)
	}
	if err := s.Ping(bg); err != nil {
		t.Fatalf("Ping() after an expand-only newer migration = %v, want nil", err)
	}
	s2 := mustOpen(t, u, Options{Version: "v0.2.0"})
	if _, err := s2.ClaimJobs(bg, db.ClaimRequest{Principal: "p", Queues: []string{"q"}, Worker: "w"}); err != nil {
		t.Fatalf("Claim() through a replica started on the newer schema = %v", err)
	}
}

// TestMinWriter_AReplicaBelowItStopsWhileANewerOneServes: two replicas of
// one database, built as v0.1.0 and v0.2.0, both serve; once the minimum
// writer version is raised to v0.2.0 (as a v0.2.0 migration that older
// builds cannot honour would), the v0.1.0 replica's next write is refused
// 503 unavailable naming both versions and writes nothing, its Ping fails
// (readyz), its start is refused, and the v0.2.0 replica goes on writing.
func TestMinWriter_AReplicaBelowItStopsWhileANewerOneServes(t *testing.T) {
	u := newTestDB(t)
	older := mustOpen(t, u, Options{Version: "v0.1.0"})
	newer := mustOpen(t, u, Options{Version: "v0.2.0"})
	for _, s := range []*Store{older, newer} {
		if _, err := s.EnqueueJob(bg, db.EnqueueRequest{Queue: "q", Payload: []byte(`1`)}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := newer.pool.Exec(bg, `UPDATE fenceq_audit_head SET min_writer = 'v0.2.0' WHERE id = 1`); err != nil {
		t.Fatal(err)
	}
	jobs := func() (n int) {
		if err := newer.pool.QueryRow(bg, `SELECT count(*) FROM fenceq_jobs`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	want := "requires fenceq v0.2.0 or newer to write to it (its minimum writer version, raised by a newer fenceq's migration); this fenceq is v0.1.0"
	for i := range 2 {
		_, err := older.EnqueueJob(bg, db.EnqueueRequest{Queue: "q", Payload: []byte(`2`)})
		if db.ErrorCode(err) != db.CodeUnavailable || !strings.Contains(err.Error(), want) {
			t.Fatalf("Enqueue() %d through the v0.1.0 replica = %v, want unavailable saying %q", i, err, want)
		}
	}
	if n := jobs(); n != 2 {
		t.Fatalf("jobs after the refused enqueues = %d, want 2", n)
	}
	if _, err := older.ClaimJobs(bg, db.ClaimRequest{Principal: "p", Queues: []string{"q"}, Worker: "w"}); db.ErrorCode(err) != db.CodeUnavailable {
		t.Fatalf("Claim() through the v0.1.0 replica = %v, want unavailable", err)
	}
	if err := older.Ping(bg); err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("Ping() of the v0.1.0 replica = %v, want a failure naming both versions", err)
	}
	if _, err := Open(bg, u, Options{Version: "v0.1.0"}); !errors.Is(err, db.ErrSchemaNewer) {
		t.Fatalf("Open() as v0.1.0 = %v, want ErrSchemaNewer", err)
	}
	if _, err := newer.EnqueueJob(bg, db.EnqueueRequest{Queue: "q", Payload: []byte(`3`)}); err != nil {
		t.Fatalf("Enqueue() through the v0.2.0 replica = %v", err)
	}
	if err := newer.Ping(bg); err != nil {
		t.Fatalf("Ping() of the v0.2.0 replica = %v", err)
	}
	if n := jobs(); n != 3 {
		t.Fatalf("jobs after the v0.2.0 enqueue = %d, want 3", n)
	}
	older.Close() // before mustOpen's Check, which an outdated replica refuses
}
