package dbtest

// A model-based test: rapid drives random sequences of enqueue, claim,
// heartbeat, complete, fail, cancel, retry and clock advances against a real
// store on a real bbolt file and against a small in-memory model of
// docs/design.md's rules. Every result and every refusal must match the model,
// every job must look the same in both after each step, and the store's
// indexes and counts must agree with its records (Check).
//
// The default run is rapid's (100 sequences of about 30 steps). Longer:
//
//	go test ./db -run TestModel -rapid.checks=5000 -rapid.steps=200
//
// RAPID_CHECKS and RAPID_STEPS in the environment do the same. A failure
// prints the shrunk sequence and a fail file rapid can replay.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fenceq/fenceq/db"
	"github.com/fenceq/fenceq/internal/testclock"
	"pgregory.net/rapid"
)

// modelStart is where the clock of every sequence starts.
var modelStart = time.Date(2031, 1, 2, 3, 4, 5, 0, time.UTC)

const (
	modelDefaultLease = 30 * time.Second
	modelMaxLease     = time.Hour
	modelMaxToken     = uint64(4294967295)
)

// mJob is a job as the model sees it.
type mJob struct {
	id          uint64
	queue       string
	priority    int64
	state       db.State
	attempts    uint64
	maxAttempts uint64
	budget      uint64
	claimedBy   string
	leaseExp    time.Time // zero unless claimed
	runAt       time.Time
	result      string
	lastError   string
	idemKey     string
}

// queueModel is docs/design.md's rules over a map of jobs, with no I/O.
type queueModel struct {
	now    time.Time
	jobs   map[uint64]*mJob
	nextID uint64
	paused map[string]bool // paused queues: claims skip them
}

var modelQueueRE = regexp.MustCompile(`^[A-Za-z0-9_.:-]{1,128}$`)

func newQueueModel() *queueModel {
	return &queueModel{now: modelStart, jobs: map[uint64]*mJob{}, nextID: 1, paused: map[string]bool{}}
}

