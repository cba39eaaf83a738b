package dbtest

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/fenceq/fenceq/db"
	"github.com/fenceq/fenceq/internal/testclock"
)

// Factory opens a new, empty store for one test, with rules. rules.Now is
// the test's clock (nil: real time): the store must read time only through
// it — an engine whose database keeps time applies it as an offset to the
// database's clock — and the test moves it to make leases expire and
// run_at come. The factory closes the store in t.Cleanup, after checking
// there whatever integrity the engine can check; a test may close the
// store itself before that.
type Factory func(t testing.TB, rules db.Rules) db.Store

// Snapshotter is a store that can list its whole stored state (every
// record, index entry and counter, as text). When the store under test is
// one, the suite checks that a refusal changed no byte of it, besides
// everything the Store interface shows.
type Snapshotter interface {
	Snapshot() (map[string]string, error)
}

// WaiterCounter is a store that reports its long-polls: the claims waiting
// on a queue and the acquires waiting for a lease. The long-poll tests use
// it to know that a claim is waiting before they enqueue.
type WaiterCounter interface {
	WaitingClaims(queue string) int
	WaitingAcquires(name string) int
}

// Checker is a store that can check its own integrity (indexes, counts);
// the model test runs it after every step.
type Checker interface {
	Check() error
}

// test is one test of the suite.
type test struct {
	name string
	run  func(t *testing.T, newStore Factory)
}

// Run runs every test of the suite against stores from newStore.
func Run(t *testing.T, newStore Factory) {
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { tc.run(t, newStore) })
	}
}

var ctx = context.Background()

func newFakeClock() *testclock.Clock {
	return testclock.New(time.Date(2031, 3, 14, 15, 9, 26, 0, time.UTC))
}

// testRules are the rules most tests use: the fake clock and a fixed
// jitter, so that a backoff is a known number.
func testRules(clk *testclock.Clock) db.Rules {
	return db.Rules{Now: clk.Now, Random: func() float64 { return 0.5 }}
}

// fenced names a caller of principal "local".
func fenced(id uint64, worker string, token uint64) db.Fenced {
	return db.Fenced{ID: id, Principal: "local", Worker: worker, FencingToken: token}
}

func durationPtr(d time.Duration) *time.Duration { return &d }

func mustEnqueue(tb testing.TB, s db.Store, req db.EnqueueRequest) db.Job {
	tb.Helper()
	if req.Principal == "" {
		req.Principal = "local"
	}
	res, err := s.EnqueueJob(context.Background(), req)
	if err != nil {
		tb.Fatalf("EnqueueJob(%+v) error = %v", req, err)
	}
	if !res.Created {
		tb.Fatalf("EnqueueJob(%+v) Created = false, want true", req)
	}
	return res.Job
}

// mustClaim claims one job for local|worker and fails unless it got one.
func mustClaim(tb testing.TB, s db.Store, worker string, lease time.Duration, queues ...string) db.Job {
	tb.Helper()
	jobs, err := s.ClaimJobs(context.Background(), db.ClaimRequest{Principal: "local", Worker: worker, Queues: queues, Lease: lease})
	if err != nil {
		tb.Fatalf("ClaimJobs(%s, %v) error = %v", worker, queues, err)
	}
	if len(jobs) != 1 {
		tb.Fatalf("ClaimJobs(%s, %v) returned %d jobs, want 1", worker, queues, len(jobs))
	}
	return jobs[0]
}

// mustClaimNothing fails unless a claim for local|worker finds no job.
func mustClaimNothing(tb testing.TB, s db.Store, worker string, queues ...string) {
	tb.Helper()
	jobs, err := s.ClaimJobs(context.Background(), db.ClaimRequest{Principal: "local", Worker: worker, Queues: queues})
	if err != nil {
		tb.Fatalf("ClaimJobs(%s, %v) error = %v", worker, queues, err)
	}
	if len(jobs) != 0 {
		tb.Fatalf("ClaimJobs(%s, %v) returned job %d (state %s), want none", worker, queues, jobs[0].ID, jobs[0].State)
	}
}

