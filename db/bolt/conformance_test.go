package bolt

import (
	"fmt"
	"testing"

	"github.com/fenceq/fenceq/db"
	"github.com/fenceq/fenceq/db/dbtest"
	"go.etcd.io/bbolt"
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

var _ dbtest.ScheduleSpecSetter = (*Store)(nil)

// SetStoredScheduleTimezone overwrites the stored time zone of schedule
// name, bypassing the rules (dbtest.ScheduleSpecSetter): a test-only hook
// that leaves a record as a build with another zone database would find it.
func (s *Store) SetStoredScheduleTimezone(name, tz string) error {
	return s.bolt.Update(func(tx *bbolt.Tx) error {
		rec, err := getSchedule(tx, name)
		if err != nil {
			return err
		}
		if rec == nil {
			return fmt.Errorf("no schedule %q", name)
		}
		rec.Timezone = tz
		v, err := encodeRecord(&scheduleRecord{V: scheduleRecordVersion, ScheduleRecord: *rec})
		if err != nil {
			return err
		}
		return tx.Bucket(bucketSchedules).Put([]byte(name), v)
	})
}
