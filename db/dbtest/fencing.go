package dbtest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/fenceq/fenceq/db"
)

// A worker paused past its lease and a restart of it under the same name
// share a holder identity; only the claim number tells them apart. The
// earlier claim must be refused everywhere and leave no trace.
func testAClaimNumberFencesAStaleClaimantOfTheSameName(t *testing.T, newStore Factory) {
	ctx := context.Background()
	clk := newFakeClock()
	s := newStore(t, testRules(clk))

	job := mustEnqueue(t, s, db.EnqueueRequest{Payload: json.RawMessage(`{"file":"a.txt"}`)})
	first := mustClaim(t, s, "w1", 30*time.Second)
	if first.ID != job.ID || first.Attempts != 1 || first.FencingToken() != 1 {
		t.Fatalf("first claim = job %d token %d, want job %d token 1", first.ID, first.FencingToken(), job.ID)
	}

	clk.Advance(31 * time.Second) // the first claimant is paused past its lease
	second := mustClaim(t, s, "w1", 30*time.Second)
	if second.ID != job.ID || second.FencingToken() != 2 {
		t.Fatalf("second claim = job %d token %d, want job %d token 2", second.ID, second.FencingToken(), job.ID)
	}
	if second.ClaimedBy != "local|w1" {
		t.Fatalf("second claim ClaimedBy = %q, want %q (same name as the first)", second.ClaimedBy, "local|w1")
	}

	stale := fenced(job.ID, "w1", 1)
	refusals := []struct {
		name    string
		call    func() error
		wantErr error
		apiCode string // what api maps wantErr to
	}{
		{"heartbeat", func() error {
			_, err := s.HeartbeatJob(ctx, db.HeartbeatRequest{Fenced: stale, Lease: time.Minute})
			return err
		}, ErrClaimNotFound, "not_found"},
		{"fail", func() error {
			_, err := s.FailJob(ctx, db.FailRequest{Fenced: stale, Error: "stale failure", RetryDelay: durationPtr(0)})
			return err
		}, ErrClaimNotFound, "not_found"},
		{"complete", func() error {
			_, err := s.CompleteJob(ctx, db.CompleteRequest{Fenced: stale,
				Result: json.RawMessage(`{"written":"stale"}`), Attestation: json.RawMessage(`{"sha256":"stale"}`)})
			return err
		}, ErrClaimMismatch, "failed_precondition"},
	}
	for _, r := range refusals {
		recBefore := rawJob(t, s, job.ID)
		headBefore := auditHead(t, s)
		snapBefore := takeSnapshot(t, s)

		err := r.call()
		if !errors.Is(err, r.wantErr) {
			t.Errorf("%s with token 1 after token 2 was issued: error = %v, want %v (API %s)", r.name, err, r.wantErr, r.apiCode)
		}
		if r.wantErr == ErrClaimMismatch && errors.Is(err, ErrClaimNotFound) {
			t.Errorf("%s error = %v also matches ErrClaimNotFound, want only ErrClaimMismatch (API %s)", r.name, err, r.apiCode)
		}
		if got := rawJob(t, s, job.ID); !bytes.Equal(got, recBefore) {
			t.Errorf("after refused %s the stored record is\n%x\nwant byte-for-byte\n%x", r.name, got, recBefore)
		}
		if got := auditHead(t, s); !bytes.Equal(got, headBefore) {
			t.Errorf("after refused %s audit head = %x, want %x (unchanged)", r.name, got, headBefore)
		}
		rec := storedJob(t, s, job.ID)
		if rec.Attestation != nil || rec.Result != nil {
			t.Errorf("after refused %s stored attestation = %s, result = %s; want none", r.name, rec.Attestation, rec.Result)
		}
		assertUnchanged(t, s, snapBefore, "refused "+r.name)
	}

	// The current claim is untouched by all that: same holder, token and lease.
	if rec := storedJob(t, s, job.ID); rec.State != db.StateClaimed || rec.Attempts != 2 ||
		rec.LeaseExpiresAt != clk.Now().Add(30*time.Second).UnixNano() {
		t.Fatalf("after the refusals job is %s attempts %d lease %d, want claimed, 2, %d",
			rec.State, rec.Attempts, rec.LeaseExpiresAt, clk.Now().Add(30*time.Second).UnixNano())
	}

	// The current token is accepted, and so is no token (the name check alone).
	clk.Advance(10 * time.Second)
	hb, err := s.HeartbeatJob(ctx, db.HeartbeatRequest{Fenced: fenced(job.ID, "w1", 2), Lease: time.Minute})
	if err != nil {
		t.Fatalf("heartbeat with current token 2: error = %v, want nil", err)
	}
	if want := clk.Now().Add(time.Minute); !hb.LeaseExpiresAt.Equal(want) {
		t.Errorf("heartbeat with token 2 LeaseExpiresAt = %v, want %v", hb.LeaseExpiresAt, want)
	}
	clk.Advance(10 * time.Second)
	hb, err = s.HeartbeatJob(ctx, db.HeartbeatRequest{Fenced: fenced(job.ID, "w1", 0), Lease: time.Minute})
	if err != nil {
		t.Fatalf("heartbeat without token: error = %v, want nil", err)
	}
	if want := clk.Now().Add(time.Minute); !hb.LeaseExpiresAt.Equal(want) {
		t.Errorf("heartbeat without token LeaseExpiresAt = %v, want %v", hb.LeaseExpiresAt, want)
	}

	result, attestation := json.RawMessage(`{"written":"current"}`), json.RawMessage(`{"sha256":"current"}`)
	done, err := s.CompleteJob(ctx, db.CompleteRequest{Fenced: fenced(job.ID, "w1", 2), Result: result, Attestation: attestation})
	if err != nil {
		t.Fatalf("complete with current token 2: error = %v, want nil", err)
	}
	if done.State != db.StateCompleted || done.Attempts != 2 {
		t.Errorf("complete returned state %s attempts %d, want completed, 2", done.State, done.Attempts)
	}
	rec := storedJob(t, s, job.ID)
	if rec.State != db.StateCompleted || !bytes.Equal(rec.Result, result) || !bytes.Equal(rec.Attestation, attestation) {
		t.Errorf("stored after complete: state %s result %s attestation %s, want completed %s %s",
			rec.State, rec.Result, rec.Attestation, result, attestation)
	}
	a := lastAudit(t, s)
	if a.Action != "complete" || a.Token != 2 || a.Details["attestation_sha256"] != db.SHA256Hex(attestation) {
		t.Errorf("last audit = %s token %d attestation_sha256 %q, want complete token 2 %q",
			a.Action, a.Token, a.Details["attestation_sha256"], db.SHA256Hex(attestation))
	}

	// The stale claimant is still refused once the job is done.
	before := takeSnapshot(t, s)
	if _, err := s.CompleteJob(ctx, db.CompleteRequest{Fenced: stale, Attestation: json.RawMessage(`{"late":true}`)}); !errors.Is(err, ErrClaimMismatch) {
		t.Errorf("stale complete after completion: error = %v, want %v", err, ErrClaimMismatch)
	}
	assertUnchanged(t, s, before, "stale complete after completion")
}
