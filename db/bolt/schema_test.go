package bolt

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fenceq/fenceq/db"
	bbolt "go.etcd.io/bbolt"
)

// releaseFile is a file written by the release before the store seam
// (commit 8c034d8, schema version 1): five jobs (completed, scheduled after
// a failure, dead, claimed, cancelled), an idempotency key, a lease
// released and acquired again, and 16 audit records.
var releaseFile = filepath.Join("..", "..", "testdata", "release-8c034d8.db")

func copyFile(t *testing.T, from string) string {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	to := filepath.Join(t.TempDir(), "fenceq.db")
	if err := os.WriteFile(to, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return to
}

func fileSchemaVersion(t *testing.T, path string) uint64 {
	t.Helper()
	raw, err := bbolt.Open(path, 0o600, &bbolt.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	var v uint64
	if err := raw.View(func(tx *bbolt.Tx) error {
		v = idFromKey(tx.Bucket(bucketMeta).Get(metaSchemaVersion))
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return v
}

func TestAFileOfTheReleaseBeforeTheSeamOpensAndIsUpgraded(t *testing.T) {
	path := copyFile(t, releaseFile)
	if v := fileSchemaVersion(t, path); v != 1 {
		t.Fatalf("the release file has schema version %d, want 1", v)
	}

	ro, err := Open(path, Options{ReadOnly: true})
	if err != nil {
		t.Fatalf("Open(read-only) of the release file = %v", err)
	}
	if rep, err := ro.VerifyAudit(ctx); err != nil || !rep.OK || rep.HeadSeq != 16 {
		t.Errorf("VerifyAudit() read-only = %+v, %v; want OK at 16", rep, err)
	}
	ro.Close()
	if v := fileSchemaVersion(t, path); v != 1 {
		t.Errorf("a read-only open changed the schema version to %d", v)
	}

	s := mustOpenStoreAt(t, path, Options{})
	var v uint64
	if err := s.bolt.View(func(tx *bbolt.Tx) error {
		v = idFromKey(tx.Bucket(bucketMeta).Get(metaSchemaVersion))
		return nil
	}); err != nil || v != schemaVersion {
		t.Errorf("schema version after Open = %d, want %d", v, schemaVersion)
	}
	if err := s.Check(); err != nil {
		t.Errorf("Check() after the upgrade = %v", err)
	}
	rep, err := s.VerifyAudit(ctx)
	if err != nil || !rep.OK || rep.HeadSeq != 16 || rep.HeadHash != "06d55aabe645f98d7dd51d89e75df748f0c1828fb47560a23b8b3e8d61f213bd" {
		t.Errorf("VerifyAudit() = %+v, %v; want OK at 16 with the release's head", rep, err)
	}
	want := map[uint64]db.State{1: db.StateCompleted, 2: db.StateScheduled, 3: db.StateDead, 4: db.StateClaimed, 5: db.StateCancelled}
	for id, st := range want {
		j, err := s.GetJob(ctx, id)
		if err != nil || j.State != st {
			t.Errorf("GetJob(%d) = %s, %v; want %s", id, j.State, err, st)
		}
	}
	if j, _ := s.GetJob(ctx, 1); string(j.Result) != `{"ok":true}` || string(j.Attestation) != `"sig"` || string(j.Payload) != `{"n":1}` {
		t.Errorf("job 1 = result %s, attestation %s, payload %s; want the release's", j.Result, j.Attestation, j.Payload)
	}
	if j, _ := s.GetJob(ctx, 2); j.LastError != "boom" || len(j.Errors) != 1 || j.Attempts != 1 {
		t.Errorf("job 2 = %+v, want one failure \"boom\"", j)
	}
	if r, err := s.EnqueueJob(ctx, db.EnqueueRequest{Principal: "local", Kind: "b", IdempotencyKey: "order-7"}); err != nil || r.Created || r.Job.ID != 2 {
		t.Errorf("EnqueueJob(order-7) = %+v, %v; want job 2, not created", r, err)
	}
	if l, err := s.GetLease(ctx, "/data/a"); err != nil || l.FencingToken != 2 || l.Holder != "local|h2" {
		t.Errorf("GetLease(/data/a) = %+v, %v; want token 2 held by local|h2", l, err)
	}
	if dead, err := s.ListJobsInState(ctx, db.StateListRequest{State: db.StateDead}); err != nil || len(dead) != 1 || dead[0].ID != 3 {
		t.Errorf("ListJobsInState(dead) = %v, %v; want job 3", dead, err)
	}
	// The chain goes on from the release's head.
	if _, err := s.CancelJob(ctx, db.JobRequest{Principal: "admin", ID: 4}); err != nil {
		t.Fatal(err)
	}
	if rep, err := s.VerifyAudit(ctx); err != nil || !rep.OK || rep.HeadSeq != 17 {
		t.Errorf("VerifyAudit() after a cancel = %+v, %v; want OK at 17", rep, err)
	}
}

func TestOpenRefusesAFileOfANewerSchemaAndLeavesItAsItIs(t *testing.T) {
	path := filepath.Join(t.TempDir(), "fenceq.db")
	s := mustOpenStoreAt(t, path, Options{})
	mustEnqueue(t, s, db.EnqueueRequest{})
	s.Close()
	raw, err := bbolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := raw.Update(func(tx *bbolt.Tx) error {
		return tx.Bucket(bucketMeta).Put(metaSchemaVersion, u64(schemaVersion+1))
	}); err != nil {
		t.Fatal(err)
	}
	raw.Close()
	before, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, opts := range []Options{{}, {ReadOnly: true}} {
		s, err := Open(path, opts)
		if err == nil {
			s.Close()
			t.Fatalf("Open(%+v) of a file of schema version %d = nil error, want ErrSchemaNewer", opts, schemaVersion+1)
		}
		if !errors.Is(err, db.ErrSchemaNewer) || !strings.Contains(err.Error(), fmt.Sprintf("schema version %d", schemaVersion+1)) ||
			!strings.Contains(err.Error(), fmt.Sprintf("up to %d", schemaVersion)) {
			t.Errorf("Open(%+v) error = %v; want ErrSchemaNewer naming versions %d and %d", opts, err, schemaVersion+1, schemaVersion)
		}
	}
	if after, _ := os.ReadFile(path); !bytes.Equal(after, before) {
		t.Error("a refused Open changed the file")
	}
}
