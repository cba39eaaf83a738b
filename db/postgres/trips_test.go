package postgres

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fenceq/fenceq/db"
)

// TestBatch_RoundTripsOfALoneClaimAndCompletion pins how many round trips
// a batch of one mutation makes inside its transaction: BEGIN with the
// time, the locked rows, the promotion, the candidates and the head's
// lock; the job writes, counters, links and COMMIT. A change that adds one
// shows here. (Before set-based batches: 5 and 4; with the head locked
// after the job writes: 3 and 3.) The completion after the claim is
// decided against the early read the claim left (early.go): one round
// trip; without early reads, two.
func TestBatch_RoundTripsOfALoneClaimAndCompletion(t *testing.T) {
	for _, early := range []bool{true, false} {
		t.Run(fmt.Sprint("early=", early), func(t *testing.T) {
			s := mustOpen(t, newTestDB(t), Options{NoEarlyRead: !early, EarlyWindow: time.Minute})
			mustEnqueueJob(t, s, db.EnqueueRequest{Principal: "p", Queue: "q"})
			before := s.trips.Load()
			jobs, err := s.ClaimJobs(bg, db.ClaimRequest{Principal: "p", Worker: "w", Queues: []string{"q"}})
			if err != nil || len(jobs) != 1 {
				t.Fatalf("ClaimJobs() = %v, %v; want one job", jobs, err)
			}
			if got := s.trips.Load() - before; got != 2 {
				t.Errorf("round trips of a lone claim = %d, want 2", got)
			}
			before = s.trips.Load()
			j := jobs[0]
			if _, err := s.CompleteJob(bg, db.CompleteRequest{Fenced: db.Fenced{ID: j.ID, Principal: "p", Worker: "w", FencingToken: j.FencingToken()}}); err != nil {
				t.Fatal(err)
			}
			want := uint64(2)
			if early {
				want = 1
			}
			if got := s.trips.Load() - before; got != want {
				t.Errorf("round trips of a lone completion = %d, want %d (early reads used: %d)", got, want, s.earlyHits.Load())
			}
		})
	}
}

