package dbtest

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/fenceq/fenceq/db"
)

// ErrTooManyPaused is the refusal of a pause beyond db.MaxPausedQueues.
var ErrTooManyPaused = &db.Error{Code: db.CodeTooLarge, Message: "too many paused queues: "}

// Reopener is a store that can be closed and opened again over what it
// stored, with the same rules (the bbolt engine: the same file). The tests
// of state that outlives a restart need it.
type Reopener interface {
	Reopen() (db.Store, error)
}

// reopen closes s and returns a store over its stored state, checked
// (when it is a Checker) and closed on cleanup; it skips the test when s
// cannot be reopened.
func reopen(t *testing.T, s db.Store) db.Store {
	t.Helper()
	r, ok := s.(Reopener)
	if !ok {
		t.Skipf("%T cannot be reopened (dbtest.Reopener)", s)
	}
	s2, err := r.Reopen()
	if err != nil {
		t.Fatalf("Reopen() error = %v", err)
	}
	t.Cleanup(func() {
		if c, ok := s2.(Checker); ok {
			if err := c.Check(); err != nil {
				t.Errorf("Check() at cleanup of the reopened store: %v", err)
			}
		}
		s2.Close()
	})
	return s2
}

func setPaused(t testing.TB, s db.Store, queue string, paused bool) db.PauseResult {
	t.Helper()
	r, err := s.SetQueuePaused(context.Background(), db.PauseRequest{Principal: "ops", Queue: queue, Paused: paused})
	if err != nil {
		t.Fatalf("SetQueuePaused(%s, %v) error = %v", queue, paused, err)
	}
	return r
}

func pausedQueues(t testing.TB, s db.Store) []db.QueuePause {
	t.Helper()
	ps, err := s.PausedQueues(context.Background())
	if err != nil {
		t.Fatalf("PausedQueues() error = %v", err)
	}
	return ps
}

