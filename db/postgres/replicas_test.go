package postgres

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fenceq/fenceq/db"
	"github.com/jackc/pgx/v5"
)

var bg = context.Background()

func TestOpen_ThreeReplicasStartingAtOnceMigrateOnce(t *testing.T) {
	u := newTestDB(t)
	var wg sync.WaitGroup
	errs := make([]error, 3)
	stores := make([]*Store, 3)
	for i := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			stores[i], errs[i] = Open(bg, u, Options{})
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("replica %d: Open() error = %v", i, err)
		}
		defer stores[i].Close()
	}
	var rows, version int
	if err := stores[0].pool.QueryRow(bg, `SELECT count(*), max(version) FROM fenceq_schema`).Scan(&rows, &version); err != nil {
		t.Fatal(err)
	}
	if rows != SchemaVersion() || version != SchemaVersion() {
		t.Fatalf("fenceq_schema has %d rows up to version %d, want %d rows up to %d (each migration applied once)", rows, version, SchemaVersion(), SchemaVersion())
	}
	// All three serve the same queue.
	res, err := stores[0].EnqueueJob(bg, db.EnqueueRequest{Principal: "p", Queue: "q"})
	if err != nil {
		t.Fatal(err)
	}
	got, err := stores[2].GetJob(bg, res.Job.ID)
	if err != nil || got.ID != res.Job.ID {
		t.Fatalf("GetJob through another replica = %+v, %v", got, err)
	}
}

func TestOpen_RefusesASchemaNewerThanTheBinary(t *testing.T) {
	u := newTestDB(t)
	s := mustOpen(t, u, Options{})
	if _, err := s.pool.Exec(bg, `INSERT INTO fenceq_schema (version) VALUES ($1)`, SchemaVersion()+1); err != nil {
		t.Fatal(err)
	}
	_, err := Open(bg, u, Options{})
	want := fmt.Sprintf("has schema version %d and this build reads versions up to %d", SchemaVersion()+1, SchemaVersion())
	if !errors.Is(err, db.ErrSchemaNewer) || !strings.Contains(err.Error(), want) {
		t.Fatalf("Open() on a newer schema = %v, want an error saying %q", err, want)
	}
	var n int
	if err := s.pool.QueryRow(bg, `SELECT count(*) FROM fenceq_schema`).Scan(&n); err != nil || n != SchemaVersion()+1 {
		t.Fatalf("fenceq_schema rows after the refused start = %d, %v; want %d (nothing changed)", n, err, SchemaVersion()+1)
	}
}

func TestOpen_BadInputFailsWithAClearError(t *testing.T) {
	base, err := url.Parse(testURL(t))
	if err != nil {
		t.Fatal(err)
	}
	wrongPassword := *base
	wrongPassword.User = url.UserPassword(base.User.Username(), "not-the-password")
	tests := []struct {
		name, url, want string
	}{
		{"malformed URL", "postgres://user:pa%zz@127.0.0.1/db", "db: postgres: the database URL is malformed"},
		{"connection refused", "postgres://user:secret@127.0.0.1:1/db?connect_timeout=5", "db: postgres: cannot connect to 127.0.0.1:1: connect: connection refused"},
		{"wrong password", wrongPassword.String(), "refused the login of user \"" + base.User.Username() + "\": password authentication failed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := Open(bg, tt.url, Options{ConnectTimeout: 5 * time.Second})
			if err == nil {
				s.Close()
				t.Fatalf("Open(%s) = nil error, want %q", tt.name, tt.want)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Open(%s) error = %q, want it to contain %q", tt.name, err, tt.want)
			}
			if strings.Contains(err.Error(), "not-the-password") || strings.Contains(err.Error(), "secret") {
				t.Fatalf("Open(%s) error = %q shows the password", tt.name, err)
			}
		})
	}
}