func (m *queueModel) sortedIDs() []uint64 {
	ids := make([]uint64, 0, len(m.jobs))
	for id := range m.jobs {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	return ids
}

// enqueue applies one request; created is false for an idempotent repeat.
func (m *queueModel) enqueue(req db.EnqueueRequest) (job *mJob, created bool) {
	q := req.Queue
	if q == "" {
		q = db.DefaultQueue
	}
	if req.IdempotencyKey != "" {
		for _, id := range m.sortedIDs() {
			if j := m.jobs[id]; j.queue == q && j.idemKey == req.IdempotencyKey {
				return j, false
			}
		}
	}
	ma := req.MaxAttempts
	if ma == 0 {
		ma = db.DefaultMaxAttempts
	}
	j := &mJob{id: m.nextID, queue: q, priority: req.Priority, state: db.StateAvailable,
		maxAttempts: ma, budget: ma, runAt: m.now.Add(req.Delay), idemKey: req.IdempotencyKey}
	if j.runAt.After(m.now) {
		j.state = db.StateScheduled
	}
	m.nextID++
	m.jobs[j.id] = j
	return j, true
}

func validEnqueue(req db.EnqueueRequest) bool {
	q := req.Queue
	if q == "" {
		q = db.DefaultQueue
	}
	return modelQueueRE.MatchString(q) && req.Delay >= 0 && req.Delay <= db.MaxDelay && req.MaxAttempts <= db.MaxMaxAttempts
}

// enqueueBatch is all or nothing: one invalid request refuses the batch.
func (m *queueModel) enqueueBatch(reqs []db.EnqueueRequest) ([]*mJob, []bool, error) {
	for _, r := range reqs {
		if !validEnqueue(r) {
			return nil, nil, ErrInvalidArgument
		}
	}
	var jobs []*mJob
	var created []bool
	for _, r := range reqs {
		j, c := m.enqueue(r)
		jobs, created = append(jobs, j), append(created, c)
	}
	return jobs, created, nil
}

func claimsBefore(a, b *mJob) bool {
	if a.priority != b.priority {
		return a.priority > b.priority
	}
	if !a.runAt.Equal(b.runAt) {
		return a.runAt.Before(b.runAt)
	}
	return a.id < b.id
}

func expired(j *mJob, now time.Time) bool { return !now.Before(j.leaseExp) }

// readyHead is the best available job of q.
func (m *queueModel) readyHead(q string) *mJob {
	var best *mJob
	for _, j := range m.jobs {
		if j.queue == q && j.state == db.StateAvailable && (best == nil || claimsBefore(j, best)) {
			best = j
		}
	}
	return best
}

// firstClaimed is the claimed job of q whose lease ends first (then by id).
func (m *queueModel) firstClaimed(q string) *mJob {
	var first *mJob
	for _, j := range m.jobs {
		if j.queue != q || j.state != db.StateClaimed {
			continue
		}
		if first == nil || j.leaseExp.Before(first.leaseExp) || (j.leaseExp.Equal(first.leaseExp) && j.id < first.id) {
			first = j
		}
	}
	return first
}

// expiredHead is the claimed job of q whose lease ran out first and that
// has attempts left; expired jobs with none left before it go dead.
func (m *queueModel) expiredHead(q string) *mJob {
	for {
		j := m.firstClaimed(q)
		if j == nil || !expired(j, m.now) {
			return nil
		}
		if j.attempts < j.maxAttempts {
			return j
		}
		j.state, j.lastError, j.claimedBy, j.leaseExp = db.StateDead, "lease expired", "", time.Time{}
		modelTally.add("expired_to_dead")
	}
}

// claimable is the store's cheap pre-check: nothing is written when it
// finds nothing (no promotion, no expiry).
func (m *queueModel) claimable(queues []string) bool {
	for _, j := range m.jobs {
		if j.state == db.StateScheduled && !j.runAt.After(m.now) {
			return true
		}
	}
	for _, q := range queues {
		if m.readyHead(q) != nil {
			return true
		}
		if j := m.firstClaimed(q); j != nil && expired(j, m.now) {
			return true
		}
	}
	return false
}

func normalizeQueues(queues []string) ([]string, bool) {
	if len(queues) == 0 {
		return []string{db.DefaultQueue}, true
	}
	seen := map[string]bool{}
	var out []string
	for _, q := range queues {
		if !modelQueueRE.MatchString(q) {
			return nil, false
		}
		if !seen[q] {
			seen[q] = true
			out = append(out, q)
		}
	}
	return out, true
}

func leaseOf(d time.Duration) (time.Duration, bool) {
	if d == 0 {
		return modelDefaultLease, true
	}
	return d, d > 0 && d <= modelMaxLease
}

func (m *queueModel) claim(req db.ClaimRequest) ([]*mJob, error) {
	queues, ok := normalizeQueues(req.Queues)
	d, okLease := leaseOf(req.Lease)
	if req.Worker == "" || !ok || !okLease || req.Max < 0 || req.Max > db.MaxClaimBatch {
		return nil, ErrInvalidArgument
	}
	n := max(req.Max, 1)
	var running []string
	for _, q := range queues {
		if !m.paused[q] {
			running = append(running, q)
		}
	}
	queues = running
	if !m.claimable(queues) {
		return nil, nil
	}
	for _, j := range m.jobs {
		if j.state == db.StateScheduled && !j.runAt.After(m.now) {
			j.state = db.StateAvailable
		}
	}
	var out []*mJob
	for len(out) < n {
		var best *mJob
		for _, q := range queues {
			for _, c := range []*mJob{m.readyHead(q), m.expiredHead(q)} {
				if c != nil && (best == nil || claimsBefore(c, best)) {
					best = c
				}
			}
		}
		if best == nil {
			break
		}
		best.state = db.StateClaimed
		best.attempts++
		best.claimedBy = req.Principal + "|" + req.Worker
		best.leaseExp = m.now.Add(d)
		out = append(out, best)
	}
	return out, nil
}

// fenced applies the fencing rule: the job is claimed by principal|worker
// and, when a token is given, the token is the current claim.
func (m *queueModel) fenced(f db.Fenced, refused error) (*mJob, error) {
	if f.FencingToken > modelMaxToken || f.Worker == "" {
		return nil, ErrInvalidArgument
	}
	j := m.jobs[f.ID]
	if j == nil {
		return nil, ErrJobNotFound
	}
	if j.state != db.StateClaimed || j.claimedBy != f.Principal+"|"+f.Worker ||
		(f.FencingToken != 0 && f.FencingToken != j.attempts) {
		return nil, refused
	}
	return j, nil
}

func (m *queueModel) heartbeat(req db.HeartbeatRequest) (*mJob, error) {
	if req.FencingToken > modelMaxToken || req.Worker == "" {
		return nil, ErrInvalidArgument
	}
	d, ok := leaseOf(req.Lease)
	if !ok {
		return nil, ErrInvalidArgument
	}
	j, err := m.fenced(req.Fenced, ErrClaimNotFound)
	if err != nil {
		return nil, err
	}
	j.leaseExp = m.now.Add(d)
	return j, nil
}

func (m *queueModel) complete(req db.CompleteRequest) (*mJob, error) {
	if req.FencingToken > modelMaxToken || req.Worker == "" || (len(req.Result) > 0 && !json.Valid(req.Result)) {
		return nil, ErrInvalidArgument
	}
	j, err := m.fenced(req.Fenced, ErrClaimMismatch)
	if err != nil {
		return nil, err
	}
	j.state, j.claimedBy, j.leaseExp, j.result = db.StateCompleted, "", time.Time{}, string(req.Result)
	return j, nil
}

// backoff is 1s·2^(attempt-1) capped at 1h, at the middle of its upper
// half (the store's tests run with Random = 0.5).
func backoff(attempt uint64) time.Duration {
	d := time.Second
	for i := uint64(1); i < attempt && d < time.Hour; i++ {
		d *= 2
	}
	d = min(d, time.Hour)
	half := d / 2
	return half + time.Duration(float64(d-half)*0.5)
}

func (m *queueModel) fail(req db.FailRequest) (*mJob, error) {
	if req.FencingToken > modelMaxToken || req.Worker == "" ||
		(req.RetryDelay != nil && (*req.RetryDelay < 0 || *req.RetryDelay > db.MaxDelay)) {
		return nil, ErrInvalidArgument
	}
	j, err := m.fenced(req.Fenced, ErrClaimNotFound)
	if err != nil {
		return nil, err
	}
	j.lastError, j.claimedBy, j.leaseExp = req.Error, "", time.Time{}
	if req.Final || j.attempts >= j.maxAttempts {
		j.state = db.StateDead
		return j, nil
	}
	delay := backoff(j.attempts)
	if req.RetryDelay != nil {
		delay = *req.RetryDelay
	}
	j.runAt = m.now.Add(delay)
	j.state = db.StateScheduled
	if delay == 0 {
		j.state = db.StateAvailable
	}
	return j, nil
}

func (m *queueModel) cancel(id uint64) (*mJob, error) {
	j := m.jobs[id]
	switch {
	case j == nil:
		return nil, ErrJobNotFound
	case j.state == db.StateCompleted || j.state == db.StateCancelled:
		return nil, ErrWrongState
	}
	j.state, j.claimedBy, j.leaseExp = db.StateCancelled, "", time.Time{}
	return j, nil
}

func (m *queueModel) retry(id uint64) (*mJob, error) {
	j := m.jobs[id]
	switch {
	case j == nil:
		return nil, ErrJobNotFound
	case j.state != db.StateDead && j.state != db.StateCancelled:
		return nil, ErrWrongState
	}
	j.state, j.runAt = db.StateAvailable, m.now
	j.maxAttempts = max(j.maxAttempts, min(j.attempts+max(j.budget, 1), modelMaxToken))
	return j, nil
}

// modelMachine runs one sequence against a store and the model.
type modelMachine struct {
	store db.Store
	clock *testclock.Clock
	model *queueModel
	ctx   context.Context
}

var modelFileSeq atomic.Uint64

// tally counts what the sequences did, so that a run shows it exercised
// the interesting cases (reclaims, stale tokens, expiry to dead).
type tally struct {
	mu sync.Mutex
	n  map[string]int
}

func (t *tally) add(what string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.n == nil {
		t.n = map[string]int{}
	}
	t.n[what]++
}

func (t *tally) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	keys := make([]string, 0, len(t.n))
	for k := range t.n {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "\n  %-55s %d", k, t.n[k])
	}
	return b.String()
}

