package db

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

var planNow = time.Date(2031, 3, 14, 15, 9, 26, 0, time.UTC)

func TestPlanPromotion_OwnQueuesFirstThenASweepOnce(t *testing.T) {
	p := PlanPromotion([]string{"a", "b"}, planNow, true)
	if p.DueBy != planNow.UnixNano() || p.QueueLimit != PromoteLimit || p.SweepLimit != PromoteLimit || len(p.Queues) != 2 {
		t.Errorf("PlanPromotion(sweep) = %+v", p)
	}
	if !p.Due(planNow.UnixNano()) || p.Due(planNow.UnixNano()+1) {
		t.Errorf("Due: a job is due at its run_at, not a nanosecond before it")
	}
	if p := PlanPromotion([]string{"a"}, planNow, false); p.SweepLimit != 0 || p.QueueLimit != PromoteLimit {
		t.Errorf("PlanPromotion(no sweep) = %+v; want its own queues only", p)
	}
}

func TestPromotesBeforeAndTakesBackBefore_OrderByTimeThenID(t *testing.T) {
	a := &JobRecord{ID: 2, RunAt: 10, LeaseExpiresAt: 20}
	b := &JobRecord{ID: 1, RunAt: 11, LeaseExpiresAt: 20}
	if !PromotesBefore(a, b) || PromotesBefore(b, a) {
		t.Error("PromotesBefore: the earlier run_at first")
	}
	if !TakesBackBefore(b, a) || TakesBackBefore(a, b) {
		t.Error("TakesBackBefore: the same expiry, the lower id first")
	}
	c := &JobRecord{ID: 9, LeaseExpiresAt: 19}
	if !TakesBackBefore(c, b) {
		t.Error("TakesBackBefore: the lease that expired first")
	}
}

func TestPlanSweep_FinishedJobsPastRetentionByUpdatedAt(t *testing.T) {
	if _, err := PlanSweep(-time.Second, 10, planNow); ErrorCode(err) != CodeInvalid {
		t.Errorf("PlanSweep(negative retention) = %v, want CodeInvalid", err)
	}
	if err := CheckSweepArgs(-1); ErrorCode(err) != CodeInvalid {
		t.Errorf("CheckSweepArgs(-1) = %v, want CodeInvalid", err)
	}
	p, err := PlanSweep(time.Hour, 0, planNow)
	if err != nil || p.Limit != DefaultSweepBatch || p.FinishedBy != planNow.Add(-time.Hour).UnixNano() {
		t.Fatalf("PlanSweep(1h, 0) = %+v, %v", p, err)
	}
	at := p.FinishedBy
	for _, tt := range []struct {
		state State
		upd   int64
		want  bool
	}{
		{StateCompleted, at, true}, // at the cutoff: swept
		{StateCancelled, at - 1, true},
		{StateCompleted, at + 1, false},
		{StateDead, at - 1, false}, // dead jobs are kept
		{StateAvailable, at - 1, false},
		{StateClaimed, at - 1, false},
		{StateScheduled, at - 1, false},
	} {
		if got := p.Sweeps(&JobRecord{State: tt.state, UpdatedAt: tt.upd}); got != tt.want {
			t.Errorf("Sweeps(%s, updated %+d ns from the cutoff) = %v, want %v", tt.state, tt.upd-at, got, tt.want)
		}
	}
	if len(SweptStates) != 2 {
		t.Errorf("SweptStates = %v", SweptStates)
	}
}

func TestSweepPasses_UntilAPassIsShort(t *testing.T) {
	var limits []int
	passes := []int{DefaultSweepBatch, DefaultSweepBatch, 3}
	n, err := SweepPasses(context.Background(), time.Hour, func(_ context.Context, r time.Duration, limit int) (int, error) {
		limits = append(limits, limit)
		n := passes[0]
		passes = passes[1:]
		return n, nil
	})
	if err != nil || n != 2*DefaultSweepBatch+3 || len(limits) != 3 {
		t.Errorf("SweepPasses() = %d, %v after %d passes", n, err, len(limits))
	}
	boom := errors.New("boom")
	if _, err := SweepPasses(context.Background(), 0, func(context.Context, time.Duration, int) (int, error) { return 0, boom }); !errors.Is(err, boom) {
		t.Errorf("SweepPasses() with a failing pass = %v", err)
	}
}

