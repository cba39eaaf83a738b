package postgres

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"os"
	"testing"

	"github.com/fenceq/fenceq/db"
	"github.com/jackc/pgx/v5"
)

// testURL is the server the tests create their databases on, from
// FENCEQ_TEST_POSTGRES_URL. Without it the tests skip, except under CI=true
// where they fail: CI starts a server (.ci/postgres.sh).
func testURL(tb testing.TB) string {
	tb.Helper()
	u := os.Getenv("FENCEQ_TEST_POSTGRES_URL")
	if u == "" {
		if os.Getenv("CI") == "true" {
			tb.Fatal("FENCEQ_TEST_POSTGRES_URL is not set; CI must start a server (.ci/postgres.sh) for the PostgreSQL tests")
		}
		tb.Skip("FENCEQ_TEST_POSTGRES_URL is not set: set it to a postgres:// URL of a server the tests may create databases on (.ci/postgres.sh start DIR prints one)")
	}
	return u
}

// newTestDB creates an empty schema for one test on the server of
// FENCEQ_TEST_POSTGRES_URL and returns a URL whose search_path is it; it is
// dropped when the test ends. A schema is much cheaper than a database, and
// as separate: fenceq's tables, locks' effects and NOTIFY channel are per
// schema.
func newTestDB(tb testing.TB) string {
	tb.Helper()
	base := testURL(tb)
	ctx := context.Background()
	admin, err := pgx.Connect(ctx, base)
	if err != nil {
		tb.Fatalf("connect to FENCEQ_TEST_POSTGRES_URL: %v", err)
	}
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	name := "fenceq_test_" + hex.EncodeToString(b)
	if _, err := admin.Exec(ctx, `CREATE SCHEMA `+name); err != nil {
		admin.Close(ctx)
		tb.Fatalf("create schema %s: %v", name, err)
	}
	tb.Cleanup(func() {
		_, _ = admin.Exec(ctx, `DROP SCHEMA IF EXISTS `+name+` CASCADE`)
		admin.Close(ctx)
	})
	u, err := url.Parse(base)
	if err != nil {
		tb.Fatal(err)
	}
	q := u.Query()
	q.Set("search_path", name)
	u.RawQuery = q.Encode()
	return u.String()
}

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
