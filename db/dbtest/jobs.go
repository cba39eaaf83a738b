package dbtest

import (
	"encoding/json"
	"errors"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fenceq/fenceq/db"
	"github.com/fenceq/fenceq/internal/testclock"
	"github.com/fenceq/fenceq/lease"
)

// env is what a table case's setup and operation work on.
type env struct {
	t   *testing.T
	s   db.Store
	clk *testclock.Clock
}

// Jobs in each state, created through the store's own operations. Claims
// are by local|w1 with a 30s lease.
func availableJob(e env) uint64 {
	return mustEnqueue(e.t, e.s, db.EnqueueRequest{Payload: json.RawMessage(`{"n":1}`)}).ID
}

func scheduledJob(e env) uint64 {
	return mustEnqueue(e.t, e.s, db.EnqueueRequest{Delay: time.Hour}).ID
}

func claimedJob(e env) uint64 {
	id := availableJob(e)
	mustClaim(e.t, e.s, "w1", 30*time.Second)
	return id
}

func completedJob(e env) uint64 {
	id := claimedJob(e)
	if _, err := e.s.CompleteJob(ctx, db.CompleteRequest{Fenced: fenced(id, "w1", 1)}); err != nil {
		e.t.Fatalf("setup: CompleteJob: %v", err)
	}
	return id
}

func deadJob(e env) uint64 {
	id := claimedJob(e)
	if _, err := e.s.FailJob(ctx, db.FailRequest{Fenced: fenced(id, "w1", 1), Error: "boom", Final: true}); err != nil {
		e.t.Fatalf("setup: FailJob: %v", err)
	}
	return id
}

func cancelledJob(e env) uint64 {
	id := availableJob(e)
	if _, err := e.s.CancelJob(ctx, db.JobRequest{Principal: "local", ID: id}); err != nil {
		e.t.Fatalf("setup: CancelJob: %v", err)
	}
	return id
}

// cancelledClaimJob is a job cancelled while local|w1 held claim 1.
func cancelledClaimJob(e env) uint64 {
	id := claimedJob(e)
	if _, err := e.s.CancelJob(ctx, db.JobRequest{Principal: "local", ID: id}); err != nil {
		e.t.Fatalf("setup: CancelJob: %v", err)
	}
	return id
}

// exhaustedDeadJob is a job with max_attempts 2 that failed twice.
func exhaustedDeadJob(e env) uint64 {
	id := mustEnqueue(e.t, e.s, db.EnqueueRequest{MaxAttempts: 2}).ID
	for token := uint64(1); token <= 2; token++ {
		mustClaim(e.t, e.s, "w1", 30*time.Second)
		if _, err := e.s.FailJob(ctx, db.FailRequest{Fenced: fenced(id, "w1", token), Error: "boom", RetryDelay: durationPtr(0)}); err != nil {
			e.t.Fatalf("setup: FailJob(token %d): %v", token, err)
		}
	}
	if st := storedJob(e.t, e.s, id).State; st != db.StateDead {
		e.t.Fatalf("setup: job after two failures of two attempts is %s, want dead", st)
	}
	return id
}

// cancelByAdmin and retryByAdmin are the admin's cancel and retry of job id.
func cancelByAdmin(e env, id uint64) (db.Job, error) {
	return e.s.CancelJob(ctx, db.JobRequest{Principal: "admin", ID: id})
}

func retryByAdmin(e env, id uint64) (db.Job, error) {
	return e.s.RetryJob(ctx, db.JobRequest{Principal: "admin", ID: id})
}

