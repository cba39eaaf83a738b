package postgres

import (
	"context"
	"testing"

	"github.com/fenceq/fenceq/db"
	"github.com/fenceq/fenceq/db/postgres/pgtest"
	"github.com/jackc/pgx/v5/pgxpool"
)

func testURL(tb testing.TB) string { return pgtest.ServerURL(tb) }

func newTestDB(tb testing.TB) string { return pgtest.NewSchema(tb) }

// mustOpen opens a store (a replica) on the database at dbURL, checked and
// closed when the test ends.
func mustOpen(tb testing.TB, dbURL string, opts Options) *Store {
	tb.Helper()
	s, err := Open(context.Background(), dbURL, opts)
	if err != nil {
		tb.Fatalf("Open() error = %v", err)
	}
	tb.Cleanup(func() {
		if s.closed.Load() {
			return // closed by the test
		}
		if err := s.Check(); err != nil {
			tb.Errorf("Check() at the end of the test: %v", err)
		}
		s.Close()
	})
	return s
}

func mustOpenStore(tb testing.TB, rules db.Rules) *Store {
	tb.Helper()
	return mustOpen(tb, newTestDB(tb), Options{Rules: rules})
}

// migrateByHand brings an empty schema to version n with this build's
// first n migrations, as the build that stopped at n left it.
func migrateByHand(t *testing.T, pool *pgxpool.Pool, n int) {
	t.Helper()
	names, err := migrationNames()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(bg, `CREATE TABLE fenceq_schema (version integer PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())`); err != nil {
		t.Fatal(err)
	}
	for v, name := range names[:n] {
		sql, err := migrations.ReadFile("migrations/" + name)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := pool.Exec(bg, string(sql)); err != nil {
			t.Fatalf("migration %s: %v", name, err)
		}
		if _, err := pool.Exec(bg, `INSERT INTO fenceq_schema (version) VALUES ($1)`, v+1); err != nil {
			t.Fatal(err)
		}
	}
}