// storedJob is job id as the store returns it, in the rules' record form
// (times as Unix nanoseconds), so that tests state a change as the fields a
// transition sets. Budget is not visible through the interface; it is
// always 0 here (retry shows it, through MaxAttempts).
func storedJob(tb testing.TB, s db.Store, id uint64) *db.JobRecord {
	tb.Helper()
	j, err := s.GetJob(context.Background(), id)
	if err != nil {
		tb.Fatalf("GetJob(%d) error = %v", id, err)
	}
	return recordOf(j)
}

func recordOf(j db.Job) *db.JobRecord {
	r := &db.JobRecord{ID: j.ID, Queue: j.Queue, Kind: j.Kind, Payload: bytesOf(j.Payload), Priority: j.Priority,
		State: j.State, Attempts: j.Attempts, MaxAttempts: j.MaxAttempts, ClaimedBy: j.ClaimedBy,
		LeaseExpiresAt: db.UnixNano(j.LeaseExpiresAt), RunAt: db.UnixNano(j.RunAt), CreatedAt: db.UnixNano(j.CreatedAt),
		UpdatedAt: db.UnixNano(j.UpdatedAt), CompletedAt: db.UnixNano(j.CompletedAt), LastError: j.LastError,
		Result: bytesOf(j.Result), Attestation: bytesOf(j.Attestation), IdempotencyKey: j.IdempotencyKey}
	for _, e := range j.Errors {
		r.Errors = append(r.Errors, db.ErrorRecord{Attempt: e.Attempt, At: db.UnixNano(e.At), Error: e.Error})
	}
	return r
}

func bytesOf(m json.RawMessage) []byte {
	if len(m) == 0 {
		return nil
	}
	return []byte(m)
}

func auditSeq(tb testing.TB, s db.Store) uint64 {
	tb.Helper()
	h, err := s.AuditHead(context.Background())
	if err != nil {
		tb.Fatalf("AuditHead() error = %v", err)
	}
	return h.Seq
}

// lastAudit returns the newest audit record.
func lastAudit(tb testing.TB, s db.Store) db.AuditRecord {
	tb.Helper()
	seq := auditSeq(tb, s)
	if seq == 0 {
		tb.Fatalf("audit log is empty")
	}
	recs, err := s.ListAudit(context.Background(), seq-1, 1)
	if err != nil || len(recs) != 1 {
		tb.Fatalf("ListAudit(%d, 1) = %d records, %v; want 1 record", seq-1, len(recs), err)
	}
	return recs[0]
}

// snapshot is what a store shows of its state: every job, the counts, the
// audit head and links, every lease — and, from a Snapshotter, every
// stored byte.
type snapshot map[string]string

func takeSnapshot(tb testing.TB, s db.Store) snapshot {
	tb.Helper()
	snap := snapshot{}
	c := context.Background()
	for after := uint64(0); ; {
		page, err := s.ListJobs(c, db.ListRequest{After: after, Limit: db.MaxListLimit})
		if err != nil {
			tb.Fatalf("snapshot: ListJobs: %v", err)
		}
		for _, j := range page.Jobs {
			snap[fmt.Sprintf("job %d", j.ID)] = fmt.Sprintf("%+v", j)
		}
		if page.Next == 0 {
			break
		}
		after = page.Next
	}
	stats, err := s.Stats(c)
	if err != nil {
		tb.Fatalf("snapshot: Stats: %v", err)
	}
	snap["stats"] = fmt.Sprint(stats)
	paused, err := s.PausedQueues(c)
	if err != nil {
		tb.Fatalf("snapshot: PausedQueues: %v", err)
	}
	snap["paused"] = fmt.Sprint(paused)
	head, err := s.AuditHead(c)
	if err != nil {
		tb.Fatalf("snapshot: AuditHead: %v", err)
	}
	snap["audit head"] = fmt.Sprint(head)
	counts, err := s.AuditCounts(c)
	if err != nil {
		tb.Fatalf("snapshot: AuditCounts: %v", err)
	}
	snap["audit counts"] = fmt.Sprint(counts)
	for after := ""; ; {
		page, err := s.ListLeases(c, db.ListLeasesRequest{After: after, Limit: db.MaxListLimit})
		if err != nil {
			tb.Fatalf("snapshot: ListLeases: %v", err)
		}
		for _, l := range page.Leases {
			l.Held = false // computed at the time of the read, not stored
			snap["lease "+l.Name] = fmt.Sprintf("%+v", l)
		}
		if page.Next == "" {
			break
		}
		after = page.Next
	}
	refused, err := s.ListRefusedCalls(c, db.RefusedCallsRequest{Limit: db.MaxListLimit})
	if err != nil {
		tb.Fatalf("snapshot: ListRefusedCalls: %v", err)
	}
	snap[observedKey+"refused calls"] = fmt.Sprintf("%+v", refused)
	workers, err := s.ListWorkers(c, db.WorkersRequest{Limit: db.MaxListLimit})
	if err != nil {
		tb.Fatalf("snapshot: ListWorkers: %v", err)
	}
	snap[observedKey+"workers"] = fmt.Sprintf("%+v", workers)
	if sn, ok := s.(Snapshotter); ok {
		raw, err := sn.Snapshot()
		if err != nil {
			tb.Fatalf("snapshot: %v", err)
		}
		for k, v := range raw {
			snap["stored "+k] = v
		}
	}
	return snap
}

