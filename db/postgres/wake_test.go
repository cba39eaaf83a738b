package postgres

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/fenceq/fenceq/db"
	"github.com/jackc/pgx/v5"
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
	a.StopWaiting()
}

// listenRaw LISTENs on s's channel with a connection of its own.
func listenRaw(t *testing.T, u string, s *Store) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(bg, u)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(bg) })
	if _, err := conn.Exec(bg, `LISTEN `+pgx.Identifier{s.channel}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	return conn
}

// A replica of the previous build reads "a <queue>" (and ignores kinds it
// does not know), waking every long-poll: the new payloads of a batch that
// made jobs available still carry it, after the counted "+".
func TestNotify_ABatchSendsTheCountAndThePayloadThePreviousBuildReads(t *testing.T) {
	u := newTestDB(t)
	b := mustOpen(t, u, Options{})
	conn := listenRaw(t, u, b)
	if _, err := b.EnqueueJobs(bg, []db.EnqueueRequest{{Principal: "p", Queue: "q"}, {Principal: "p", Queue: "q"}, {Principal: "p", Queue: "r.s"}}); err != nil {
		t.Fatal(err)
	}
	var got []string
	pids := map[uint32]bool{}
	for len(got) < 4 {
		ctx, cancel := context.WithTimeout(bg, 10*time.Second)
		n, err := conn.WaitForNotification(ctx)
		cancel()
		if err != nil {
			t.Fatalf("notifications so far %q: %v", got, err)
		}
		got = append(got, n.Payload)
		pids[n.PID] = true
	}
	want := []string{"+ 1 r.s", "+ 2 q", "a q", "a r.s"}
	if !slices.Equal(got, want) || len(pids) != 1 {
		t.Fatalf("payloads = %q from %d senders, want %q from one", got, len(pids), want)
	}
}

// A payload of the previous build ("a <queue>", no count) wakes every
// long-poll, as before; a counted one, with its "a", wakes as many as it
// counts.
func TestNotify_TheOldPayloadWakesEveryLongPollTheCountedOneItsCount(t *testing.T) {
	u := newTestDB(t)
	a := mustOpen(t, u, Options{})
	const n = 12
	for range n {
		go func() {
			_, err := a.ClaimJobs(bg, db.ClaimRequest{Principal: "p", Worker: "w", Queues: []string{"q"}, Wait: 25 * time.Second})
			if err != nil && !errors.Is(err, db.ErrClosed) {
				t.Errorf("long-poll: %v", err)
			}
		}()
	}
	waitQuiet(t, a, "q", n)
	conn, err := pgx.Connect(bg, u)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(bg)
	for _, tc := range []struct {
		name     string
		payloads []string
		looks    uint64
	}{
		{"the previous build's payload", []string{"a q"}, n},
		{"this build's payloads", []string{"+ 2 q", "a q"}, 2},
	} {
		before := a.waits.Looks()
		if _, err := conn.Exec(bg, `SELECT pg_notify($2, p) FROM unnest($1::text[]) AS p`, tc.payloads, a.channel); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(10 * time.Second)
		for a.waits.Looks()-before < tc.looks && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
		waitQuiet(t, a, "q", n)
		if got := a.waits.Looks() - before; got != tc.looks {
			t.Errorf("%s %q made %d long-polls look again, want %d", tc.name, tc.payloads, got, tc.looks)
		}
	}
	a.StopWaiting()
}
