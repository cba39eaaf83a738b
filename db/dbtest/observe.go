package dbtest

import (
	"fmt"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/fenceq/fenceq/db"
)

// Tests of what the status page shows besides the jobs (db/observe.go):
// queue latency, the jobs waiting for a retry, refused calls and workers.

func testQueueWaitingIsTheOldestAvailableJobOfEachQueue(t *testing.T, newStore Factory) {
	s, clk := newStatusStore(t, newStore)
	t0 := clk.Now()
	oldLow := statusEnqueue(t, s, db.EnqueueRequest{Queue: "a"})
	clk.Advance(time.Second)
	high1 := statusEnqueue(t, s, db.EnqueueRequest{Queue: "a", Priority: 5})
	clk.Advance(time.Second)
	statusEnqueue(t, s, db.EnqueueRequest{Queue: "a", Priority: 5})
	clk.Advance(time.Second)
	b := statusEnqueue(t, s, db.EnqueueRequest{Queue: "b", Priority: -3})
	statusEnqueue(t, s, db.EnqueueRequest{Queue: "c", Delay: time.Hour}) // scheduled: not waiting
	clk.Advance(time.Second)

	got := queueWaiting(t, s)
	want := []db.QueueWaiting{
		{Queue: "a", Job: oldLow.ID, Since: t0},
		{Queue: "b", Job: b.ID, Since: t0.Add(3 * time.Second)},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("QueueWaiting() = %v, want %v", got, want)
	}

	// Claims take the higher priority first: the oldest job still waits.
	if j := statusClaim(t, s, "a", time.Minute); j.ID != high1.ID {
		t.Fatalf("claim took job %d, want %d", j.ID, high1.ID)
	}
	statusClaim(t, s, "a", time.Minute)
	if got := queueWaiting(t, s); len(got) != 2 || got[0].Job != oldLow.ID {
		t.Fatalf("QueueWaiting() after claiming the high priority jobs = %v, want job %d first", got, oldLow.ID)
	}
	// A failure retried at once waits from the failure, not its enqueue.
	j := statusClaim(t, s, "a", time.Minute)
	clk.Advance(time.Second)
	failedAt := clk.Now()
	if _, err := s.FailJob(ctx, db.FailRequest{Fenced: db.Fenced{ID: j.ID, Principal: "p", Worker: "w", FencingToken: j.Attempts},
		Error: "boom", RetryDelay: durationPtr(0)}); err != nil {
		t.Fatalf("FailJob() error = %v", err)
	}
	if got := queueWaiting(t, s); len(got) != 2 || got[0].Job != j.ID || !got[0].Since.Equal(failedAt) {
		t.Fatalf("QueueWaiting() after a failure retried at once = %v, want job %d since %v", got, j.ID, failedAt)
	}
	statusClaim(t, s, "a", time.Minute)
	if got := queueWaiting(t, s); len(got) != 1 || got[0].Queue != "b" {
		t.Fatalf("QueueWaiting() with queue a empty = %v, want only b", got)
	}
}

func queueWaiting(t *testing.T, s db.Store) []db.QueueWaiting {
	t.Helper()
	got, err := s.QueueWaiting(ctx)
	if err != nil {
		t.Fatalf("QueueWaiting() error = %v", err)
	}
	return got
}