// TestBatch_RoundTripsDoNotGrowWithTheBatch: one batch of 150 mutations
// (50 completions, 50 claims, 50 enqueues, interleaved) costs the round
// trips of one mutation; each claim takes a job of its own, in claim
// order, and a claim after an enqueue of the same batch may take the
// enqueued job (the batch's view): the jobs the claims took are the 50
// oldest of the 100 that were available to them.
func TestBatch_RoundTripsDoNotGrowWithTheBatch(t *testing.T) {
	s := mustOpenStore(t, db.Rules{})
	const n = 50
	for range 2 * n {
		mustEnqueueJob(t, s, db.EnqueueRequest{Principal: "p", Queue: "q"})
	}
	held, err := s.ClaimJobs(bg, db.ClaimRequest{Principal: "p", Worker: "w", Queues: []string{"q"}, Max: n, Lease: time.Minute})
	if err != nil || len(held) != n {
		t.Fatalf("ClaimJobs() = %d jobs, %v", len(held), err)
	}
	var ops []*writeOp
	claims := make([][]db.Job, n)
	for i := range n {
		j := held[i]
		f := db.Fenced{ID: j.ID, Principal: "p", Worker: "w", FencingToken: j.FencingToken()}
		ops = append(ops, &writeOp{plan: opPlan{jobs: []uint64{j.ID}}, done: make(chan struct{}), fn: func(w *writer) error {
			_, err := changeIn(w, j.ID, func(old *db.JobRecord, now time.Time) (db.JobRecord, db.AuditEvent, error) {
				return db.Complete(old, db.CompleteRequest{Fenced: f}, now)
			})
			return err
		}})
		ops = append(ops, &writeOp{plan: opPlan{inserts: 1}, done: make(chan struct{}), fn: func(w *writer) error {
			_, err := enqueue(w, db.EnqueueRequest{Principal: "p", Queue: "q", Priority: 1})
			return err
		}})
		req := db.ClaimRequest{Principal: "p", Worker: fmt.Sprint("c", i), Queues: []string{"q"}, Max: 1, Lease: time.Minute}
		if err := s.opts.NormalizeClaim(&req); err != nil {
			t.Fatal(err)
		}
		ops = append(ops, &writeOp{plan: opPlan{claim: &req}, done: make(chan struct{}), fn: func(w *writer) (err error) {
			claims[i], err = claimIn(w, req)
			return err
		}})
	}
	before := s.trips.Load()
	if retry := s.commitBatch(ops); len(retry) != 0 {
		t.Fatalf("the batch asked for %d retries", len(retry))
	}
	if got := s.trips.Load() - before; got != 2 {
		t.Errorf("round trips of a batch of %d mutations = %d, want 2", len(ops), got)
	}
	seen := map[uint64]bool{}
	for i, op := range ops {
		if op.err != nil {
			t.Fatalf("mutation %d: %v", i, op.err)
		}
	}
	for i, c := range claims {
		if len(c) != 1 || seen[c[0].ID] {
			t.Fatalf("claim %d took %v; want one job no other claim took", i, c)
		}
		seen[c[0].ID] = true
		// Claim i comes after enqueue i of priority 1: it takes that job.
		if c[0].Priority != 1 {
			t.Errorf("claim %d took job %d of priority %d; want the job of priority 1 enqueued before it in the batch", i, c[0].ID, c[0].Priority)
		}
	}
	stats, err := s.Stats(bg)
	if err != nil || len(stats) != 1 || stats[0].Counts[db.StateCompleted] != n || stats[0].Counts[db.StateClaimed] != n || stats[0].Counts[db.StateAvailable] != n {
		t.Fatalf("Stats() = %+v, %v; want %d completed, claimed and available", stats, err, n)
	}
	if rep, err := s.VerifyAudit(bg); err != nil || !rep.OK {
		t.Fatalf("VerifyAudit() = %+v, %v", rep, err)
	}
}

// BenchmarkDrainRoundTrips drains jobs with concurrent claims and
// completions through one replica, or three over one database, and
// reports the batches' round trips, statements and commits per drained job (not
// speed: the counts the batch's length is made of).
func BenchmarkDrainRoundTrips(b *testing.B) {
	for _, mode := range []string{"calls", "claim_next"} {
		for _, replicas := range []int{1, 3} {
			drainRoundTrips(b, mode, replicas)
		}
	}
}

