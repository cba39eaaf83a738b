package dbtest

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/fenceq/fenceq/db"
)

// ReplicaFactory opens n stores over one new, empty database for one test,
// each as a separate fenceq process would (its own connections, commit
// loop and waiters), all with rules. An engine that cannot be shared by
// processes (bbolt: one process owns the file) returns its one store n
// times: every guarantee below must then hold within one process too.
type ReplicaFactory func(t testing.TB, rules db.Rules, n int) []db.Store

// RunReplicas runs the part of the suite about several replicas over one
// database. It asserts what every engine guarantees across replicas:
// fencing (a token handed out through one replica is checked by every
// other), each job claimed by one claim at a time, named-lease tokens that
// only grow, idempotency keys unique per queue, and a long-poll woken by an
// enqueue through another replica.
//
// What it does not assert, because an engine of several replicas does not
// promise it: the order of claims that race through different replicas
// (PostgreSQL takes rows FOR UPDATE SKIP LOCKED, so of two concurrent
// claims the second may take the second-best job while the best one is
// still being taken by the first, or a later one when the first's
// transaction rolls back), and the hand-off of a job to the oldest waiter
// of another replica (each replica wakes its own waiters; which one's claim
// commits first decides). Through one replica alone, Run's claim-order and
// hand-off tests hold exactly.
func RunReplicas(t *testing.T, open ReplicaFactory) {
	for _, tc := range replicaTests {
		t.Run(tc.name, func(t *testing.T) { tc.run(t, open) })
	}
}

var replicaTests = []struct {
	name string
	run  func(t *testing.T, open ReplicaFactory)
}{
	{"AStaleTokenThroughAnotherReplicaIsRefusedAndChangesNothing", testAStaleTokenThroughAnotherReplicaIsRefusedAndChangesNothing},
	{"ClaimsRacingThroughEveryReplicaTakeEachJobOnce", testClaimsRacingThroughEveryReplicaTakeEachJobOnce},
	{"LeaseTokensOnlyGrowAcrossReplicas", testLeaseTokensOnlyGrowAcrossReplicas},
	{"OneIdempotencyKeyThroughEveryReplicaMakesOneJob", testOneIdempotencyKeyThroughEveryReplicaMakesOneJob},
	{"AnEnqueueThroughOneReplicaWakesALongPollOnAnother", testAnEnqueueThroughOneReplicaWakesALongPollOnAnother},
	{"ObservationsThroughEveryReplicaAreOneBoundedList", testObservationsThroughEveryReplicaAreOneBoundedList},
	{"FireSchedulesRacingThroughEveryReplicaFireEachTickOnce", testFireSchedulesRacingThroughEveryReplicaFireEachTickOnce},
}

// Refused calls and worker sightings written through every replica at
// once end as one list that every replica reads the same: the refused
// calls bounded to the newest db.MaxRefusedCalls, each worker's claims the
// sum of what every replica wrote (none lost to a race).
func testObservationsThroughEveryReplicaAreOneBoundedList(t *testing.T, open ReplicaFactory) {
	clk := newFakeClock()
	r := open(t, testRules(clk), 3)
	const rounds = 8
	perRound := db.MaxRefusedCalls/(rounds*len(r)) + 10 // together past the bound
	var wg sync.WaitGroup
	errs := make(chan error, 2*rounds*len(r))
	for i, s := range r {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for round := 0; round < rounds; round++ {
				calls := make([]db.RefusedCall, perRound)
				for k := range calls {
					calls[k] = db.RefusedCall{Worker: fmt.Sprint("r", i), Job: uint64(round + 1), Operation: "heartbeat", Code: "not_found"}
				}
				errs <- s.RecordRefusedCalls(ctx, calls)
				errs <- s.RecordWorkers(ctx, []db.WorkerSighting{
					{Principal: "local", Worker: "shared", Claims: 1, LastClaim: clk.Now()},
					{Principal: "local", Worker: fmt.Sprint("only-", i), Claims: 2, LastHeartbeat: clk.Now()},
				})
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("recording observations through every replica: %v", err)
		}
	}
	var first string
	for i, s := range r {
		calls, err := s.ListRefusedCalls(ctx, db.RefusedCallsRequest{Limit: db.MaxListLimit})
		if err != nil {
			t.Fatalf("replica %d: ListRefusedCalls() error = %v", i, err)
		}
		if len(calls) != db.MaxRefusedCalls {
			t.Errorf("replica %d lists %d refused calls of %d written, want the newest %d", i, len(calls), rounds*len(r)*perRound, db.MaxRefusedCalls)
		}
		workers, err := s.ListWorkers(ctx, db.WorkersRequest{})
		if err != nil {
			t.Fatalf("replica %d: ListWorkers() error = %v", i, err)
		}
		claims := map[string]uint64{}
		for _, w := range workers {
			claims[w.Worker] = w.Claims
		}
		want := map[string]uint64{"shared": uint64(rounds * len(r))}
		for k := range r {
			want[fmt.Sprint("only-", k)] = 2 * rounds
		}
		if fmt.Sprint(claims) != fmt.Sprint(want) {
			t.Errorf("replica %d: workers' claims = %v, want %v", i, claims, want)
		}
		seen := fmt.Sprint(calls, workers)
		if i == 0 {
			first = seen
		} else if seen != first {
			t.Errorf("replica %d lists other observations than replica 0", i)
		}
	}
}

