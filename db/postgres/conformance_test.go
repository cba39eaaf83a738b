package postgres

import (
	"testing"

	"github.com/fenceq/fenceq/db"
	"github.com/fenceq/fenceq/db/dbtest"
)

// TestConformance runs the suite every engine must pass, each test on its
// own database of FENCEQ_TEST_POSTGRES_URL's server, checked (counters
// against the jobs, audit head against the log) when it ends.
func TestConformance(t *testing.T) {
	testURL(t)
	dbtest.Run(t, func(tb testing.TB, rules db.Rules) db.Store {
		return mustOpenStore(tb, rules)
	})
}

// TestConformanceReplicas runs the suite's part about several replicas:
// n stores (each as its own fenceq process would be) over one database.
func TestConformanceReplicas(t *testing.T) {
	testURL(t)
	dbtest.RunReplicas(t, func(tb testing.TB, rules db.Rules, n int) []db.Store {
		u := newTestDB(tb)
		out := make([]db.Store, n)
		for i := range out {
			out[i] = mustOpen(tb, u, Options{Rules: rules})
		}
		return out
	})
}

var (
	_ dbtest.WaiterCounter = (*Store)(nil)
	_ dbtest.CommitCounter = (*Store)(nil)
	_ dbtest.Checker       = (*Store)(nil)
)