func testAPausedQueueGivesNoClaimsUntilItIsResumed(t *testing.T, newStore Factory) {
	clk := newFakeClock()
	s := newStore(t, testRules(clk))
	low := mustEnqueue(t, s, db.EnqueueRequest{Queue: "other"})
	high := mustEnqueue(t, s, db.EnqueueRequest{Queue: "emails", Priority: 9})

	r := setPaused(t, s, "emails", true)
	want := db.PauseResult{Queue: "emails", Paused: true, PausedAt: clk.Now().UTC(), PausedBy: "ops", Changed: true}
	if !reflect.DeepEqual(r, want) {
		t.Fatalf("SetQueuePaused(pause) = %+v, want %+v", r, want)
	}
	if a := lastAudit(t, s); a.Action != "pause" || a.Subject != db.QueueSubject("emails") || a.Principal != "ops" || a.Details["queue"] != "emails" {
		t.Errorf("audit record of the pause = %+v, want action pause, subject queue:emails, principal ops", a)
	}
	if got := pausedQueues(t, s); !reflect.DeepEqual(got, []db.QueuePause{{Queue: "emails", PausedAt: want.PausedAt, PausedBy: "ops"}}) {
		t.Errorf("PausedQueues() = %+v, want emails only", got)
	}

	// Pausing a paused queue changes nothing and is no refusal.
	before := takeSnapshot(t, s)
	clk.Advance(time.Second)
	if again := setPaused(t, s, "emails", true); again.Changed || !again.Paused || !again.PausedAt.Equal(want.PausedAt) {
		t.Errorf("SetQueuePaused(pause) again = %+v, want Changed false and the first pause's time", again)
	}
	assertUnchanged(t, s, before, "a second pause")

	// No claim takes the paused queue's job: alone, beside another queue
	// (whose lower-priority job is taken instead), or several at once.
	mustClaimNothing(t, s, "w1", "emails")
	jobs, err := s.ClaimJobs(ctx, db.ClaimRequest{Principal: "local", Worker: "w1", Queues: []string{"emails", "other"}, Max: 5})
	if err != nil || len(jobs) != 1 || jobs[0].ID != low.ID {
		t.Fatalf("ClaimJobs(emails, other; max 5) = %v, %v; want only job %d of queue other", jobs, err, low.ID)
	}
	// Enqueues are accepted while paused.
	later := mustEnqueue(t, s, db.EnqueueRequest{Queue: "emails"})
	if later.State != db.StateAvailable {
		t.Errorf("a job enqueued to a paused queue is %s, want available", later.State)
	}
	mustClaimNothing(t, s, "w1", "emails")
	if j := storedJob(t, s, high.ID); j.State != db.StateAvailable || j.Attempts != 0 {
		t.Errorf("job %d of the paused queue = %s with %d attempts, want available and never claimed", high.ID, j.State, j.Attempts)
	}

	r = setPaused(t, s, "emails", false)
	if r.Paused || !r.Changed || !r.PausedAt.IsZero() {
		t.Errorf("SetQueuePaused(resume) = %+v, want Paused false, Changed true", r)
	}
	if a := lastAudit(t, s); a.Action != "resume" || a.Subject != db.QueueSubject("emails") || a.Principal != "ops" {
		t.Errorf("audit record of the resume = %+v, want action resume, subject queue:emails, principal ops", a)
	}
	if got := pausedQueues(t, s); len(got) != 0 {
		t.Errorf("PausedQueues() after the resume = %+v, want none", got)
	}
	before = takeSnapshot(t, s)
	if again := setPaused(t, s, "emails", false); again.Changed || again.Paused {
		t.Errorf("SetQueuePaused(resume) again = %+v, want Changed false", again)
	}
	assertUnchanged(t, s, before, "a resume of a running queue")
	if got := claimAll(t, s, "emails"); !reflect.DeepEqual(got, []uint64{high.ID, later.ID}) {
		t.Errorf("claims after the resume = %v, want %v", got, []uint64{high.ID, later.ID})
	}
	// A pause and its resume are the queue's history.
	page, err := s.ListAuditBySubject(ctx, db.AuditSubjectRequest{Subject: db.QueueSubject("emails")})
	if err != nil || len(page.Records) != 2 || page.Records[0].Action != "resume" || page.Records[1].Action != "pause" {
		t.Errorf("ListAuditBySubject(queue:emails) = %+v, %v; want resume, pause", page.Records, err)
	}
}

func testTheClaimedJobsOfAPausedQueueCanBeHeartbeatenCompletedAndFailed(t *testing.T, newStore Factory) {
	clk := newFakeClock()
	s := newStore(t, testRules(clk))
	var ids []uint64
	for i := 0; i < 4; i++ {
		ids = append(ids, mustEnqueue(t, s, db.EnqueueRequest{Queue: "q"}).ID)
	}
	mustEnqueue(t, s, db.EnqueueRequest{Queue: "q"}) // left available
	var claimed []db.Job
	for range ids {
		claimed = append(claimed, mustClaim(t, s, "w1", time.Minute, "q"))
	}
	setPaused(t, s, "q", true)

	if _, err := s.HeartbeatJob(ctx, db.HeartbeatRequest{Fenced: fenced(claimed[0].ID, "w1", claimed[0].Attempts), Lease: time.Minute}); err != nil {
		t.Errorf("HeartbeatJob on a paused queue = %v, want accepted", err)
	}
	if j, err := s.CompleteJob(ctx, db.CompleteRequest{Fenced: fenced(claimed[1].ID, "w1", 1)}); err != nil || j.State != db.StateCompleted {
		t.Errorf("CompleteJob on a paused queue = %s, %v; want completed", j.State, err)
	}
	if j, err := s.FailJob(ctx, db.FailRequest{Fenced: fenced(claimed[2].ID, "w1", 1), Error: "boom", RetryDelay: durationPtr(0)}); err != nil || j.State != db.StateAvailable {
		t.Errorf("FailJob(retry now) on a paused queue = %s, %v; want available", j.State, err)
	}
	// A completion's next claim does not take from the paused queue,
	// not even the job that was just failed back to available.
	done, next, err := s.CompleteAndClaimJob(ctx, db.CompleteRequest{Fenced: fenced(claimed[3].ID, "w1", 1)},
		db.ClaimRequest{Queues: []string{"q"}, Max: 5})
	if err != nil || done.State != db.StateCompleted || len(next) != 0 {
		t.Errorf("CompleteAndClaimJob(next: q) = %s, %d next jobs, %v; want completed and none", done.State, len(next), err)
	}
	// An expired claim of a paused queue is not claimed again while the
	// queue is paused; its holder's late heartbeat still holds.
	clk.Advance(2 * time.Minute)
	mustClaimNothing(t, s, "w2", "q")
	if j := storedJob(t, s, claimed[0].ID); j.State != db.StateClaimed || j.Attempts != 1 {
		t.Fatalf("the expired claim of the paused queue = %s with %d attempts, want still claimed (1)", j.State, j.Attempts)
	}
	if _, err := s.HeartbeatJob(ctx, db.HeartbeatRequest{Fenced: fenced(claimed[0].ID, "w1", 1), Lease: time.Second}); err != nil {
		t.Errorf("a late heartbeat on a paused queue = %v, want accepted (nobody claimed the job again)", err)
	}
	clk.Advance(2 * time.Second)

	setPaused(t, s, "q", false)
	jobs, err := s.ClaimJobs(ctx, db.ClaimRequest{Principal: "local", Worker: "w2", Queues: []string{"q"}, Max: 10})
	if err != nil || len(jobs) != 3 {
		t.Fatalf("ClaimJobs(q) after the resume = %d jobs, %v; want 3 (the failed one, the available one, the expired claim)", len(jobs), err)
	}
}

