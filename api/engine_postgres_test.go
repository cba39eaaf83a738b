package api_test

import (
	"context"
	"os"
	"testing"

	"github.com/fenceq/fenceq/db"
	"github.com/fenceq/fenceq/db/postgres"
	"github.com/fenceq/fenceq/db/postgres/pgtest"
)

// With FENCEQ_TEST_ENGINE=postgres the HTTP tests run on the PostgreSQL
// engine, each on a schema of its own (pgtest), checked and verified when
// it ends. .ci/run runs them so, beside the default run on bbolt.
func init() {
	if os.Getenv("FENCEQ_TEST_ENGINE") != "postgres" {
		return
	}
	newStore = func(tb testing.TB, rules db.Rules) db.Store {
		tb.Helper()
		store, err := postgres.Open(context.Background(), pgtest.NewSchema(tb), postgres.Options{Rules: rules})
		if err != nil {
			tb.Fatalf("postgres.Open() error = %v", err)
		}
		tb.Cleanup(func() {
			if err := store.Check(); err != nil {
				tb.Errorf("store.Check() after test = %v", err)
			}
			if rep, err := store.VerifyAudit(context.Background()); err != nil || !rep.OK {
				tb.Errorf("store.VerifyAudit() after test = %+v, %v; want OK", rep, err)
			}
			if err := store.Close(); err != nil {
				tb.Errorf("store.Close() = %v", err)
			}
		})
		return store
	}
}
