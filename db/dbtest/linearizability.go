package dbtest

// Linearizability: goroutines claim, heartbeat, fail, complete and check one
// job concurrently on a real store (a real bbolt file, group commit), while
// another goroutine moves the store's clock. Every call and its answer is
// recorded with its start and end time, and porcupine checks that the
// history could have happened one call at a time, in an order that respects
// real time, against a sequential model of one job's life (docs/design.md:
// claims hand out attempts+1 as the token, only the current holder with the
// current token may act, an expired lease may be claimed again).
//
// The default run is a few short rounds. Longer:
//
//	FENCEQ_LIN_ROUNDS=200 go test ./db -run TestLinearizable -v

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/fenceq/fenceq/db"
)

type linKind int

const (
	linClaim linKind = iota
	linHeartbeat
	linComplete
	linFail
	linCheck
	linAdvance
)

func (k linKind) String() string {
	return [...]string{"claim", "heartbeat", "complete", "fail", "check", "advance"}[k]
}

// linInput is one call. Durations and times are in ticks of the test clock.
type linInput struct {
	kind   linKind
	worker string
	token  uint64
	lease  int64 // claim, heartbeat
	ticks  int64 // advance
	clock0 int64 // the clock when the call was made
	// batch sends a heartbeat, completion or failure as the first item of
	// a batch whose second item names a job that does not exist: the
	// job's item must be decided exactly as the single call, alone.
	batch bool
}

// linOutput is its answer: ok, or the refusal; for a claim the token, for
// a claim or heartbeat the lease's end.
type linOutput struct {
	ok       bool
	refusal  string
	token    uint64
	leaseEnd int64
}

// linState is the model: one job.
type linState struct {
	state    db.State
	attempts uint64
	holder   string
	leaseEnd int64
	now      int64
}

func (s linState) current(worker string, token uint64) bool {
	return s.state == db.StateClaimed && s.holder == "local|"+worker && (token == 0 || token == s.attempts)
}

// linStep is the sequential model of one job's life.
//
// Time: the store reads its clock inside the write transaction, and the
// change becomes visible when that transaction commits, a moment later. So
// a call takes effect at one point, but the time it acted on may be any
// clock value from its start (clock0) up to that point (s.now). A claim or
// heartbeat shows its time in its answer (lease end minus lease); an empty
// claim is allowed when the job was not claimable at clock0 (claimability
// only grows with time).
func linStep(st, in, out any) (bool, any) {
	s, i, o := st.(linState), in.(linInput), out.(linOutput)
	actedAt := func() (int64, bool) {
		t := o.leaseEnd - i.lease
		return t, t >= i.clock0 && t <= s.now
	}
	switch i.kind {
	case linAdvance:
		s.now += i.ticks
		return true, s
	case linClaim:
		if !o.ok {
			claimable := s.state == db.StateAvailable || (s.state == db.StateClaimed && i.clock0 >= s.leaseEnd)
			return !claimable && o.refusal == "none", s
		}
		t, ok := actedAt()
		if !ok || !(s.state == db.StateAvailable || (s.state == db.StateClaimed && t >= s.leaseEnd)) {
			return false, s
		}
		s.state, s.attempts, s.holder, s.leaseEnd = db.StateClaimed, s.attempts+1, "local|"+i.worker, o.leaseEnd
		return o.token == s.attempts, s
	case linHeartbeat:
		if !s.current(i.worker, i.token) {
			return !o.ok && o.refusal == "not_found", s
		}
		_, ok := actedAt()
		s.leaseEnd = o.leaseEnd
		return o.ok && ok, s
	case linComplete:
		if s.current(i.worker, i.token) {
			s.state, s.holder = db.StateCompleted, ""
			return o.ok, s
		}
		return !o.ok && o.refusal == "failed_precondition", s
	case linFail:
		if s.current(i.worker, i.token) {
			s.state, s.holder = db.StateAvailable, ""
			return o.ok, s
		}
		return !o.ok && o.refusal == "not_found", s
	case linCheck:
		if s.state == db.StateClaimed && s.attempts == i.token {
			return o.ok, s
		}
		return !o.ok && o.refusal == "not_current", s
	}
	return false, s
}

// linModel is the model of a job enqueued when the clock stood at start.
func linModel(start int64) porcupine.Model {
	return porcupine.Model{
		Init: func() any { return linState{state: db.StateAvailable, now: start} },
		Step: linStep,
		DescribeOperation: func(in, out any) string {
			i, o := in.(linInput), out.(linOutput)
			res := "ok"
			if !o.ok {
				res = o.refusal
			}
			switch i.kind {
			case linAdvance:
				return fmt.Sprintf("advance(%d)", i.ticks)
			case linClaim:
				return fmt.Sprintf("claim(%s, lease %d) -> %s token %d until %d", i.worker, i.lease, res, o.token, o.leaseEnd)
			case linHeartbeat:
				return fmt.Sprintf("heartbeat(%s, %d, lease %d) -> %s until %d", i.worker, i.token, i.lease, res, o.leaseEnd)
			}
			return fmt.Sprintf("%s(%s, %d) -> %s", i.kind, i.worker, i.token, res)
		},
		DescribeState: func(st any) string { return fmt.Sprintf("%+v", st.(linState)) },
	}
}

