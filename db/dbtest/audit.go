package dbtest

import (
	"encoding/hex"
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

// mark is record r of the chain as a mark.
func mark(t testing.TB, r db.AuditRecord) db.AuditMark {
	t.Helper()
	h, err := hex.DecodeString(r.Hash)
	if err != nil {
		t.Fatalf("audit record %d hash %q: %v", r.Seq, r.Hash, err)
	}
	return db.AuditMark{Seq: r.Seq, Hash: h}
}

func listAudit(t testing.TB, s db.Store) []db.AuditRecord {
	t.Helper()
	recs, err := s.ListAudit(ctx, 0, db.MaxListLimit)
	if err != nil {
		t.Fatalf("ListAudit() error = %v", err)
	}
	return recs
}

// An incremental verification walks only the records after the mark it
// is given, in steps of at most Limit, and a mark that is not the chain's
// (a hash the next record does not name, a sequence past the head) is
// reported as a break.
func testAnIncrementalVerificationWalksOnlyWhatWasAppended(t *testing.T, newStore Factory) {
	clk := newFakeClock()
	s := newStore(t, testRules(clk))
	for range 5 {
		mustEnqueue(t, s, db.EnqueueRequest{Principal: "p", Queue: "a"})
	}
	step := func(what string, from db.AuditMark, limit int) db.AuditReport {
		t.Helper()
		rep, err := s.VerifyAuditFrom(ctx, db.AuditVerifyRequest{From: from, Limit: limit})
		if err != nil {
			t.Fatalf("%s: VerifyAuditFrom() error = %v", what, err)
		}
		return rep
	}
	recs := listAudit(t, s)
	first := step("first step", db.AuditMark{}, 2)
	if !first.OK || first.Records != 2 || first.VerifiedSeq != 2 || first.VerifiedHash != recs[1].Hash || first.HeadSeq != 5 {
		t.Fatalf("first step of 2 = %+v, want OK, 2 records walked, verified through 2 (%s), head 5", first, recs[1].Hash)
	}
	rest := step("the rest", first.VerifiedMark(), 0)
	if !rest.OK || rest.Records != 3 || rest.StartSeq != 2 || rest.VerifiedSeq != 5 || rest.VerifiedHash != rest.HeadHash {
		t.Fatalf("the rest = %+v, want OK, 3 records walked from 2, verified through the head 5", rest)
	}
	idle := step("nothing new", rest.VerifiedMark(), 0)
	if !idle.OK || idle.Records != 0 || idle.VerifiedSeq != 5 {
		t.Errorf("with nothing appended = %+v, want OK, 0 records walked, verified through 5", idle)
	}
	mustEnqueue(t, s, db.EnqueueRequest{Principal: "p", Queue: "a"})
	next := step("one appended", rest.VerifiedMark(), 0)
	if !next.OK || next.Records != 1 || next.VerifiedSeq != 6 || next.HeadSeq != 6 {
		t.Errorf("after one more record = %+v, want OK, 1 record walked, verified through 6", next)
	}

	wrong := rest.VerifiedMark()
	wrong.Hash[0] ^= 1
	if rep := step("a wrong hash", wrong, 0); rep.OK || rep.FirstBroken != 6 {
		t.Errorf("from seq 5 with a hash record 6 does not name = %+v, want broken at 6", rep)
	}
	if rep := step("a wrong head hash", db.AuditMark{Seq: 6, Hash: wrong.Hash}, 0); rep.OK || rep.FirstBroken != 6 {
		t.Errorf("from the head with another hash = %+v, want broken at 6", rep)
	}
	if rep := step("past the head", db.AuditMark{Seq: 9, Hash: wrong.Hash}, 0); rep.OK {
		t.Errorf("from seq 9 past the head 6 = %+v, want broken", rep)
	}
	if _, err := s.VerifyAuditFrom(ctx, db.AuditVerifyRequest{Limit: -1}); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("VerifyAuditFrom(limit -1) error = %v, want invalid_argument", err)
	}
}

