package postgres

import (
	"testing"
	"time"

	"github.com/fenceq/fenceq/db"
	"github.com/fenceq/fenceq/internal/testclock"
	"github.com/jackc/pgx/v5/pgxpool"
)

// The early read (early.go): these tests give it a window longer than
// their steps, so that it is there for the call that follows; each shows
// what the read must not get wrong and fails without the check that keeps
// it right.

// (Leases are longer than the window: a lease that could expire within it
// keeps the read from claims.)
func earlyOpts() Options { return Options{EarlyWindow: time.Minute} }

func fencedOf(j db.Job) db.Fenced {
	return db.Fenced{ID: j.ID, Principal: "p", Worker: "w", FencingToken: j.FencingToken()}
}

func claimReq(max int) db.ClaimRequest {
	return db.ClaimRequest{Principal: "p", Worker: "w", Queues: []string{"q"}, Lease: 10 * time.Minute, Max: max}
}

func mustClaim(t *testing.T, s *Store, max int) []db.Job {
	t.Helper()
	jobs, err := s.ClaimJobs(bg, claimReq(max))
	if err != nil || len(jobs) != max {
		t.Fatalf("ClaimJobs(max %d) = %v, %v", max, jobs, err)
	}
	return jobs
}

func completeWithNext(t *testing.T, s *Store, held []db.Job, next int) db.CompleteBatchResult {
	t.Helper()
	req := db.CompleteBatchRequest{}
	for _, j := range held {
		req.Items = append(req.Items, db.CompleteRequest{Fenced: fencedOf(j)})
	}
	if next > 0 {
		n := claimReq(next)
		req.Next = &n
	}
	res, err := s.CompleteJobs(bg, req)
	if err != nil {
		t.Fatalf("CompleteJobs() error = %v", err)
	}
	return res
}

// claimedThenTokenMoved claims a job, which leaves an early read of its
// row, then raises the row's attempts by hand: its token moves as a claim
// elsewhere would move it, but without an audit link (the head stays).
func claimedThenTokenMoved(t *testing.T) (*Store, []db.Job) {
	t.Helper()
	u := newTestDB(t)
	s := mustOpen(t, u, earlyOpts())
	mustEnqueueJob(t, s, db.EnqueueRequest{Principal: "p", Queue: "q"})
	held := mustClaim(t, s, 1)
	pool, err := pgxpool.New(bg, u)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if _, err := pool.Exec(bg, `UPDATE fenceq_jobs SET attempts = attempts + 1 WHERE id = $1`, int64(held[0].ID)); err != nil {
		t.Fatal(err)
	}
	return s, held
}

// A Worker's next call — completing what the last batch claimed, with
// claim_next for as many — is decided against the early read and costs one
// round trip, and claims what a batch without it would: the next jobs in
// claim order.
func TestEarlyRead_AWorkersNextCallTakesOneRoundTrip(t *testing.T) {
	s := mustOpen(t, newTestDB(t), earlyOpts())
	var ids []uint64
	for range 6 {
		ids = append(ids, mustEnqueueJob(t, s, db.EnqueueRequest{Principal: "p", Queue: "q"}).ID)
	}
	held := mustClaim(t, s, 3)
	trips, hits := s.trips.Load(), s.earlyHits.Load()
	res := completeWithNext(t, s, held, 3)
	if got := s.trips.Load() - trips; got != 1 {
		t.Errorf("round trips of the call after a claim = %d, want 1", got)
	}
	if got := s.earlyHits.Load() - hits; got != 1 {
		t.Errorf("early reads used = %d, want 1", got)
	}
	for i, r := range res.Items {
		if r.Err != nil || r.Job.State != db.StateCompleted {
			t.Errorf("completion %d = %+v, %v; want completed", i, r.Job, r.Err)
		}
	}
	if len(res.Next) != 3 {
		t.Fatalf("claim_next took %d jobs, want 3", len(res.Next))
	}
	for i, j := range res.Next {
		if j.ID != ids[3+i] {
			t.Errorf("claim_next job %d = %d, want %d (claim order)", i, j.ID, ids[3+i])
		}
	}
}