func testEnqueueJobStoresAvailableOrScheduledJobs(t *testing.T, newStore Factory) {
	clk := newFakeClock()
	t0 := clk.Now()
	tests := []struct {
		name string
		req  db.EnqueueRequest
		want func(now int64) db.JobRecord
	}{
		{"no delay is available now", db.EnqueueRequest{Payload: json.RawMessage(`{"n":1}`)}, func(now int64) db.JobRecord {
			return db.JobRecord{Queue: "default", Payload: []byte(`{"n":1}`), State: db.StateAvailable, MaxAttempts: db.DefaultMaxAttempts, Budget: db.DefaultMaxAttempts, RunAt: now}
		}},
		{"delay is scheduled at now+delay", db.EnqueueRequest{Queue: "mail", Kind: "send", Delay: 90 * time.Second, Priority: -3}, func(now int64) db.JobRecord {
			return db.JobRecord{Queue: "mail", Kind: "send", Priority: -3, State: db.StateScheduled, MaxAttempts: db.DefaultMaxAttempts, Budget: db.DefaultMaxAttempts, RunAt: now + int64(90*time.Second)}
		}},
		{"future run_at is scheduled at run_at", db.EnqueueRequest{RunAt: t0.Add(time.Hour), MaxAttempts: 3}, func(now int64) db.JobRecord {
			return db.JobRecord{Queue: "default", State: db.StateScheduled, MaxAttempts: 3, Budget: 3, RunAt: t0.Add(time.Hour).UnixNano()}
		}},
		{"past run_at means now: available with the enqueue time", db.EnqueueRequest{RunAt: t0.Add(-time.Hour)}, func(now int64) db.JobRecord {
			return db.JobRecord{Queue: "default", State: db.StateAvailable, MaxAttempts: db.DefaultMaxAttempts, Budget: db.DefaultMaxAttempts, RunAt: now}
		}},
		{"run_at equal to now is available", db.EnqueueRequest{RunAt: t0}, func(now int64) db.JobRecord {
			return db.JobRecord{Queue: "default", State: db.StateAvailable, MaxAttempts: db.DefaultMaxAttempts, Budget: db.DefaultMaxAttempts, RunAt: now}
		}},
		{"idempotency key is kept", db.EnqueueRequest{IdempotencyKey: "order-7", Priority: 9}, func(now int64) db.JobRecord {
			return db.JobRecord{Queue: "default", Priority: 9, State: db.StateAvailable, IdempotencyKey: "order-7", MaxAttempts: db.DefaultMaxAttempts, Budget: db.DefaultMaxAttempts, RunAt: now}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := newFakeClock()
			s := newStore(t, testRules(clk))
			got := mustEnqueue(t, s, tt.req)
			now := clk.Now().UnixNano()
			want := tt.want(now)
			want.ID, want.CreatedAt, want.UpdatedAt = 1, now, now
			want.Budget = 0 // not visible through the Store interface (storedJob)
			if rec := storedJob(t, s, got.ID); !reflect.DeepEqual(*rec, want) {
				t.Errorf("stored record = %+v, want %+v", *rec, want)
			}
			if !reflect.DeepEqual(got, want.Job()) {
				t.Errorf("EnqueueJob() job = %+v, want %+v", got, want.Job())
			}
			if a := lastAudit(t, s); a.Action != "enqueue" || a.Subject != "job:1" || a.Details["state"] != string(want.State) {
				t.Errorf("audit = %s %s state %s, want enqueue job:1 state %s", a.Action, a.Subject, a.Details["state"], want.State)
			}
		})
	}
}

