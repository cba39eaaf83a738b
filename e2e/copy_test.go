//go:build linux

package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fenceq/fenceq/db"
	"github.com/fenceq/fenceq/db/bolt"
	"github.com/fenceq/fenceq/db/postgres"
	"github.com/fenceq/fenceq/db/postgres/pgtest"
)

// TestCopy_AFileMovesToPostgreSQLAndItsChainVerifiesThere: jobs in every
// state, a named lease and the audit chain are copied; the target serves
// them as the file did, the chain verifies with the same head, and a
// second copy into the now non-empty target is refused.
func TestCopy_AFileMovesToPostgreSQLAndItsChainVerifiesThere(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "fenceq.db")
	src, err := bolt.Open(path, bolt.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var ids []uint64
	for i := range 6 {
		r, err := src.EnqueueJob(ctx, db.EnqueueRequest{Principal: "p", Queue: "q", Payload: []byte(fmt.Sprintf(`{"n":%d}`, i)), IdempotencyKey: fmt.Sprint("k", i), MaxAttempts: 2})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, r.Job.ID)
	}
	jobs, err := src.ClaimJobs(ctx, db.ClaimRequest{Principal: "p", Worker: "w", Queues: []string{"q"}, Max: 3, Lease: time.Minute})
	if err != nil || len(jobs) != 3 {
		t.Fatal(jobs, err)
	}
	if _, err := src.CompleteJob(ctx, db.CompleteRequest{Fenced: db.Fenced{ID: jobs[0].ID, Principal: "p", Worker: "w", FencingToken: 1}, Result: []byte(`"ok"`), Attestation: []byte(`{"sig":"x"}`)}); err != nil {
		t.Fatal(err)
	}
	if _, err := src.FailJob(ctx, db.FailRequest{Fenced: db.Fenced{ID: jobs[1].ID, Principal: "p", Worker: "w", FencingToken: 1}, Error: "boom", Final: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := src.RetryJob(ctx, db.JobRequest{Principal: "p", ID: jobs[1].ID}); err != nil {
		t.Fatal(err)
	}
	if _, err := src.CancelJob(ctx, db.JobRequest{Principal: "p", ID: ids[5]}); err != nil {
		t.Fatal(err)
	}
	if _, err := src.AcquireLease(ctx, db.AcquireLeaseRequest{Principal: "p", Name: "/leader", Holder: "a", TTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	want := map[uint64]db.Job{}
	for _, id := range ids {
		j, err := src.GetJob(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		want[id] = j
	}
	head, _ := src.AuditHead(ctx)
	stats, _ := src.Stats(ctx)
	src.Close()

	target := pgtest.NewSchema(t)
	code, stdout, stderr := runFenceq(t, nil, "copy", "--from", path, "--to", target)
	if code != 0 || !strings.Contains(stdout, "copied 6 jobs, 1 leases and") {
		t.Fatalf("fenceq copy = %d\n%s%s", code, stdout, stderr)
	}
	dst, err := postgres.Open(ctx, target, postgres.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer dst.Close()
	for id, w := range want {
		got, err := dst.GetJob(ctx, id)
		if err != nil || fmt.Sprintf("%+v", got) != fmt.Sprintf("%+v", w) {
			t.Errorf("job %d on the target = %+v, %v\nwant %+v", id, got, err, w)
		}
	}
	if rep, err := dst.VerifyAudit(ctx); err != nil || !rep.OK || rep.HeadSeq != head.Seq || rep.HeadHash != head.Hash {
		t.Fatalf("VerifyAudit on the target = %+v, %v; want OK at the source's head %+v", rep, err, head)
	}
	if got, _ := dst.Stats(ctx); fmt.Sprint(got) != fmt.Sprint(stats) {
		t.Errorf("Stats on the target = %v, want %v", got, stats)
	}
	if err := dst.Check(); err != nil {
		t.Error(err)
	}
	// The copy goes on where the file stopped: the claimed job's token,
	// the lease's token, the next id.
	if _, err := dst.CompleteJob(ctx, db.CompleteRequest{Fenced: db.Fenced{ID: jobs[2].ID, Principal: "p", Worker: "w", FencingToken: 1}}); err != nil {
		t.Errorf("completing a job claimed before the copy: %v", err)
	}
	if _, err := dst.AcquireLease(ctx, db.AcquireLeaseRequest{Principal: "p", Name: "/leader", Holder: "b", TTL: time.Minute}); db.ErrorCode(err) != db.CodeConflict {
		t.Errorf("acquiring the lease held on the source = %v, want held", err)
	}
	r, err := dst.EnqueueJob(ctx, db.EnqueueRequest{Principal: "p", Queue: "q", IdempotencyKey: "k0"})
	if err != nil || r.Created || r.Job.ID != ids[0] {
		t.Errorf("enqueue with a copied idempotency key = %+v, %v; want job %d", r, err, ids[0])
	}
	if r, err := dst.EnqueueJob(ctx, db.EnqueueRequest{Principal: "p", Queue: "q"}); err != nil || r.Job.ID != ids[5]+1 {
		t.Errorf("new job on the target = %+v, %v; want id %d", r.Job.ID, err, ids[5]+1)
	}

	code, _, stderr = runFenceq(t, nil, "copy", "--from", path, "--to", target)
	if code == 0 || !strings.Contains(stderr, "already holds fenceq jobs") {
		t.Fatalf("a second copy into the same target = %d %s, want a refusal", code, stderr)
	}
}