// Another replica's commit between the read and its use (here an enqueue
// of a job of higher priority) moves the audit head: the batch sees it and
// runs again, and claims that job, not the one the read offered.
func TestEarlyRead_AnotherReplicasCommitInBetweenIsSeen(t *testing.T) {
	u := newTestDB(t)
	a, b := mustOpen(t, u, earlyOpts()), mustOpen(t, u, Options{})
	mustEnqueueJob(t, a, db.EnqueueRequest{Principal: "p", Queue: "q"})
	mustEnqueueJob(t, a, db.EnqueueRequest{Principal: "p", Queue: "q"})
	held := mustClaim(t, a, 1)
	urgent := mustEnqueueJob(t, b, db.EnqueueRequest{Principal: "p", Queue: "q", Priority: 5})
	hits, retries := a.earlyHits.Load(), a.retries.Load()
	res := completeWithNext(t, a, held, 1)
	if len(res.Next) != 1 || res.Next[0].ID != urgent.ID {
		t.Fatalf("claim_next took %v, want job %d of priority 5, enqueued by the other replica before the call", res.Next, urgent.ID)
	}
	if a.earlyHits.Load() == hits || a.retries.Load() == retries {
		t.Errorf("early reads used %d, batches run again %d; want the read used, found stale and the batch run again",
			a.earlyHits.Load()-hits, a.retries.Load()-retries)
	}
}

// A row written since the read (claimedThenTokenMoved) fails the write
// that decided on the read's version, and the batch runs again against the
// row as it is: the stale token is refused.
func TestEarlyRead_ARowChangedSinceTheReadIsReadAgain(t *testing.T) {
	s, held := claimedThenTokenMoved(t)
	res := completeWithNext(t, s, held, 0)
	if r := res.Items[0]; db.ErrorCode(r.Err) != db.CodeConflict {
		t.Fatalf("completion with the token the row no longer has = %+v, %v; want a conflict", r.Job, r.Err)
	}
	j, err := s.GetJob(bg, held[0].ID)
	if err != nil || j.State != db.StateClaimed || j.Attempts != held[0].Attempts+1 {
		t.Errorf("job = %+v, %v; want it claimed with attempts %d, as the hand left it", j, err, held[0].Attempts+1)
	}
}

// The same for a refusal: a batch that writes nothing checks the rows it
// decided on too. The token the worker sends became current after the
// read: the completion is accepted, not refused on the read's version.
func TestEarlyRead_ARefusalDecidedOnAStaleRowIsDecidedAgain(t *testing.T) {
	s, held := claimedThenTokenMoved(t)
	f := fencedOf(held[0])
	f.FencingToken++
	res, err := s.CompleteJobs(bg, db.CompleteBatchRequest{Items: []db.CompleteRequest{{Fenced: f}}})
	if err != nil {
		t.Fatal(err)
	}
	if r := res.Items[0]; r.Err != nil || r.Job.State != db.StateCompleted {
		t.Fatalf("completion with the row's current token = %+v, %v; want it completed", r.Job, r.Err)
	}
}

// A scheduled job that becomes due within the window: a claim served by
// the read would not see it (the read saw it scheduled and promoted
// nothing); the read is not used for claims then, and the call claims it.
func TestEarlyRead_AJobDueWithinTheWindowIsClaimed(t *testing.T) {
	s := mustOpen(t, newTestDB(t), Options{EarlyWindow: 10 * time.Second})
	mustEnqueueJob(t, s, db.EnqueueRequest{Principal: "p", Queue: "q"})
	later := mustEnqueueJob(t, s, db.EnqueueRequest{Principal: "p", Queue: "q", Delay: time.Second})
	held := mustClaim(t, s, 1)
	time.Sleep(time.Until(later.RunAt) + 100*time.Millisecond)
	res := completeWithNext(t, s, held, 1)
	if len(res.Next) != 1 || res.Next[0].ID != later.ID {
		t.Fatalf("claim_next took %v, want job %d, due since", res.Next, later.ID)
	}
}