func testJobTransitions(t *testing.T, newStore Factory) {
	const lease30 = 30 * time.Second
	tests := []struct {
		name   string
		opts   func(*db.Rules)
		setup  func(e env) uint64
		op     func(e env, id uint64) (db.Job, error)
		want   func(r *db.JobRecord, now int64) // applied to a copy of the record before op
		action string                           // the audit record the change appends
	}{
		{
			name:  "claim takes an available job",
			setup: availableJob,
			op: func(e env, id uint64) (db.Job, error) {
				return mustClaim(e.t, e.s, "w2", 20*time.Second), nil
			},
			want: func(r *db.JobRecord, now int64) {
				r.State, r.Attempts, r.ClaimedBy = db.StateClaimed, 1, "local|w2"
				r.LeaseExpiresAt, r.UpdatedAt = now+int64(20*time.Second), now
			},
			action: "claim",
		},
		{
			name:  "claim without a lease uses the default lease",
			opts:  func(o *db.Rules) { o.DefaultLease = 7 * time.Second },
			setup: availableJob,
			op: func(e env, id uint64) (db.Job, error) {
				return mustClaim(e.t, e.s, "w2", 0), nil
			},
			want: func(r *db.JobRecord, now int64) {
				r.State, r.Attempts, r.ClaimedBy = db.StateClaimed, 1, "local|w2"
				r.LeaseExpiresAt, r.UpdatedAt = now+int64(7*time.Second), now
			},
			action: "claim",
		},
		{
			name: "claim takes a scheduled job once its run_at has come",
			setup: func(e env) uint64 {
				return mustEnqueue(e.t, e.s, db.EnqueueRequest{Delay: time.Second}).ID
			},
			op: func(e env, id uint64) (db.Job, error) {
				return mustClaim(e.t, e.s, "w2", lease30), nil
			},
			want: func(r *db.JobRecord, now int64) {
				r.State, r.Attempts, r.ClaimedBy = db.StateClaimed, 1, "local|w2"
				r.LeaseExpiresAt, r.UpdatedAt = now+int64(lease30), now
			},
			action: "claim",
		},
		{
			name: "claim takes over an expired claim with the next token",
			setup: func(e env) uint64 {
				id := claimedJob(e)
				e.clk.Advance(lease30)
				return id
			},
			op: func(e env, id uint64) (db.Job, error) {
				return mustClaim(e.t, e.s, "w2", lease30), nil
			},
			want: func(r *db.JobRecord, now int64) {
				r.Attempts, r.ClaimedBy = 2, "local|w2"
				r.LeaseExpiresAt, r.UpdatedAt = now+int64(lease30), now
			},
			action: "claim",
		},
		{
			name:  "heartbeat with the current token extends the lease from now",
			setup: claimedJob,
			op: func(e env, id uint64) (db.Job, error) {
				return e.s.HeartbeatJob(ctx, db.HeartbeatRequest{Fenced: fenced(id, "w1", 1), Lease: 45 * time.Second})
			},
			want: func(r *db.JobRecord, now int64) {
				r.LeaseExpiresAt, r.UpdatedAt = now+int64(45*time.Second), now
			},
			action: "heartbeat",
		},
		{
			name:  "heartbeat without a token is checked by name and accepted",
			setup: claimedJob,
			op: func(e env, id uint64) (db.Job, error) {
				return e.s.HeartbeatJob(ctx, db.HeartbeatRequest{Fenced: fenced(id, "w1", 0)})
			},
			want: func(r *db.JobRecord, now int64) {
				r.LeaseExpiresAt, r.UpdatedAt = now+int64(30*time.Second), now
			},
			action: "heartbeat",
		},
		{
			name:  "heartbeat with a token is accepted when fencing is required",
			opts:  func(o *db.Rules) { o.RequireFencing = true },
			setup: claimedJob,
			op: func(e env, id uint64) (db.Job, error) {
				return e.s.HeartbeatJob(ctx, db.HeartbeatRequest{Fenced: fenced(id, "w1", 1), Lease: time.Minute})
			},
			want: func(r *db.JobRecord, now int64) {
				r.LeaseExpiresAt, r.UpdatedAt = now+int64(time.Minute), now
			},
			action: "heartbeat",
		},
		{
			name:  "complete stores result and attestation",
			setup: claimedJob,
			op: func(e env, id uint64) (db.Job, error) {
				return e.s.CompleteJob(ctx, db.CompleteRequest{Fenced: fenced(id, "w1", 1),
					Result: json.RawMessage(`{"ok":true}`), Attestation: json.RawMessage(`"sig"`)})
			},
			want: func(r *db.JobRecord, now int64) {
				r.State, r.ClaimedBy, r.LeaseExpiresAt = db.StateCompleted, "", 0
				r.CompletedAt, r.UpdatedAt = now, now
				r.Result, r.Attestation = []byte(`{"ok":true}`), []byte(`"sig"`)
			},
			action: "complete",
		},
		{
			name:  "complete without a token or result",
			setup: claimedJob,
			op: func(e env, id uint64) (db.Job, error) {
				return e.s.CompleteJob(ctx, db.CompleteRequest{Fenced: fenced(id, "w1", 0)})
			},
			want: func(r *db.JobRecord, now int64) {
				r.State, r.ClaimedBy, r.LeaseExpiresAt = db.StateCompleted, "", 0
				r.CompletedAt, r.UpdatedAt = now, now
			},
			action: "complete",
		},
		{
			name:  "fail with a retry delay schedules the job at now+delay",
			setup: claimedJob,
			op: func(e env, id uint64) (db.Job, error) {
				return e.s.FailJob(ctx, db.FailRequest{Fenced: fenced(id, "w1", 1), Error: "boom", RetryDelay: durationPtr(5 * time.Second)})
			},
			want: func(r *db.JobRecord, now int64) {
				r.State, r.ClaimedBy, r.LeaseExpiresAt = db.StateScheduled, "", 0
				r.RunAt, r.UpdatedAt = now+int64(5*time.Second), now
				r.LastError, r.Errors = "boom", []db.ErrorRecord{{Attempt: 1, At: now, Error: "boom"}}
			},
			action: "fail",
		},
		{
			name:  "fail with retry delay 0 makes the job available now",
			setup: claimedJob,
			op: func(e env, id uint64) (db.Job, error) {
				return e.s.FailJob(ctx, db.FailRequest{Fenced: fenced(id, "w1", 1), Error: "boom", RetryDelay: durationPtr(0)})
			},
			want: func(r *db.JobRecord, now int64) {
				r.State, r.ClaimedBy, r.LeaseExpiresAt = db.StateAvailable, "", 0
				r.RunAt, r.UpdatedAt = now, now
				r.LastError, r.Errors = "boom", []db.ErrorRecord{{Attempt: 1, At: now, Error: "boom"}}
			},
			action: "fail",
		},
		{
			name:  "fail without a retry delay schedules the job after the backoff",
			setup: claimedJob,
			op: func(e env, id uint64) (db.Job, error) {
				return e.s.FailJob(ctx, db.FailRequest{Fenced: fenced(id, "w1", 1), Error: "boom"})
			},
			want: func(r *db.JobRecord, now int64) {
				r.State, r.ClaimedBy, r.LeaseExpiresAt = db.StateScheduled, "", 0
				r.RunAt, r.UpdatedAt = now+int64(lease.DefaultBackoff.Delay(1, 0.5)), now
				r.LastError, r.Errors = "boom", []db.ErrorRecord{{Attempt: 1, At: now, Error: "boom"}}
			},
			action: "fail",
		},
		{
			name:  "final fail makes the job dead",
			setup: claimedJob,
			op: func(e env, id uint64) (db.Job, error) {
				return e.s.FailJob(ctx, db.FailRequest{Fenced: fenced(id, "w1", 1), Error: "bad input", Final: true})
			},
			want: func(r *db.JobRecord, now int64) {
				r.State, r.ClaimedBy, r.LeaseExpiresAt, r.UpdatedAt = db.StateDead, "", 0, now
				r.LastError, r.Errors = "bad input", []db.ErrorRecord{{Attempt: 1, At: now, Error: "bad input"}}
			},
			action: "dead",
		},
		{
			name: "fail of the last attempt makes the job dead despite a retry delay",
			setup: func(e env) uint64 {
				id := mustEnqueue(e.t, e.s, db.EnqueueRequest{MaxAttempts: 1}).ID
				mustClaim(e.t, e.s, "w1", lease30)
				return id
			},
			op: func(e env, id uint64) (db.Job, error) {
				return e.s.FailJob(ctx, db.FailRequest{Fenced: fenced(id, "w1", 1), Error: "boom", RetryDelay: durationPtr(time.Second)})
			},
			want: func(r *db.JobRecord, now int64) {
				r.State, r.ClaimedBy, r.LeaseExpiresAt, r.UpdatedAt = db.StateDead, "", 0, now
				r.LastError, r.Errors = "boom", []db.ErrorRecord{{Attempt: 1, At: now, Error: "boom"}}
			},
			action: "dead",
		},
		{
			name: "fail keeps only the last errors",
			setup: func(e env) uint64 {
				id := mustEnqueue(e.t, e.s, db.EnqueueRequest{MaxAttempts: 20}).ID
				for token := uint64(1); token <= db.MaxErrorsKept; token++ {
					mustClaim(e.t, e.s, "w1", lease30)
					if _, err := e.s.FailJob(ctx, db.FailRequest{Fenced: fenced(id, "w1", token), Error: "old", RetryDelay: durationPtr(0)}); err != nil {
						e.t.Fatalf("setup: FailJob: %v", err)
					}
				}
				mustClaim(e.t, e.s, "w1", lease30)
				return id
			},
			op: func(e env, id uint64) (db.Job, error) {
				return e.s.FailJob(ctx, db.FailRequest{Fenced: fenced(id, "w1", db.MaxErrorsKept+1), Error: "new", RetryDelay: durationPtr(0)})
			},
			want: func(r *db.JobRecord, now int64) {
				r.State, r.ClaimedBy, r.LeaseExpiresAt = db.StateAvailable, "", 0
				r.RunAt, r.UpdatedAt = now, now
				r.LastError = "new"
				r.Errors = append(r.Errors[1:], db.ErrorRecord{Attempt: db.MaxErrorsKept + 1, At: now, Error: "new"})
			},
			action: "fail",
		},
		{
			name:   "cancel of an available job",
			setup:  availableJob,
			op:     cancelByAdmin,
			want:   func(r *db.JobRecord, now int64) { r.State, r.UpdatedAt = db.StateCancelled, now },
			action: "cancel",
		},
		{
			name:   "cancel of a scheduled job",
			setup:  scheduledJob,
			op:     cancelByAdmin,
			want:   func(r *db.JobRecord, now int64) { r.State, r.UpdatedAt = db.StateCancelled, now },
			action: "cancel",
		},
		{
			name:  "cancel of a claimed job drops the claim",
			setup: claimedJob,
			op:    cancelByAdmin,
			want: func(r *db.JobRecord, now int64) {
				r.State, r.ClaimedBy, r.LeaseExpiresAt, r.UpdatedAt = db.StateCancelled, "", 0, now
			},
			action: "cancel",
		},
		{
			name:   "cancel of a dead job",
			setup:  deadJob,
			op:     cancelByAdmin,
			want:   func(r *db.JobRecord, now int64) { r.State, r.UpdatedAt = db.StateCancelled, now },
			action: "cancel",
		},
		{
			name:  "retry of a dead job raises max_attempts to attempts+budget",
			setup: exhaustedDeadJob,
			op:    retryByAdmin,
			want: func(r *db.JobRecord, now int64) {
				r.State, r.RunAt, r.UpdatedAt = db.StateAvailable, now, now
				r.MaxAttempts = 2 + 2 // attempts stay 2; the budget of 2 is granted again
			},
			action: "retry",
		},
		{
			name:  "retry of a job that died early still grants a whole budget",
			setup: deadJob, // attempts 1 of 10
			op:    retryByAdmin,
			want: func(r *db.JobRecord, now int64) {
				r.State, r.RunAt, r.UpdatedAt = db.StateAvailable, now, now
				r.MaxAttempts = 1 + db.DefaultMaxAttempts
			},
			action: "retry",
		},
		{
			name:  "retry of a cancelled job",
			setup: cancelledClaimJob, // attempts 1
			op:    retryByAdmin,
			want: func(r *db.JobRecord, now int64) {
				r.State, r.RunAt, r.UpdatedAt = db.StateAvailable, now, now
				r.MaxAttempts = 1 + db.DefaultMaxAttempts
			},
			action: "retry",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := newFakeClock()
			opts := testRules(clk)
			if tt.opts != nil {
				tt.opts(&opts)
			}
			s := newStore(t, opts)
			e := env{t: t, s: s, clk: clk}
			id := tt.setup(e)
			clk.Advance(time.Second) // so that changed times are visible
			before := storedJob(t, s, id)
			seqBefore := auditSeq(t, s)

			got, err := tt.op(e, id)
			if err != nil {
				t.Fatalf("error = %v, want nil", err)
			}
			want := ptr(before.Clone())
			tt.want(want, clk.Now().UnixNano())
			after := storedJob(t, s, id)
			if !reflect.DeepEqual(after, want) {
				t.Errorf("stored record =\n%+v\nwant\n%+v", *after, *want)
			}
			if !reflect.DeepEqual(got, want.Job()) {
				t.Errorf("returned job =\n%+v\nwant\n%+v", got, want.Job())
			}
			if after.Attempts < before.Attempts {
				t.Errorf("attempts went from %d to %d, want never decreasing", before.Attempts, after.Attempts)
			}
			if seq := auditSeq(t, s); seq != seqBefore+1 {
				t.Errorf("audit head = %d, want %d (one record per change)", seq, seqBefore+1)
			}
			if a := lastAudit(t, s); a.Action != tt.action || a.Subject != "job:"+itoa(id) || a.Token != after.Attempts {
				t.Errorf("audit = %s %s token %d, want %s job:%d token %d", a.Action, a.Subject, a.Token, tt.action, id, after.Attempts)
			}
		})
	}
}