// drainRoundTrips: mode "calls" claims and completes with a call each;
// "claim_next" claims the next job with each completion (as
// client.Worker does).
func drainRoundTrips(b *testing.B, mode string, replicas int) {
	{
		b.Run(fmt.Sprintf("%s/replicas=%d", mode, replicas), func(b *testing.B) {
			u := newTestDB(b)
			stores := make([]*Store, replicas)
			for i := range stores {
				stores[i] = mustOpen(b, u, Options{})
			}
			const workers = 15
			jobs := b.N * 100
			for i := range jobs {
				mustEnqueueJob(b, stores[i%replicas], db.EnqueueRequest{Principal: "p", Queue: "q"})
			}
			var trips0, commits0, heads0, stmts0, early0 uint64
			var held0 int64
			for _, s := range stores {
				c, _ := s.CommitStats()
				trips0, commits0, stmts0, early0 = trips0+s.trips.Load(), commits0+c, stmts0+s.stmts.Load(), early0+s.earlyTrips.Load()
				heads0, held0 = heads0+s.headBatches.Load(), held0+s.headHeld.Load()
			}
			b.ResetTimer()
			var wg sync.WaitGroup
			var mu sync.Mutex
			done := 0
			for w := range workers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					s := stores[w%replicas]
					claim := db.ClaimRequest{Principal: "p", Worker: fmt.Sprint("w", w), Queues: []string{"q"}, Lease: time.Minute}
					var got []db.Job
					for {
						var err error
						if mode == "calls" || got == nil {
							got, err = s.ClaimJobs(bg, claim)
						}
						if err != nil {
							b.Error(err)
							return
						}
						if len(got) == 0 {
							return
						}
						j := got[0]
						req := db.CompleteRequest{Fenced: db.Fenced{ID: j.ID, Principal: "p", Worker: fmt.Sprint("w", w), FencingToken: j.FencingToken()}}
						if mode == "calls" {
							_, err = s.CompleteJob(bg, req)
						} else {
							_, got, err = s.CompleteAndClaimJob(bg, req, claim)
							if got == nil {
								got = []db.Job{}
							}
						}
						if err != nil {
							b.Error(err)
							return
						}
						mu.Lock()
						done++
						mu.Unlock()
					}
				}()
			}
			wg.Wait()
			b.StopTimer()
			var trips, commits, heads, stmts, early uint64
			var held int64
			for _, s := range stores {
				c, _ := s.CommitStats()
				trips, commits, stmts, early = trips+s.trips.Load(), commits+c, stmts+s.stmts.Load(), early+s.earlyTrips.Load()
				heads, held = heads+s.headBatches.Load(), held+s.headHeld.Load()
			}
			if done != jobs {
				b.Fatalf("drained %d jobs, want %d", done, jobs)
			}
			b.ReportMetric(float64(trips-trips0)/float64(jobs), "trips/job")
			b.ReportMetric(float64(stmts-stmts0)/float64(jobs), "stmts/job")
			// Early reads (early.go) are round trips too, made while the
			// replica waits for its next call.
			b.ReportMetric(float64(early-early0)/float64(jobs), "early-trips/job")
			b.ReportMetric(float64(commits-commits0)/float64(jobs), "commits/job")
			// The head is held from its lock to the commit: its share of
			// the drain's time is how close the chain's turns are to the cap.
			b.ReportMetric(float64(held-held0)/float64(heads-heads0)/1e3, "head-µs/batch")
			b.ReportMetric(float64(held-held0)/float64(b.Elapsed().Nanoseconds()), "head-busy")
		})
	}
}

// TestBatch_ARowReadFromTheBatchsLocksIsCurrent: a mutation reads a row
// the batch locked at its start from the batch's copy; that copy follows
// the writes of the mutations before it and forgets those rolled back.
func TestBatch_ARowReadFromTheBatchsLocksIsCurrent(t *testing.T) {
	s := mustOpenStore(t, db.Rules{})
	mustEnqueueJob(t, s, db.EnqueueRequest{Principal: "p", Queue: "q"})
	jobs, err := s.ClaimJobs(bg, db.ClaimRequest{Principal: "p", Worker: "w", Queues: []string{"q"}, Lease: time.Minute})
	if err != nil || len(jobs) != 1 {
		t.Fatalf("ClaimJobs() = %v, %v", jobs, err)
	}
	j := jobs[0]
	f := db.Fenced{ID: j.ID, Principal: "p", Worker: "w", FencingToken: j.FencingToken()}
	op := func(fn func(w *writer) error) *writeOp {
		return &writeOp{plan: opPlan{jobs: []uint64{j.ID}}, done: make(chan struct{}), fn: fn}
	}
	heartbeat := func(w *writer) error {
		_, err := changeIn(w, j.ID, func(old *db.JobRecord, now time.Time) (db.JobRecord, db.AuditEvent, error) {
			return db.Heartbeat(old, db.HeartbeatRequest{Fenced: f}, time.Hour, now)
		})
		return err
	}
	// Completes the job, then fails on a statement PostgreSQL refuses.
	completeThenFail := op(func(w *writer) error {
		if _, err := changeIn(w, j.ID, func(old *db.JobRecord, now time.Time) (db.JobRecord, db.AuditEvent, error) {
			return db.Complete(old, db.CompleteRequest{Fenced: f}, now)
		}); err != nil {
			return err
		}
		_, err := w.tx.Exec(w.ctx, `SELECT 1/0`)
		return err
	})
	afterRollback := op(heartbeat)
	complete := op(func(w *writer) error {
		_, err := changeIn(w, j.ID, func(old *db.JobRecord, now time.Time) (db.JobRecord, db.AuditEvent, error) {
			return db.Complete(old, db.CompleteRequest{Fenced: f}, now)
		})
		return err
	})
	afterComplete := op(heartbeat)
	for ops := []*writeOp{completeThenFail, afterRollback, complete, afterComplete}; len(ops) > 0; {
		ops = s.commitBatch(ops)
	}
	if completeThenFail.err == nil {
		t.Fatal("the mutation that divides by zero succeeded")
	}
	if afterRollback.err != nil {
		t.Errorf("heartbeat after a rolled-back completion error = %v, want it applied to the claimed job", afterRollback.err)
	}
	if complete.err != nil {
		t.Errorf("completion error = %v", complete.err)
	}
	if db.ErrorCode(afterComplete.err) != db.CodeNotFound {
		t.Errorf("heartbeat after the completion in the same batch error = %v, want %s (the job is completed)", afterComplete.err, db.CodeNotFound)
	}
	got, err := s.GetJob(bg, j.ID)
	if err != nil || got.State != db.StateCompleted {
		t.Fatalf("job after the batch = %+v, %v; want completed", got, err)
	}
}