// TestReplicas_AClockMinutesAheadCannotReclaimALiveLease: leases end by
// the database's clock, so a replica whose own clock runs ahead takes
// nothing early; once the lease has really ended, it reclaims.
func TestReplicas_AClockMinutesAheadCannotReclaimALiveLease(t *testing.T) {
	u := newTestDB(t)
	a := mustOpen(t, u, Options{})
	b := mustOpen(t, u, Options{LocalClockSkew: 10 * time.Minute})
	mustEnqueueJob(t, a, db.EnqueueRequest{Principal: "p", Queue: "q"})
	claim := func(s *Store, worker string, lease time.Duration) []db.Job {
		t.Helper()
		jobs, err := s.ClaimJobs(bg, db.ClaimRequest{Principal: "p", Worker: worker, Queues: []string{"q"}, Lease: lease})
		if err != nil {
			t.Fatalf("ClaimJobs(%s) error = %v", worker, err)
		}
		return jobs
	}
	first := claim(a, "w-a", 400*time.Millisecond)
	if len(first) != 1 {
		t.Fatalf("claim through A = %d jobs, want 1", len(first))
	}
	if jobs := claim(b, "w-b", time.Minute); len(jobs) != 0 {
		t.Fatalf("B, 10 minutes ahead, reclaimed job %d (token %d) while A's lease was live", jobs[0].ID, jobs[0].Attempts)
	}
	if j, err := b.GetJob(bg, first[0].ID); err != nil || j.ClaimedBy != "p|w-a" || j.Attempts != 1 {
		t.Fatalf("job through B = %+v, %v; want still claimed by p|w-a with token 1", j, err)
	}
	time.Sleep(time.Until(first[0].LeaseExpiresAt) + 50*time.Millisecond)
	again := claim(b, "w-b", time.Minute)
	if len(again) != 1 || again[0].Attempts != 2 || again[0].ClaimedBy != "p|w-b" {
		t.Fatalf("claim through B after the lease ended = %+v, want the job with token 2", again)
	}
}

// TestReplicas_RacingTheSameIdempotencyKeyFailsNobody: two replicas
// enqueue the same key many times at once, among other enqueues sharing
// their transactions; every request succeeds, one job holds the key.
func TestReplicas_RacingTheSameIdempotencyKeyFailsNobody(t *testing.T) {
	u := newTestDB(t)
	stores := []*Store{mustOpen(t, u, Options{}), mustOpen(t, u, Options{})}
	const per = 20
	type result struct {
		res db.EnqueueResult
		err error
		key string
	}
	results := make(chan result, 2*per*2)
	var wg sync.WaitGroup
	for si, s := range stores {
		for i := range per {
			wg.Add(2)
			go func() {
				defer wg.Done()
				r, err := s.EnqueueJob(bg, db.EnqueueRequest{Principal: "p", Queue: "q", IdempotencyKey: "same"})
				results <- result{r, err, "same"}
			}()
			go func() {
				defer wg.Done()
				key := fmt.Sprintf("own-%d-%d", si, i)
				r, err := s.EnqueueJob(bg, db.EnqueueRequest{Principal: "p", Queue: "q", IdempotencyKey: key})
				results <- result{r, err, key}
			}()
		}
	}
	wg.Wait()
	close(results)
	created, sameID := 0, uint64(0)
	for r := range results {
		if r.err != nil {
			t.Fatalf("enqueue %s error = %v; want every request to succeed", r.key, r.err)
		}
		if r.key != "same" {
			if !r.res.Created {
				t.Errorf("enqueue %s Created = false, want a new job", r.key)
			}
			continue
		}
		if r.res.Created {
			created++
		}
		if sameID == 0 {
			sameID = r.res.Job.ID
		}
		if r.res.Job.ID != sameID {
			t.Errorf("enqueue with key same returned job %d and job %d; want one job", sameID, r.res.Job.ID)
		}
	}
	if created != 1 {
		t.Errorf("%d enqueues with key same created a job, want 1", created)
	}
	stats, err := stores[1].Stats(bg)
	if err != nil || len(stats) != 1 || stats[0].Counts[db.StateAvailable] != 2*per+1 {
		t.Errorf("Stats() = %+v, %v; want %d available jobs", stats, err, 2*per+1)
	}
}