// A worker claims through A, is paused past its lease and claims again
// under the same name through B; its first token's calls through C are
// refused as on one store, and change nothing.
func testAStaleTokenThroughAnotherReplicaIsRefusedAndChangesNothing(t *testing.T, open ReplicaFactory) {
	clk := newFakeClock()
	r := open(t, testRules(clk), 3)
	job := mustEnqueue(t, r[0], db.EnqueueRequest{Payload: json.RawMessage(`{"n":1}`)})
	first := mustClaim(t, r[0], "w1", 10*time.Second)
	clk.Advance(11 * time.Second)
	second := mustClaim(t, r[1], "w1", 10*time.Second)
	if first.ID != job.ID || second.ID != job.ID || second.FencingToken() != first.FencingToken()+1 {
		t.Fatalf("claims = job %d token %d, job %d token %d; want job %d, tokens n and n+1", first.ID, first.FencingToken(), second.ID, second.FencingToken(), job.ID)
	}
	stale := fenced(job.ID, "w1", first.FencingToken())
	for _, c := range []struct {
		name string
		call func() error
		want error
	}{
		{"heartbeat", func() error {
			_, err := r[2].HeartbeatJob(ctx, db.HeartbeatRequest{Fenced: stale, Lease: time.Minute})
			return err
		}, ErrClaimNotFound},
		{"fail", func() error {
			_, err := r[2].FailJob(ctx, db.FailRequest{Fenced: stale, Error: "stale", RetryDelay: durationPtr(0)})
			return err
		}, ErrClaimNotFound},
		{"complete", func() error {
			_, err := r[2].CompleteJob(ctx, db.CompleteRequest{Fenced: stale, Result: json.RawMessage(`"stale"`)})
			return err
		}, ErrClaimMismatch},
	} {
		rec, head, snap := rawJob(t, r[0], job.ID), auditHead(t, r[0]), takeSnapshot(t, r[0])
		if err := c.call(); !errors.Is(err, c.want) {
			t.Errorf("%s with token %d through C: error = %v, want %v", c.name, first.FencingToken(), err, c.want)
		}
		if got := rawJob(t, r[0], job.ID); string(got) != string(rec) {
			t.Errorf("after the refused %s the job is\n%s\nwant\n%s", c.name, got, rec)
		}
		if got := auditHead(t, r[1]); string(got) != string(head) {
			t.Errorf("after the refused %s the audit head is %s, want %s", c.name, got, head)
		}
		assertUnchanged(t, r[0], snap, "the refused "+c.name)
	}
	done, err := r[2].CompleteJob(ctx, db.CompleteRequest{Fenced: fenced(job.ID, "w1", second.FencingToken()), Result: json.RawMessage(`"ok"`)})
	if err != nil || done.State != db.StateCompleted {
		t.Fatalf("complete with the current token through C = %s, %v; want completed", done.State, err)
	}
}

