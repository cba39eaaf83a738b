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

var (
	_ dbtest.Snapshotter   = (*Store)(nil)
	_ dbtest.WaiterCounter = (*Store)(nil)
	_ dbtest.CommitCounter = (*Store)(nil)
	_ dbtest.Checker       = (*Store)(nil)
	_ dbtest.Reopener      = (*Store)(nil)
)
