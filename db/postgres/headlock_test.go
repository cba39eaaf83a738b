package postgres

import (
	"sync"
	"testing"
	"time"

	"github.com/fenceq/fenceq/db"
	"github.com/jackc/pgx/v5/pgxpool"
)

// TestReplicas_OppositeLockOrdersDoNotDeadlock: two replicas whose batches
// change the same jobs and named leases in opposite orders, at once, both
// inside one mutation (HeartbeatJobs) and across the mutations of one
// batch. A batch takes those locks at its start in one order (opPlan), so
// neither PostgreSQL's deadlock detector nor a retry is ever needed.
func TestReplicas_OppositeLockOrdersDoNotDeadlock(t *testing.T) {
	u := newTestDB(t)
	a, b := mustOpen(t, u, Options{}), mustOpen(t, u, Options{})
	for range 2 {
		if _, err := a.EnqueueJob(bg, db.EnqueueRequest{Principal: "p", Queue: "q"}); err != nil {
			t.Fatal(err)
		}
	}
	jobs, err := a.ClaimJobs(bg, db.ClaimRequest{Principal: "p", Worker: "w", Queues: []string{"q"}, Lease: time.Hour, Max: 2})
	if err != nil || len(jobs) != 2 {
		t.Fatalf("ClaimJobs() = %d jobs, %v; want 2", len(jobs), err)
	}
	fenced := func(j db.Job) db.Fenced {
		return db.Fenced{ID: j.ID, Principal: "p", Worker: "w", FencingToken: j.FencingToken()}
	}
	hb := func(js ...db.Job) []db.HeartbeatRequest {
		var out []db.HeartbeatRequest
		for _, j := range js {
			out = append(out, db.HeartbeatRequest{Fenced: fenced(j), Lease: time.Hour})
		}
		return out
	}
	tokens := map[string]uint64{}
	for _, name := range []string{"x", "y"} {
		l, err := a.AcquireLease(bg, db.AcquireLeaseRequest{Principal: "p", Name: name, Holder: "h", TTL: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		tokens[name] = l.FencingToken
	}
	// One batch of several mutations, each renewing a lease or extending
	// one job's claim, in the given order.
	batchOf := func(s *Store, leases []string, js []db.Job) []*writeOp {
		var ops []*writeOp
		for i := range leases {
			req := db.RenewLeaseRequest{Principal: "p", Name: leases[i], Holder: "h", FencingToken: tokens[leases[i]], TTL: time.Hour}
			holder, ttl, err := s.opts.ValidateRenew(req)
			if err != nil {
				t.Fatal(err)
			}
			ops = append(ops, &writeOp{plan: opPlan{keys: []string{leaseKey(req.Name)}}, done: make(chan struct{}), fn: func(w *writer) error {
				old, err := getLease(w.ctx, w.tx, req.Name, true)
				if err != nil {
					return err
				}
				if old == nil {
					return db.LeaseNotFound(req.Name)
				}
				next, ev, err := db.RenewLease(old, req, holder, ttl, w.now)
				if err != nil {
					return err
				}
				w.audit(ev)
				// Hold the row a while, so that the other replica's batch
				// has locked its first rows before this one goes on.
				if _, err := w.tx.Exec(w.ctx, `SELECT pg_sleep(0.01)`); err != nil {
					return err
				}
				return putLease(w, req.Name, &next)
			}})
			req2 := hb(js[i])[0]
			d, err := s.opts.ValidateHeartbeat(req2)
			if err != nil {
				t.Fatal(err)
			}
			ops = append(ops, &writeOp{plan: opPlan{jobs: []uint64{req2.ID}}, done: make(chan struct{}), fn: func(w *writer) error {
				_, err := changeIn(w, req2.ID, func(old *db.JobRecord, now time.Time) (db.JobRecord, db.AuditEvent, error) {
					return db.Heartbeat(old, req2, d, now)
				})
				return err
			}})
		}
		return ops
	}
	const rounds = 10
	for round := range rounds {
		var wg sync.WaitGroup
		errs := make([]error, 2)
		wg.Add(4)
		go func() { defer wg.Done(); _, errs[0] = a.HeartbeatJobs(bg, hb(jobs[0], jobs[1])) }()
		go func() { defer wg.Done(); _, errs[1] = b.HeartbeatJobs(bg, hb(jobs[1], jobs[0])) }()
		opsA := batchOf(a, []string{"x", "y"}, []db.Job{jobs[0], jobs[1]})
		opsB := batchOf(b, []string{"y", "x"}, []db.Job{jobs[1], jobs[0]})
		run := func(s *Store, ops []*writeOp) {
			defer wg.Done()
			for len(ops) > 0 {
				ops = s.commitBatch(ops)
			}
		}
		go run(a, opsA)
		go run(b, opsB)
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Fatalf("round %d: HeartbeatJobs() on replica %d error = %v", round, i, err)
			}
		}
		for i, op := range append(opsA, opsB...) {
			if op.err != nil {
				t.Fatalf("round %d: mutation %d of the two batches error = %v", round, i, op.err)
			}
		}
	}
	if n := a.retries.Load() + b.retries.Load(); n != 0 {
		t.Errorf("batches run again after a deadlock = %d, want 0 (the locks are taken in one order)", n)
	}
	// Every renewal was applied: each lease's chain of renewals is there.
	for _, name := range []string{"x", "y"} {
		page, err := a.ListAuditBySubject(bg, db.AuditSubjectRequest{Subject: db.LeaseSubject(name), Limit: 100})
		if err != nil {
			t.Fatal(err)
		}
		if got, want := len(page.Records), 1+2*rounds; got != want {
			t.Errorf("audit records of lease %s = %d, want %d (an acquire and two renewals a round)", name, got, want)
		}
	}
	rep, err := b.VerifyAudit(bg)
	if err != nil || !rep.OK {
		t.Fatalf("VerifyAudit() = %+v, %v; want a chain that verifies", rep, err)
	}
}

