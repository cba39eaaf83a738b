package api_test

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/fenceq/fenceq/api"
	"github.com/fenceq/fenceq/db"
)

// refusal is one request that must be refused without changing anything.
type refusal struct {
	name     string
	path     string
	body     any
	status   int
	code     string
	mentions []string
}

// wantRefusals sends each refusal and checks its error and that neither the
// job (GET /v1/jobs/{id}, byte for byte) nor anything else changed.
func wantRefusals(t *testing.T, ts *testServer, id uint64, refusals []refusal) {
	t.Helper()
	for _, rf := range refusals {
		jobBefore, before := ts.jobRaw(id), ts.snapshot()
		r := ts.post(rf.path, rf.body)
		wantError(t, rf.name, r, rf.status, rf.code, rf.mentions...)
		if jobAfter := ts.jobRaw(id); string(jobAfter) != string(jobBefore) {
			t.Errorf("%s changed job %d:\nbefore %s\nafter  %s", rf.name, id, jobBefore, jobAfter)
		}
		wantUnchanged(t, rf.name, before, ts.snapshot())
	}
}

func TestAStaleClaimOfTheSameWorkerIsFencedOff(t *testing.T) {
	ts := newTestServer(t, db.Rules{}, api.Config{})
	enq := ts.enqueue(`{"queue":"default","payload":{"n":1}}`)

	first := ts.claim(`{"worker":"w1","lease_ms":1000}`)
	if first.ID != enq.ID || first.FencingToken != 1 || first.Attempts != 1 || first.ClaimedBy != "local|w1" {
		t.Fatalf("first claim = id %d token %d attempts %d by %q, want id %d token 1 attempts 1 by local|w1",
			first.ID, first.FencingToken, first.Attempts, first.ClaimedBy, enq.ID)
	}
	// While the lease runs, nobody (not even the same name) gets the job.
	if r := ts.post("/v1/claim", `{"worker":"w1","lease_ms":1000}`); r.status != http.StatusNoContent {
		t.Fatalf("claim during the lease: got %v, want 204", r)
	}

	// Real time: wait until the lease has expired.
	time.Sleep(time.Until(*first.LeaseExpiresAt) + 30*time.Millisecond)

	// The same worker name claims again, as a restarted worker would.
	second := ts.claim(`{"worker":"w1","lease_ms":10000}`)
	if second.ID != enq.ID || second.FencingToken != 2 || second.Attempts != 2 || second.ClaimedBy != "local|w1" {
		t.Fatalf("second claim = id %d token %d attempts %d by %q, want id %d token 2 attempts 2 by local|w1",
			second.ID, second.FencingToken, second.Attempts, second.ClaimedBy, enq.ID)
	}

	id := enq.ID
	path := func(op string) string { return fmt.Sprintf("/v1/jobs/%d/%s", id, op) }
	wantRefusals(t, ts, id, []refusal{
		{"stale heartbeat", path("heartbeat"), `{"worker":"w1","fencing_token":1,"lease_ms":10000}`,
			http.StatusNotFound, "not_found", []string{"fencing token 1"}},
		{"stale fail", path("fail"), `{"worker":"w1","fencing_token":1,"error":"boom","final":true}`,
			http.StatusNotFound, "not_found", []string{"fencing token 1"}},
		{"stale complete", path("complete"), `{"worker":"w1","fencing_token":1,"result":{"ok":"stale"},"attestation":{"sig":"stale"}}`,
			http.StatusConflict, "failed_precondition", []string{"fencing token 1"}},
		{"heartbeat with token above u32 max", path("heartbeat"), `{"worker":"w1","fencing_token":4294967296}`,
			http.StatusBadRequest, "invalid_argument", []string{"fencing_token", "4294967296"}},
		{"complete with token above u32 max", path("complete"), `{"worker":"w1","fencing_token":4294967296,"result":1,"attestation":1}`,
			http.StatusBadRequest, "invalid_argument", []string{"fencing_token", "4294967296"}},
		{"fail with token above u32 max", path("fail"), `{"worker":"w1","fencing_token":4294967296,"final":true}`,
			http.StatusBadRequest, "invalid_argument", []string{"fencing_token", "4294967296"}},
		{"heartbeat with a token from the future", path("heartbeat"), `{"worker":"w1","fencing_token":3}`,
			http.StatusNotFound, "not_found", nil},
		{"heartbeat by another worker", path("heartbeat"), `{"worker":"w2","fencing_token":2}`,
			http.StatusNotFound, "not_found", nil},
	})
	if j := wantJob(t, "GET after the stale complete", ts.get(fmt.Sprintf("/v1/jobs/%d", id)), http.StatusOK); j.Attestation != nil || j.Result != nil {
		t.Fatalf("after the stale complete: result %s attestation %s, want none stored", j.Result, j.Attestation)
	}

	// The current token is accepted, and so is no token (the name check alone).
	hb := wantJob(t, "heartbeat with the current token", ts.post(path("heartbeat"), `{"worker":"w1","fencing_token":2,"lease_ms":10000}`), http.StatusOK)
	if hb.State != "claimed" || hb.FencingToken != 2 || !hb.LeaseExpiresAt.After(*second.LeaseExpiresAt) {
		t.Fatalf("heartbeat with the current token = state %s token %d lease %v, want claimed, 2, after %v",
			hb.State, hb.FencingToken, hb.LeaseExpiresAt, second.LeaseExpiresAt)
	}
	hb = wantJob(t, "heartbeat without a token", ts.post(path("heartbeat"), `{"worker":"w1","lease_ms":10000}`), http.StatusOK)
	if hb.State != "claimed" || hb.FencingToken != 2 {
		t.Fatalf("heartbeat without a token = state %s token %d, want claimed, 2", hb.State, hb.FencingToken)
	}

	const result, attestation = `{"rows": 42}`, `{"sig": "c2lnbmVk", "by": "w1"}`
	done := wantJob(t, "complete with the current token",
		ts.post(path("complete"), `{"worker":"w1","fencing_token":2,"result":`+result+`,"attestation":`+attestation+`}`), http.StatusOK)
	if done.State != "completed" || done.Attempts != 2 || done.FencingToken != 0 || done.ClaimedBy != "" || done.CompletedAt == nil {
		t.Fatalf("complete = state %s attempts %d token %d by %q completed_at %v, want completed, 2, 0, unclaimed, set",
			done.State, done.Attempts, done.FencingToken, done.ClaimedBy, done.CompletedAt)
	}
	got := wantJob(t, "GET after complete", ts.get(fmt.Sprintf("/v1/jobs/%d", id)), http.StatusOK)
	if string(got.Result) != compactJSON(t, result) || string(got.Attestation) != compactJSON(t, attestation) {
		t.Fatalf("stored result %s attestation %s, want %s and %s", got.Result, got.Attestation, compactJSON(t, result), compactJSON(t, attestation))
	}

	// Once completed, no token completes or fails it again.
	wantRefusals(t, ts, id, []refusal{
		{"complete twice", path("complete"), `{"worker":"w1","fencing_token":2,"result":{"again":true}}`,
			http.StatusConflict, "failed_precondition", []string{"completed"}},
		{"stale complete after completion", path("complete"), `{"worker":"w1","fencing_token":1,"attestation":{"late":true}}`,
			http.StatusConflict, "failed_precondition", nil},
		{"heartbeat after completion", path("heartbeat"), `{"worker":"w1","fencing_token":2}`,
			http.StatusNotFound, "not_found", nil},
		{"fail after completion", path("fail"), `{"worker":"w1"}`,
			http.StatusNotFound, "not_found", nil},
	})
}