// observedKey starts the keys of a snapshot that hold observations
// (refused calls, workers) rather than queue state.
const observedKey = "observed "

// withoutObservations is the snapshot without the observations: the
// queue's own state. A stored key is an observation when its bucket or
// table is named for refused calls or workers.
func (a snapshot) withoutObservations() snapshot {
	out := snapshot{}
	for k, v := range a {
		name := strings.TrimPrefix(k, "stored ")
		if strings.HasPrefix(k, observedKey) || (name != k && (strings.Contains(strings.SplitN(name, "/", 2)[0], "refused") ||
			strings.Contains(strings.SplitN(name, "/", 2)[0], "workers"))) {
			continue
		}
		out[k] = v
	}
	return out
}

// diff lists the keys whose values differ between two snapshots.
func (a snapshot) diff(b snapshot) []string {
	var out []string
	for k, v := range a {
		w, ok := b[k]
		switch {
		case !ok:
			out = append(out, "removed "+k)
		case v != w:
			out = append(out, "changed "+k)
		}
	}
	for k := range b {
		if _, ok := a[k]; !ok {
			out = append(out, "added "+k)
		}
	}
	sort.Strings(out)
	return out
}

// assertUnchanged fails when the store changed between before and now.
func assertUnchanged(tb testing.TB, s db.Store, before snapshot, what string) {
	tb.Helper()
	if d := before.diff(takeSnapshot(tb, s)); len(d) > 0 {
		tb.Errorf("%s changed the store: %s; want no change", what, strings.Join(d, ", "))
	}
}

func ptr[T any](v T) *T { return &v }

// rawJob is job id as the store shows it, as text (nil when there is none),
// for before/after comparisons; with a Snapshotter, assertUnchanged
// compares its stored bytes too.
func rawJob(tb testing.TB, s db.Store, id uint64) []byte {
	tb.Helper()
	j, err := s.GetJob(context.Background(), id)
	if db.ErrorCode(err) == db.CodeNotFound {
		return nil
	}
	if err != nil {
		tb.Fatalf("GetJob(%d) error = %v", id, err)
	}
	return fmt.Appendf(nil, "%+v", j)
}

// auditHead is the audit head as text.
func auditHead(tb testing.TB, s db.Store) []byte {
	tb.Helper()
	h, err := s.AuditHead(context.Background())
	if err != nil {
		tb.Fatalf("AuditHead() error = %v", err)
	}
	return fmt.Appendf(nil, "%+v", h)
}

// CommitCounter is a store that counts its commits (the bbolt engine's
// group commits). The tests that show an operation costs one commit, or
// none, need it.
type CommitCounter interface {
	CommitStats() (commits, ops uint64)
}

// commits returns the store's commit count, or skips the test when the
// store does not count them.
func commits(t testing.TB, s db.Store) uint64 {
	t.Helper()
	cc, ok := s.(CommitCounter)
	if !ok {
		t.Skipf("%T does not count its commits (dbtest.CommitCounter)", s)
	}
	n, _ := cc.CommitStats()
	return n
}

// waiters returns the store's long-poll counts, or skips the test when
// the store does not report them.
func waiters(t testing.TB, s db.Store) WaiterCounter {
	t.Helper()
	wc, ok := s.(WaiterCounter)
	if !ok {
		t.Skipf("%T does not report its long-polls (dbtest.WaiterCounter)", s)
	}
	return wc
}
