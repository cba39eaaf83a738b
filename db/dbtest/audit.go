package dbtest

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/fenceq/fenceq/db"
	"github.com/fenceq/fenceq/internal/testclock"
)

// MixedWorkload drives s through every kind of change, with refusals in
// between, and returns how many changes it made (each appends one audit
// record). It leaves, at clk.Now():
//
//	1 a claimed by local|w4, token 2, lease to now+30s
//	2 a claimed by local|w1, token 1, lease to now+44s
//	3 b completed with result and attestation
//	4 b scheduled at now+14s
//	5 a dead: "lease expired"
//	6 b cancelled
//	7 a available (retried after a cancel)
//	8 b scheduled at now+5s, failed once
//	9 b available, idempotency key "b-2", enqueued last
func MixedWorkload(t *testing.T, s db.Store, clk *testclock.Clock) uint64 {
	t.Helper()
	var changes uint64
	ok := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("workload: %s: %v", what, err)
		}
		changes++
	}
	refused := func(what string, err, want error) {
		t.Helper()
		if !errors.Is(err, want) {
			t.Fatalf("workload: %s: error = %v, want %v", what, err, want)
		}
	}
	claim := func(worker string, want ...uint64) {
		t.Helper()
		jobs, err := s.ClaimJobs(ctx, db.ClaimRequest{Principal: "local", Worker: worker, Queues: []string{"a", "b"}, Max: len(want), Lease: 10 * time.Second})
		if err != nil {
			t.Fatalf("workload: claim by %s: %v", worker, err)
		}
		var got []uint64
		for _, j := range jobs {
			got = append(got, j.ID)
		}
		if !slicesEqual(got, want) {
			t.Fatalf("workload: claim by %s = %v, want %v", worker, got, want)
		}
		changes += uint64(len(jobs))
	}

	res, err := s.EnqueueJobs(ctx, []db.EnqueueRequest{
		{Principal: "producer", Queue: "a", Priority: 1, IdempotencyKey: "a-1"},
		{Principal: "producer", Queue: "a", Priority: 5},
		{Principal: "producer", Queue: "b", Priority: 5, Payload: json.RawMessage(`{"x":[1,2]}`)},
		{Principal: "producer", Queue: "b", Delay: 30 * time.Second},
		{Principal: "producer", Queue: "a", Priority: 9, MaxAttempts: 1},
		{Principal: "producer", Queue: "b", Priority: -1},
		{Principal: "producer", Queue: "a"},
		{Principal: "producer", Queue: "b", Priority: 2, IdempotencyKey: "b-1"},
	})
	ok("enqueue batch", err)
	changes += uint64(len(res)) - 1
	_, err = s.EnqueueJob(ctx, db.EnqueueRequest{Queue: "a", IdempotencyKey: "a-1"}) // repeat: no change
	if err != nil {
		t.Fatalf("workload: repeat enqueue: %v", err)
	}

	claim("w1", 5, 2, 3)
	_, err = s.HeartbeatJob(ctx, db.HeartbeatRequest{Fenced: fenced(2, "w1", 1), Lease: time.Minute})
	ok("heartbeat 2", err)
	_, err = s.CompleteJob(ctx, db.CompleteRequest{Fenced: fenced(3, "w1", 1), Result: json.RawMessage(`{"rows":3}`), Attestation: json.RawMessage(`{"sha256":"abc"}`)})
	ok("complete 3", err)
	_, err = s.CompleteJob(ctx, db.CompleteRequest{Fenced: fenced(2, "w1", 7), Attestation: json.RawMessage(`"stale"`)})
	refused("complete 2 with token 7", err, ErrClaimMismatch)
	_, err = s.FailJob(ctx, db.FailRequest{Fenced: fenced(2, "w9", 1)})
	refused("fail 2 by w9", err, ErrClaimNotFound)

	clk.Advance(time.Second)
	claim("w2", 8)
	_, err = s.FailJob(ctx, db.FailRequest{Fenced: fenced(8, "w2", 1), Error: "timeout", RetryDelay: durationPtr(20 * time.Second)})
	ok("fail 8", err)
	claim("w3", 1)
	_, err = s.FailJob(ctx, db.FailRequest{Fenced: fenced(1, "w3", 1), Error: "bad input", Final: true})
	ok("final fail 1", err)
	_, err = s.CancelJob(ctx, db.JobRequest{Principal: "admin", ID: 7})
	ok("cancel 7", err)
	_, err = s.RetryJob(ctx, db.JobRequest{Principal: "admin", ID: 7})
	ok("retry 7", err)
	_, err = s.CancelJob(ctx, db.JobRequest{Principal: "admin", ID: 6})
	ok("cancel 6", err)
	_, err = s.CancelJob(ctx, db.JobRequest{Principal: "admin", ID: 3})
	refused("cancel completed 3", err, ErrWrongState)
	_, err = s.RetryJob(ctx, db.JobRequest{Principal: "admin", ID: 1})
	ok("retry 1", err)

	clk.Advance(15 * time.Second) // job 5's lease is over and it has no attempts left
	claim("w4", 1)
	changes++ // job 5 went dead on the way
	_, err = s.HeartbeatJob(ctx, db.HeartbeatRequest{Fenced: fenced(1, "w4", 2), Lease: 30 * time.Second})
	ok("heartbeat 1", err)
	_, err = s.HeartbeatJob(ctx, db.HeartbeatRequest{Fenced: fenced(5, "w1", 1)})
	refused("heartbeat of dead 5", err, ErrClaimNotFound)
	_, err = s.EnqueueJob(ctx, db.EnqueueRequest{Principal: "producer", Queue: "b", IdempotencyKey: "b-2"})
	ok("enqueue 9", err)
	return changes
}

func slicesEqual(a, b []uint64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// The audit chain has one link per accepted change (none per refusal), in
// sequence, each naming the previous one's hash, and the head names the
// last.
func testTheAuditChainVerifiesAfterAMixedWorkload(t *testing.T, newStore Factory) {
	clk := newFakeClock()
	s := newStore(t, testRules(clk))
	changes := MixedWorkload(t, s, clk)

	rep, err := s.VerifyAudit(ctx)
	if err != nil {
		t.Fatalf("VerifyAudit() error = %v", err)
	}
	if !rep.OK || rep.FirstBroken != 0 || rep.HeadSeq != changes || rep.Records != changes {
		t.Fatalf("VerifyAudit() = %+v, want OK with HeadSeq and Records %d", rep, changes)
	}
	recs, err := s.ListAudit(ctx, 0, db.MaxListLimit)
	if err != nil || uint64(len(recs)) != changes {
		t.Fatalf("ListAudit() = %d records, %v; want %d", len(recs), err, changes)
	}
	for i, r := range recs {
		if r.Seq != uint64(i+1) {
			t.Errorf("audit record %d has seq %d, want %d", i, r.Seq, i+1)
		}
		if i > 0 && r.PrevHash != recs[i-1].Hash {
			t.Errorf("audit record %d prev_hash %s, want record %d's hash %s", r.Seq, r.PrevHash, i, recs[i-1].Hash)
		}
	}
	if last := recs[len(recs)-1]; last.Hash != rep.HeadHash {
		t.Errorf("last audit hash %s, want the head %s", last.Hash, rep.HeadHash)
	}
	head, err := s.AuditHead(ctx)
	if err != nil || head.Seq != rep.HeadSeq || head.Hash != rep.HeadHash {
		t.Errorf("AuditHead() = %+v, %v; want seq %d hash %s", head, err, rep.HeadSeq, rep.HeadHash)
	}
}