func itoa(n uint64) string { return strconv.FormatUint(n, 10) }

// Every refusal leaves the file exactly as it was: record bytes, indexes,
// counts, audit log and sequences.
func testRefusalsChangeNothing(t *testing.T, newStore Factory) {
	heartbeat := func(f db.Fenced) func(e env, id uint64) error {
		return func(e env, id uint64) error {
			if f.ID == 0 {
				f.ID = id
			}
			_, err := e.s.HeartbeatJob(ctx, db.HeartbeatRequest{Fenced: f, Lease: time.Minute})
			return err
		}
	}
	complete := func(f db.Fenced) func(e env, id uint64) error {
		return func(e env, id uint64) error {
			if f.ID == 0 {
				f.ID = id
			}
			_, err := e.s.CompleteJob(ctx, db.CompleteRequest{Fenced: f, Result: json.RawMessage(`1`), Attestation: json.RawMessage(`"a"`)})
			return err
		}
	}
	fail := func(f db.Fenced) func(e env, id uint64) error {
		return func(e env, id uint64) error {
			if f.ID == 0 {
				f.ID = id
			}
			_, err := e.s.FailJob(ctx, db.FailRequest{Fenced: f, Error: "x", RetryDelay: durationPtr(0)})
			return err
		}
	}
	cancel := func(e env, id uint64) error {
		_, err := e.s.CancelJob(ctx, db.JobRequest{Principal: "admin", ID: id})
		return err
	}
	retry := func(e env, id uint64) error {
		_, err := e.s.RetryJob(ctx, db.JobRequest{Principal: "admin", ID: id})
		return err
	}
	enqueue := func(req db.EnqueueRequest) func(e env, id uint64) error {
		return func(e env, id uint64) error {
			_, err := e.s.EnqueueJob(ctx, req)
			return err
		}
	}
	claim := func(req db.ClaimRequest) func(e env, id uint64) error {
		return func(e env, id uint64) error {
			_, err := e.s.ClaimJobs(ctx, req)
			return err
		}
	}
	w1 := func(token uint64) db.Fenced { return fenced(0, "w1", token) }
	other := func(principal, worker string, token uint64) db.Fenced {
		return db.Fenced{Principal: principal, Worker: worker, FencingToken: token}
	}
	const unknown = 999
	overU32 := lease.MaxToken + 1

	tests := []struct {
		name    string
		setup   func(e env) uint64
		opts    func(*db.Rules)
		op      func(e env, id uint64) error
		wantErr error
	}{
		// Unknown ids.
		{"heartbeat of an unknown job", claimedJob, nil, heartbeat(fenced(unknown, "w1", 1)), ErrJobNotFound},
		{"complete of an unknown job", claimedJob, nil, complete(fenced(unknown, "w1", 1)), ErrJobNotFound},
		{"fail of an unknown job", claimedJob, nil, fail(fenced(unknown, "w1", 1)), ErrJobNotFound},
		{"cancel of an unknown job", claimedJob, nil, func(e env, _ uint64) error { return cancel(e, unknown) }, ErrJobNotFound},
		{"retry of an unknown job", deadJob, nil, func(e env, _ uint64) error { return retry(e, unknown) }, ErrJobNotFound},

		// Another worker of the same principal.
		{"heartbeat by another worker", claimedJob, nil, heartbeat(fenced(0, "w2", 1)), ErrClaimNotFound},
		{"complete by another worker", claimedJob, nil, complete(fenced(0, "w2", 1)), ErrClaimMismatch},
		{"fail by another worker", claimedJob, nil, fail(fenced(0, "w2", 0)), ErrClaimNotFound},

		// Another principal using the same worker label.
		{"heartbeat by another principal with the same worker label", claimedJob, nil, heartbeat(other("other", "w1", 1)), ErrClaimNotFound},
		{"complete by another principal with the same worker label", claimedJob, nil, complete(other("other", "w1", 1)), ErrClaimMismatch},
		{"fail by another principal with the same worker label", claimedJob, nil, fail(other("other", "w1", 0)), ErrClaimNotFound},

		// A token that is not the current claim's number.
		{"heartbeat with a future token", claimedJob, nil, heartbeat(w1(2)), ErrClaimNotFound},
		{"complete with a future token", claimedJob, nil, complete(w1(2)), ErrClaimMismatch},
		{"fail with the largest valid token", claimedJob, nil, fail(w1(lease.MaxToken)), ErrClaimNotFound},

		// Tokens that cannot be claim numbers are invalid, never "none".
		{"heartbeat with a token above u32 max", claimedJob, nil, heartbeat(w1(overU32)), ErrInvalidArgument},
		{"complete with a token above u32 max", claimedJob, nil, complete(w1(overU32)), ErrInvalidArgument},
		{"fail with a token above u32 max", claimedJob, nil, fail(w1(overU32)), ErrInvalidArgument},
		{"complete with token u64 max", claimedJob, nil, complete(w1(^uint64(0))), ErrInvalidArgument},
		{"heartbeat of an unknown job with a token above u32 max", claimedJob, nil, heartbeat(fenced(unknown, "w1", overU32)), ErrInvalidArgument},

		// RequireFencing: no token is invalid.
		{"heartbeat without a token when fencing is required", claimedJob, requireFencing, heartbeat(w1(0)), ErrInvalidArgument},
		{"complete without a token when fencing is required", claimedJob, requireFencing, complete(w1(0)), ErrInvalidArgument},
		{"fail without a token when fencing is required", claimedJob, requireFencing, fail(w1(0)), ErrInvalidArgument},

		// Jobs that are not claimed.
		{"heartbeat of an available job", availableJob, nil, heartbeat(w1(0)), ErrClaimNotFound},
		{"heartbeat of a scheduled job", scheduledJob, nil, heartbeat(w1(0)), ErrClaimNotFound},
		{"complete of a completed job with its token", completedJob, nil, complete(w1(1)), ErrClaimMismatch},
		{"fail of a dead job with its token", deadJob, nil, fail(w1(1)), ErrClaimNotFound},
		{"heartbeat of a job cancelled while claimed", cancelledClaimJob, nil, heartbeat(w1(1)), ErrClaimNotFound},
		{"complete of a job cancelled while claimed", cancelledClaimJob, nil, complete(w1(1)), ErrClaimMismatch},
		{"fail of a job cancelled while claimed", cancelledClaimJob, nil, fail(w1(1)), ErrClaimNotFound},

		// Bad arguments of fenced calls.
		{"fenced call without a worker", claimedJob, nil, heartbeat(fenced(0, "", 1)), ErrInvalidArgument},
		{"heartbeat with a negative lease", claimedJob, nil, func(e env, id uint64) error {
			_, err := e.s.HeartbeatJob(ctx, db.HeartbeatRequest{Fenced: fenced(id, "w1", 1), Lease: -time.Second})
			return err
		}, ErrInvalidArgument},
		{"heartbeat with a lease above the maximum", claimedJob, nil, func(e env, id uint64) error {
			_, err := e.s.HeartbeatJob(ctx, db.HeartbeatRequest{Fenced: fenced(id, "w1", 1), Lease: 2 * time.Hour})
			return err
		}, ErrInvalidArgument},
		{"fail with a negative retry delay", claimedJob, nil, func(e env, id uint64) error {
			_, err := e.s.FailJob(ctx, db.FailRequest{Fenced: fenced(id, "w1", 1), RetryDelay: durationPtr(-time.Second)})
			return err
		}, ErrInvalidArgument},
		{"fail with an absurd retry delay", claimedJob, nil, func(e env, id uint64) error {
			_, err := e.s.FailJob(ctx, db.FailRequest{Fenced: fenced(id, "w1", 1), RetryDelay: durationPtr(db.MaxDelay + time.Nanosecond)})
			return err
		}, ErrInvalidArgument},
		{"complete with a result above the size limit", claimedJob, func(o *db.Rules) { o.MaxPayloadBytes = 8 }, func(e env, id uint64) error {
			_, err := e.s.CompleteJob(ctx, db.CompleteRequest{Fenced: fenced(id, "w1", 1), Result: json.RawMessage(`"123456789"`)})
			return err
		}, ErrTooLarge},
		{"complete with an attestation above the size limit", claimedJob, func(o *db.Rules) { o.MaxAttestationBytes = 4 }, func(e env, id uint64) error {
			_, err := e.s.CompleteJob(ctx, db.CompleteRequest{Fenced: fenced(id, "w1", 1), Attestation: json.RawMessage(`"12345"`)})
			return err
		}, ErrTooLarge},
		{"complete with an attestation that is not JSON", claimedJob, nil, func(e env, id uint64) error {
			_, err := e.s.CompleteJob(ctx, db.CompleteRequest{Fenced: fenced(id, "w1", 1), Attestation: json.RawMessage(`{sig`)})
			return err
		}, ErrInvalidArgument},

		// Cancel and retry in the wrong state.
		{"cancel of a completed job", completedJob, nil, cancel, ErrWrongState},
		{"cancel of a cancelled job", cancelledJob, nil, cancel, ErrWrongState},
		{"retry of an available job", availableJob, nil, retry, ErrWrongState},
		{"retry of a scheduled job", scheduledJob, nil, retry, ErrWrongState},
		{"retry of a claimed job", claimedJob, nil, retry, ErrWrongState},
		{"retry of a completed job", completedJob, nil, retry, ErrWrongState},

		// Bad enqueues and claims.
		{"enqueue to an invalid queue name", availableJob, nil, enqueue(db.EnqueueRequest{Queue: "no spaces"}), ErrInvalidArgument},
		{"enqueue with a queue name of 129 bytes", availableJob, nil, enqueue(db.EnqueueRequest{Queue: strings.Repeat("q", 129)}), ErrInvalidArgument},
		{"enqueue with a negative delay", availableJob, nil, enqueue(db.EnqueueRequest{Delay: -time.Second}), ErrInvalidArgument},
		{"enqueue with both run_at and delay", availableJob, nil, enqueue(db.EnqueueRequest{Delay: time.Second, RunAt: time.Date(2031, 1, 1, 0, 0, 0, 0, time.UTC)}), ErrInvalidArgument},
		{"enqueue with run_at after 2200", availableJob, nil, enqueue(db.EnqueueRequest{RunAt: time.Date(2201, 1, 1, 0, 0, 0, 0, time.UTC)}), ErrInvalidArgument},
		{"enqueue with a payload that is not JSON", availableJob, nil, enqueue(db.EnqueueRequest{Payload: json.RawMessage(`{"a":`)}), ErrInvalidArgument},
		{"enqueue with a payload above the size limit", availableJob, func(o *db.Rules) { o.MaxPayloadBytes = 8 }, enqueue(db.EnqueueRequest{Payload: json.RawMessage(`"123456789"`)}), ErrTooLarge},
		{"enqueue with max_attempts above the maximum", availableJob, nil, enqueue(db.EnqueueRequest{MaxAttempts: db.MaxMaxAttempts + 1}), ErrInvalidArgument},
		{"enqueue with a kind above 128 bytes", availableJob, nil, enqueue(db.EnqueueRequest{Kind: strings.Repeat("k", 129)}), ErrInvalidArgument},
		{"claim without a worker", availableJob, nil, claim(db.ClaimRequest{Principal: "local"}), ErrInvalidArgument},
		{"claim from an invalid queue", availableJob, nil, claim(db.ClaimRequest{Principal: "local", Worker: "w1", Queues: []string{"default", "a/b"}}), ErrInvalidArgument},
		{"claim of more than the batch maximum", availableJob, nil, claim(db.ClaimRequest{Principal: "local", Worker: "w1", Max: db.MaxClaimBatch + 1}), ErrInvalidArgument},
		{"claim with a lease above the maximum", availableJob, nil, claim(db.ClaimRequest{Principal: "local", Worker: "w1", Lease: 2 * time.Hour}), ErrInvalidArgument},
		{"claim with a negative lease", availableJob, nil, claim(db.ClaimRequest{Principal: "local", Worker: "w1", Lease: -time.Second}), ErrInvalidArgument},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := newFakeClock()
			opts := testRules(clk)
			if tt.opts != nil {
				tt.opts(&opts)
			}
			s := newStore(t, opts)
			e := env{t: t, s: s, clk: clk}
			id := tt.setup(e)
			clk.Advance(time.Second)
			rec := rawJob(t, s, id)
			before := takeSnapshot(t, s)

			err := tt.op(e, id)
			if !errors.Is(err, tt.wantErr) {
				t.Errorf("error = %v, want %v", err, tt.wantErr)
			}
			if got := rawJob(t, s, id); string(got) != string(rec) {
				t.Errorf("record bytes after refusal =\n%x\nwant byte-for-byte\n%x", got, rec)
			}
			assertUnchanged(t, s, before, "the refusal")
		})
	}
}

func requireFencing(o *db.Rules) { o.RequireFencing = true }
