package bolt

import (
	"errors"
	"path/filepath"
	"testing"

	"github.com/fenceq/fenceq/db"
	bbolt "go.etcd.io/bbolt"
)

// A file of the schema version before queue pauses opens, is upgraded to
// the current one with no queue paused, and keeps its jobs.
func TestAFileFromBeforeQueuePausesIsUpgradedWithNoQueuePaused(t *testing.T) {
	path := filepath.Join(t.TempDir(), "fenceq.db")
	s := mustOpenStoreAt(t, path, Options{})
	job := mustEnqueue(t, s, db.EnqueueRequest{Queue: "q"})
	s.Close()
	raw, err := bbolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := raw.Update(func(tx *bbolt.Tx) error {
		if err := tx.DeleteBucket(bucketPaused); err != nil {
			return err
		}
		return tx.Bucket(bucketMeta).Put(metaSchemaVersion, u64(pausedQueuesSchema-1))
	}); err != nil {
		t.Fatal(err)
	}
	raw.Close()

	ro, err := Open(path, Options{ReadOnly: true})
	if err != nil {
		t.Fatalf("Open(read-only) of a version %d file = %v", pausedQueuesSchema-1, err)
	}
	if ps, err := ro.PausedQueues(ctx); err != nil || len(ps) != 0 {
		t.Errorf("PausedQueues() of a read-only version %d file = %v, %v; want none", pausedQueuesSchema-1, ps, err)
	}
	ro.Close()

	s = mustOpenStoreAt(t, path, Options{})
	if v := fileSchemaVersionOf(t, s); v != schemaVersion {
		t.Errorf("schema version after Open = %d, want %d", v, schemaVersion)
	}
	if ps, err := s.PausedQueues(ctx); err != nil || len(ps) != 0 {
		t.Errorf("PausedQueues() after the upgrade = %v, %v; want none", ps, err)
	}
	if _, err := s.SetQueuePaused(ctx, db.PauseRequest{Principal: "ops", Queue: "q", Paused: true}); err != nil {
		t.Fatalf("SetQueuePaused() after the upgrade = %v", err)
	}
	if jobs, err := s.ClaimJobs(ctx, db.ClaimRequest{Principal: "local", Worker: "w", Queues: []string{"q"}}); err != nil || len(jobs) != 0 {
		t.Errorf("ClaimJobs(q) paused = %v, %v; want nothing", jobs, err)
	}
	if j, err := s.GetJob(ctx, job.ID); err != nil || j.State != db.StateAvailable {
		t.Errorf("GetJob(%d) = %s, %v; want available", job.ID, j.State, err)
	}
}

// A file with a paused queue is of a version that a build from before
// queue pauses refuses (db.CheckSchema) rather than ignore the pause.
func TestAFileWithAPausedQueueIsRefusedByABuildFromBeforePauses(t *testing.T) {
	path := filepath.Join(t.TempDir(), "fenceq.db")
	s := mustOpenStoreAt(t, path, Options{})
	if _, err := s.SetQueuePaused(ctx, db.PauseRequest{Principal: "ops", Queue: "q", Paused: true}); err != nil {
		t.Fatal(err)
	}
	s.Close()
	have := fileSchemaVersion(t, path)
	if have != schemaVersion || have < pausedQueuesSchema {
		t.Fatalf("schema version of a file with a pause = %d, want %d (at least %d)", have, schemaVersion, pausedQueuesSchema)
	}
	if _, err := db.CheckSchema(path, have, pausedQueuesSchema-1); !errors.Is(err, db.ErrSchemaNewer) {
		t.Errorf("CheckSchema(%d, want %d) = %v, want ErrSchemaNewer", have, pausedQueuesSchema-1, err)
	}
}

func fileSchemaVersionOf(t *testing.T, s *Store) uint64 {
	t.Helper()
	var v uint64
	if err := s.bolt.View(func(tx *bbolt.Tx) error {
		v = idFromKey(tx.Bucket(bucketMeta).Get(metaSchemaVersion))
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return v
}
