package bolt_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/fenceq/fenceq/db"
	"github.com/fenceq/fenceq/db/bolt"
	"github.com/fenceq/fenceq/db/dbtest"
)

type stepClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *stepClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *stepClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// TestAStaleCompletionLeavesNoAttestationOrAuditRecordInTheFile reads the
// raw file: the stale claimant's attestation bytes must not be anywhere in
// it, while the current claimant's are (so the search can find them).
func TestAStaleCompletionLeavesNoAttestationOrAuditRecordInTheFile(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "fenceq.db")
	clock := &stepClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	s, err := bolt.Open(path, bolt.Options{Rules: db.Rules{Now: clock.Now}})
	if err != nil {
		t.Fatal(err)
	}
	res, err := s.EnqueueJob(ctx, db.EnqueueRequest{Principal: "local", Queue: "q"})
	if err != nil {
		t.Fatal(err)
	}
	claim := func() db.Job {
		jobs, err := s.ClaimJobs(ctx, db.ClaimRequest{Principal: "local", Worker: "w1", Queues: []string{"q"}, Lease: time.Second})
		if err != nil || len(jobs) != 1 {
			t.Fatalf("ClaimJobs() = %v, %v", jobs, err)
		}
		return jobs[0]
	}
	first := claim()
	clock.Advance(2 * time.Second)
	second := claim()
	headBefore, _ := s.VerifyAudit(ctx)

	zombie := json.RawMessage(`{"signed":"ZOMBIE-ATTESTATION-4f1c"}`)
	_, err = s.CompleteJob(ctx, db.CompleteRequest{
		Fenced:      db.Fenced{ID: res.Job.ID, Principal: "local", Worker: "w1", FencingToken: first.Attempts},
		Result:      json.RawMessage(`"ZOMBIE-RESULT-4f1c"`),
		Attestation: zombie,
	})
	if !errors.Is(err, dbtest.ErrClaimMismatch) {
		t.Fatalf("stale CompleteJob() = %v, want ErrClaimMismatch", err)
	}
	headAfter, _ := s.VerifyAudit(ctx)
	if headAfter.HeadSeq != headBefore.HeadSeq || !headAfter.OK {
		t.Fatalf("audit head moved on a refusal: %+v → %+v", headBefore, headAfter)
	}
	if _, err := s.CompleteJob(ctx, db.CompleteRequest{
		Fenced:      db.Fenced{ID: res.Job.ID, Principal: "local", Worker: "w1", FencingToken: second.Attempts},
		Attestation: json.RawMessage(`{"signed":"CURRENT-ATTESTATION-9a2e"}`),
	}); err != nil {
		t.Fatalf("current CompleteJob() = %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, gone := range []string{"ZOMBIE-ATTESTATION-4f1c", "ZOMBIE-RESULT-4f1c"} {
		if bytes.Contains(raw, []byte(gone)) {
			t.Errorf("the file holds %q from a refused completion", gone)
		}
	}
	if !bytes.Contains(raw, []byte("CURRENT-ATTESTATION-9a2e")) {
		t.Error("the file does not hold the accepted attestation: the search cannot be trusted")
	}

	s, err = bolt.Open(path, bolt.Options{Rules: db.Rules{Now: clock.Now}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	recs, err := s.ListAudit(ctx, 0, 1000)
	if err != nil {
		t.Fatal(err)
	}
	completes := 0
	for _, r := range recs {
		if r.Action == "complete" {
			completes++
			if r.Token != second.Attempts || r.Details["attestation_sha256"] == "" {
				t.Errorf("complete audit record = %+v, want token %d with the attestation hash", r, second.Attempts)
			}
		}
	}
	if completes != 1 {
		t.Errorf("%d complete audit records, want exactly 1 (the accepted one)", completes)
	}
	if rep, err := s.VerifyAudit(ctx); err != nil || !rep.OK {
		t.Errorf("VerifyAudit() after reopen = %+v, %v", rep, err)
	}
}