func testALongPollOnAPausedQueueWaitsForTheResume(t *testing.T, newStore Factory) {
	s := newStore(t, db.Rules{})
	waiters(t, s)
	setPaused(t, s, "q", true)
	queued := mustEnqueue(t, s, db.EnqueueRequest{Queue: "q"})

	type result struct {
		jobs []db.Job
		err  error
	}
	poll := func(queues ...string) chan result {
		ch := make(chan result, 1)
		go func() {
			jobs, err := s.ClaimJobs(ctx, db.ClaimRequest{Principal: "local", Worker: "w", Queues: queues, Wait: db.MaxWait})
			ch <- result{jobs, err}
		}()
		return ch
	}
	mustWait := func(ch chan result, what string) {
		t.Helper()
		select {
		case r := <-ch:
			t.Fatalf("%s: the long-poll returned %d jobs, %v; want it still waiting", what, len(r.jobs), r.err)
		case <-time.After(200 * time.Millisecond):
		}
	}
	single := poll("q")
	waitForWaiters(t, s, "q", 1)
	mustWait(single, "a job waiting in the paused queue")

	// Jobs that become claimable while the queue is paused wake nobody:
	// an enqueue, a run_at that comes, a retry.
	mustEnqueue(t, s, db.EnqueueRequest{Queue: "q"})
	mustEnqueue(t, s, db.EnqueueRequest{Queue: "q", Delay: 50 * time.Millisecond})
	mustWait(single, "an enqueue and a run_at that came while paused")
	if n := waiterCount(s, "q"); n != 1 {
		t.Fatalf("%d long-polls wait on q, want 1", n)
	}

	// A long-poll over the paused queue and another takes the other's job.
	both := poll("q", "r")
	waitForWaiters(t, s, "q", 2)
	other := mustEnqueue(t, s, db.EnqueueRequest{Queue: "r"})
	select {
	case r := <-both:
		if r.err != nil || len(r.jobs) != 1 || r.jobs[0].ID != other.ID {
			t.Fatalf("the long-poll on q and r = %v, %v; want job %d of r", r.jobs, r.err, other.ID)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the long-poll on q and r was not given the job enqueued to r")
	}
	mustWait(single, "a job of another queue")

	setPaused(t, s, "q", false)
	select {
	case r := <-single:
		if r.err != nil || len(r.jobs) != 1 || r.jobs[0].ID != queued.ID || r.jobs[0].Queue != "q" {
			t.Fatalf("the long-poll after the resume = %v, %v; want job %d, the oldest of q", r.jobs, r.err, queued.ID)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the long-poll on q was not woken by the resume (its wait is a minute)")
	}
}

func testAPauseOutlivesReopeningTheStore(t *testing.T, newStore Factory) {
	clk := newFakeClock()
	s := newStore(t, testRules(clk))
	job := mustEnqueue(t, s, db.EnqueueRequest{Queue: "q"})
	r := setPaused(t, s, "q", true)
	setPaused(t, s, "p", true)
	setPaused(t, s, "p", false)

	s = reopen(t, s)
	want := []db.QueuePause{{Queue: "q", PausedAt: r.PausedAt, PausedBy: "ops"}}
	if got := pausedQueues(t, s); !reflect.DeepEqual(got, want) {
		t.Fatalf("PausedQueues() after reopening = %+v, want %+v", got, want)
	}
	mustClaimNothing(t, s, "w1", "q")
	if rep, err := s.VerifyAudit(ctx); err != nil || !rep.OK {
		t.Errorf("VerifyAudit() after reopening = %+v, %v", rep, err)
	}
	setPaused(t, s, "q", false)
	if got := mustClaim(t, s, "w1", time.Minute, "q"); got.ID != job.ID {
		t.Errorf("claim after the resume = job %d, want %d", got.ID, job.ID)
	}
}

func testPauseRefusalsChangeNothing(t *testing.T, newStore Factory) {
	s := newStore(t, testRules(newFakeClock()))
	before := takeSnapshot(t, s)
	for _, q := range []string{"", "a b", "x/y", string(make([]byte, 129))} {
		_, err := s.SetQueuePaused(ctx, db.PauseRequest{Principal: "ops", Queue: q, Paused: true})
		if !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("SetQueuePaused(%q) error = %v, want %v", q, err, ErrInvalidArgument)
		}
	}
	assertUnchanged(t, s, before, "a pause of a bad queue name")

	// Up to db.MaxPausedQueues may be paused, also by pauses that share
	// commits: of a few more than that at once, exactly the limit succeed.
	const extra = 5
	var wg sync.WaitGroup
	errs := make(chan error, db.MaxPausedQueues+extra)
	for i := 0; i < db.MaxPausedQueues+extra; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := s.SetQueuePaused(ctx, db.PauseRequest{Principal: "ops", Queue: fmt.Sprintf("q%04d", i), Paused: true})
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	refused := 0
	for err := range errs {
		switch {
		case errors.Is(err, ErrTooManyPaused):
			refused++
		case err != nil:
			t.Fatalf("SetQueuePaused() of one of %d queues = %v", db.MaxPausedQueues+extra, err)
		}
	}
	if n := len(pausedQueues(t, s)); refused != extra || n != db.MaxPausedQueues {
		t.Fatalf("%d concurrent pauses: %d refused, %d paused; want %d refused, %d paused", db.MaxPausedQueues+extra, refused, n, extra, db.MaxPausedQueues)
	}
	// Which ones were refused depends on the order of the commits.
	var inLimit string
	for _, p := range pausedQueues(t, s) {
		inLimit = p.Queue
	}
	before = takeSnapshot(t, s)
	_, err := s.SetQueuePaused(ctx, db.PauseRequest{Principal: "ops", Queue: "one-more", Paused: true})
	if !errors.Is(err, ErrTooManyPaused) {
		t.Fatalf("SetQueuePaused(one more than %d) error = %v, want %v", db.MaxPausedQueues, err, ErrTooManyPaused)
	}
	assertUnchanged(t, s, before, "a pause beyond the limit")
	// Pausing one that is paused already is no new pause: not refused.
	if r := setPaused(t, s, inLimit, true); r.Changed {
		t.Errorf("SetQueuePaused(%s) again at the limit = %+v, want Changed false", inLimit, r)
	}
	setPaused(t, s, inLimit, false)
	setPaused(t, s, "one-more", true)
	if n := len(pausedQueues(t, s)); n != db.MaxPausedQueues {
		t.Errorf("%d queues paused, want %d", n, db.MaxPausedQueues)
	}
}
