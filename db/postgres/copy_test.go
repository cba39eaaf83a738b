package postgres

import (
	"context"
	"testing"

	"github.com/fenceq/fenceq/db"
)

// tableKinds says which stored kind (db.StoredKinds) each table of the
// schema holds; "" marks what is derived from the kinds (counters, the
// schema's own bookkeeping), which a copy rebuilds rather than carries.
var tableKinds = map[string]db.StoredKind{
	"fenceq_jobs":           db.StoredJobs,
	"fenceq_job_counts":     "",
	"fenceq_leases":         db.StoredLeases,
	"fenceq_paused":         db.StoredPauses,
	"fenceq_audit":          db.StoredAudit,
	"fenceq_audit_head":     db.StoredAudit,
	"fenceq_audit_counts":   "",
	"fenceq_schema":         "",
	"fenceq_refused":        db.StoredRefused,
	"fenceq_workers":        db.StoredWorkers,
	"fenceq_schedules":      db.StoredSchedules,
	"fenceq_schedule_ticks": db.StoredSchedules,
}

// TestCopy_CarriesEveryStoredKind: "fenceq copy" has a step for every
// kind of db.StoredKinds, and every table of the schema holds a kind (or
// is derived): a table added for a new kind of state fails this test until
// the kind is named in db and the copy carries it. (Issue 30: the copy
// dropped the queue pauses, added after it was written.)
func TestCopy_CarriesEveryStoredKind(t *testing.T) {
	for _, k := range db.StoredKinds {
		if copySteps[k] == nil {
			t.Errorf("the copy has no step for the stored kind %q", k)
		}
	}
	if len(copySteps) != len(db.StoredKinds) {
		t.Errorf("the copy has %d steps for %d stored kinds", len(copySteps), len(db.StoredKinds))
	}
	s := mustOpenStore(t, db.Rules{})
	rows, err := s.pool.Query(context.Background(), `SELECT table_name::text FROM information_schema.tables WHERE table_schema = current_schema()`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	n := 0
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			t.Fatal(err)
		}
		n++
		if _, ok := tableKinds[name]; !ok {
			t.Errorf("table %s holds no stored kind: name its kind in db.StoredKinds and carry it in the copy, or mark it derived", name)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if n == 0 {
		t.Fatal("no tables found in the store's schema")
	}
}