var modelTally tally

func newModelMachine(t *rapid.T, tb testing.TB, newStore Factory) *modelMachine {
	clock := testclock.New(modelStart)
	s := newStore(tb, db.Rules{Now: clock.Now, Random: func() float64 { return 0.5 }, DefaultLease: modelDefaultLease, MaxLease: modelMaxLease})
	t.Cleanup(func() { s.Close() })
	return &modelMachine{store: s, clock: clock, model: newQueueModel(), ctx: context.Background()}
}

// sameError fails unless the store's error is the model's (both nil, or
// the same sentinel).
func sameError(t *rapid.T, op string, got, want error) {
	t.Helper()
	outcome := "ok"
	if want != nil {
		outcome = strings.TrimPrefix(want.Error(), "db: ")
	}
	modelTally.add(op + ": " + outcome)
	if want == nil && got != nil {
		t.Fatalf("%s error = %v, want success", op, got)
	}
	if want != nil && !errors.Is(got, want) {
		t.Fatalf("%s error = %v, want %v", op, got, want)
	}
}

// sameJob fails unless the store's job is the model's.
func sameJob(t *rapid.T, op string, got db.Job, want *mJob) {
	t.Helper()
	var diffs []string
	check := func(field string, g, w any) {
		if g != w {
			diffs = append(diffs, fmt.Sprintf("%s = %v, want %v", field, g, w))
		}
	}
	check("id", got.ID, want.id)
	check("queue", got.Queue, want.queue)
	check("priority", got.Priority, want.priority)
	check("state", got.State, want.state)
	check("attempts", got.Attempts, want.attempts)
	check("max_attempts", got.MaxAttempts, want.maxAttempts)
	check("claimed_by", got.ClaimedBy, want.claimedBy)
	check("lease_expires_at", got.LeaseExpiresAt.UnixNano(), want.leaseExp.UnixNano())
	check("run_at", got.RunAt.UnixNano(), want.runAt.UnixNano())
	check("result", string(got.Result), want.result)
	check("last_error", got.LastError, want.lastError)
	check("idempotency_key", got.IdempotencyKey, want.idemKey)
	check("fencing_token", got.FencingToken(), map[bool]uint64{true: want.attempts}[want.state == db.StateClaimed])
	if len(diffs) > 0 {
		t.Fatalf("%s: job %d differs from the model:\n  %s", op, want.id, strings.Join(diffs, "\n  "))
	}
}