// Archived records are removed oldest first, in bounded steps, leaving a
// checkpoint from which the rest of the chain verifies; a removal that does
// not match the archive (wrong hash, a record not older than the cut, past
// the head) is refused and changes nothing; a repeated one removes nothing.
func testArchivedAuditRecordsAreRemovedLeavingACheckpoint(t *testing.T, newStore Factory) {
	clk := newFakeClock()
	s := newStore(t, testRules(clk))
	t0 := clk.Now()
	for range 3 {
		mustEnqueue(t, s, db.EnqueueRequest{Principal: "p", Queue: "a"}) // jobs 1-3: records 1-3
	}
	clk.Advance(time.Hour)
	for range 2 {
		mustEnqueue(t, s, db.EnqueueRequest{Principal: "p", Queue: "a"}) // jobs 4, 5: records 4, 5
	}
	recs := listAudit(t, s)
	cut := t0.Add(30 * time.Minute)
	through := mark(t, recs[2])

	refusals := []struct {
		what string
		req  db.RemoveAuditRequest
		want error
	}{
		{"a hash the archive does not hold", db.RemoveAuditRequest{Through: db.AuditMark{Seq: 3, Hash: mark(t, recs[1]).Hash}, Before: cut}, &db.Error{Code: db.CodeConflict}},
		{"records not older than the cut", db.RemoveAuditRequest{Through: through, Before: t0}, &db.Error{Code: db.CodeConflict}},
		{"through a record newer than the cut", db.RemoveAuditRequest{Through: mark(t, recs[4]), Before: cut}, &db.Error{Code: db.CodeConflict}},
		{"past the head", db.RemoveAuditRequest{Through: db.AuditMark{Seq: 9, Hash: through.Hash}, Before: cut}, ErrInvalidArgument},
		{"no hash", db.RemoveAuditRequest{Through: db.AuditMark{Seq: 3}, Before: cut}, ErrInvalidArgument},
	}
	for _, tc := range refusals {
		before := takeSnapshot(t, s)
		tc.req.Principal = "admin"
		if _, err := s.RemoveAudit(ctx, tc.req); !errors.Is(err, tc.want) {
			t.Errorf("RemoveAudit(%s) error = %v, want %v", tc.what, err, tc.want)
		}
		assertUnchanged(t, s, before, "RemoveAudit("+tc.what+")")
		if got := listAudit(t, s); len(got) != 5 {
			t.Errorf("after RemoveAudit(%s): %d audit records, want 5", tc.what, len(got))
		}
	}

	clk.Advance(time.Minute)
	cp, err := s.RemoveAudit(ctx, db.RemoveAuditRequest{Principal: "admin", Through: through, Before: cut, Limit: 2})
	if err != nil || cp.Seq != 2 || cp.Hash != recs[1].Hash {
		t.Fatalf("RemoveAudit(through 3, limit 2) = %+v, %v; want the checkpoint at record 2 (%s)", cp, err, recs[1].Hash)
	}
	cp, err = s.RemoveAudit(ctx, db.RemoveAuditRequest{Principal: "admin", Through: through, Before: cut, Limit: 2})
	if err != nil || cp.Seq != 3 || cp.Hash != recs[2].Hash || !cp.Time.Equal(recs[2].Time) || !cp.ArchivedAt.Equal(clk.Now()) {
		t.Fatalf("RemoveAudit(through 3) again = %+v, %v; want the checkpoint at record 3 (%s, %v), archived at %v", cp, err, recs[2].Hash, recs[2].Time, clk.Now())
	}
	before := takeSnapshot(t, s)
	if again, err := s.RemoveAudit(ctx, db.RemoveAuditRequest{Principal: "admin", Through: through, Before: cut}); err != nil || again != cp {
		t.Errorf("a repeated RemoveAudit(through 3) = %+v, %v; want the same checkpoint %+v", again, err, cp)
	}
	assertUnchanged(t, s, before, "a repeated RemoveAudit")

	left := listAudit(t, s)
	if len(left) != 4 || left[0].Seq != 4 || left[2].Action != "archive" || left[2].Subject != "audit" ||
		left[2].Details["through_seq"] != "2" || left[3].Details["from_seq"] != "3" || left[3].Details["through_seq"] != "3" {
		t.Fatalf("audit records after the removal = %+v, want 4, 5 and two archive records (1-2, 3-3)", left)
	}
	head, err := s.AuditHead(ctx)
	if err != nil || head.Seq != 7 || head.Checkpoint != cp {
		t.Errorf("AuditHead() = %+v, %v; want head 7 and the checkpoint %+v", head, err, cp)
	}
	rep, err := s.VerifyAudit(ctx)
	if err != nil || !rep.OK || rep.Records != 4 || rep.StartSeq != 3 || rep.StartHash != recs[2].Hash || rep.HeadSeq != 7 {
		t.Errorf("VerifyAudit() after the removal = %+v, %v; want OK, 4 records from the checkpoint 3 to the head 7", rep, err)
	}
	if rep, err := s.VerifyAuditFrom(ctx, db.AuditVerifyRequest{From: mark(t, recs[0])}); err != nil || !rep.OK || rep.StartSeq != 3 || rep.VerifiedSeq != 7 {
		t.Errorf("VerifyAuditFrom(record 1, archived since) = %+v, %v; want OK from the checkpoint 3 through 7", rep, err)
	}
	for id, want := range map[uint64]int{1: 0, 3: 0, 4: 1} {
		page, err := s.ListAuditBySubject(ctx, db.AuditSubjectRequest{Subject: db.JobSubject(id)})
		if err != nil || len(page.Records) != want {
			t.Errorf("ListAuditBySubject(job %d) = %+v, %v; want %d records", id, page.Records, err, want)
		}
	}
}