// TestBatch_OneMutationsSQLErrorFailsOnlyIt: a statement PostgreSQL
// refuses in one mutation of a shared transaction fails that mutation
// alone: the batch is rolled back and runs each mutation in a transaction
// of its own (no savepoints); the others commit, once each.
func TestBatch_OneMutationsSQLErrorFailsOnlyIt(t *testing.T) {
	s := mustOpenStore(t, db.Rules{})
	// Hold the commit loop with a first mutation, so that the next ones
	// queue up and share one transaction.
	release := make(chan struct{})
	started := make(chan struct{})
	go func() {
		_ = s.update(bg, func(w *writer) error {
			close(started)
			<-release
			return nil
		})
	}()
	<-started
	var wg sync.WaitGroup
	errs := make([]error, 6)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if i == 3 {
				errs[i] = s.update(bg, func(w *writer) error {
					if _, err := enqueue(w, db.EnqueueRequest{Principal: "p", Queue: "bad", MaxAttempts: 1}); err != nil {
						return err
					}
					_, err := w.tx.Exec(w.ctx, `SELECT 1/0`) // division_by_zero, after a write
					return err
				})
				return
			}
			_, errs[i] = s.EnqueueJob(bg, db.EnqueueRequest{Principal: "p", Queue: "good"})
		}()
	}
	time.Sleep(100 * time.Millisecond) // the six queue behind the first
	close(release)
	wg.Wait()
	for i, err := range errs {
		if i == 3 {
			if err == nil || !strings.Contains(err.Error(), "division by zero") {
				t.Errorf("the failing mutation's error = %v, want its SQL error", err)
			}
			continue
		}
		if err != nil {
			t.Errorf("mutation %d error = %v; want it committed despite another's SQL error", i, err)
		}
	}
	stats, err := s.Stats(bg)
	if err != nil || len(stats) != 1 || stats[0].Queue != "good" || stats[0].Counts[db.StateAvailable] != 5 {
		t.Fatalf("Stats() = %+v, %v; want 5 jobs in good and none of the failed mutation's", stats, err)
	}
	if rep, err := s.VerifyAudit(bg); err != nil || !rep.OK || rep.Records != 5 {
		t.Fatalf("VerifyAudit() = %+v, %v; want 5 links, verified", rep, err)
	}
	if c, ops := s.CommitStats(); c > 3 || ops != 7 {
		t.Logf("commits %d for %d mutations", c, ops)
	}
}

// TestReplicas_OneAuditChainAndIncreasingLeaseTokens: three replicas
// acquire and release one named lease in turn and enqueue at once; the
// tokens only grow and the one chain verifies, its links in order.
func TestReplicas_OneAuditChainAndIncreasingLeaseTokens(t *testing.T) {
	u := newTestDB(t)
	stores := []*Store{mustOpen(t, u, Options{}), mustOpen(t, u, Options{}), mustOpen(t, u, Options{})}
	var mu sync.Mutex
	var tokens []uint64
	var wg sync.WaitGroup
	for i, s := range stores {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; n < 10; n++ {
				l, err := s.AcquireLease(bg, db.AcquireLeaseRequest{Principal: "p", Name: "/leader", Holder: fmt.Sprint("r", i), TTL: time.Minute, Wait: 10 * time.Second})
				if err != nil {
					t.Errorf("replica %d: AcquireLease error = %v", i, err)
					return
				}
				mu.Lock()
				if len(tokens) > 0 && l.FencingToken <= tokens[len(tokens)-1] {
					t.Errorf("replica %d got token %d after %d; want strictly increasing", i, l.FencingToken, tokens[len(tokens)-1])
				}
				tokens = append(tokens, l.FencingToken)
				mu.Unlock()
				if _, err := s.EnqueueJob(bg, db.EnqueueRequest{Principal: "p", Queue: "q"}); err != nil {
					t.Errorf("replica %d: enqueue error = %v", i, err)
				}
				if _, err := s.ReleaseLease(bg, db.ReleaseLeaseRequest{Principal: "p", Name: "/leader", Holder: fmt.Sprint("r", i), FencingToken: l.FencingToken}); err != nil {
					t.Errorf("replica %d: ReleaseLease error = %v", i, err)
				}
			}
		}()
	}
	wg.Wait()
	if len(tokens) != 30 || tokens[29] != 30 {
		t.Fatalf("tokens = %v, want 1..30", tokens)
	}
	rep, err := stores[1].VerifyAudit(bg)
	if err != nil || !rep.OK || rep.Records != 90 {
		t.Fatalf("VerifyAudit() = %+v, %v; want 90 links verified", rep, err)
	}
	recs, err := stores[2].ListAudit(bg, 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i < len(recs); i++ {
		if recs[i].Time.Before(recs[i-1].Time) {
			t.Errorf("link %d at %v is before link %d at %v; the batches' times follow the chain", recs[i].Seq, recs[i].Time, recs[i-1].Seq, recs[i-1].Time)
		}
	}
}