// Generators draw a bad value about one time in ten, so that most steps do
// something and refusals are still covered.
var (
	genQueue    = rapid.SampledFrom([]string{"a", "a", "a", "a", "b", "b", "b", "", "", "bad queue!"})
	genClaimQ   = rapid.SampledFrom([]string{"a", "a", "b", "b", "default"})
	genWorker   = rapid.SampledFrom([]string{"w1", "w1", "w1", "w1", "w1", "w1", "w2", "w2", "w2", ""})
	genPrinc    = rapid.SampledFrom([]string{"local", "local", "local", "local", "local", "local", "local", "local", "local", "other"})
	genLease    = rapid.SampledFrom([]time.Duration{time.Second, time.Second, time.Second, 3 * time.Second, 3 * time.Second, 3 * time.Second, 0, 0, time.Hour, -time.Second})
	genAdvance  = rapid.SampledFrom([]time.Duration{100 * time.Millisecond, time.Second, 3 * time.Second, 31 * time.Second})
	genDelay    = rapid.SampledFrom([]time.Duration{0, 0, 0, 0, 0, 0, 500 * time.Millisecond, 2 * time.Second, 2 * time.Second, -time.Millisecond})
	genAttempts = rapid.SampledFrom([]uint64{0, 1, 2, 2, 3, 3})
	genIdem     = rapid.SampledFrom([]string{"", "", "", "", "", "", "k1", "k1", "k2", "k2"})
	genResult   = rapid.SampledFrom([]string{`{"ok":1}`, `{"ok":1}`, `{"ok":1}`, `"done"`, `"done"`, `"done"`, `[1,2]`, `[1,2]`, ``, `{bad`})
	genRetry    = rapid.SampledFrom([]time.Duration{-2, -2, -2, 0, 0, 0, time.Second, time.Second, 2 * time.Second, -time.Second})
)

func (mm *modelMachine) genEnqueue(t *rapid.T, label string) db.EnqueueRequest {
	return db.EnqueueRequest{
		Principal:      "local",
		Queue:          genQueue.Draw(t, label+"queue"),
		Priority:       int64(rapid.IntRange(-1, 1).Draw(t, label+"priority")),
		MaxAttempts:    genAttempts.Draw(t, label+"max_attempts"),
		Delay:          genDelay.Draw(t, label+"delay"),
		IdempotencyKey: genIdem.Draw(t, label+"idempotency_key"),
		Payload:        json.RawMessage(`{"n":1}`),
	}
}

