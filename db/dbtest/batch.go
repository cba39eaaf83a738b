package dbtest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/fenceq/fenceq/db"
)

// batchFixture is four claimed jobs of local|w1: a, c and d current (token
// 1), b claimed again after its lease ran out (token 2, so token 1 is
// stale), in queue "q"; and a job e of queue "e" claimed by local|w2.
type batchFixture struct {
	s             db.Store
	a, b, c, d, e db.Job
}

func newBatchFixture(t *testing.T, newStore Factory) (*batchFixture, *batchClock) {
	clk := newFakeClock()
	s := newStore(t, testRules(clk))
	f := &batchFixture{s: s}
	mustEnqueue(t, s, db.EnqueueRequest{Queue: "b"})
	mustClaim(t, s, "w1", 10*time.Second, "b")
	clk.Advance(11 * time.Second)
	f.b = mustClaim(t, s, "w1", time.Minute, "b")
	if f.b.FencingToken() != 2 {
		t.Fatalf("re-claim of b token = %d, want 2", f.b.FencingToken())
	}
	for _, j := range []*db.Job{&f.a, &f.c, &f.d} {
		mustEnqueue(t, s, db.EnqueueRequest{Queue: "q"})
		*j = mustClaim(t, s, "w1", time.Minute, "q")
	}
	mustEnqueue(t, s, db.EnqueueRequest{Queue: "e"})
	f.e = mustClaim(t, s, "w2", time.Minute, "e")
	return f, &batchClock{clk.Now}
}

type batchClock struct{ now func() time.Time }

// sameAsSingle holds a refused item's outcome to the single call's: the
// same request made alone, after the batch, gets the very same error (code
// and message) and changes nothing either.
func sameAsSingle(t *testing.T, s db.Store, what string, got error, single func() error) {
	t.Helper()
	before := takeSnapshot(t, s)
	want := single()
	if want == nil || got == nil || got.Error() != want.Error() || db.ErrorCode(got) != db.ErrorCode(want) {
		t.Errorf("%s: batch item error = %v, want the single call's %v", what, got, want)
	}
	assertUnchanged(t, s, before, what+" (single call)")
}

func testCompleteJobsDecidesEachItemAsTheSingleCallWould(t *testing.T, newStore Factory) {
	f, _ := newBatchFixture(t, newStore)
	s := f.s
	items := []db.CompleteRequest{
		{Fenced: fenced(f.a.ID, "w1", 1), Result: json.RawMessage(`"a"`)},
		{Fenced: fenced(f.b.ID, "w1", 1), Result: json.RawMessage(`"stale"`), Attestation: json.RawMessage(`{"stale":true}`)},
		{Fenced: fenced(f.c.ID, "w1", 0), Result: json.RawMessage(`"c"`)},
		{Fenced: fenced(f.d.ID, "w1", 1), Result: json.RawMessage(`{bad`)},
		{Fenced: fenced(f.e.ID, "w1", 1)},
		{Fenced: fenced(999, "w1", 1)},
		{Fenced: fenced(f.d.ID+100, "w1", 1<<33)},
	}
	refused := []uint64{f.b.ID, f.d.ID, f.e.ID}
	before := map[uint64][]byte{}
	for _, id := range refused {
		before[id] = rawJob(t, s, id)
	}
	seq := auditSeq(t, s)
	res, err := s.CompleteJobs(ctx, db.CompleteBatchRequest{Items: items})
	if err != nil {
		t.Fatalf("CompleteJobs() error = %v, want per-item outcomes", err)
	}
	if len(res.Items) != len(items) || res.Next != nil {
		t.Fatalf("CompleteJobs() = %d items, next %v; want %d items, nothing claimed", len(res.Items), res.Next, len(items))
	}
	wantErr := []error{nil, ErrClaimMismatch, nil, ErrInvalidArgument, ErrClaimMismatch, ErrJobNotFound, ErrInvalidArgument}
	for i, w := range wantErr {
		got := res.Items[i]
		if w == nil {
			if got.Err != nil || got.Job.State != db.StateCompleted || string(got.Job.Result) != string(items[i].Result) {
				t.Errorf("items[%d] = %s result %s, %v; want completed %s", i, got.Job.State, got.Job.Result, got.Err, items[i].Result)
			}
			continue
		}
		if !errors.Is(got.Err, w) {
			t.Errorf("items[%d] error = %v, want %v", i, got.Err, w)
		}
		sameAsSingle(t, s, fmt.Sprintf("items[%d]", i), got.Err, func() error {
			_, err := s.CompleteJob(ctx, items[i])
			return err
		})
	}
	for _, id := range refused {
		if got := rawJob(t, s, id); string(got) != string(before[id]) {
			t.Errorf("refused job %d is now\n%s\nwant unchanged\n%s", id, got, before[id])
		}
	}
	// Two completions, two audit links, in the batch's order.
	recs, err := s.ListAudit(ctx, seq, 10)
	if err != nil || len(recs) != 2 || recs[0].Subject != db.JobSubject(f.a.ID) || recs[1].Subject != db.JobSubject(f.c.ID) || recs[0].Action != "complete" {
		t.Fatalf("audit after the batch = %+v, %v; want complete of %d then %d", recs, err, f.a.ID, f.c.ID)
	}
}