// TestReplicas_AClaimThatLookedBeforeAPauseDoesNotCommitAfterIt: replica
// B's batch claims a job of q while another replica's transaction holds
// the audit head, and that transaction pauses q and commits before B's
// batch gets the head. B's claim must not commit after the pause: B's
// batch finds the pause once it holds the head and runs again, and its
// claim then takes nothing.
func TestReplicas_AClaimThatLookedBeforeAPauseDoesNotCommitAfterIt(t *testing.T) {
	u := newTestDB(t)
	a, b := mustOpen(t, u, Options{}), mustOpen(t, u, Options{})
	res, err := a.EnqueueJob(bg, db.EnqueueRequest{Principal: "p", Queue: "q"})
	if err != nil {
		t.Fatal(err)
	}
	pool, err := pgxpool.New(bg, u)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	other, err := pool.Begin(bg)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Rollback(bg)
	if _, err := other.Exec(bg, `SELECT 1 FROM fenceq_audit_head WHERE id = 1 FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	var claimed []db.Job
	req := db.ClaimRequest{Principal: "p", Worker: "w", Queues: []string{"q"}, Lease: time.Minute, Max: 1}
	// The claim's candidates are read at the batch's start (opPlan.claim).
	claim := &writeOp{plan: opPlan{claim: &req}, done: make(chan struct{}), fn: func(w *writer) (err error) {
		claimed, err = claimIn(w, req)
		return err
	}}
	ran := make(chan struct{})
	go func() {
		defer close(ran)
		for ops := []*writeOp{claim}; len(ops) > 0; {
			ops = b.commitBatch(ops)
		}
	}()
	// B's batch has claimed once it waits for the head.
	for start := time.Now(); ; time.Sleep(5 * time.Millisecond) {
		var waiting int
		if err := other.QueryRow(bg, `SELECT count(*) FROM pg_locks WHERE NOT granted AND locktype = 'transactionid'
			AND transactionid::text = pg_current_xact_id()::text`).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		if waiting > 0 {
			break
		}
		if time.Since(start) > 10*time.Second {
			t.Fatal("B's batch never waited for the audit head")
		}
	}
	if _, err := other.Exec(bg, `INSERT INTO fenceq_paused (queue, paused_at, paused_by) VALUES ('q', 1, 'p')`); err != nil {
		t.Fatal(err)
	}
	if err := other.Commit(bg); err != nil {
		t.Fatal(err)
	}
	<-ran
	if claim.err != nil || len(claimed) != 0 {
		t.Fatalf("claim = %d jobs, %v; want none: q was paused before the batch held the head", len(claimed), claim.err)
	}
	job, err := b.GetJob(bg, res.Job.ID)
	if err != nil || job.State != db.StateAvailable || job.Attempts != 0 {
		t.Fatalf("job after the pause = %+v, %v; want it still available, never claimed", job, err)
	}
}

// TestOpen_MigratesASchema2DatabaseKeepingItsIDsAndCounts: a database of
// schema 2 (job ids from the head row, one audit counter row per action)
// moves to schema 3 at Open: the next job gets the id the head row would
// have given, and the audit counters keep counting from their values.
func TestOpen_MigratesASchema2DatabaseKeepingItsIDsAndCounts(t *testing.T) {
	u := newTestDB(t)
	pool, err := pgxpool.New(bg, u)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	migrateByHand(t, pool, 2)
	if _, err := pool.Exec(bg, `UPDATE fenceq_audit_head SET next_job_id = 42 WHERE id = 1`); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(bg, `INSERT INTO fenceq_audit_counts (key, n) VALUES ('enqueue', 41)`); err != nil {
		t.Fatal(err)
	}
	s := mustOpen(t, u, Options{})
	res, err := s.EnqueueJob(bg, db.EnqueueRequest{Principal: "p", Queue: "q"})
	if err != nil || res.Job.ID != 42 {
		t.Fatalf("first enqueue after the migration = job %d, %v; want job 42", res.Job.ID, err)
	}
	counts, err := s.AuditCounts(bg)
	if err != nil || counts.Actions["enqueue"] != 42 {
		t.Fatalf("AuditCounts() = %+v, %v; want 42 enqueues (41 before the migration, 1 after)", counts, err)
	}
	var version int
	if err := pool.QueryRow(bg, `SELECT max(version) FROM fenceq_schema`).Scan(&version); err != nil || version != SchemaVersion() {
		t.Fatalf("schema version after Open = %d, %v; want %d", version, err, SchemaVersion())
	}
}