// genID picks an existing job most of the time, else one that does not exist.
func (mm *modelMachine) genID(t *rapid.T) uint64 {
	ids := mm.model.sortedIDs()
	if len(ids) == 0 || rapid.IntRange(0, 9).Draw(t, "unknown_id") == 0 {
		return mm.model.nextID + uint64(rapid.IntRange(0, 3).Draw(t, "past_end"))
	}
	return rapid.SampledFrom(ids).Draw(t, "id")
}

// genFenced names a caller: mostly a claimed job's current holder with its
// token, sometimes another worker or principal, a stale or future token, no
// token, or one above u32 max.
func (mm *modelMachine) genFenced(t *rapid.T) db.Fenced {
	var claimed []uint64
	for _, id := range mm.model.sortedIDs() {
		if mm.model.jobs[id].state == db.StateClaimed {
			claimed = append(claimed, id)
		}
	}
	var id uint64
	if len(claimed) > 0 && rapid.IntRange(0, 9).Draw(t, "pick_claimed") < 8 {
		id = rapid.SampledFrom(claimed).Draw(t, "id")
	} else {
		id = mm.genID(t)
	}
	f := db.Fenced{ID: id, Principal: genPrinc.Draw(t, "principal"), Worker: genWorker.Draw(t, "worker")}
	attempts := uint64(0)
	if j := mm.model.jobs[id]; j != nil {
		attempts = j.attempts
		if j.claimedBy != "" && rapid.IntRange(0, 9).Draw(t, "as_holder") < 8 {
			f.Principal, f.Worker, _ = strings.Cut(j.claimedBy, "|")
		}
	}
	f.FencingToken = rapid.SampledFrom([]uint64{attempts, attempts, attempts, attempts, attempts, attempts,
		0, attempts + 1, max(attempts, 1) - 1, modelMaxToken + 1}).Draw(t, "fencing_token")
	return f
}

// Actions.

func (mm *modelMachine) Enqueue(t *rapid.T) {
	req := mm.genEnqueue(t, "")
	res, err := mm.store.EnqueueJob(mm.ctx, req)
	jobs, created, want := mm.model.enqueueBatch([]db.EnqueueRequest{req})
	sameError(t, "EnqueueJob", err, want)
	if err == nil {
		if res.Created != created[0] {
			t.Fatalf("EnqueueJob Created = %v, want %v", res.Created, created[0])
		}
		sameJob(t, "EnqueueJob", res.Job, jobs[0])
	}
}

func (mm *modelMachine) EnqueueBatch(t *rapid.T) {
	n := rapid.IntRange(2, 3).Draw(t, "batch_size")
	reqs := make([]db.EnqueueRequest, n)
	for i := range reqs {
		reqs[i] = mm.genEnqueue(t, fmt.Sprintf("jobs[%d].", i))
	}
	res, err := mm.store.EnqueueJobs(mm.ctx, append([]db.EnqueueRequest(nil), reqs...))
	jobs, created, want := mm.model.enqueueBatch(reqs)
	sameError(t, "EnqueueJobs", err, want)
	if err == nil {
		if len(res) != len(jobs) {
			t.Fatalf("EnqueueJobs returned %d jobs, want %d", len(res), len(jobs))
		}
		for i := range res {
			if res[i].Created != created[i] {
				t.Fatalf("EnqueueJobs[%d] Created = %v, want %v", i, res[i].Created, created[i])
			}
			sameJob(t, fmt.Sprintf("EnqueueJobs[%d]", i), res[i].Job, jobs[i])
		}
	}
}