// Under a test's clock that moved since the read, the read is not used:
// a heartbeat extends the lease from the clock's time now, not the read's.
func TestEarlyRead_NotUsedOnceATestsClockMoved(t *testing.T) {
	clk := testclock.New(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	opts := earlyOpts()
	opts.Rules = db.Rules{Now: clk.Now}
	s := mustOpen(t, newTestDB(t), opts)
	mustEnqueueJob(t, s, db.EnqueueRequest{Principal: "p", Queue: "q"})
	held := mustClaim(t, s, 1)
	clk.Advance(10 * time.Second)
	res, err := s.HeartbeatJobs(bg, []db.HeartbeatRequest{{Fenced: fencedOf(held[0]), Lease: time.Minute}})
	if err != nil || res[0].Err != nil {
		t.Fatalf("HeartbeatJobs() = %v, %v", res, err)
	}
	if want := clk.Now().Add(time.Minute); !res[0].Job.LeaseExpiresAt.Equal(want) {
		t.Errorf("lease after the heartbeat expires at %v, want %v (the clock's time now plus the lease)", res[0].Job.LeaseExpiresAt, want)
	}
}

// The read locks nothing: another replica claims the job the read offered
// at once, and the first replica's call, decided against the read, finds
// it gone and claims nothing twice.
func TestEarlyRead_HoldsNothingAnotherReplicaNeeds(t *testing.T) {
	u := newTestDB(t)
	a, b := mustOpen(t, u, earlyOpts()), mustOpen(t, u, Options{})
	mustEnqueueJob(t, a, db.EnqueueRequest{Principal: "p", Queue: "q"})
	second := mustEnqueueJob(t, a, db.EnqueueRequest{Principal: "p", Queue: "q"})
	held := mustClaim(t, a, 1)
	got, err := b.ClaimJobs(bg, db.ClaimRequest{Principal: "p", Worker: "w2", Queues: []string{"q"}, Lease: time.Minute, Max: 1})
	if err != nil || len(got) != 1 || got[0].ID != second.ID {
		t.Fatalf("the other replica's claim = %v, %v; want job %d, which the first replica's read offered", got, err, second.ID)
	}
	res := completeWithNext(t, a, held, 1)
	if len(res.Next) != 0 {
		t.Errorf("claim_next took %v, want nothing: the other replica holds the only job left", res.Next)
	}
}

// A read that serves no batch (here: an enqueue comes next) makes the
// replica skip the next 1, then 2 … claiming batches before it reads
// early again; a read that serves resets that.
func TestEarlyRead_BacksOffAfterReadsThatServeNothing(t *testing.T) {
	s := mustOpen(t, newTestDB(t), earlyOpts())
	for range 20 {
		mustEnqueueJob(t, s, db.EnqueueRequest{Principal: "p", Queue: "q"})
	}
	// reads runs claims, each followed by an enqueue (which no read
	// serves), and returns how many early reads they sent.
	reads := func(claims int) uint64 {
		t.Helper()
		before := s.earlyTrips.Load()
		for range claims {
			mustClaim(t, s, 1)
			mustEnqueueJob(t, s, db.EnqueueRequest{Principal: "p", Queue: "q"})
		}
		return s.earlyTrips.Load() - before
	}
	if got := reads(1); got != 1 {
		t.Fatalf("early reads after the first claim = %d, want 1", got)
	}
	// Missed once: skip one claiming batch, read after the next.
	if got := reads(2); got != 1 {
		t.Errorf("early reads over the next 2 claims = %d, want 1 (the first skipped)", got)
	}
	// Missed twice: skip two.
	if got := reads(3); got != 1 {
		t.Errorf("early reads over the next 3 claims = %d, want 1 (two skipped)", got)
	}
	// Missed three times: skip four; a served read then resets the skips.
	if got := reads(4); got != 0 {
		t.Errorf("early reads over the next 4 claims = %d, want 0", got)
	}
	held := mustClaim(t, s, 1)
	hits := s.earlyHits.Load()
	res := completeWithNext(t, s, held, 1)
	if s.earlyHits.Load() != hits+1 || len(res.Next) != 1 {
		t.Fatalf("the call after the fifth skipped claim: early reads used %d, claimed %v; want the read used and one job", s.earlyHits.Load()-hits, res.Next)
	}
	s.earlyMu.Lock()
	backoff, skip := s.earlyBackoff.n, s.earlyBackoff.skip
	s.earlyMu.Unlock()
	if backoff != 0 || skip != 0 {
		t.Errorf("after a served read: backoff %d, skip %d; want 0, 0 (the next claiming batch reads early)", backoff, skip)
	}
}