func testScheduledJobsListApartThoseWaitingForARetry(t *testing.T, newStore Factory) {
	s, clk := newStatusStore(t, newStore)
	delayed := statusEnqueue(t, s, db.EnqueueRequest{Queue: "a", Delay: time.Hour})
	statusEnqueue(t, s, db.EnqueueRequest{Queue: "a"})
	j := statusClaim(t, s, "a", time.Minute)
	if _, err := s.FailJob(ctx, db.FailRequest{Fenced: db.Fenced{ID: j.ID, Principal: "p", Worker: "w", FencingToken: j.Attempts},
		Error: "disk full", RetryDelay: durationPtr(time.Minute)}); err != nil {
		t.Fatalf("FailJob() error = %v", err)
	}
	retryAt := clk.Now().Add(time.Minute)
	list := func(f db.RetryFilter) []db.Job {
		t.Helper()
		jobs, err := s.ListJobsInState(ctx, db.StateListRequest{State: db.StateScheduled, Retry: f})
		if err != nil {
			t.Fatalf("ListJobsInState(scheduled, retry %d) error = %v", f, err)
		}
		return jobs
	}
	if got := statusIDs(list(db.RetryAny)); fmt.Sprint(got) != fmt.Sprint([]uint64{j.ID, delayed.ID}) {
		t.Errorf("scheduled jobs = %v, want %v", got, []uint64{j.ID, delayed.ID})
	}
	retrying := list(db.RetryOnly)
	if len(retrying) != 1 || retrying[0].ID != j.ID || retrying[0].LastError != "disk full" ||
		!retrying[0].RunAt.Equal(retryAt) || !retrying[0].Retrying() {
		t.Errorf("jobs waiting for a retry = %+v, want job %d with its last error and next attempt at %v", retrying, j.ID, retryAt)
	}
	if got := statusIDs(list(db.RetryNone)); fmt.Sprint(got) != fmt.Sprint([]uint64{delayed.ID}) {
		t.Errorf("scheduled jobs never attempted = %v, want %v", got, []uint64{delayed.ID})
	}
	if _, err := s.ListJobsInState(ctx, db.StateListRequest{State: db.StateClaimed, Retry: db.RetryOnly}); db.ErrorCode(err) != db.CodeInvalid {
		t.Errorf("ListJobsInState(claimed, retry only) error = %v, want %s", err, db.CodeInvalid)
	}
}

func refusedCalls(t *testing.T, s db.Store, req db.RefusedCallsRequest) []db.RefusedCall {
	t.Helper()
	got, err := s.ListRefusedCalls(ctx, req)
	if err != nil {
		t.Fatalf("ListRefusedCalls(%+v) error = %v", req, err)
	}
	return got
}