// TestReplicas_LongPollOnBIsWokenByAnEnqueueOnA: the waiter on B sleeps
// until A's commit notifies it.
func TestReplicas_LongPollOnBIsWokenByAnEnqueueOnA(t *testing.T) {
	u := newTestDB(t)
	a, b := mustOpen(t, u, Options{}), mustOpen(t, u, Options{})
	for _, tc := range []struct {
		name    string
		prepare func(t *testing.T) func() // returns what makes a job available through A
	}{
		{"enqueue", func(t *testing.T) func() {
			return func() {
				// Weaker across replicas: A's transaction does not hand the
				// job to B's waiter (it would within one replica); B is
				// woken and claims in a transaction of its own.
				if j := mustEnqueueJob(t, a, db.EnqueueRequest{Principal: "p", Queue: "q"}); j.State != db.StateAvailable {
					t.Errorf("enqueue through A = %s, want available (handed to nobody on A)", j.State)
				}
			}
		}},
		{"fail without delay", func(t *testing.T) func() {
			j := mustEnqueueJob(t, a, db.EnqueueRequest{Principal: "p", Queue: "q"})
			got, err := a.ClaimJobs(bg, db.ClaimRequest{Principal: "p", Worker: "w", Queues: []string{"q"}, Lease: time.Minute})
			if err != nil || len(got) != 1 {
				t.Fatalf("ClaimJobs() = %v, %v", got, err)
			}
			return func() {
				zero := time.Duration(0)
				if _, err := a.FailJob(bg, db.FailRequest{Fenced: db.Fenced{ID: j.ID, Principal: "p", Worker: "w", FencingToken: 1}, Error: "x", RetryDelay: &zero}); err != nil {
					t.Error(err)
				}
			}
		}},
		{"retry", func(t *testing.T) func() {
			j := mustEnqueueJob(t, a, db.EnqueueRequest{Principal: "p", Queue: "q", Delay: time.Hour})
			if _, err := a.CancelJob(bg, db.JobRequest{Principal: "p", ID: j.ID}); err != nil {
				t.Fatal(err)
			}
			return func() {
				if _, err := a.RetryJob(bg, db.JobRequest{Principal: "p", ID: j.ID}); err != nil {
					t.Error(err)
				}
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			makeAvailable := tc.prepare(t)
			got := make(chan []db.Job, 1)
			go func() {
				jobs, err := b.ClaimJobs(bg, db.ClaimRequest{Principal: "p", Worker: "wb", Queues: []string{"q"}, Wait: 20 * time.Second})
				if err != nil {
					t.Error(err)
				}
				got <- jobs
			}()
			waitSleeping(t, b, "q")
			start := time.Now()
			makeAvailable()
			select {
			case jobs := <-got:
				if len(jobs) != 1 || jobs[0].ClaimedBy != "p|wb" {
					t.Fatalf("B's long-poll got %+v, want the job", jobs)
				}
				t.Logf("woken %v after the %s on A", time.Since(start), tc.name)
				if _, err := b.CompleteJob(bg, db.CompleteRequest{Fenced: db.Fenced{ID: jobs[0].ID, Principal: "p", Worker: "wb", FencingToken: jobs[0].Attempts}}); err != nil {
					t.Fatal(err)
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("B's long-poll was not woken by the %s on A", tc.name)
			}
		})
	}
}

// TestReplicas_ALongPollWakesAtRunAtOfAJobScheduledThroughAnotherReplica:
// B learns the run_at from A's notification and sleeps until then, not
// until its wait ends.
func TestReplicas_ALongPollWakesAtRunAtOfAJobScheduledThroughAnotherReplica(t *testing.T) {
	u := newTestDB(t)
	a, b := mustOpen(t, u, Options{}), mustOpen(t, u, Options{})
	got := make(chan []db.Job, 1)
	start := time.Now()
	go func() {
		jobs, err := b.ClaimJobs(bg, db.ClaimRequest{Principal: "p", Worker: "wb", Queues: []string{"q"}, Wait: 30 * time.Second})
		if err != nil {
			t.Error(err)
		}
		got <- jobs
	}()
	waitSleeping(t, b, "q")
	j := mustEnqueueJob(t, a, db.EnqueueRequest{Principal: "p", Queue: "q", Delay: 500 * time.Millisecond})
	select {
	case jobs := <-got:
		if len(jobs) != 1 || jobs[0].ID != j.ID {
			t.Fatalf("B's long-poll got %+v, want job %d", jobs, j.ID)
		}
		if now := time.Now(); now.Before(j.RunAt.Add(-50 * time.Millisecond)) {
			t.Fatalf("claimed at %v, before the run_at %v", now, j.RunAt)
		}
		t.Logf("claimed %v after the wait began (run_at %v after)", time.Since(start), j.RunAt.Sub(start))
	case <-time.After(10 * time.Second):
		t.Fatal("B's long-poll did not wake at the run_at")
	}
}

func TestBackup_NamesPgDump(t *testing.T) {
	s := mustOpenStore(t, db.Rules{})
	_, err := s.Backup(bg, nil)
	if db.ErrorCode(err) != db.CodeConflict || !strings.Contains(err.Error(), "pg_dump") {
		t.Fatalf("Backup() = %v, want a refusal that names pg_dump", err)
	}
}

// TestSweep_OneReplicaAtATime: while one replica holds the sweep's
// advisory lock, another's Sweep deletes nothing; then it sweeps.
func TestSweep_OneReplicaAtATime(t *testing.T) {
	u := newTestDB(t)
	a, b := mustOpen(t, u, Options{}), mustOpen(t, u, Options{})
	j := mustEnqueueJob(t, a, db.EnqueueRequest{Principal: "p", Queue: "q"})
	if _, err := a.CancelJob(bg, db.JobRequest{Principal: "p", ID: j.ID}); err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(bg, u)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(bg)
	if _, err := conn.Exec(bg, `SELECT pg_advisory_lock($1)`, int64(sweepLock)); err != nil {
		t.Fatal(err)
	}
	if n, err := b.Sweep(bg, 0); err != nil || n != 0 {
		t.Fatalf("Sweep() while another holds the lock = %d, %v; want 0", n, err)
	}
	if _, err := b.GetJob(bg, j.ID); err != nil {
		t.Fatalf("job after the skipped sweep: %v", err)
	}
	if _, err := conn.Exec(bg, `SELECT pg_advisory_unlock($1)`, int64(sweepLock)); err != nil {
		t.Fatal(err)
	}
	if n, err := b.Sweep(bg, 0); err != nil || n != 1 {
		t.Fatalf("Sweep() = %d, %v; want 1", n, err)
	}
	if _, err := a.GetJob(bg, j.ID); db.ErrorCode(err) != db.CodeNotFound {
		t.Fatalf("swept job through A: %v, want not found", err)
	}
}

func mustEnqueueJob(tb testing.TB, s *Store, req db.EnqueueRequest) db.Job {
	tb.Helper()
	r, err := s.EnqueueJob(bg, req)
	if err != nil {
		tb.Fatalf("EnqueueJob() error = %v", err)
	}
	return r.Job
}

func waitSleeping(tb testing.TB, s *Store, queue string) {
	tb.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for s.WaitingClaims(queue) == 0 {
		if time.Now().After(deadline) {
			tb.Fatalf("no claim is waiting on %s", queue)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// BenchmarkCrossReplicaWakeUp: a worker long-polls on replica B; each job
// is enqueued through replica A once the worker waits. It reports the time
// from the enqueue's call to the worker's claim returning (p50, p99).
func BenchmarkCrossReplicaWakeUp(b *testing.B) {
	u := newTestDB(b)
	a, r := mustOpen(b, u, Options{}), mustOpen(b, u, Options{})
	var lat []time.Duration
	b.ResetTimer()
	for range b.N {
		got := make(chan time.Time, 1)
		go func() {
			jobs, err := r.ClaimJobs(bg, db.ClaimRequest{Principal: "p", Worker: "w", Queues: []string{"q"}, Wait: 10 * time.Second})
			if err != nil || len(jobs) != 1 {
				b.Errorf("claim on B = %v, %v", jobs, err)
			}
			got <- time.Now()
		}()
		waitSleeping(b, r, "q")
		start := time.Now()
		mustEnqueueJob(b, a, db.EnqueueRequest{Principal: "p", Queue: "q"})
		lat = append(lat, (<-got).Sub(start))
	}
	b.StopTimer()
	slices.Sort(lat)
	if len(lat) > 0 {
		b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
		b.ReportMetric(float64(lat[min(len(lat)-1, len(lat)*99/100)].Microseconds())/1000, "p99-ms")
	}
}
