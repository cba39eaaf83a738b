//go:build linux

package e2e

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fenceq/fenceq/db"
	"github.com/fenceq/fenceq/db/bolt"
	"github.com/fenceq/fenceq/db/postgres"
	"github.com/fenceq/fenceq/db/postgres/pgtest"
)

// TestCopy_APausedQueueStaysPausedOnPostgreSQL: issue 30 found that
// "fenceq copy" dropped queue pauses: a queue paused on the bbolt file was
// not paused on PostgreSQL, and its jobs were handed out, while the copied
// chain ended with the pause record. Now the pause is carried, since the
// same time and by the same principal, and a claim gets nothing until the
// queue is resumed.
func TestCopy_APausedQueueStaysPausedOnPostgreSQL(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "fenceq.db")
	src, err := bolt.Open(path, bolt.Options{})
	if err != nil {
		t.Fatal(err)
	}
	r, err := src.EnqueueJob(ctx, db.EnqueueRequest{Principal: "p", Queue: "q"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := src.EnqueueJob(ctx, db.EnqueueRequest{Principal: "p", Queue: "open"}); err != nil {
		t.Fatal(err)
	}
	if _, err := src.SetQueuePaused(ctx, db.PauseRequest{Principal: "ops", Queue: "q", Paused: true}); err != nil {
		t.Fatal(err)
	}
	pauses, err := src.PausedQueues(ctx)
	if err != nil || len(pauses) != 1 {
		t.Fatalf("PausedQueues() on the file = %v, %v", pauses, err)
	}
	src.Close()

	target := pgtest.NewSchema(t)
	code, stdout, stderr := runFenceq(t, nil, "copy", "--from", path, "--to", target)
	if code != 0 || !strings.Contains(stdout, "(1 queues paused)") {
		t.Fatalf("fenceq copy = %d\n%s%s", code, stdout, stderr)
	}
	dst, err := postgres.Open(ctx, target, postgres.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer dst.Close()
	got, err := dst.PausedQueues(ctx)
	if err != nil || len(got) != 1 || got[0].Queue != "q" || got[0].PausedBy != "ops" || !got[0].PausedAt.Equal(pauses[0].PausedAt) {
		t.Fatalf("PausedQueues() on the target = %+v, %v; want %+v", got, err, pauses)
	}
	if jobs, err := dst.ClaimJobs(ctx, db.ClaimRequest{Principal: "p", Worker: "w", Queues: []string{"q"}}); err != nil || len(jobs) != 0 {
		t.Fatalf("ClaimJobs(q) on the target = %v, %v; want nothing: q is paused", jobs, err)
	}
	if jobs, err := dst.ClaimJobs(ctx, db.ClaimRequest{Principal: "p", Worker: "w", Queues: []string{"open"}}); err != nil || len(jobs) != 1 {
		t.Fatalf("ClaimJobs(open) on the target = %v, %v; want its job", jobs, err)
	}
	if _, err := dst.SetQueuePaused(ctx, db.PauseRequest{Principal: "ops", Queue: "q", Paused: false}); err != nil {
		t.Fatal(err)
	}
	if jobs, err := dst.ClaimJobs(ctx, db.ClaimRequest{Principal: "p", Worker: "w", Queues: []string{"q"}}); err != nil || len(jobs) != 1 || jobs[0].ID != r.Job.ID {
		t.Fatalf("ClaimJobs(q) after the resume = %v, %v; want job %d", jobs, err, r.Job.ID)
	}
	if err := dst.Check(); err != nil {
		t.Error(err)
	}
}