func testHeartbeatAndFailJobsDecideEachItemAlone(t *testing.T, newStore Factory) {
	f, clk := newBatchFixture(t, newStore)
	s := f.s
	hb := []db.HeartbeatRequest{
		{Fenced: fenced(f.a.ID, "w1", 1), Lease: 2 * time.Minute},
		{Fenced: fenced(f.b.ID, "w1", 1), Lease: 2 * time.Minute},
		{Fenced: fenced(f.c.ID, "w1", 1), Lease: 2 * time.Hour},
		{Fenced: fenced(f.d.ID, "w1", 1)},
	}
	bBefore, cBefore := rawJob(t, s, f.b.ID), rawJob(t, s, f.c.ID)
	res, err := s.HeartbeatJobs(ctx, hb)
	if err != nil || len(res) != len(hb) {
		t.Fatalf("HeartbeatJobs() = %d results, %v", len(res), err)
	}
	if res[0].Err != nil || !res[0].Job.LeaseExpiresAt.Equal(clk.now().Add(2*time.Minute)) {
		t.Errorf("items[0] = lease %v, %v; want %v", res[0].Job.LeaseExpiresAt, res[0].Err, clk.now().Add(2*time.Minute))
	}
	if res[3].Err != nil || !res[3].Job.LeaseExpiresAt.Equal(clk.now().Add(30*time.Second)) {
		t.Errorf("items[3] (default lease) = lease %v, %v; want %v", res[3].Job.LeaseExpiresAt, res[3].Err, clk.now().Add(30*time.Second))
	}
	if !errors.Is(res[1].Err, ErrClaimNotFound) || !errors.Is(res[2].Err, ErrInvalidArgument) {
		t.Errorf("items[1], items[2] errors = %v, %v; want ErrClaimNotFound, ErrInvalidArgument", res[1].Err, res[2].Err)
	}
	for _, i := range []int{1, 2} {
		sameAsSingle(t, s, fmt.Sprintf("heartbeat items[%d]", i), res[i].Err, func() error {
			_, err := s.HeartbeatJob(ctx, hb[i])
			return err
		})
	}
	if string(rawJob(t, s, f.b.ID)) != string(bBefore) || string(rawJob(t, s, f.c.ID)) != string(cBefore) {
		t.Errorf("a refused heartbeat changed its job")
	}

	fail := []db.FailRequest{
		{Fenced: fenced(f.a.ID, "w1", 1), Error: "boom", RetryDelay: durationPtr(0)},
		{Fenced: fenced(f.b.ID, "w1", 1), Error: "stale"},
		{Fenced: fenced(f.c.ID, "w1", 1), Error: "final", Final: true},
		{Fenced: fenced(f.d.ID, "w1", 1), Error: "late", RetryDelay: durationPtr(-time.Second)},
	}
	dBefore := rawJob(t, s, f.d.ID)
	fres, err := s.FailJobs(ctx, fail)
	if err != nil || len(fres) != len(fail) {
		t.Fatalf("FailJobs() = %d results, %v", len(fres), err)
	}
	if fres[0].Err != nil || fres[0].Job.State != db.StateAvailable || fres[2].Err != nil || fres[2].Job.State != db.StateDead {
		t.Errorf("FailJobs() items[0] = %s %v, items[2] = %s %v; want available, dead", fres[0].Job.State, fres[0].Err, fres[2].Job.State, fres[2].Err)
	}
	if !errors.Is(fres[1].Err, ErrClaimNotFound) || !errors.Is(fres[3].Err, ErrInvalidArgument) {
		t.Errorf("FailJobs() items[1], items[3] = %v, %v; want ErrClaimNotFound, ErrInvalidArgument", fres[1].Err, fres[3].Err)
	}
	for _, i := range []int{1, 3} {
		sameAsSingle(t, s, fmt.Sprintf("fail items[%d]", i), fres[i].Err, func() error {
			_, err := s.FailJob(ctx, fail[i])
			return err
		})
	}
	if string(rawJob(t, s, f.b.ID)) != string(bBefore) || string(rawJob(t, s, f.d.ID)) != string(dBefore) {
		t.Errorf("a refused failure changed its job")
	}
}

