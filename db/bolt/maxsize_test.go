package bolt

import (
	"context"
	"encoding/json"
	"errors"
	"github.com/fenceq/fenceq/db"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A store bounded by MaxSize refuses the commit that would grow the file
// past it with db.ErrFull, writes nothing of it, keeps serving reads, and the
// file stays whole: every job acknowledged before is there after a reopen.
func TestStore_MaxSize(t *testing.T) {
	const limit = 1 << 20
	path := filepath.Join(t.TempDir(), "fenceq.db")
	s := mustOpenStoreAt(t, path, Options{MaxSize: limit})
	ctx := context.Background()
	payload := json.RawMessage(`"` + strings.Repeat("x", 60<<10) + `"`)

	var acked []db.Job
	var full error
	for i := 0; i < 64 && full == nil; i++ {
		res, err := s.EnqueueJob(ctx, db.EnqueueRequest{Principal: "local", Payload: payload})
		if err != nil {
			full = err
			break
		}
		acked = append(acked, res.Job)
	}
	if !errors.Is(full, db.ErrFull) {
		t.Fatalf("EnqueueJob() after %d jobs: error = %v, want ErrFull", len(acked), full)
	}
	if len(acked) == 0 {
		t.Fatalf("EnqueueJob() refused the first job; the limit left no room at all")
	}
	if fi, err := os.Stat(path); err != nil || fi.Size() > limit {
		t.Fatalf("file size = %v (err %v), want at most %d", fi.Size(), err, limit)
	}

	before, err := s.ListJobs(ctx, db.ListRequest{Limit: 1000})
	if err != nil {
		t.Fatalf("ListJobs() after db.ErrFull: %v (reads must go on)", err)
	}
	if len(before.Jobs) != len(acked) {
		t.Fatalf("ListJobs() = %d jobs, want the %d acknowledged", len(before.Jobs), len(acked))
	}
	// Refused again: still nothing written, still readable.
	if _, err := s.EnqueueJob(ctx, db.EnqueueRequest{Principal: "local", Payload: payload}); !errors.Is(err, db.ErrFull) {
		t.Fatalf("second EnqueueJob() past the limit: error = %v, want ErrFull", err)
	}
	for _, j := range acked {
		got, err := s.GetJob(ctx, j.ID)
		if err != nil || got.ID != j.ID || string(got.Payload) != string(payload) {
			t.Fatalf("GetJob(%d) after db.ErrFull = %v, %v; want the acknowledged job", j.ID, got.ID, err)
		}
	}
	// A small write fits in the pages the file already has.
	if _, err := s.CancelJob(ctx, db.JobRequest{Principal: "local", ID: acked[0].ID}); err != nil {
		t.Fatalf("db.CancelJob() in a full file: %v, want it to fit in free pages", err)
	}
	if err := s.Check(); err != nil {
		t.Fatalf("Check() after db.ErrFull: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("Close() = %v", err)
	}

	s = mustOpenStoreAt(t, path, Options{MaxSize: limit})
	after, err := s.ListJobs(ctx, db.ListRequest{Limit: 1000})
	if err != nil || len(after.Jobs) != len(acked) {
		t.Fatalf("after reopen: ListJobs() = %d jobs, %v; want the %d acknowledged", len(after.Jobs), err, len(acked))
	}
}
