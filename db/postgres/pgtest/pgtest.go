// Package pgtest gives tests of the PostgreSQL engine a database of their
// own: a fresh schema on the server that FENCEQ_TEST_POSTGRES_URL names,
// dropped when the test ends. Without the variable a test skips, naming
// it; under CI=true it fails instead, since CI starts a server
// (.ci/postgres.sh).
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"os"
	"testing"

	"github.com/jackc/pgx/v5"
)

// EnvURL is the variable that points the tests at a server.
const EnvURL = "FENCEQ_TEST_POSTGRES_URL"

// ServerURL returns the server's URL, or skips (fails under CI=true) when
// EnvURL is not set.
func ServerURL(tb testing.TB) string {
	tb.Helper()
	u := os.Getenv(EnvURL)
	if u == "" {
		if os.Getenv("CI") == "true" {
			tb.Fatalf("%s is not set; CI must start a server (.ci/postgres.sh) for the PostgreSQL tests", EnvURL)
		}
		tb.Skipf("%s is not set: set it to a postgres:// URL of a server the tests may create schemas on (.ci/postgres.sh start DIR prints one)", EnvURL)
	}
	return u
}

// NewSchema creates an empty schema for one test and returns a URL whose
// search_path is it; the schema is dropped when the test ends. A schema is
// much cheaper than a database and as separate: fenceq's tables and its
// NOTIFY channel are per schema.
func NewSchema(tb testing.TB) string {
	tb.Helper()
	base := ServerURL(tb)
	ctx := context.Background()
	exec := func(sql string) error {
		admin, err := pgx.Connect(ctx, base)
		if err != nil {
			return err
		}
		defer admin.Close(ctx)
		_, err = admin.Exec(ctx, sql)
		return err
	}
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	name := "fenceq_test_" + hex.EncodeToString(b)
	// No connection is held between: a test that makes many schemas
	// (a property test) must not hold a connection for each.
	if err := exec(`CREATE SCHEMA ` + name); err != nil {
		tb.Fatalf("create schema %s on %s: %v", name, EnvURL, err)
	}
	tb.Cleanup(func() { _ = exec(`DROP SCHEMA IF EXISTS ` + name + ` CASCADE`) })
	u, err := url.Parse(base)
	if err != nil {
		tb.Fatal(err)
	}
	q := u.Query()
	q.Set("search_path", name)
	u.RawQuery = q.Encode()
	return u.String()
}