// linClock is the store's clock: linStart plus a number of ticks that only
// the advance calls move.
type linClock struct{ ticks atomic.Int64 }

var linStart = time.Date(2031, 6, 1, 0, 0, 0, 0, time.UTC)

const linTick = time.Millisecond

func (c *linClock) Now() time.Time { return linStart.Add(time.Duration(c.ticks.Load()) * linTick) }

func toTicks(t time.Time) int64 { return int64(t.Sub(linStart) / linTick) }

// refusal names a store error as the API would; anything else is a bug.
func refusal(err error) (string, bool) {
	switch {
	case errors.Is(err, ErrClaimNotFound):
		return "not_found", true
	case errors.Is(err, ErrClaimMismatch):
		return "failed_precondition", true
	case errors.Is(err, ErrNotCurrent):
		return "not_current", true
	}
	return "", false
}

// linRound runs clients goroutines against one fresh job and returns the
// history and the clock at its start.
func linRound(t *testing.T, s db.Store, clock *linClock, round, clients, opsPerClient int, seed uint64) ([]porcupine.Operation, int64) {
	ctx := context.Background()
	queue := "lin-" + strconv.Itoa(round)
	res, err := s.EnqueueJob(ctx, db.EnqueueRequest{Principal: "local", Queue: queue, MaxAttempts: db.MaxMaxAttempts})
	if err != nil {
		t.Fatalf("EnqueueJob() error = %v", err)
	}
	id := res.Job.ID
	start := clock.ticks.Load()
	begin := time.Now()
	since := func() int64 { return int64(time.Since(begin)) }

	var (
		mu      sync.Mutex
		history []porcupine.Operation
		wg      sync.WaitGroup
		bad     atomic.Value
	)
	record := func(client int, in linInput, call int64, out linOutput) {
		ret := since()
		mu.Lock()
		history = append(history, porcupine.Operation{ClientId: client, Input: in, Call: call, Output: out, Return: ret})
		mu.Unlock()
	}
	done := make(chan struct{})

	// The clock: a few ticks at a time, so that leases of 2 to 4 ticks
	// expire while the workers run.
	wg.Add(1)
	go func() {
		defer wg.Done()
		rng := rand.New(rand.NewPCG(seed, 0))
		for {
			select {
			case <-done:
				return
			case <-time.After(time.Duration(200+rng.IntN(800)) * time.Microsecond):
			}
			in := linInput{kind: linAdvance, ticks: int64(1 + rng.IntN(2))}
			call := since()
			clock.ticks.Add(in.ticks)
			record(clients, in, call, linOutput{ok: true})
		}
	}()

	var workers sync.WaitGroup
	for c := range clients {
		workers.Add(1)
		go func() {
			defer workers.Done()
			rng := rand.New(rand.NewPCG(seed, uint64(c)+1))
			// Two clients share each worker name: a restarted worker that
			// claims under its old name must still be fenced off by token.
			worker := fmt.Sprintf("w%d", c%(max(clients/2, 1)))
			var token uint64 // the token of this client's last claim, 0 when it holds none
			for range opsPerClient {
				in := linInput{worker: worker, token: token}
				switch r := rng.IntN(100); {
				case token == 0 && r < 70:
					in.kind, in.lease = linClaim, int64(2+rng.IntN(3))
				case token == 0:
					in.kind, in.token = linCheck, uint64(1+rng.IntN(3))
				case r < 45:
					in.kind, in.lease = linHeartbeat, int64(2+rng.IntN(3))
				case r < 55:
					in.kind = linComplete
				case r < 70:
					in.kind = linFail
				default:
					in.kind = linCheck
				}
				if in.kind != linCheck && in.kind != linClaim && rng.IntN(10) == 0 {
					in.token = 0 // "not given": the name check alone
				}
				if in.kind == linHeartbeat || in.kind == linComplete || in.kind == linFail {
					in.batch = rng.IntN(2) == 0
				}
				in.clock0 = clock.ticks.Load()
				call := since()
				out, err := linCall(ctx, s, id, queue, in)
				if err != nil {
					bad.Store(fmt.Errorf("%s: %w", in.kind, err))
					return
				}
				record(c, in, call, out)
				switch {
				case in.kind == linClaim && out.ok:
					token = out.token
				case in.kind == linComplete || in.kind == linFail:
					token = 0
				case in.kind == linHeartbeat && !out.ok:
					token = 0
				}
				if (in.kind == linClaim && !out.ok) || rng.IntN(4) == 0 {
					time.Sleep(time.Duration(rng.IntN(300)) * time.Microsecond)
				}
			}
		}()
	}
	workers.Wait()
	close(done)
	wg.Wait()
	if err, _ := bad.Load().(error); err != nil {
		t.Fatalf("round %d: unexpected error: %v", round, err)
	}
	return history, start
}

