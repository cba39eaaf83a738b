package postgres

import (
	"context"
	"testing"

	"github.com/fenceq/fenceq/db"
	"github.com/fenceq/fenceq/db/postgres/pgtest"
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