func (mm *modelMachine) Claim(t *rapid.T) {
	req := db.ClaimRequest{
		Principal: genPrinc.Draw(t, "principal"),
		Worker:    genWorker.Draw(t, "worker"),
		Queues:    rapid.SliceOfN(genClaimQ, 0, 3).Draw(t, "queues"),
		Lease:     genLease.Draw(t, "lease"),
		Max:       rapid.IntRange(0, 2).Draw(t, "max"),
	}
	got, err := mm.store.ClaimJobs(mm.ctx, req)
	want, wantErr := mm.model.claim(req)
	op := "ClaimJobs"
	if wantErr == nil && len(want) == 0 {
		op = "ClaimJobs (nothing claimable)"
	}
	sameError(t, op, err, wantErr)
	if len(got) != len(want) {
		ids := func(n int, id func(int) uint64) []uint64 {
			var out []uint64
			for i := range n {
				out = append(out, id(i))
			}
			return out
		}
		t.Fatalf("ClaimJobs claimed jobs %v, want %v", ids(len(got), func(i int) uint64 { return got[i].ID }),
			ids(len(want), func(i int) uint64 { return want[i].id }))
	}
	for i := range got {
		sameJob(t, fmt.Sprintf("ClaimJobs[%d]", i), got[i], want[i])
	}
}

func (mm *modelMachine) Heartbeat(t *rapid.T) {
	req := db.HeartbeatRequest{Fenced: mm.genFenced(t), Lease: genLease.Draw(t, "lease")}
	got, err := mm.store.HeartbeatJob(mm.ctx, req)
	want, wantErr := mm.model.heartbeat(req)
	sameError(t, "HeartbeatJob", err, wantErr)
	if err == nil {
		sameJob(t, "HeartbeatJob", got, want)
	}
}

func (mm *modelMachine) Complete(t *rapid.T) {
	req := db.CompleteRequest{Fenced: mm.genFenced(t),
		Result: json.RawMessage(genResult.Draw(t, "result"))}
	got, err := mm.store.CompleteJob(mm.ctx, req)
	want, wantErr := mm.model.complete(req)
	sameError(t, "CompleteJob", err, wantErr)
	if err == nil {
		sameJob(t, "CompleteJob", got, want)
	}
}

func (mm *modelMachine) Fail(t *rapid.T) {
	req := db.FailRequest{Fenced: mm.genFenced(t), Error: rapid.SampledFrom([]string{"boom", "timeout"}).Draw(t, "error"),
		Final: rapid.IntRange(0, 4).Draw(t, "final") == 0}
	if d := genRetry.Draw(t, "retry_delay"); d != -2 {
		req.RetryDelay = &d
	}
	got, err := mm.store.FailJob(mm.ctx, req)
	want, wantErr := mm.model.fail(req)
	sameError(t, "FailJob", err, wantErr)
	if err == nil {
		sameJob(t, "FailJob", got, want)
	}
}

// genBatch draws 1 to 3 fenced callers; now and then one job twice, which
// makes the batch malformed.
func (mm *modelMachine) genBatch(t *rapid.T) []db.Fenced {
	n := rapid.IntRange(1, 3).Draw(t, "batch_size")
	keepDup := rapid.IntRange(0, 7).Draw(t, "keep_duplicate") == 0
	var out []db.Fenced
	seen := map[uint64]bool{}
	for range n {
		f := mm.genFenced(t)
		if seen[f.ID] && !keepDup {
			continue
		}
		seen[f.ID] = true
		out = append(out, f)
	}
	return out
}

// batchOK is the model of a batch's shape: not empty, no job twice.
func batchOK(fs []db.Fenced) bool {
	seen := map[uint64]bool{}
	for _, f := range fs {
		if seen[f.ID] {
			return false
		}
		seen[f.ID] = true
	}
	return len(fs) > 0
}

// sameItems holds a batch's outcome to the model's, item by item: each
// item is the single call applied in the batch's order.
func sameItems(t *rapid.T, op string, got []db.ItemResult, err error, ok bool, single func(i int) (*mJob, error)) {
	t.Helper()
	if !ok {
		sameError(t, op+" (malformed)", err, ErrInvalidArgument)
		return
	}
	if err != nil {
		t.Fatalf("%s error = %v, want per-item outcomes", op, err)
	}
	for i := range got {
		want, wantErr := single(i)
		sameError(t, fmt.Sprintf("%s item", op), got[i].Err, wantErr)
		if wantErr == nil {
			sameJob(t, fmt.Sprintf("%s[%d]", op, i), got[i].Job, want)
		}
	}
}

func (mm *modelMachine) HeartbeatBatch(t *rapid.T) {
	fs := mm.genBatch(t)
	reqs := make([]db.HeartbeatRequest, len(fs))
	for i, f := range fs {
		reqs[i] = db.HeartbeatRequest{Fenced: f, Lease: genLease.Draw(t, "lease")}
	}
	got, err := mm.store.HeartbeatJobs(mm.ctx, reqs)
	sameItems(t, "HeartbeatJobs", got, err, batchOK(fs), func(i int) (*mJob, error) { return mm.model.heartbeat(reqs[i]) })
}