func testAMalformedBatchIsRefusedWhole(t *testing.T, newStore Factory) {
	f, _ := newBatchFixture(t, newStore)
	s := f.s
	ok := fenced(f.a.ID, "w1", 1)
	over := make([]db.HeartbeatRequest, db.MaxFencedBatch+1)
	for i := range over {
		over[i] = db.HeartbeatRequest{Fenced: fenced(uint64(i+1), "w1", 0)}
	}
	cases := []struct {
		name string
		call func() error
	}{
		{"empty completions", func() error { _, err := s.CompleteJobs(ctx, db.CompleteBatchRequest{}); return err }},
		{"empty heartbeats", func() error { _, err := s.HeartbeatJobs(ctx, nil); return err }},
		{"empty failures", func() error { _, err := s.FailJobs(ctx, []db.FailRequest{}); return err }},
		{"over the limit", func() error { _, err := s.HeartbeatJobs(ctx, over); return err }},
		{"a job twice", func() error {
			_, err := s.CompleteJobs(ctx, db.CompleteBatchRequest{Items: []db.CompleteRequest{{Fenced: ok}, {Fenced: fenced(f.c.ID, "w1", 1)}, {Fenced: ok}}})
			return err
		}},
		{"a failure twice", func() error {
			_, err := s.FailJobs(ctx, []db.FailRequest{{Fenced: ok}, {Fenced: ok, Final: true}})
			return err
		}},
		{"a claim that waits", func() error {
			_, err := s.CompleteJobs(ctx, db.CompleteBatchRequest{Items: []db.CompleteRequest{{Fenced: ok}},
				Next: &db.ClaimRequest{Principal: "local", Worker: "w1", Wait: time.Second}})
			return err
		}},
	}
	for _, tc := range cases {
		before := takeSnapshot(t, s)
		if err := tc.call(); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("%s: error = %v, want ErrInvalidArgument", tc.name, err)
		}
		assertUnchanged(t, s, before, tc.name)
	}
}