// Six claimers, two per replica, take three jobs at a time until the queue
// is empty: every job is handed out once.
func testClaimsRacingThroughEveryReplicaTakeEachJobOnce(t *testing.T, open ReplicaFactory) {
	clk := newFakeClock()
	r := open(t, testRules(clk), 3)
	const n = 90
	reqs := make([]db.EnqueueRequest, n)
	for i := range reqs {
		reqs[i] = db.EnqueueRequest{Principal: "local", Queue: "race"}
	}
	if _, err := r[0].EnqueueJobs(ctx, reqs); err != nil {
		t.Fatal(err)
	}
	var (
		mu  sync.Mutex
		got []uint64
		wg  sync.WaitGroup
	)
	for i := range 6 {
		s := r[i%3]
		wg.Go(func() {
			for {
				jobs, err := s.ClaimJobs(ctx, db.ClaimRequest{Principal: "local", Worker: fmt.Sprint("w", i), Queues: []string{"race"}, Max: 3, Lease: time.Minute})
				if err != nil {
					t.Errorf("claimer %d: %v", i, err)
					return
				}
				if len(jobs) == 0 {
					return
				}
				mu.Lock()
				for _, j := range jobs {
					got = append(got, j.ID)
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	slices.Sort(got)
	if len(got) != n || len(slices.Compact(slices.Clone(got))) != n {
		t.Fatalf("claimed %d jobs, %d distinct; want each of the %d once", len(got), len(slices.Compact(slices.Clone(got))), n)
	}
	for _, s := range r {
		mustClaimNothing(t, s, "late", "race")
	}
}

// A named lease taken and released through each replica in turn: every
// token is larger than the one before.
func testLeaseTokensOnlyGrowAcrossReplicas(t *testing.T, open ReplicaFactory) {
	clk := newFakeClock()
	r := open(t, testRules(clk), 3)
	var last uint64
	for i := range 9 {
		s := r[i%3]
		holder := fmt.Sprint("h", i)
		l, err := s.AcquireLease(ctx, db.AcquireLeaseRequest{Principal: "local", Name: "/leader", Holder: holder, TTL: time.Minute})
		if err != nil {
			t.Fatalf("acquire %d through replica %d: %v", i, i%3, err)
		}
		if l.FencingToken <= last {
			t.Fatalf("acquire %d through replica %d: token %d after %d, want larger", i, i%3, l.FencingToken, last)
		}
		last = l.FencingToken
		if i%2 == 0 {
			if _, err := r[(i+1)%3].ReleaseLease(ctx, db.ReleaseLeaseRequest{Principal: "local", Name: "/leader", Holder: holder, FencingToken: l.FencingToken}); err != nil {
				t.Fatalf("release %d through replica %d: %v", i, (i+1)%3, err)
			}
		} else {
			clk.Advance(time.Minute) // expires instead
		}
	}
}

// Callers on every replica enqueue with one idempotency key at once: one
// job is created, every caller gets it, and nobody gets an error.
func testOneIdempotencyKeyThroughEveryReplicaMakesOneJob(t *testing.T, open ReplicaFactory) {
	clk := newFakeClock()
	r := open(t, testRules(clk), 3)
	var (
		mu      sync.Mutex
		ids     []uint64
		created int
		wg      sync.WaitGroup
	)
	for i := range 9 {
		s := r[i%3]
		wg.Go(func() {
			res, err := s.EnqueueJob(ctx, db.EnqueueRequest{Principal: "local", Queue: "once", IdempotencyKey: "order-7"})
			if err != nil {
				t.Errorf("enqueue %d through replica %d: %v", i, i%3, err)
				return
			}
			mu.Lock()
			defer mu.Unlock()
			ids = append(ids, res.Job.ID)
			if res.Created {
				created++
			}
		})
	}
	wg.Wait()
	if len(ids) != 9 || created != 1 || len(slices.Compact(slices.Sorted(slices.Values(ids)))) != 1 {
		t.Fatalf("ids %v, %d created; want one job, created once, returned to all 9", ids, created)
	}
	st, err := r[2].Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range st {
		if q.Queue == "once" && q.Counts[db.StateAvailable] != 1 {
			t.Errorf("queue once counts %v, want one available job", q.Counts)
		}
	}
}

// A claim long-polling on B gets a job enqueued through A long before its
// wait ends.
func testAnEnqueueThroughOneReplicaWakesALongPollOnAnother(t *testing.T, open ReplicaFactory) {
	r := open(t, db.Rules{}, 2)
	type claimed struct {
		jobs []db.Job
		err  error
	}
	out := make(chan claimed, 1)
	go func() {
		jobs, err := r[1].ClaimJobs(ctx, db.ClaimRequest{Principal: "local", Worker: "w", Queues: []string{"wake"}, Lease: time.Minute, Wait: 20 * time.Second})
		out <- claimed{jobs, err}
	}()
	if wc, ok := r[1].(WaiterCounter); ok {
		deadline := time.Now().Add(10 * time.Second)
		for wc.WaitingClaims("wake") == 0 && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
	} else {
		time.Sleep(200 * time.Millisecond)
	}
	start := time.Now()
	job := mustEnqueue(t, r[0], db.EnqueueRequest{Queue: "wake"})
	select {
	case c := <-out:
		if c.err != nil || len(c.jobs) != 1 || c.jobs[0].ID != job.ID {
			t.Fatalf("the long-poll on B returned %d jobs, %v; want job %d", len(c.jobs), c.err, job.ID)
		}
		if d := time.Since(start); d > 10*time.Second {
			t.Errorf("woken %v after the enqueue; want well before its 20s wait ended", d)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the long-poll on B was not woken by the enqueue through A")
	}
}
