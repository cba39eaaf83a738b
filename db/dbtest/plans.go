package dbtest

import (
	"errors"
	"testing"
	"time"

	"github.com/fenceq/fenceq/db"
)

// The sweep's cutoff (db.PlanSweep) is measured from when a job finished
// — its UpdatedAt —, not from when it was made, and a job finished exactly
// retention ago is swept: both engines agree on the instant.
func testTheSweepCutoffIsTheFinishTimeInclusive(t *testing.T, newStore Factory) {
	clk := newFakeClock()
	s := newStore(t, testRules(clk))
	done := mustEnqueue(t, s, db.EnqueueRequest{Queue: "q"})
	cancelled := mustEnqueue(t, s, db.EnqueueRequest{Queue: "q"})
	clk.Advance(10 * time.Hour) // made long ago, finished now
	got := mustClaim(t, s, "w", time.Minute, "q")
	if _, err := s.CompleteJob(ctx, db.CompleteRequest{Fenced: fenced(got.ID, "w", got.Attempts)}); err != nil || got.ID != done.ID {
		t.Fatalf("CompleteJob(%d) = %v (claimed %d)", done.ID, err, got.ID)
	}
	clk.Advance(time.Second)
	if _, err := s.CancelJob(ctx, db.JobRequest{ID: cancelled.ID}); err != nil {
		t.Fatal(err)
	}
	clk.Advance(time.Hour - time.Second - time.Nanosecond)
	if n, err := s.SweepOnce(ctx, time.Hour, 10); err != nil || n != 0 {
		t.Fatalf("SweepOnce(1h) a nanosecond before the completed job is an hour old = %d, %v; want 0", n, err)
	}
	clk.Advance(time.Nanosecond)
	if n, err := s.SweepOnce(ctx, time.Hour, 10); err != nil || n != 1 {
		t.Fatalf("SweepOnce(1h) when the completed job is exactly an hour old = %d, %v; want 1", n, err)
	}
	if _, err := s.GetJob(ctx, done.ID); !errors.Is(err, ErrJobNotFound) {
		t.Errorf("GetJob(%d) after its sweep = %v, want not found", done.ID, err)
	}
	if _, err := s.GetJob(ctx, cancelled.ID); err != nil {
		t.Errorf("GetJob(%d), cancelled a second later = %v, want it kept", cancelled.ID, err)
	}
	clk.Advance(time.Second)
	if n, err := s.SweepOnce(ctx, time.Hour, 10); err != nil || n != 1 {
		t.Fatalf("SweepOnce(1h) a second later = %d, %v; want the cancelled job", n, err)
	}
	if _, err := s.SweepOnce(ctx, -time.Nanosecond, 10); db.ErrorCode(err) != db.CodeInvalid {
		t.Errorf("SweepOnce(negative retention) = %v, want CodeInvalid", err)
	}
}

// Expired claims are taken back in the order db.TakesBackBefore says:
// the lease that expired first, then the lower id.
func testExpiredClaimsAreTakenBackInTheOrderTheyExpired(t *testing.T, newStore Factory) {
	clk := newFakeClock()
	s := newStore(t, testRules(clk))
	var ids []uint64
	for range 3 {
		ids = append(ids, mustEnqueue(t, s, db.EnqueueRequest{Queue: "q"}).ID)
	}
	long := mustClaim(t, s, "w", 30*time.Second, "q")
	short, err := s.ClaimJobs(ctx, db.ClaimRequest{Principal: "local", Worker: "w", Queues: []string{"q"}, Max: 2, Lease: 10 * time.Second})
	if err != nil || len(short) != 2 || long.ID != ids[0] {
		t.Fatalf("claims = %v and %v, %v", long, short, err)
	}
	clk.Advance(time.Minute)
	var order []uint64
	for range 3 {
		order = append(order, mustClaim(t, s, "w2", time.Minute, "q").ID)
	}
	want := []uint64{ids[1], ids[2], ids[0]}
	if order[0] != want[0] || order[1] != want[1] || order[2] != want[2] {
		t.Errorf("expired claims taken back in the order %v, want %v (the earlier expiry, then the lower id)", order, want)
	}
}
