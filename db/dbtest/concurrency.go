package dbtest

import (
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/fenceq/fenceq/db"
)

// Many goroutines share commits. Refusals in a shared commit get their own
// errors and change nothing; every accepted change is in the file.
func testConcurrentMutationsShareCommitsWithoutLosingOrLeakingChanges(t *testing.T, newStore Factory) {
	const workers = 32
	clk := newFakeClock()
	s := newStore(t, testRules(clk))

	// Each worker w-i holds job fencedIDs[i] with token 2; its token 1 is
	// stale (claimed, expired, claimed again under the same name).
	var changes uint64
	fencedIDs := make([]uint64, workers)
	cancelIDs := make([]uint64, workers)
	for i := range workers {
		fencedIDs[i] = mustEnqueue(t, s, db.EnqueueRequest{Queue: "fenced"}).ID
		cancelIDs[i] = mustEnqueue(t, s, db.EnqueueRequest{Queue: "cancel"}).ID
	}
	changes += 2 * workers
	for round := range 2 {
		for i := range workers {
			if got := mustClaim(t, s, fmt.Sprintf("w-%d", i), 10*time.Second, "fenced"); got.ID != fencedIDs[i] {
				t.Fatalf("setup round %d: w-%d claimed job %d, want %d", round, i, got.ID, fencedIDs[i])
			}
		}
		if round == 0 {
			clk.Advance(10 * time.Second) // the first claims expire
		}
	}
	changes += 2 * workers

	var (
		mu         sync.Mutex
		newClaimed = map[uint64]string{} // job of queue "new" → who claimed it
		wg         sync.WaitGroup
	)
	for i := range workers {
		wg.Go(func() {
			worker := fmt.Sprintf("w-%d", i)
			id := fencedIDs[i]
			expect := func(what string, err, want error) {
				if want == nil && err != nil {
					t.Errorf("%s %s: error = %v, want nil", worker, what, err)
				}
				if want != nil && !errors.Is(err, want) {
					t.Errorf("%s %s: error = %v, want %v", worker, what, err, want)
				}
			}

			_, err := s.CompleteJob(ctx, db.CompleteRequest{Fenced: fenced(id, worker, 1), Result: json.RawMessage(`"stale"`), Attestation: json.RawMessage(`"stale"`)})
			expect("stale complete", err, ErrClaimMismatch)
			_, err = s.HeartbeatJob(ctx, db.HeartbeatRequest{Fenced: fenced(id, worker, 2), Lease: time.Minute})
			expect("heartbeat", err, nil)
			_, err = s.FailJob(ctx, db.FailRequest{Fenced: fenced(id, worker, 1), Error: "stale"})
			expect("stale fail", err, ErrClaimNotFound)
			_, err = s.HeartbeatJob(ctx, db.HeartbeatRequest{Fenced: db.Fenced{ID: id, Principal: "intruder", Worker: worker, FencingToken: 2}})
			expect("heartbeat by another principal", err, ErrClaimNotFound)
			// Somebody else's job, completed or not by now: refused either way.
			neighbour := fencedIDs[(i+1)%workers]
			_, err = s.CompleteJob(ctx, db.CompleteRequest{Fenced: fenced(neighbour, worker, 2), Attestation: json.RawMessage(`"theft"`)})
			expect("complete of another worker's job", err, ErrClaimMismatch)

			res, err := s.EnqueueJob(ctx, db.EnqueueRequest{Principal: "local", Queue: "new", IdempotencyKey: worker, Payload: json.RawMessage(fmt.Sprintf(`{"by":%q}`, worker))})
			expect("enqueue", err, nil)
			if err == nil && !res.Created {
				t.Errorf("%s enqueue Created = false, want true", worker)
			}
			_, err = s.CompleteJob(ctx, db.CompleteRequest{Fenced: fenced(id, worker, 2),
				Result: json.RawMessage(fmt.Sprintf(`{"i":%d}`, i)), Attestation: json.RawMessage(fmt.Sprintf(`{"by":%q}`, worker))})
			expect("complete", err, nil)

			// Every goroutine enqueued one before it claims one, so a claim
			// always finds a job.
			jobs, err := s.ClaimJobs(ctx, db.ClaimRequest{Principal: "local", Worker: "n-" + worker, Queues: []string{"new"}})
			expect("claim", err, nil)
			if len(jobs) != 1 {
				t.Errorf("%s claim of queue new got %d jobs, want 1", worker, len(jobs))
			} else {
				mu.Lock()
				if by, dup := newClaimed[jobs[0].ID]; dup {
					t.Errorf("job %d claimed by both %s and %s", jobs[0].ID, by, worker)
				}
				newClaimed[jobs[0].ID] = worker
				mu.Unlock()
				_, err = s.CompleteJob(ctx, db.CompleteRequest{Fenced: fenced(jobs[0].ID, "n-"+worker, jobs[0].Attempts)})
				expect("complete of the new job", err, nil)
			}

			_, err = s.CancelJob(ctx, db.JobRequest{Principal: "admin", ID: cancelIDs[i]})
			expect("cancel", err, nil)
			_, err = s.CancelJob(ctx, db.JobRequest{Principal: "admin", ID: cancelIDs[i]})
			expect("second cancel", err, ErrWrongState)
			_, err = s.RetryJob(ctx, db.JobRequest{Principal: "admin", ID: cancelIDs[i]})
			expect("retry", err, nil)
			_, err = s.RetryJob(ctx, db.JobRequest{Principal: "admin", ID: cancelIDs[i]})
			expect("second retry", err, ErrWrongState)
		})
	}
	wg.Wait()
	// Per worker: heartbeat, enqueue, complete, claim, complete, cancel, retry.
	changes += 7 * workers

	for i, id := range fencedIDs {
		rec := storedJob(t, s, id)
		wantResult, wantAtt := fmt.Sprintf(`{"i":%d}`, i), fmt.Sprintf(`{"by":"w-%d"}`, i)
		if rec.State != db.StateCompleted || rec.Attempts != 2 || string(rec.Result) != wantResult || string(rec.Attestation) != wantAtt || len(rec.Errors) != 0 {
			t.Errorf("job %d = %s attempts %d result %s attestation %s errors %d, want completed 2 %s %s 0",
				id, rec.State, rec.Attempts, rec.Result, rec.Attestation, len(rec.Errors), wantResult, wantAtt)
		}
	}
	for _, id := range cancelIDs {
		if rec := storedJob(t, s, id); rec.State != db.StateAvailable || rec.Attempts != 0 {
			t.Errorf("cancelled and retried job %d = %s attempts %d, want available 0", id, rec.State, rec.Attempts)
		}
	}
	page, err := s.ListJobs(ctx, db.ListRequest{Queue: "new", Limit: db.MaxListLimit})
	if err != nil || len(page.Jobs) != workers {
		t.Fatalf("ListJobs(new) = %d jobs, %v; want %d", len(page.Jobs), err, workers)
	}
	for _, j := range page.Jobs {
		if j.State != db.StateCompleted || j.Attempts != 1 || newClaimed[j.ID] == "" {
			t.Errorf("new job %d = %s attempts %d claimed by %q, want completed, claimed once", j.ID, j.State, j.Attempts, newClaimed[j.ID])
		}
	}

	rep, err := s.VerifyAudit(ctx)
	if err != nil || !rep.OK || rep.HeadSeq != changes {
		t.Errorf("VerifyAudit() = %+v, %v; want OK with HeadSeq %d (one record per accepted change, none per refusal)", rep, err, changes)
	}
	if cc, ok := s.(CommitCounter); ok {
		commits, ops := cc.CommitStats()
		t.Logf("%d mutations in %d commits", ops, commits)
	}
}
