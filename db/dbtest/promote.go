package dbtest

import (
	"context"
	"testing"
	"time"

	"github.com/fenceq/fenceq/db"
)

// enqueueScheduled enqueues n jobs of queue due after delay, in batches.
func enqueueScheduled(t *testing.T, s db.Store, queue string, n int, delay time.Duration) {
	t.Helper()
	for n > 0 {
		k := min(n, db.MaxEnqueueBatch)
		reqs := make([]db.EnqueueRequest, k)
		for i := range reqs {
			reqs[i] = db.EnqueueRequest{Principal: "local", Queue: queue, Delay: delay}
		}
		if _, err := s.EnqueueJobs(context.Background(), reqs); err != nil {
			t.Fatalf("EnqueueJobs(%d of %s) error = %v", k, queue, err)
		}
		n -= k
	}
}

func countIn(t *testing.T, s db.Store, queue string, st db.State) uint64 {
	t.Helper()
	stats, err := s.Stats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range stats {
		if q.Queue == queue {
			return q.Counts[st]
		}
	}
	return 0
}

// More due scheduled jobs in other queues than one claim promotes
// (db.PromoteLimit) must not hide a due job of the queue claimed: the
// claim promotes its own queues' due jobs first. And promotion keeps up
// with the rest, PromoteLimit a claim.
func testAClaimSeesItsQueuesDueJobWhateverOtherQueuesHold(t *testing.T, newStore Factory) {
	clk := newFakeClock()
	s := newStore(t, testRules(clk))
	others := db.PromoteLimit * 3 / 2
	enqueueScheduled(t, s, "other", others, time.Second)
	mine := mustEnqueue(t, s, db.EnqueueRequest{Queue: "q", Delay: 2 * time.Second})
	clk.Advance(3 * time.Second)

	got, err := s.ClaimJobs(ctx, db.ClaimRequest{Principal: "local", Worker: "w", Queues: []string{"q"}})
	if err != nil || len(got) != 1 || got[0].ID != mine.ID {
		t.Fatalf("ClaimJobs(q) with %d due jobs in another queue = %v, %v; want job %d, which is due", others, got, err, mine.ID)
	}
	// That claim swept PromoteLimit of the others; the next takes the rest.
	if n := countIn(t, s, "other", db.StateScheduled); n != uint64(others-db.PromoteLimit) {
		t.Errorf("after one claim %d jobs of other are scheduled, want %d", n, others-db.PromoteLimit)
	}
	mustClaimNothing(t, s, "w", "q")
	if n := countIn(t, s, "other", db.StateScheduled); n != 0 {
		t.Errorf("after two claims %d due jobs of other are still scheduled, want 0", n)
	}
	if n := countIn(t, s, "other", db.StateAvailable); n != uint64(others) {
		t.Errorf("after two claims %d jobs of other are available, want %d", n, others)
	}
}

// A long-poll on q is woken for q's scheduled job when it comes due, even
// though more due jobs of other queues than a claim promotes came due
// before it.
func testALongPollIsWokenForItsQueuesDueJobWhateverOtherQueuesHold(t *testing.T, newStore Factory) {
	clk := newFakeClock()
	s := newStore(t, testRules(clk))
	enqueueScheduled(t, s, "other", db.PromoteLimit*3/2, 50*time.Millisecond)
	mine := mustEnqueue(t, s, db.EnqueueRequest{Queue: "q", Delay: 100 * time.Millisecond})
	type result struct {
		jobs []db.Job
		err  error
	}
	done := make(chan result, 1)
	go func() {
		jobs, err := s.ClaimJobs(ctx, db.ClaimRequest{Principal: "local", Worker: "w", Queues: []string{"q"}, Wait: 10 * time.Second})
		done <- result{jobs, err}
	}()
	waitForWaiters(t, s, "q", 1)
	clk.Advance(time.Second)
	r := <-done
	if r.err != nil || len(r.jobs) != 1 || r.jobs[0].ID != mine.ID {
		t.Fatalf("long-poll on q = %v, %v; want job %d, due while it waited", r.jobs, r.err, mine.ID)
	}
}