// testChain is n sealed links from the start of a chain, a second apart.
func testChain(t *testing.T, n int) (links [][]byte, marks []AuditMark, times []time.Time) {
	t.Helper()
	var prevHash []byte
	for i := 1; i <= n; i++ {
		at := planNow.Add(time.Duration(i) * time.Second)
		l := NextAuditLink(uint64(i-1), prevHash, at, AuditEvent{Principal: "p", Action: "enqueue", Subject: "job:1"})
		v, err := l.Seal()
		if err != nil {
			t.Fatal(err)
		}
		links = append(links, v)
		marks = append(marks, AuditMark{Seq: l.Seq, Hash: l.Hash})
		times = append(times, at)
		prevHash = l.Hash
	}
	return links, marks, times
}

func TestPlanAuditRemoval_ChecksAndRefusals(t *testing.T) {
	links, marks, times := testChain(t, 5)
	req := func(through int, before time.Time) RemoveAuditRequest {
		r := RemoveAuditRequest{Principal: "ops", Through: marks[through-1], Before: before}
		if err := r.Normalize(); err != nil {
			t.Fatal(err)
		}
		return r
	}
	cut := times[4] // records 1-4 are older

	// Through at or before the checkpoint: nothing to do.
	p, err := PlanAuditRemoval(req(2, cut), AuditCheckpoint{Seq: 3}, 5)
	if err != nil || !p.Done() {
		t.Errorf("a removal through the checkpoint = %v, %v; want done", p, err)
	}
	// Past the head: CodeInvalid.
	r := req(5, cut)
	r.Through.Seq = 6
	if _, err := PlanAuditRemoval(r, AuditCheckpoint{}, 5); ErrorCode(err) != CodeInvalid || !strings.Contains(err.Error(), "does not exist (the head is 5)") {
		t.Errorf("a removal past the head = %v", err)
	}
	// Another record's hash: CodeConflict.
	p, _ = PlanAuditRemoval(req(3, cut), AuditCheckpoint{}, 5)
	if err := p.CheckThrough(links[1]); ErrorCode(err) != CodeConflict || !strings.Contains(err.Error(), "does not have the hash the archive holds") {
		t.Errorf("CheckThrough(another record) = %v", err)
	}
	// A link that does not follow: CodeConflict.
	p, _ = PlanAuditRemoval(req(3, cut), AuditCheckpoint{}, 5)
	if err := p.Add(2, links[1]); ErrorCode(err) != CodeConflict || !strings.Contains(err.Error(), "does not verify") {
		t.Errorf("Add(a link that skips one) = %v", err)
	}
	// A record not older than the cut: CodeConflict.
	p, _ = PlanAuditRemoval(req(3, times[1]), AuditCheckpoint{}, 5)
	_ = p.Add(1, links[0])
	if err := p.Add(2, links[1]); ErrorCode(err) != CodeConflict || !strings.Contains(err.Error(), "is not older than the cut") {
		t.Errorf("Add(a record at the cut) = %v", err)
	}
	// A record missing: CodeConflict.
	p, _ = PlanAuditRemoval(req(3, cut), AuditCheckpoint{}, 5)
	_ = p.Add(1, links[0])
	if err := p.Finish(); ErrorCode(err) != CodeConflict || !strings.Contains(err.Error(), "audit record 3 is missing") {
		t.Errorf("Finish() with a record missing = %v", err)
	}

	// The limit bounds a call; the plan names what to remove and leave.
	r = req(4, cut)
	r.Limit = 2
	p, err = PlanAuditRemoval(r, AuditCheckpoint{}, 5)
	if err != nil || p.After() != 0 || p.End() != 2 {
		t.Fatalf("PlanAuditRemoval(limit 2) = %+v, %v; want records 1-2", p, err)
	}
	if err := p.CheckThrough(links[3]); err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 2; i++ {
		if err := p.Add(uint64(i), links[i-1]); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.Finish(); err != nil {
		t.Fatal(err)
	}
	cp := p.Checkpoint(planNow)
	if len(p.Removed()) != 2 || p.Last().Seq != 2 || cp.Seq != 2 || cp.Time != times[1] || !cp.ArchivedAt.Equal(planNow) {
		t.Errorf("removed %v, checkpoint %+v", p.Removed(), cp)
	}
	if ev := p.Event(); ev.Action != "archive" || ev.Details["from_seq"] != "1" || ev.Details["through_seq"] != "2" {
		t.Errorf("Event() = %+v", ev)
	}
	// From that checkpoint the rest verifies.
	p, err = PlanAuditRemoval(req(4, cut), cp, 5)
	if err != nil || p.After() != 2 || p.End() != 4 {
		t.Fatalf("PlanAuditRemoval(from checkpoint 2) = %+v, %v", p, err)
	}
	for i := 3; i <= 4; i++ {
		if err := p.Add(uint64(i), links[i-1]); err != nil {
			t.Fatalf("Add(%d) after the checkpoint = %v", i, err)
		}
	}
	if err := p.Finish(); err != nil {
		t.Error(err)
	}
}
