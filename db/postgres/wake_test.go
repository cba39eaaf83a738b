package postgres

import (
	"errors"
	"testing"
	"time"

	"github.com/fenceq/fenceq/db"
)

// waitQuiet waits until n claims sleep on queue of s and s's committed
// mutations have not moved for a while: every waiter woken has tried and
// gone back to sleep.
func waitQuiet(tb testing.TB, s *Store, queue string, n int) {
	tb.Helper()
	deadline := time.Now().Add(20 * time.Second)
	_, last := s.CommitStats()
	stable := 0
	for stable < 20 {
		time.Sleep(10 * time.Millisecond)
		_, ops := s.CommitStats()
		if ops == last && s.WaitingClaims(queue) == n {
			stable++
		} else {
			stable, last = 0, ops
		}
		if time.Now().After(deadline) {
			tb.Fatalf("%d claims sleep on %q, want %d; commits still moving", s.WaitingClaims(queue), queue, n)
		}
	}
}

// Issue 30 item 9: jobs enqueued through replica B wake as many of replica
// A's long-polls as jobs became available, not every one: A's committed
// claim attempts stay O(jobs), not O(long-polls). Before the fix, one job
// through B woke all 40 of A's long-polls, and every one that looked while
// the job was still there committed a claim attempt.
func TestReplicas_AJobThroughAnotherReplicaWakesOneLongPollNotAll(t *testing.T) {
	u := newTestDB(t)
	a, b := mustOpen(t, u, Options{}), mustOpen(t, u, Options{})
	const n = 40
	got := make(chan []db.Job, n)
	for i := range n {
		go func() {
			jobs, err := a.ClaimJobs(bg, db.ClaimRequest{Principal: "p", Worker: "w", Queues: []string{"q"}, Wait: 25 * time.Second})
			if err != nil && !errors.Is(err, db.ErrClosed) {
				t.Errorf("long-poll %d: %v", i, err)
			}
			got <- jobs
		}()
	}
	waitQuiet(t, a, "q", n)
	left := n
	for round, jobs := range []int{1, 3} {
		_, before := a.CommitStats()
		reqs := make([]db.EnqueueRequest, jobs)
		for i := range reqs {
			reqs[i] = db.EnqueueRequest{Principal: "p", Queue: "q"}
		}
		if _, err := b.EnqueueJobs(bg, reqs); err != nil {
			t.Fatal(err)
		}
		for range jobs {
			select {
			case js := <-got:
				if len(js) != 1 {
					t.Fatalf("round %d: a long-poll of A answered %+v, want one job", round, js)
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("round %d: A's long-polls were not woken by %d jobs through B", round, jobs)
			}
		}
		left -= jobs
		waitQuiet(t, a, "q", left)
		_, after := a.CommitStats()
		if ops := after - before; ops > uint64(jobs)+2 {
			t.Errorf("round %d: %d jobs through B cost A %d committed claim attempts with %d long-polls waiting; want about %d", round, jobs, ops, n, jobs)
		} else {
			t.Logf("round %d: %d jobs through B cost A %d committed claim attempts", round, jobs, ops)
		}
	}
}
