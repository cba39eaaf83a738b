package postgres

import (
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// TestOpen_AMigrationThatMeetsADeadlockIsRunAgain: during a rolling
// upgrade an older replica's transaction writes fenceq_jobs while the new
// build's migration 0006 waits to alter it, then waits for a lock the
// migration holds. PostgreSQL breaks the deadlock by failing the
// migration's transaction, which rolled back whole: Open runs it again
// instead of refusing to start.
func TestOpen_AMigrationThatMeetsADeadlockIsRunAgain(t *testing.T) {
	u := newTestDB(t)
	pool, err := pgxpool.New(bg, u)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	names, err := migrationNames()
	if err != nil {
		t.Fatal(err)
	}
	migrateByHand(t, pool, 5) // schema 5: the migration to 6 alters fenceq_jobs
	// The older replica's transaction: it writes fenceq_jobs. It never
	// runs the deadlock check itself, so that the migration's side is the
	// one PostgreSQL fails.
	old, err := pool.Begin(bg)
	if err != nil {
		t.Fatal(err)
	}
	defer old.Rollback(bg)
	if _, err := old.Exec(bg, `SET LOCAL deadlock_timeout = '60s'`); err != nil {
		t.Fatal(err)
	}
	if _, err := old.Exec(bg, `LOCK TABLE fenceq_jobs IN ROW EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	opened := make(chan error, 1)
	go func() {
		s, err := Open(bg, u, Options{})
		if err == nil {
			s.Close()
		}
		opened <- err
	}()
	// The migration holds its advisory lock and waits for fenceq_jobs.
	for start := time.Now(); ; time.Sleep(5 * time.Millisecond) {
		var waiting int
		if err := old.QueryRow(bg, `SELECT count(*) FROM pg_locks WHERE NOT granted AND locktype = 'relation' AND relation = 'fenceq_jobs'::regclass`).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		if waiting > 0 {
			break
		}
		if time.Since(start) > 10*time.Second {
			t.Fatal("the migration never waited for fenceq_jobs")
		}
	}
	// The older replica now waits for the migration: a deadlock, which
	// fails the migration's transaction after its deadlock_timeout.
	if _, err := old.Exec(bg, `SELECT pg_advisory_xact_lock($1)`, int64(migrationLock)); err != nil {
		t.Fatalf("the older replica's side: %v; want the migration's side failed", err)
	}
	if err := old.Commit(bg); err != nil {
		t.Fatal(err)
	}
	if err := <-opened; err != nil {
		t.Fatalf("Open after a deadlock in its migration = %v; want it run again and started", err)
	}
	var version int
	if err := pool.QueryRow(bg, `SELECT max(version) FROM fenceq_schema`).Scan(&version); err != nil || version != len(names) {
		t.Fatalf("schema version = %d, %v; want %d", version, err, len(names))
	}
}