// TestBatch_AWriteTheDatabaseRefusesFailsOnlyItsMutation: a mutation
// whose row the batch's one INSERT cannot write (here a job id that exists
// already) fails the batch's writes; the batch runs again one mutation at
// a time, and only that mutation fails: the others commit once each.
func TestBatch_AWriteTheDatabaseRefusesFailsOnlyItsMutation(t *testing.T) {
	s := mustOpenStore(t, db.Rules{})
	taken := mustEnqueueJob(t, s, db.EnqueueRequest{Principal: "p", Queue: "q"})
	var ops []*writeOp
	for i := range 5 {
		if i == 2 {
			ops = append(ops, &writeOp{done: make(chan struct{}), fn: func(w *writer) error {
				rec, _ := db.Enqueue(taken.ID, db.EnqueueRequest{Principal: "p", Queue: "q"}, w.now)
				return w.v.put(&rec, true) // a second row with the id: the INSERT refuses it
			}})
			continue
		}
		ops = append(ops, &writeOp{plan: opPlan{inserts: 1}, done: make(chan struct{}), fn: func(w *writer) error {
			_, err := enqueue(w, db.EnqueueRequest{Principal: "p", Queue: "good"})
			return err
		}})
	}
	for r := ops; len(r) > 0; {
		r = s.commitBatch(r)
	}
	for i, op := range ops {
		if i == 2 {
			if op.err == nil || !strings.Contains(op.err.Error(), "duplicate key") {
				t.Errorf("the mutation whose row exists: error %v, want the database's duplicate key", op.err)
			}
			continue
		}
		if op.err != nil {
			t.Errorf("mutation %d: %v; want it committed despite another's write", i, op.err)
		}
	}
	stats, err := s.Stats(bg)
	if err != nil || len(stats) != 2 || stats[0].Queue != "good" || stats[0].Counts[db.StateAvailable] != 4 || stats[1].Counts[db.StateAvailable] != 1 {
		t.Fatalf("Stats() = %+v, %v; want 4 jobs in good and q's one", stats, err)
	}
	if rep, err := s.VerifyAudit(bg); err != nil || !rep.OK || rep.Records != 5 {
		t.Fatalf("VerifyAudit() = %+v, %v; want 5 links (q's and good's four), verified", rep, err)
	}
}
