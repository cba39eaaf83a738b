package bolt

import (
	"testing"

	"github.com/fenceq/fenceq/db"
	"github.com/fenceq/fenceq/db/dbtest"
)

// TestConformance runs the suite every engine must pass on bbolt files in
// t.TempDir(), each checked (bbolt's tx.Check and the store's index and
// count invariants) when its test ends.
func TestConformance(t *testing.T) {
	dbtest.Run(t, func(tb testing.TB, rules db.Rules) db.Store {
		return mustOpenStore(tb, Options{Rules: rules})
	})
}

// TestConformanceReplicas runs the suite's part about several replicas on
// one store: one process owns a bbolt file, so the three "replicas" are
// the same store, and every cross-replica guarantee must hold within it.
func TestConformanceReplicas(t *testing.T) {
	dbtest.RunReplicas(t, func(tb testing.TB, rules db.Rules, n int) []db.Store {
		s := mustOpenStore(tb, Options{Rules: rules})
		out := make([]db.Store, n)
		for i := range out {
			out[i] = s
		}
		return out
	})
}

var (
	_ dbtest.Snapshotter   = (*Store)(nil)
	_ dbtest.WaiterCounter = (*Store)(nil)
	_ dbtest.CommitCounter = (*Store)(nil)
	_ dbtest.Checker       = (*Store)(nil)
	_ dbtest.Reopener      = (*Store)(nil)
)