// linCall makes one call on the store and turns its answer into a linOutput.
// The job is alone in its queue, so a claim there can only return it.
func linCall(ctx context.Context, s db.Store, id uint64, queue string, in linInput) (linOutput, error) {
	f := db.Fenced{ID: id, Principal: "local", Worker: in.worker, FencingToken: in.token}
	var (
		job db.Job
		err error
	)
	switch in.kind {
	case linClaim:
		var jobs []db.Job
		jobs, err = s.ClaimJobs(ctx, db.ClaimRequest{Principal: "local", Worker: in.worker,
			Queues: []string{queue}, Lease: time.Duration(in.lease) * linTick})
		if err == nil && len(jobs) == 0 {
			return linOutput{refusal: "none"}, nil
		}
		if err == nil {
			if jobs[0].ID != id {
				return linOutput{}, fmt.Errorf("claimed job %d, want %d", jobs[0].ID, id)
			}
			return linOutput{ok: true, token: jobs[0].FencingToken(), leaseEnd: toTicks(jobs[0].LeaseExpiresAt)}, nil
		}
	case linHeartbeat:
		req := db.HeartbeatRequest{Fenced: f, Lease: time.Duration(in.lease) * linTick}
		if in.batch {
			job, err = linBatch(s.HeartbeatJobs(ctx, []db.HeartbeatRequest{req, {Fenced: linDecoy(f)}}))
		} else {
			job, err = s.HeartbeatJob(ctx, req)
		}
		if err == nil {
			return linOutput{ok: true, leaseEnd: toTicks(job.LeaseExpiresAt)}, nil
		}
	case linComplete:
		req := db.CompleteRequest{Fenced: f}
		if in.batch {
			var res db.CompleteBatchResult
			res, err = s.CompleteJobs(ctx, db.CompleteBatchRequest{Items: []db.CompleteRequest{req, {Fenced: linDecoy(f)}}})
			_, err = linBatch(res.Items, err)
		} else {
			_, err = s.CompleteJob(ctx, req)
		}
	case linFail:
		zero := time.Duration(0)
		req := db.FailRequest{Fenced: f, Error: "lin", RetryDelay: &zero}
		if in.batch {
			_, err = linBatch(s.FailJobs(ctx, []db.FailRequest{req, {Fenced: linDecoy(f)}}))
		} else {
			_, err = s.FailJob(ctx, req)
		}
	case linCheck:
		_, err = s.CheckJob(ctx, id, in.token)
	}
	if err == nil {
		return linOutput{ok: true}, nil
	}
	if code, ok := refusal(err); ok {
		return linOutput{refusal: code}, nil
	}
	return linOutput{}, err
}

// linDecoy is a batch's second item: a job that does not exist.
func linDecoy(f db.Fenced) db.Fenced {
	f.ID = 1 << 40
	return f
}

// linBatch is the first item's outcome of a two-item batch whose second
// item must be refused as not found; anything else is a fault of the test.
func linBatch(items []db.ItemResult, err error) (db.Job, error) {
	if err != nil {
		return db.Job{}, fmt.Errorf("batch refused whole: %w", err)
	}
	if len(items) != 2 || !errors.Is(items[1].Err, ErrJobNotFound) {
		return db.Job{}, fmt.Errorf("batch decoy item = %+v, want job not found", items)
	}
	return items[0].Job, items[0].Err
}

func testLinearizable_ClaimsAndFencedCallsOnOneJob(t *testing.T, newStore Factory) {
	rounds := 20
	if v := os.Getenv("FENCEQ_LIN_ROUNDS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("FENCEQ_LIN_ROUNDS=%q: want a positive number", v)
		}
		rounds = n
	}
	clock := &linClock{}
	s := newStore(t, db.Rules{Now: clock.Now})

	seed := uint64(time.Now().UnixNano())
	ops := 0
	tally := map[string]int{}
	for round := range rounds {
		history, start := linRound(t, s, clock, round, 6, 15, seed+uint64(round))
		model := linModel(start)
		for _, op := range history {
			ops++
			in, out := op.Input.(linInput), op.Output.(linOutput)
			if in.kind != linAdvance {
				tally[fmt.Sprintf("%s %s", in.kind, map[bool]string{true: "ok", false: out.refusal}[out.ok])]++
			}
		}
		res, info := porcupine.CheckOperationsVerbose(model, history, 30*time.Second)
		if res != porcupine.Ok {
			file := filepath.Join(os.TempDir(), fmt.Sprintf("fenceq-lin-%d-%d.html", seed, round))
			if f, err := os.Create(file); err == nil {
				_ = porcupine.Visualize(model, info, f)
				f.Close()
			}
			t.Fatalf("round %d (seed %d): history of %d calls is %s, not linearizable; visualization in %s", round, seed, len(history), res, file)
		}
	}
	if c, ok := s.(Checker); ok {
		if err := c.Check(); err != nil {
			t.Fatalf("Check() = %v", err)
		}
	}
	if rep, err := s.VerifyAudit(context.Background()); err != nil || !rep.OK {
		t.Fatalf("VerifyAudit() = %+v, %v; want OK", rep, err)
	}
	t.Logf("linearizable: %d rounds, %d calls with the clock's, seed %d; outcomes: %v", rounds, ops, seed, tally)
}