func testCompleteJobsClaimsNextInTheSameCommit(t *testing.T, newStore Factory) {
	f, _ := newBatchFixture(t, newStore)
	s := f.s
	for range 3 {
		mustEnqueue(t, s, db.EnqueueRequest{Queue: "q"})
	}
	n := commits(t, s)
	res, err := s.CompleteJobs(ctx, db.CompleteBatchRequest{
		Items: []db.CompleteRequest{{Fenced: fenced(f.a.ID, "w1", 1)}, {Fenced: fenced(f.b.ID, "w1", 1)}},
		Next:  &db.ClaimRequest{Principal: "local", Worker: "w1", Queues: []string{"q"}, Max: 2, Lease: time.Minute},
	})
	if err != nil || res.Items[0].Err != nil || !errors.Is(res.Items[1].Err, ErrClaimMismatch) {
		t.Fatalf("CompleteJobs() = %+v, %v; want a completed, b refused", res.Items, err)
	}
	if len(res.Next) != 2 || res.Next[0].State != db.StateClaimed || res.Next[0].ClaimedBy != "local|w1" || res.Next[1].FencingToken() != 1 {
		t.Fatalf("CompleteJobs() next = %+v, want 2 jobs claimed by local|w1 (a refused item frees a handler too)", res.Next)
	}
	if after := commits(t, s); after != n+1 {
		t.Fatalf("a batch of completions with a claim took %d commits, want 1", after-n)
	}
}

// A batch and a claim of the same expired jobs race: each job ends either
// completed by the batch (its item accepted, the claim did not get it) or
// claimed again (its item refused, nothing of it written) — never both,
// never neither.
func testABatchRacingAReclaimHasOneWinnerPerJob(t *testing.T, newStore Factory) {
	for round := range 20 {
		clk := newFakeClock()
		s := newStore(t, testRules(clk))
		const n = 6
		var jobs []db.Job
		for range n {
			mustEnqueue(t, s, db.EnqueueRequest{Queue: "r"})
		}
		got, err := s.ClaimJobs(ctx, db.ClaimRequest{Principal: "local", Worker: "w1", Queues: []string{"r"}, Max: n, Lease: 10 * time.Second})
		if err != nil || len(got) != n {
			t.Fatalf("claim = %d jobs, %v", len(got), err)
		}
		jobs = got
		clk.Advance(11 * time.Second) // every lease has run out; nobody claimed again yet
		items := make([]db.CompleteRequest, n)
		for i, j := range jobs {
			items[i] = db.CompleteRequest{Fenced: fenced(j.ID, "w1", j.FencingToken()), Result: json.RawMessage(`1`)}
		}
		var (
			wg      sync.WaitGroup
			res     db.CompleteBatchResult
			claimed []db.Job
			errB    error
			errC    error
		)
		wg.Go(func() { res, errB = s.CompleteJobs(ctx, db.CompleteBatchRequest{Items: items}) })
		wg.Go(func() {
			claimed, errC = s.ClaimJobs(context.Background(), db.ClaimRequest{Principal: "local", Worker: "w1", Queues: []string{"r"}, Max: n / 2, Lease: time.Minute})
		})
		wg.Wait()
		if errB != nil || errC != nil {
			t.Fatalf("round %d: CompleteJobs error = %v, ClaimJobs error = %v", round, errB, errC)
		}
		reclaimed := map[uint64]bool{}
		for _, j := range claimed {
			reclaimed[j.ID] = true
		}
		for i, j := range jobs {
			rec := storedJob(t, s, j.ID)
			switch item := res.Items[i]; {
			case item.Err == nil:
				if reclaimed[j.ID] || rec.State != db.StateCompleted || rec.Attempts != 1 {
					t.Fatalf("round %d: job %d completed by the batch but is %s attempts %d (reclaimed %v)", round, j.ID, rec.State, rec.Attempts, reclaimed[j.ID])
				}
			case errors.Is(item.Err, ErrClaimMismatch):
				if !reclaimed[j.ID] || rec.State != db.StateClaimed || rec.Attempts != 2 || rec.Result != nil {
					t.Fatalf("round %d: job %d refused in the batch but is %s attempts %d result %s (reclaimed %v)", round, j.ID, rec.State, rec.Attempts, rec.Result, reclaimed[j.ID])
				}
			default:
				t.Fatalf("round %d: items[%d] error = %v", round, i, item.Err)
			}
		}
		s.Close()
	}
}
