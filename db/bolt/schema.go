package bolt

import (
	"bytes"
	"fmt"
	"os"

	"github.com/fenceq/fenceq/db"
	"github.com/fenceq/fenceq/internal/msgrec"
	bbolt "go.etcd.io/bbolt"
)

// schemaVersion is the file layout this build writes, recorded in meta
// schema_version. Versions:
//
//	1  jobs, their indexes and counts, the audit chain, meta, named leases;
//	   builds late in version 1 added idx_dead, idx_audit_subject and
//	   audit_counts and filled them at every open.
//	2  those three are always present and filled: the upgrade from 1
//	   builds them, once.
//	3  meta audit_checkpoint, left by the removal of archived audit
//	   records (RemoveAudit), from which the stored chain verifies. It is
//	   absent until the first removal, so the upgrade from 2 writes nothing
//	   but the version: a build of version 2 would verify such a chain
//	   from record 1 and call it broken.
//	4  queue_paused, the paused queues (pause.go). A build of version 3
//	   would ignore it and hand out the jobs of a paused queue, so it must
//	   refuse the file instead. The upgrade from 3 writes nothing but the
//	   version (the bucket starts empty: nothing is paused).
//	5  idx_scheduled_queue, the scheduled jobs queue by queue, from
//	   which a claim promotes its own queues' due jobs. A build of
//	   version 4 would not keep it, so it must refuse the file. The
//	   upgrade from 4 fills it from idx_scheduled.
//	6  refused, idx_refused_job, workers and idx_workers_seen: the refused fenced calls and the workers heard from,
//	   each kept bounded (observe.go). A build of version 5 would leave
//	   them unbounded and the worker count wrong. The upgrade from 5
//	   writes nothing but the version (the buckets start empty).
//	7  schedules, idx_schedule_next and schedule_ticks: periodic jobs
//	   (schedules.go), and job records may carry the optional fields sc,
//	   sf and bf (schedule, scheduled_for, backfilled). A build of
//	   version 6 would neither tick nor keep the index, so it must refuse
//	   the file. The upgrade from 6 writes nothing but the version (the
//	   buckets start empty; no job has the new fields yet).
//
// Stored state an older build would not understand bumps it, with an
// upgrade from the version before.
const schemaVersion = schedulesSchema

// upgrades[v] brings a file of version v to v+1, inside the transaction of
// Open that records the new version.
var upgrades = map[uint64]func(tx *bbolt.Tx) error{
	1:                        buildNewIndexes,
	2:                        func(*bbolt.Tx) error { return nil },
	pausedQueuesSchema - 1:   addPausedQueues,
	scheduledQueueSchema - 1: buildScheduledQueueIndex,
	observationsSchema - 1:   func(*bbolt.Tx) error { return nil }, // initFile created the buckets empty
	schedulesSchema - 1:      func(*bbolt.Tx) error { return nil }, // likewise
}

// schedulesSchema is the schema version that added the schedules (issue 28).
const schedulesSchema = 7

// observationsSchema is the schema version that added the refused calls
// and the workers (observe.go).
const observationsSchema = 6

// openSchema reads the file's schema version and applies db.CheckSchema:
// it reports whether the file must be upgraded, and refuses a newer one.
func openSchema(tx *bbolt.Tx, path string) (have uint64, err error) {
	if meta := tx.Bucket(bucketMeta); meta != nil {
		if v := meta.Get(metaSchemaVersion); v != nil {
			if len(v) != 8 || idFromKey(v) == 0 {
				return 0, fmt.Errorf("%w: %s: schema version %x", db.ErrCorrupt, path, v)
			}
			have = idFromKey(v)
		}
	}
	if _, err := db.CheckSchema(path, have, schemaVersion); err != nil {
		return 0, err
	}
	return have, nil
}

// initFile makes a new file at schemaVersion or upgrades an older one, in
// the one transaction of Open: every bucket exists afterwards, and the
// file records the version it now has.
func initFile(tx *bbolt.Tx, path string) error {
	have, err := openSchema(tx, path)
	if err != nil {
		return err
	}
	for _, name := range allBuckets {
		if _, err := tx.CreateBucketIfNotExists(name); err != nil {
			return fmt.Errorf("db: create bucket %s: %w", name, err)
		}
	}
	if have == schemaVersion {
		return nil
	}
	for v := have; v != 0 && v < schemaVersion; v++ {
		if err := upgrades[v](tx); err != nil {
			return fmt.Errorf("db: upgrade %s from schema version %d to %d: %w", path, v, v+1, err)
		}
	}
	return tx.Bucket(bucketMeta).Put(metaSchemaVersion, u64(schemaVersion))
}

// buildNewIndexes is the upgrade from version 1 to 2: it fills the index
// buckets that a file made by an early build of version 1 does not have
// (initFile creates them empty): the dead-jobs index, the audit subject
// index and the audit counters. A file of a later build of version 1 has
// them filled already; then it costs a few lookups.
func buildNewIndexes(tx *bbolt.Tx) error {
	if err := buildDeadIndex(tx); err != nil {
		return err
	}
	return buildAuditIndexes(tx)
}

// pausedQueuesSchema is the schema version that added queue_paused.
const pausedQueuesSchema = 4

// addPausedQueues is the upgrade to pausedQueuesSchema: the queue_paused
// bucket, which initFile has created empty already, so nothing is paused.
func addPausedQueues(*bbolt.Tx) error { return nil }

// scheduledQueueSchema is the schema version that added idx_scheduled_queue.
const scheduledQueueSchema = 5