func TestALateHeartbeatBeforeAnyReclaimIsAccepted(t *testing.T) {
	ts := newTestServer(t, db.Rules{}, api.Config{})
	enq := ts.enqueue(`{}`)
	c := ts.claim(`{"worker":"w1","lease_ms":100}`)
	time.Sleep(time.Until(*c.LeaseExpiresAt) + 30*time.Millisecond)

	hb := wantJob(t, "late heartbeat", ts.post(fmt.Sprintf("/v1/jobs/%d/heartbeat", enq.ID), `{"worker":"w1","fencing_token":1,"lease_ms":10000}`), http.StatusOK)
	if hb.State != "claimed" || hb.FencingToken != 1 || !hb.LeaseExpiresAt.After(time.Now()) {
		t.Fatalf("late heartbeat = state %s token %d lease %v, want claimed, 1, in the future", hb.State, hb.FencingToken, hb.LeaseExpiresAt)
	}
	// The renewed lease holds: nobody can claim the job now.
	if r := ts.post("/v1/claim", `{"worker":"w2"}`); r.status != http.StatusNoContent {
		t.Fatalf("claim after the late heartbeat: got %v, want 204", r)
	}
}

func TestRequireFencingRefusesCallsWithoutAToken(t *testing.T) {
	ts := newTestServer(t, db.Rules{RequireFencing: true}, api.Config{})
	enq := ts.enqueue(`{"payload":"x"}`)
	c := ts.claim(`{"worker":"w1","lease_ms":10000}`)
	if c.FencingToken != 1 {
		t.Fatalf("claim token = %d, want 1", c.FencingToken)
	}
	id := enq.ID
	path := func(op string) string { return fmt.Sprintf("/v1/jobs/%d/%s", id, op) }
	wantRefusals(t, ts, id, []refusal{
		{"heartbeat without a token", path("heartbeat"), `{"worker":"w1"}`,
			http.StatusBadRequest, "invalid_argument", []string{"fencing_token", "required"}},
		{"heartbeat with token 0", path("heartbeat"), `{"worker":"w1","fencing_token":0}`,
			http.StatusBadRequest, "invalid_argument", []string{"fencing_token", "required"}},
		{"complete without a token", path("complete"), `{"worker":"w1","result":1,"attestation":{"a":1}}`,
			http.StatusBadRequest, "invalid_argument", []string{"fencing_token", "required"}},
		{"fail without a token", path("fail"), `{"worker":"w1","error":"x","final":true}`,
			http.StatusBadRequest, "invalid_argument", []string{"fencing_token", "required"}},
	})

	wantJob(t, "heartbeat with the token", ts.post(path("heartbeat"), `{"worker":"w1","fencing_token":1}`), http.StatusOK)
	f := wantJob(t, "fail with the token", ts.post(path("fail"), `{"worker":"w1","fencing_token":1,"error":"try again","retry_delay_ms":0}`), http.StatusOK)
	if f.State != "available" || f.LastError != "try again" {
		t.Fatalf("fail with the token = state %s last_error %q, want available, %q", f.State, f.LastError, "try again")
	}
	c = ts.claim(`{"worker":"w1","lease_ms":10000}`)
	if c.FencingToken != 2 {
		t.Fatalf("second claim token = %d, want 2", c.FencingToken)
	}
	done := wantJob(t, "complete with the token", ts.post(path("complete"), `{"worker":"w1","fencing_token":2,"result":"ok"}`), http.StatusOK)
	if done.State != "completed" || string(done.Result) != `"ok"` {
		t.Fatalf("complete with the token = state %s result %s, want completed, \"ok\"", done.State, done.Result)
	}
}