func (mm *modelMachine) CompleteBatch(t *rapid.T) {
	fs := mm.genBatch(t)
	req := db.CompleteBatchRequest{Items: make([]db.CompleteRequest, len(fs))}
	for i, f := range fs {
		req.Items[i] = db.CompleteRequest{Fenced: f, Result: json.RawMessage(genResult.Draw(t, "result"))}
	}
	var next *db.ClaimRequest
	if rapid.Bool().Draw(t, "claim_next") {
		next = &db.ClaimRequest{Principal: genPrinc.Draw(t, "next_principal"), Worker: genWorker.Draw(t, "next_worker"),
			Queues: rapid.SliceOfN(genClaimQ, 0, 2).Draw(t, "next_queues"), Lease: genLease.Draw(t, "next_lease"),
			Max: rapid.IntRange(0, 2).Draw(t, "next_max")}
		req.Next = next
	}
	got, err := mm.store.CompleteJobs(mm.ctx, req)
	ok := batchOK(fs)
	if ok && next != nil {
		// A claim the model refuses refuses the whole batch before any item.
		if _, ok2 := normalizeQueues(next.Queues); !ok2 || next.Worker == "" {
			sameError(t, "CompleteJobs (bad claim_next)", err, ErrInvalidArgument)
			return
		}
		if _, ok2 := leaseOf(next.Lease); !ok2 {
			sameError(t, "CompleteJobs (bad claim_next)", err, ErrInvalidArgument)
			return
		}
	}
	sameItems(t, "CompleteJobs", got.Items, err, ok, func(i int) (*mJob, error) { return mm.model.complete(req.Items[i]) })
	if ok && next != nil {
		want, wantErr := mm.model.claim(*next)
		sameError(t, "CompleteJobs claim_next", wantErr, nil)
		if len(got.Next) != len(want) {
			t.Fatalf("CompleteJobs claimed %d jobs, want %d", len(got.Next), len(want))
		}
		for i := range want {
			sameJob(t, fmt.Sprintf("CompleteJobs next[%d]", i), got.Next[i], want[i])
		}
	}
}

func (mm *modelMachine) FailBatch(t *rapid.T) {
	fs := mm.genBatch(t)
	reqs := make([]db.FailRequest, len(fs))
	for i, f := range fs {
		reqs[i] = db.FailRequest{Fenced: f, Error: "batch", Final: rapid.IntRange(0, 4).Draw(t, "final") == 0}
		if d := genRetry.Draw(t, "retry_delay"); d != -2 {
			reqs[i].RetryDelay = &d
		}
	}
	got, err := mm.store.FailJobs(mm.ctx, reqs)
	sameItems(t, "FailJobs", got, err, batchOK(fs), func(i int) (*mJob, error) { return mm.model.fail(reqs[i]) })
}

func (mm *modelMachine) Cancel(t *rapid.T) {
	id := mm.genID(t)
	got, err := mm.store.CancelJob(mm.ctx, db.JobRequest{Principal: "local", ID: id})
	want, wantErr := mm.model.cancel(id)
	sameError(t, "CancelJob", err, wantErr)
	if err == nil {
		sameJob(t, "CancelJob", got, want)
	}
}

func (mm *modelMachine) Retry(t *rapid.T) {
	id := mm.genID(t)
	got, err := mm.store.RetryJob(mm.ctx, db.JobRequest{Principal: "local", ID: id})
	want, wantErr := mm.model.retry(id)
	sameError(t, "RetryJob", err, wantErr)
	if err == nil {
		sameJob(t, "RetryJob", got, want)
	}
}

func (mm *modelMachine) SetPaused(t *rapid.T) {
	req := db.PauseRequest{Principal: "ops", Queue: rapid.SampledFrom([]string{"a", "a", "b", "b", "default", "bad queue!"}).Draw(t, "queue"),
		Paused: rapid.Bool().Draw(t, "paused")}
	got, err := mm.store.SetQueuePaused(mm.ctx, req)
	if !modelQueueRE.MatchString(req.Queue) {
		sameError(t, "SetQueuePaused", err, ErrInvalidArgument)
		return
	}
	sameError(t, "SetQueuePaused", err, nil)
	changed := mm.model.paused[req.Queue] != req.Paused
	if got.Paused != req.Paused || got.Changed != changed || got.Queue != req.Queue {
		t.Fatalf("SetQueuePaused(%+v) = %+v, want paused %v, changed %v", req, got, req.Paused, changed)
	}
	if req.Paused {
		mm.model.paused[req.Queue] = true
		modelTally.add("paused")
	} else {
		delete(mm.model.paused, req.Queue)
	}
}

