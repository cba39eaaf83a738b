package postgres

import (
	"context"
	"fmt"
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

var _ dbtest.ScheduleSpecSetter = (*Store)(nil)

// SetStoredScheduleTimezone overwrites the stored time zone of schedule
// name, bypassing the rules (dbtest.ScheduleSpecSetter): a test-only hook
// that leaves a row as a build with another zone database would find it.
func (s *Store) SetStoredScheduleTimezone(name, tz string) error {
	tag, err := s.pool.Exec(context.Background(), `UPDATE fenceq_schedules SET timezone = $2 WHERE name = $1`, name, tz)
	if err == nil && tag.RowsAffected() != 1 {
		err = fmt.Errorf("no schedule %q", name)
	}
	return err
}
