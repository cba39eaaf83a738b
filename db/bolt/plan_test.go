package bolt

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/fenceq/fenceq/db"
	"github.com/fenceq/fenceq/internal/testclock"
	bbolt "go.etcd.io/bbolt"
)

// bucketKinds says which stored kind (db.StoredKinds) each bucket holds;
// "" marks what is derived from the kinds (indexes, counters), which a
// copy to another engine rebuilds rather than carries. The job sequence
// is the jobs bucket's own sequence; meta holds the audit head and
// checkpoint (and the schema version).
var bucketKinds = map[string]db.StoredKind{
	"jobs":                db.StoredJobs,
	"idx_ready":           "",
	"idx_scheduled":       "",
	"idx_scheduled_queue": "",
	"idx_claimed":         "",
	"idx_finished":        "",
	"idx_idempotency":     "",
	"counts":              "",
	"audit":               db.StoredAudit,
	"meta":                db.StoredAudit,
	"leases":              db.StoredLeases,
	"idx_dead":            "",
	"idx_audit_subject":   "",
	"audit_counts":        "",
	"queue_paused":        db.StoredPauses,
	"refused":             db.StoredRefused,
	"idx_refused_job":     "",
	"workers":             db.StoredWorkers,
	"idx_workers_seen":    "",
	"schedules":           db.StoredSchedules,
	"idx_schedule_next":   "",
	"schedule_ticks":      db.StoredSchedules,
}

// TestEveryBucketHoldsAStoredKindOrIsDerived: a bucket added for a new
// kind of state fails this test until the kind is named in db.StoredKinds
// — and then "fenceq copy" fails its own (postgres
// TestCopy_CarriesEveryStoredKind) until it carries it. Issue 30: the copy
// dropped queue_paused, added after it was written.
func TestEveryBucketHoldsAStoredKindOrIsDerived(t *testing.T) {
	seen := map[db.StoredKind]bool{db.StoredJobSequence: true} // the jobs bucket's sequence
	for _, b := range allBuckets {
		k, ok := bucketKinds[string(b)]
		if !ok {
			t.Errorf("bucket %s holds no stored kind: name its kind in db.StoredKinds and carry it in the copy, or mark it derived", b)
		}
		seen[k] = true
	}
	for _, k := range db.StoredKinds {
		if !seen[k] {
			t.Errorf("the stored kind %q is in no bucket", k)
		}
	}
}

// A file of the schema version before idx_scheduled_queue is upgraded
// with the index filled from idx_scheduled: its scheduled jobs are
// promoted and claimed as before, and the indexes check.
func TestAFileFromBeforeTheScheduledQueueIndexIsUpgradedWithItFilled(t *testing.T) {
	clk := testclock.New(time.Date(2031, 3, 14, 15, 9, 26, 0, time.UTC))
	path := filepath.Join(t.TempDir(), "fenceq.db")
	s := mustOpenStoreAt(t, path, Options{Rules: db.Rules{Now: clk.Now}})
	var jobs []db.Job
	for _, q := range []string{"a", "b", "a"} {
		jobs = append(jobs, mustEnqueue(t, s, db.EnqueueRequest{Queue: q, Delay: time.Minute}))
	}
	s.Close()
	raw, err := bbolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := raw.Update(func(tx *bbolt.Tx) error {
		if err := tx.DeleteBucket(bucketScheduledQueue); err != nil {
			return err
		}
		return tx.Bucket(bucketMeta).Put(metaSchemaVersion, u64(scheduledQueueSchema-1))
	}); err != nil {
		t.Fatal(err)
	}
	raw.Close()

	s = mustOpenStoreAt(t, path, Options{Rules: db.Rules{Now: clk.Now}})
	if v := fileSchemaVersionOf(t, s); v != schemaVersion {
		t.Errorf("schema version after Open = %d, want %d", v, schemaVersion)
	}
	if err := s.Check(); err != nil {
		t.Fatalf("Check() after the upgrade = %v", err)
	}
	clk.Advance(time.Minute)
	got, err := s.ClaimJobs(ctx, db.ClaimRequest{Principal: "local", Worker: "w", Queues: []string{"a"}, Max: 3})
	if err != nil || len(got) != 2 || got[0].ID != jobs[0].ID || got[1].ID != jobs[2].ID {
		t.Fatalf("ClaimJobs(a) after the upgrade = %v, %v; want jobs %d and %d", got, err, jobs[0].ID, jobs[2].ID)
	}
}