func (mm *modelMachine) AdvanceClock(t *rapid.T) {
	d := genAdvance.Draw(t, "advance")
	mm.clock.Advance(d)
	mm.model.now = mm.model.now.Add(d)
}

// Check runs after every step: each job is what the model says, the
// counts per queue and state agree, and so do the store's own indexes.
func (mm *modelMachine) Check(t *rapid.T) {
	for _, id := range mm.model.sortedIDs() {
		got, err := mm.store.GetJob(mm.ctx, id)
		if err != nil {
			t.Fatalf("GetJob(%d) error = %v", id, err)
		}
		sameJob(t, "GetJob", got, mm.model.jobs[id])
	}
	if _, err := mm.store.GetJob(mm.ctx, mm.model.nextID); !errors.Is(err, ErrJobNotFound) {
		t.Fatalf("GetJob(%d) (never enqueued) error = %v, want ErrJobNotFound", mm.model.nextID, err)
	}
	want := map[string]uint64{}
	for _, j := range mm.model.jobs {
		want[j.queue+"/"+string(j.state)]++
	}
	stats, err := mm.store.Stats(mm.ctx)
	if err != nil {
		t.Fatalf("Stats() error = %v", err)
	}
	got := map[string]uint64{}
	for _, q := range stats {
		for st, n := range q.Counts {
			if n > 0 {
				got[q.Queue+"/"+string(st)] = n
			}
		}
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("Stats() = %v, want %v", got, want)
	}
	pauses, err := mm.store.PausedQueues(mm.ctx)
	if err != nil {
		t.Fatalf("PausedQueues() error = %v", err)
	}
	var gotPaused, wantPaused []string
	for _, p := range pauses {
		gotPaused = append(gotPaused, p.Queue)
	}
	for q := range mm.model.paused {
		wantPaused = append(wantPaused, q)
	}
	sort.Strings(wantPaused)
	if fmt.Sprint(gotPaused) != fmt.Sprint(wantPaused) {
		t.Fatalf("PausedQueues() = %v, want %v", gotPaused, wantPaused)
	}
	if c, ok := mm.store.(Checker); ok {
		if err := c.Check(); err != nil {
			t.Fatalf("Check() = %v", err)
		}
	}
}

func testModel_StoreFollowsTheRules(t *testing.T, newStore Factory) {
	var steps atomic.Int64
	rapid.Check(t, func(rt *rapid.T) {
		mm := newModelMachine(rt, t, newStore)
		// Weights: claims and fenced calls are the point; the admin
		// operations and batches less often.
		weighted := map[string]struct {
			fn func(*rapid.T)
			n  int
		}{
			"Enqueue": {mm.Enqueue, 3}, "EnqueueBatch": {mm.EnqueueBatch, 1}, "Claim": {mm.Claim, 3},
			"Heartbeat": {mm.Heartbeat, 2}, "Complete": {mm.Complete, 2}, "Fail": {mm.Fail, 2},
			"HeartbeatBatch": {mm.HeartbeatBatch, 1}, "CompleteBatch": {mm.CompleteBatch, 2}, "FailBatch": {mm.FailBatch, 1},
			"Cancel": {mm.Cancel, 1}, "Retry": {mm.Retry, 1}, "AdvanceClock": {mm.AdvanceClock, 2},
			"SetPaused": {mm.SetPaused, 1},
		}
		actions := map[string]func(*rapid.T){"": mm.Check}
		for name, a := range weighted {
			for i := range a.n {
				actions[fmt.Sprintf("%s#%d", name, i)] = func(t *rapid.T) { steps.Add(1); a.fn(t) }
			}
		}
		rt.Repeat(actions)
	})
	t.Logf("model: %d steps over the sequences, every result, refusal and job matched, Check() passed after each; outcomes:%v", steps.Load(), &modelTally)
}
