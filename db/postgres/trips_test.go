package postgres

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/fenceq/fenceq/db"
)

// TestBatch_RoundTripsOfALoneClaimAndCompletion pins how many round trips
// a batch of one mutation makes inside its transaction: a claim (BEGIN
// with the time; promotion with the candidates; the claimed row; the
// head; the links, counters and COMMIT) and a completion (BEGIN with the
// time and the row, locked and read; its update; the head; the writes and
// COMMIT). A change that adds one shows here.
func TestBatch_RoundTripsOfALoneClaimAndCompletion(t *testing.T) {
	s := mustOpenStore(t, db.Rules{})
	mustEnqueueJob(t, s, db.EnqueueRequest{Principal: "p", Queue: "q"})
	before := s.trips.Load()
	jobs, err := s.ClaimJobs(bg, db.ClaimRequest{Principal: "p", Worker: "w", Queues: []string{"q"}})
	if err != nil || len(jobs) != 1 {
		t.Fatalf("ClaimJobs() = %v, %v; want one job", jobs, err)
	}
	if got := s.trips.Load() - before; got != 5 {
		t.Errorf("round trips of a lone claim = %d, want 5", got)
	}
	before = s.trips.Load()
	j := jobs[0]
	if _, err := s.CompleteJob(bg, db.CompleteRequest{Fenced: db.Fenced{ID: j.ID, Principal: "p", Worker: "w", FencingToken: j.FencingToken()}}); err != nil {
		t.Fatal(err)
	}
	if got := s.trips.Load() - before; got != 4 {
		t.Errorf("round trips of a lone completion = %d, want 4", got)
	}
}

// BenchmarkDrainRoundTrips drains jobs with concurrent claims and
// completions through one replica, or three over one database, and
// reports the batches' round trips and commits per drained job (not
// speed: the counts the batch's length is made of).
func BenchmarkDrainRoundTrips(b *testing.B) {
	for _, replicas := range []int{1, 3} {
		b.Run(fmt.Sprintf("replicas=%d", replicas), func(b *testing.B) {
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
			var trips0, commits0, heads0 uint64
			var held0 int64
			for _, s := range stores {
				c, _ := s.CommitStats()
				trips0, commits0 = trips0+s.trips.Load(), commits0+c
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
					for {
						got, err := s.ClaimJobs(bg, db.ClaimRequest{Principal: "p", Worker: fmt.Sprint("w", w), Queues: []string{"q"}, Lease: time.Minute})
						if err != nil {
							b.Error(err)
							return
						}
						if len(got) == 0 {
							return
						}
						j := got[0]
						if _, err := s.CompleteJob(bg, db.CompleteRequest{Fenced: db.Fenced{ID: j.ID, Principal: "p", Worker: fmt.Sprint("w", w), FencingToken: j.FencingToken()}}); err != nil {
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
			var trips, commits, heads uint64
			var held int64
			for _, s := range stores {
				c, _ := s.CommitStats()
				trips, commits = trips+s.trips.Load(), commits+c
				heads, held = heads+s.headBatches.Load(), held+s.headHeld.Load()
			}
			if done != jobs {
				b.Fatalf("drained %d jobs, want %d", done, jobs)
			}
			b.ReportMetric(float64(trips-trips0)/float64(jobs), "trips/job")
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