func testRefusedCallsAreKeptNewestFirstBoundedAndChangeNoJob(t *testing.T, newStore Factory) {
	s, clk := newStatusStore(t, newStore)
	job := statusEnqueue(t, s, db.EnqueueRequest{Queue: "a"})
	before := takeSnapshot(t, s)
	t0 := clk.Now()
	long := strings.Repeat("é", 600) // 1200 bytes
	if err := s.RecordRefusedCalls(ctx, []db.RefusedCall{
		{Principal: "p", Worker: "w1", Job: job.ID, Operation: "heartbeat", TokenSent: 1, Code: "not_found", Message: "claim not found"},
		{Principal: "p", Worker: "w2", Job: 999, Operation: "complete", TokenSent: 2, Code: "failed_precondition", Message: long},
	}); err != nil {
		t.Fatalf("RecordRefusedCalls() error = %v", err)
	}
	clk.Advance(time.Second)
	if err := s.RecordRefusedCalls(ctx, []db.RefusedCall{{Worker: "w1", Job: job.ID, Operation: "fail", Code: "not_found"}}); err != nil {
		t.Fatalf("RecordRefusedCalls() error = %v", err)
	}
	// Recording a refusal changes no job and appends no audit link.
	if d := before.withoutObservations().diff(takeSnapshot(t, s).withoutObservations()); len(d) != 0 {
		t.Errorf("RecordRefusedCalls changed the jobs or the audit chain: %v", d)
	}
	all := refusedCalls(t, s, db.RefusedCallsRequest{})
	if len(all) != 3 || all[0].Operation != "fail" || all[1].Worker != "w2" || all[2].Worker != "w1" {
		t.Fatalf("ListRefusedCalls() = %+v, want fail, complete, heartbeat (newest first)", all)
	}
	if !(all[0].Seq > all[1].Seq && all[1].Seq > all[2].Seq) || !all[2].At.Equal(t0) || !all[0].At.Equal(t0.Add(time.Second)) {
		t.Errorf("ListRefusedCalls() seqs and times = %+v, want decreasing seqs, times %v and %v", all, t0.Add(time.Second), t0)
	}
	if c := all[2]; c.Principal != "p" || c.Job != job.ID || c.TokenSent != 1 || c.Code != "not_found" || c.Message != "claim not found" {
		t.Errorf("refused heartbeat = %+v, want every field as recorded", c)
	}
	if m := all[1].Message; len(m) > 1024 || !utf8.ValidString(m) || !strings.HasPrefix(long, m) {
		t.Errorf("a long message was kept as %d bytes (valid UTF-8 %v), want a prefix of at most 1024", len(m), utf8.ValidString(m))
	}
	if got := refusedCalls(t, s, db.RefusedCallsRequest{Job: job.ID}); len(got) != 2 || got[0].Operation != "fail" || got[1].Operation != "heartbeat" {
		t.Errorf("ListRefusedCalls(job %d) = %+v, want its fail and heartbeat, newest first", job.ID, got)
	}
	if got := refusedCalls(t, s, db.RefusedCallsRequest{Job: job.ID + 1}); len(got) != 0 {
		t.Errorf("ListRefusedCalls(job without refusals) = %+v, want none", got)
	}
	if got := refusedCalls(t, s, db.RefusedCallsRequest{Limit: 1}); len(got) != 1 || got[0].Seq != all[0].Seq {
		t.Errorf("ListRefusedCalls(limit 1) = %+v, want the newest", got)
	}

	// Bad batches are refused and write nothing.
	mid := takeSnapshot(t, s)
	for name, calls := range map[string][]db.RefusedCall{
		"empty":     {},
		"operation": {{Job: 1, Operation: "claim"}},
		"too many":  make([]db.RefusedCall, db.MaxObservationBatch+1),
	} {
		if err := s.RecordRefusedCalls(ctx, calls); err == nil {
			t.Errorf("RecordRefusedCalls(%s) = nil error, want a refusal", name)
		}
	}
	if _, err := s.ListRefusedCalls(ctx, db.RefusedCallsRequest{Limit: db.MaxListLimit + 1}); db.ErrorCode(err) != db.CodeInvalid {
		t.Errorf("ListRefusedCalls(limit too large) error = %v, want %s", err, db.CodeInvalid)
	}
	assertUnchanged(t, s, mid, "refused RecordRefusedCalls")

	// The store keeps the newest MaxRefusedCalls: more push the oldest out.
	batch := make([]db.RefusedCall, db.MaxObservationBatch)
	for i := range batch {
		batch[i] = db.RefusedCall{Worker: "flood", Job: 7, Operation: "heartbeat", Code: "not_found"}
	}
	for i := 0; i < 2; i++ {
		if err := s.RecordRefusedCalls(ctx, batch); err != nil {
			t.Fatalf("RecordRefusedCalls(%d calls) error = %v", len(batch), err)
		}
	}
	all = refusedCalls(t, s, db.RefusedCallsRequest{Limit: db.MaxListLimit})
	if len(all) != db.MaxRefusedCalls || all[len(all)-1].Worker != "flood" {
		t.Errorf("after %d more refused calls the store lists %d (oldest by %q), want the newest %d, all of the flood",
			2*len(batch), len(all), all[len(all)-1].Worker, db.MaxRefusedCalls)
	}
	if got := refusedCalls(t, s, db.RefusedCallsRequest{Job: job.ID}); len(got) != 0 {
		t.Errorf("ListRefusedCalls(job %d) after they were pushed out = %+v, want none", job.ID, got)
	}
	if got := refusedCalls(t, s, db.RefusedCallsRequest{Job: 7, Limit: db.MaxListLimit}); len(got) != db.MaxRefusedCalls {
		t.Errorf("ListRefusedCalls(job 7) = %d calls, want %d", len(got), db.MaxRefusedCalls)
	}
	if _, ok := s.(Reopener); ok {
		s2 := reopen(t, s)
		if got, err := s2.ListRefusedCalls(ctx, db.RefusedCallsRequest{Limit: 1}); err != nil || len(got) != 1 || got[0].Seq != all[0].Seq {
			t.Errorf("ListRefusedCalls() after reopening = %+v, %v; want the newest, seq %d", got, err, all[0].Seq)
		}
	}
}

func listWorkers(t *testing.T, s db.Store, limit int) []db.Worker {
	t.Helper()
	got, err := s.ListWorkers(ctx, db.WorkersRequest{Limit: limit})
	if err != nil {
		t.Fatalf("ListWorkers() error = %v", err)
	}
	return got
}

