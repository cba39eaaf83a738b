package postgres

import (
	"testing"
	"time"

	"github.com/fenceq/fenceq/db"
	"github.com/prometheus/client_golang/prometheus"
)

// headFigures gathers s's metrics through a pedantic registry (which
// refuses a metric its Describe did not announce) and returns the audit
// head's turns and the seconds it was held.
func headFigures(t *testing.T, s *Store) (turns, held float64) {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(s); err != nil {
		t.Fatalf("Register() = %v", err)
	}
	fams, err := reg.Gather()
	if err != nil {
		t.Fatalf("Gather() = %v", err)
	}
	found := 0
	for _, f := range fams {
		switch f.GetName() {
		case "fenceq_postgres_audit_head_turns_total":
			turns, found = f.GetMetric()[0].GetCounter().GetValue(), found+1
		case "fenceq_postgres_audit_head_held_seconds_total":
			held, found = f.GetMetric()[0].GetCounter().GetValue(), found+1
		}
	}
	if found != 2 {
		t.Fatalf("found %d of the 2 audit head metrics in %d families", found, len(fams))
	}
	return turns, held
}

// TestMetrics_AuditHeadTurnsAndHold: each replica counts the batches that
// held the audit head (at least one per commit) and how long they held it,
// which for one replica, one batch at a time, is at most the time that
// passed; a read takes no turn.
func TestMetrics_AuditHeadTurnsAndHold(t *testing.T) {
	u := newTestDB(t)
	s1, s2 := mustOpen(t, u, Options{}), mustOpen(t, u, Options{})
	turns1, held1 := headFigures(t, s1)
	turns2, held2 := headFigures(t, s2)
	commits1, _ := s1.CommitStats()
	commits2, _ := s2.CommitStats()
	start := time.Now()
	for range 10 {
		mustEnqueueJob(t, s1, db.EnqueueRequest{Principal: "p", Queue: "q"})
	}
	for range 5 {
		mustEnqueueJob(t, s2, db.EnqueueRequest{Principal: "p", Queue: "q"})
	}
	jobs, err := s1.ClaimJobs(bg, db.ClaimRequest{Principal: "p", Worker: "w", Queues: []string{"q"}, Lease: time.Minute})
	if err != nil || len(jobs) != 1 {
		t.Fatalf("ClaimJobs() = %v, %v", jobs, err)
	}
	j := jobs[0]
	if _, err := s1.CompleteJob(bg, db.CompleteRequest{Fenced: db.Fenced{ID: j.ID, Principal: "p", Worker: "w", FencingToken: j.FencingToken()}}); err != nil {
		t.Fatalf("CompleteJob() = %v", err)
	}
	elapsed := time.Since(start).Seconds()

	t1, h1 := headFigures(t, s1)
	t2, h2 := headFigures(t, s2)
	c1, _ := s1.CommitStats()
	c2, _ := s2.CommitStats()
	if c1-commits1 < 12 || c2-commits2 < 5 {
		t.Fatalf("commits: %d and %d; want at least 12 and 5", c1-commits1, c2-commits2)
	}
	if d := t1 - turns1; d < float64(c1-commits1) {
		t.Errorf("replica 1: %v turns at the head for %d commits; want one a commit at least", d, c1-commits1)
	}
	if d := t2 - turns2; d < float64(c2-commits2) {
		t.Errorf("replica 2: %v turns at the head for %d commits; want one a commit at least", d, c2-commits2)
	}
	for i, d := range []float64{h1 - held1, h2 - held2} {
		if d <= 0 || d > elapsed {
			t.Errorf("replica %d held the head %.6f s in %.6f s; want more than 0 and at most the time that passed", i+1, d, elapsed)
		}
	}

	// Reads take no turn.
	if _, err := s1.Stats(bg); err != nil {
		t.Fatalf("Stats() = %v", err)
	}
	if _, err := s1.GetJob(bg, j.ID); err != nil {
		t.Fatalf("GetJob() = %v", err)
	}
	if again, _ := headFigures(t, s1); again != t1 {
		t.Errorf("reads moved replica 1's turns from %v to %v", t1, again)
	}
}
