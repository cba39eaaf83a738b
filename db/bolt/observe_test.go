package bolt

import (
	"bytes"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/fenceq/fenceq/db"
	bbolt "go.etcd.io/bbolt"
)

// The stored forms of the observations are pinned like the job record's:
// each golden file is the encoding of a record with every field set, and
// must keep decoding to it.
func TestObservationRecordGoldenFiles(t *testing.T) {
	at := time.Date(2026, 12, 3, 8, 0, 0, 0, time.UTC)
	goldens := []struct {
		file   string
		record any
		decode func([]byte) (any, error)
		want   any
	}{
		{"refused_v1.msgpack",
			&refusedRecord{V: 1, At: at.UnixNano(), Principal: "etl", Worker: "w1", Job: 42, Operation: "complete",
				TokenSent: 3, Code: "failed_precondition", Message: "job is not claimed by this worker with this fencing token"},
			func(b []byte) (any, error) { return decodeRefused(7, b) },
			db.RefusedCall{Seq: 7, At: at, Principal: "etl", Worker: "w1", Job: 42, Operation: "complete", TokenSent: 3,
				Code: "failed_precondition", Message: "job is not claimed by this worker with this fencing token"}},
		{"worker_v1.msgpack",
			&workerRecord{V: 1, Principal: "etl", Worker: "w1", Claims: 12, FirstSeen: at.UnixNano(),
				LastSeen: at.Add(time.Minute).UnixNano(), LastClaim: at.Add(30 * time.Second).UnixNano(), LastHeartbeat: at.Add(time.Minute).UnixNano()},
			func(b []byte) (any, error) { return decodeWorker(b) },
			db.Worker{Principal: "etl", Worker: "w1", Claims: 12, FirstSeen: at, LastSeen: at.Add(time.Minute),
				LastClaim: at.Add(30 * time.Second), LastHeartbeat: at.Add(time.Minute)}},
	}
	for _, g := range goldens {
		t.Run(g.file, func(t *testing.T) {
			path := filepath.Join(goldenDir, g.file)
			enc, err := encodeRecord(g.record)
			if err != nil {
				t.Fatal(err)
			}
			if *update {
				if err := os.WriteFile(path, enc, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("read golden: %v (run go test ./db/bolt -run Golden -update to create it)", err)
			}
			if !bytes.Equal(enc, b) {
				t.Errorf("encodeRecord() =\n%x\nwant (%s)\n%x", enc, path, b)
			}
			got, err := g.decode(b)
			if err != nil || !reflect.DeepEqual(got, g.want) {
				t.Errorf("decode(%s) = %+v, %v\nwant %+v", g.file, got, err, g.want)
			}
		})
	}
}

// A file of schema version 4 (before the observations) opens read-only
// with none, and a writable open upgrades it to keep them.
func TestAFileFromBeforeObservationsIsUpgraded(t *testing.T) {
	path := filepath.Join(t.TempDir(), "fenceq.db")
	s := mustOpenStoreAt(t, path, Options{})
	job := mustEnqueue(t, s, db.EnqueueRequest{Queue: "q"})
	s.Close()
	raw, err := bbolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := raw.Update(func(tx *bbolt.Tx) error {
		for _, b := range [][]byte{bucketRefused, bucketRefusedJob, bucketWorkers, bucketWorkersSeen} {
			if err := tx.DeleteBucket(b); err != nil {
				return err
			}
		}
		return tx.Bucket(bucketMeta).Put(metaSchemaVersion, u64(observationsSchema-1))
	}); err != nil {
		t.Fatal(err)
	}
	raw.Close()

	ro, err := Open(path, Options{ReadOnly: true})
	if err != nil {
		t.Fatalf("Open(read-only) of a version %d file = %v", observationsSchema-1, err)
	}
	if rs, err := ro.ListRefusedCalls(ctx, db.RefusedCallsRequest{Job: job.ID}); err != nil || len(rs) != 0 {
		t.Errorf("ListRefusedCalls() of a read-only version %d file = %v, %v; want none", observationsSchema-1, rs, err)
	}
	if ws, err := ro.ListWorkers(ctx, db.WorkersRequest{}); err != nil || len(ws) != 0 {
		t.Errorf("ListWorkers() of a read-only version %d file = %v, %v; want none", observationsSchema-1, ws, err)
	}
	ro.Close()

	s = mustOpenStoreAt(t, path, Options{})
	if v := fileSchemaVersionOf(t, s); v != schemaVersion {
		t.Errorf("schema version after Open = %d, want %d", v, schemaVersion)
	}
	if err := s.RecordRefusedCalls(ctx, []db.RefusedCall{{Worker: "w", Job: job.ID, Operation: "heartbeat", Code: "not_found"}}); err != nil {
		t.Fatalf("RecordRefusedCalls() after the upgrade = %v", err)
	}
	if err := s.RecordWorkers(ctx, []db.WorkerSighting{{Worker: "w", LastClaim: time.Now()}}); err != nil {
		t.Fatalf("RecordWorkers() after the upgrade = %v", err)
	}
	if rs, err := s.ListRefusedCalls(ctx, db.RefusedCallsRequest{Job: job.ID}); err != nil || len(rs) != 1 {
		t.Errorf("ListRefusedCalls() after the upgrade = %v, %v; want one", rs, err)
	}
}