// buildScheduledQueueIndex is the upgrade to scheduledQueueSchema: it adds
// every scheduled job to idx_scheduled_queue, which initFile has created
// empty, from idx_scheduled.
func buildScheduledQueueIndex(tx *bbolt.Tx) error {
	byQueue := tx.Bucket(bucketScheduledQueue)
	return tx.Bucket(bucketScheduled).ForEach(func(k, _ []byte) error {
		rec, err := getIndexedJob(tx, idFromKey(k))
		if err != nil {
			return err
		}
		return byQueue.Put(scheduledQueueKey(rec), nil)
	})
}

// buildDeadIndex adds every dead job to an empty idx_dead when the counts
// say dead jobs exist: one scan of the jobs, once.
func buildDeadIndex(tx *bbolt.Tx) error {
	dead := tx.Bucket(bucketDead)
	if !isEmptyBucket(dead) {
		return nil
	}
	suffix := append([]byte{0}, db.StateDead...)
	found := false
	err := tx.Bucket(bucketCounts).ForEach(func(k, _ []byte) error {
		found = found || bytes.HasSuffix(k, suffix)
		return nil
	})
	if err != nil || !found {
		return err
	}
	return tx.Bucket(bucketJobs).ForEach(func(_, v []byte) error {
		rec, err := decodeJob(v)
		if err != nil {
			return err
		}
		if rec.State != db.StateDead {
			return nil
		}
		return dead.Put(deadKey(rec), nil)
	})
}

// buildAuditIndexes fills idx_audit_subject and audit_counts from the log
// when the file predates them (the buckets are empty but the log is not).
// It runs once, in the transaction of Open that upgrades the file.
// Records that do not decode are left out: VerifyAudit reports them.
func buildAuditIndexes(tx *bbolt.Tx) error {
	audit, subjects, counts := tx.Bucket(bucketAudit), tx.Bucket(bucketAuditSubject), tx.Bucket(bucketAuditCounts)
	if k, _ := audit.Cursor().First(); k == nil {
		return nil
	}
	needSubjects := isEmptyBucket(subjects)
	needCounts := isEmptyBucket(counts)
	if !needSubjects && !needCounts {
		return nil
	}
	tally := map[string]uint64{}
	err := audit.ForEach(func(k, v []byte) error {
		var r db.AuditLink
		if len(k) != 8 || msgrec.Unmarshal(v, &r) != nil {
			return nil
		}
		if needSubjects {
			if err := subjects.Put(append(auditSubjectPrefix(r.Subject), k...), nil); err != nil {
				return err
			}
		}
		for _, key := range db.AuditCountKeys(&r) {
			tally[key]++
		}
		return nil
	})
	if err != nil || !needCounts {
		return err
	}
	for k, n := range tally {
		if err := counts.Put([]byte(k), u64(n)); err != nil {
			return err
		}
	}
	return nil
}

func isEmptyBucket(b *bbolt.Bucket) bool {
	k, _ := b.Cursor().First()
	return k == nil
}

// upgradeSteps say what each upgrade of upgrades does, for
// "fenceq migrate --dry-run".
var upgradeSteps = map[uint64]string{
	1:                        "fill idx_dead, idx_audit_subject and audit_counts from the jobs and the audit chain",
	2:                        "record meta audit_checkpoint's meaning (nothing to write)",
	pausedQueuesSchema - 1:   "add the queue_paused bucket (empty: nothing is paused)",
	scheduledQueueSchema - 1: "fill idx_scheduled_queue from idx_scheduled",
	observationsSchema - 1:   "add the refused, idx_refused_job, workers and idx_workers_seen buckets (empty)",
	schedulesSchema - 1:      "add the schedules, idx_schedule_next and schedule_ticks buckets (empty: no schedule yet)",
}

// UpgradeStep is one step of a file's upgrade: from schema version From to
// From+1.
type UpgradeStep struct {
	From uint64
	What string
}

// MigrateReport says what a migration of a file found and did (or, dry,
// would do).
type MigrateReport struct {
	From, To uint64 // schema versions before and after; From 0: no fenceq file yet
	Steps    []UpgradeStep
}

// Migrate brings the file at path to this build's schema version, as Open
// does in its first transaction, and reports the steps; with dryRun it
// opens the file read-only, changes nothing and reports the steps it would
// take. A file that does not exist is refused (Open would create it), as
// is a newer file (db.ErrSchemaNewer) and one another process holds
// (ErrLocked, after opts.LockTimeout).
func Migrate(path string, opts Options, dryRun bool) (MigrateReport, error) {
	var rep MigrateReport
	if _, err := os.Stat(path); err != nil {
		return rep, fmt.Errorf("db: migrate %s: %w", path, err)
	}
	ro := opts
	ro.ReadOnly = true
	s, err := Open(path, ro)
	if err != nil {
		return rep, err
	}
	err = s.bolt.View(func(tx *bbolt.Tx) error {
		have, err := openSchema(tx, path)
		rep.From = have
		return err
	})
	s.Close()
	if err != nil {
		return rep, err
	}
	rep.To = schemaVersion
	for v := rep.From; v != 0 && v < schemaVersion; v++ {
		rep.Steps = append(rep.Steps, UpgradeStep{From: v, What: upgradeSteps[v]})
	}
	if dryRun || len(rep.Steps) == 0 {
		return rep, nil
	}
	s, err = Open(path, opts)
	if err != nil {
		return rep, err
	}
	return rep, s.Close()
}