func testWorkersAreMergedListedNewestFirstAndPruned(t *testing.T, newStore Factory) {
	s, clk := newStatusStore(t, newStore)
	t0 := clk.Now()
	before := takeSnapshot(t, s)
	if err := s.RecordWorkers(ctx, []db.WorkerSighting{
		{Principal: "p", Worker: "w1", Claims: 2, LastClaim: t0},
		{Principal: "p", Worker: "w2", LastHeartbeat: t0.Add(time.Second)},
		{Principal: "p", Worker: "w1", Claims: 1, LastClaim: t0.Add(-time.Second), LastHeartbeat: t0.Add(2 * time.Second)},
	}); err != nil {
		t.Fatalf("RecordWorkers() error = %v", err)
	}
	if d := before.withoutObservations().diff(takeSnapshot(t, s).withoutObservations()); len(d) != 0 {
		t.Errorf("RecordWorkers changed the jobs or the audit chain: %v", d)
	}
	got := listWorkers(t, s, 0)
	want := []db.Worker{
		{Principal: "p", Worker: "w1", Claims: 3, FirstSeen: t0, LastSeen: t0.Add(2 * time.Second), LastClaim: t0, LastHeartbeat: t0.Add(2 * time.Second)},
		{Principal: "p", Worker: "w2", FirstSeen: t0.Add(time.Second), LastSeen: t0.Add(time.Second), LastHeartbeat: t0.Add(time.Second)},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("ListWorkers() = %+v\nwant %+v", got, want)
	}
	// Another sighting adds claims and moves w2 ahead; another principal's
	// worker of the same label is another worker.
	clk.Advance(time.Minute)
	if err := s.RecordWorkers(ctx, []db.WorkerSighting{
		{Principal: "p", Worker: "w2", Claims: 4, LastClaim: clk.Now()},
		{Principal: "q", Worker: "w1", LastClaim: clk.Now().Add(-time.Second)},
	}); err != nil {
		t.Fatalf("RecordWorkers() error = %v", err)
	}
	got = listWorkers(t, s, 0)
	if len(got) != 3 || got[0].Worker != "w2" || got[0].Claims != 4 || !got[0].FirstSeen.Equal(t0.Add(time.Second)) ||
		got[1].Principal != "q" || got[2].Principal != "p" || got[2].Worker != "w1" {
		t.Errorf("ListWorkers() after more sightings = %+v, want p|w2 (4 claims), q|w1, p|w1", got)
	}
	if got := listWorkers(t, s, 1); len(got) != 1 || got[0].Worker != "w2" {
		t.Errorf("ListWorkers(limit 1) = %+v, want p|w2", got)
	}
	for name, ss := range map[string][]db.WorkerSighting{
		"empty":    {},
		"no label": {{Principal: "p", LastClaim: t0}},
		"no time":  {{Principal: "p", Worker: "w"}},
		"long":     {{Principal: "p", Worker: strings.Repeat("x", 201), LastClaim: t0}},
	} {
		if err := s.RecordWorkers(ctx, ss); err == nil {
			t.Errorf("RecordWorkers(%s) = nil error, want a refusal", name)
		}
	}

	// Workers not heard from for WorkerRetention are removed by the next
	// write, and at most MaxWorkersKept are kept, the newest.
	clk.Advance(db.WorkerRetention + time.Hour)
	now := clk.Now()
	batch := make([]db.WorkerSighting, 0, db.MaxObservationBatch)
	for i := 0; i < db.MaxWorkersKept+5; i++ {
		batch = append(batch, db.WorkerSighting{Principal: "r", Worker: fmt.Sprintf("w%04d", i), Claims: 1,
			LastClaim: now.Add(time.Duration(i) * time.Millisecond)})
		if len(batch) == db.MaxObservationBatch || i == db.MaxWorkersKept+4 {
			if err := s.RecordWorkers(ctx, batch); err != nil {
				t.Fatalf("RecordWorkers(%d) error = %v", len(batch), err)
			}
			batch = batch[:0]
		}
	}
	got = listWorkers(t, s, db.MaxListLimit)
	if len(got) != db.MaxWorkersKept || got[0].Worker != fmt.Sprintf("w%04d", db.MaxWorkersKept+4) || got[len(got)-1].Worker != "w0005" {
		t.Errorf("ListWorkers() after %d new workers = %d workers, from %s to %s; want the newest %d, w%04d to w0005",
			db.MaxWorkersKept+5, len(got), got[0].Worker, got[len(got)-1].Worker, db.MaxWorkersKept, db.MaxWorkersKept+4)
	}
	for _, w := range got {
		if w.Principal != "r" {
			t.Errorf("worker %s|%s past the retention is still listed", w.Principal, w.Worker)
			break
		}
	}
	if _, ok := s.(Reopener); ok {
		s2 := reopen(t, s)
		if got, err := s2.ListWorkers(ctx, db.WorkersRequest{Limit: 1}); err != nil || len(got) != 1 || got[0].Worker != fmt.Sprintf("w%04d", db.MaxWorkersKept+4) {
			t.Errorf("ListWorkers() after reopening = %+v, %v", got, err)
		}
	}
}
