package bolt

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/fenceq/fenceq/db"
	"github.com/fenceq/fenceq/lease"
	bbolt "go.etcd.io/bbolt"
)

// listScanBudget bounds the records one listing page reads, so that a
// selective filter over a large file holds its read transaction briefly.
const listScanBudget = 10_000

// EnqueueJob adds one job. It returns ErrInvalidArgument or ErrTooLarge.
func (s *Store) EnqueueJob(ctx context.Context, req db.EnqueueRequest) (db.EnqueueResult, error) {
	res, err := s.EnqueueJobs(ctx, []db.EnqueueRequest{req})
	if err != nil {
		return db.EnqueueResult{}, err
	}
	return res[0], nil
}

// EnqueueJobs adds several jobs in one transaction: all of them or, when
// any request is invalid, none. Errors name the index of the bad request.
func (s *Store) EnqueueJobs(ctx context.Context, reqs []db.EnqueueRequest) ([]db.EnqueueResult, error) {
	reqs, err := s.opts.NormalizeEnqueueBatch(reqs)
	if err != nil {
		return nil, err
	}
	var results []db.EnqueueResult
	err = s.update(ctx, func(tx *bbolt.Tx) error {
		now := s.opts.Now()
		results = make([]db.EnqueueResult, 0, len(reqs))
		for _, req := range reqs {
			r, err := s.enqueue(tx, now, req)
			if err != nil {
				return err
			}
			results = append(results, r)
		}
		return nil
	})
	return results, err
}

func (s *Store) enqueue(tx *bbolt.Tx, now time.Time, req db.EnqueueRequest) (db.EnqueueResult, error) {
	var idemKey []byte
	if req.IdempotencyKey != "" {
		idemKey = append(queuePrefix(req.Queue), req.IdempotencyKey...)
		if v := tx.Bucket(bucketIdempotency).Get(idemKey); v != nil {
			rec, err := getIndexedJob(tx, idFromKey(v))
			if err != nil {
				return db.EnqueueResult{}, err
			}
			return db.EnqueueResult{Job: rec.job()}, nil
		}
	}
	id, err := tx.Bucket(bucketJobs).NextSequence()
	if err != nil {
		return db.EnqueueResult{}, err
	}
	runAt := req.RunAt
	if runAt.IsZero() {
		runAt = now.Add(req.Delay)
	}
	rec := &jobRecord{
		V: jobRecordVersion, ID: id, Queue: req.Queue, Kind: req.Kind, Payload: req.Payload,
		Priority: req.Priority, State: db.StateAvailable, MaxAttempts: req.MaxAttempts, Budget: req.MaxAttempts,
		RunAt: runAt.UnixNano(), CreatedAt: now.UnixNano(), UpdatedAt: now.UnixNano(),
		IdempotencyKey: req.IdempotencyKey,
	}
	if runAt.After(now) {
		rec.State = db.StateScheduled
	}
	if idemKey != nil {
		if err := tx.Bucket(bucketIdempotency).Put(idemKey, u64(id)); err != nil {
			return db.EnqueueResult{}, err
		}
	}
	// Audited before putJob, which may hand the job to a waiting claim.
	if err := appendAudit(tx, now, db.AuditEvent{Principal: req.Principal, Action: "enqueue", Job: id,
		Details: map[string]string{"queue": rec.Queue, "state": string(rec.State)}}); err != nil {
		return db.EnqueueResult{}, err
	}
	if err := s.putJob(tx, nil, rec); err != nil {
		return db.EnqueueResult{}, err
	}
	return db.EnqueueResult{Job: rec.job(), Created: true}, nil
}

// ClaimJobs takes up to req.Max of the best eligible jobs in one
// transaction: available jobs, scheduled jobs whose run_at is due, and
// claimed jobs whose lease has expired (those whose attempts are exhausted
// go dead with "lease expired" instead). Each claimed job's Attempts is its
// fencing token. No eligible job: an empty slice and no error, at once or,
// with Wait, when a job arrived for somebody else or the wait ended. A
// claim that finds nothing costs a read transaction, not a commit.
func (s *Store) ClaimJobs(ctx context.Context, req db.ClaimRequest) ([]db.Job, error) {
	if err := s.opts.NormalizeClaim(&req); err != nil {
		return nil, err
	}
	if req.Wait > 0 {
		return s.claimWaiting(ctx, req)
	}
	return s.claimNow(ctx, req)
}

func (s *Store) claimNow(ctx context.Context, req db.ClaimRequest) ([]db.Job, error) {
	if ok, err := s.claimable(req.Queues); err != nil || !ok {
		return nil, err
	}
	var jobs []db.Job
	err := s.update(ctx, func(tx *bbolt.Tx) error {
		jobs = nil
		return s.claimInTx(tx, s.opts.Now(), req, &jobs)
	})
	return jobs, err
}

// claimInTx promotes due scheduled jobs and claims up to req.Max jobs,
// appending them to jobs.
func (s *Store) claimInTx(tx *bbolt.Tx, now time.Time, req db.ClaimRequest, jobs *[]db.Job) error {
	if err := s.promoteDue(tx, now, 1000); err != nil {
		return err
	}
	for len(*jobs) < req.Max {
		rec, err := s.claimOne(tx, now, req)
		if err != nil || rec == nil {
			return err
		}
		*jobs = append(*jobs, rec.job())
	}
	return nil
}

// promoteDue moves up to limit scheduled jobs whose run_at has come into the
// ready index, oldest first.
func (s *Store) promoteDue(tx *bbolt.Tx, now time.Time, limit int) error {
	var due []uint64
	c := tx.Bucket(bucketScheduled).Cursor()
	for k, _ := c.First(); k != nil && len(due) < limit; k, _ = c.Next() {
		if timeFromKey(k, 0) > now.UnixNano() {
			break
		}
		due = append(due, idFromKey(k))
	}
	for _, id := range due {
		old, err := getIndexedJob(tx, id)
		if err != nil {
			return err
		}
		rec := old.clone()
		rec.State = db.StateAvailable
		if err := s.putJob(tx, old, rec); err != nil {
			return err
		}
	}
	return nil
}

// claimOne claims the best eligible job of req.Queues, or returns nil.
func (s *Store) claimOne(tx *bbolt.Tx, now time.Time, req db.ClaimRequest) (*jobRecord, error) {
	var best *jobRecord
	for _, q := range req.Queues {
		for _, find := range []func(*bbolt.Tx, time.Time, string) (*jobRecord, error){readyHead, s.expiredHead} {
			rec, err := find(tx, now, q)
			if err != nil {
				return nil, err
			}
			if rec != nil && (best == nil || claimsBefore(rec, best)) {
				best = rec
			}
		}
	}
	if best == nil {
		return nil, nil
	}
	return s.claimRecord(tx, now, best, req)
}

// claimRecord claims the eligible job best for req's holder: attempts + 1
// (the new fencing token), holder, lease; with its audit record.
func (s *Store) claimRecord(tx *bbolt.Tx, now time.Time, best *jobRecord, req db.ClaimRequest) (*jobRecord, error) {
	if best.Attempts >= lease.MaxToken {
		return nil, fmt.Errorf("db: job %d has used every fencing token", best.ID)
	}
	rec := best.clone()
	rec.State = db.StateClaimed
	rec.Attempts++
	rec.ClaimedBy = lease.Holder(req.Principal, req.Worker)
	rec.LeaseExpiresAt = lease.ExpiresAt(now, req.Lease).UnixNano()
	rec.UpdatedAt = now.UnixNano()
	if err := s.putJob(tx, best, rec); err != nil {
		return nil, err
	}
	details := map[string]string{"holder": rec.ClaimedBy}
	if best.State == db.StateClaimed {
		details["reclaimed_from"] = best.ClaimedBy
	}
	if err := appendAudit(tx, now, db.AuditEvent{Principal: req.Principal, Action: "claim", Job: rec.ID,
		Token: rec.Attempts, Details: details}); err != nil {
		return nil, err
	}
	return rec, nil
}

// claimsBefore orders candidates: priority desc, then run_at, then id.
func claimsBefore(a, b *jobRecord) bool {
	if a.Priority != b.Priority {
		return a.Priority > b.Priority
	}
	if a.RunAt != b.RunAt {
		return a.RunAt < b.RunAt
	}
	return a.ID < b.ID
}

// readyHead returns the first available job of queue in claim order.
func readyHead(tx *bbolt.Tx, _ time.Time, queue string) (*jobRecord, error) {
	prefix := queuePrefix(queue)
	k, _ := tx.Bucket(bucketReady).Cursor().Seek(prefix)
	if k == nil || !bytes.HasPrefix(k, prefix) {
		return nil, nil
	}
	return getIndexedJob(tx, idFromKey(k))
}

// expiredHead returns the claimed job of queue whose lease expired first, if
// any expired. Expired jobs with no attempts left go dead on the way.
func (s *Store) expiredHead(tx *bbolt.Tx, now time.Time, queue string) (*jobRecord, error) {
	prefix := queuePrefix(queue)
	for {
		k, _ := tx.Bucket(bucketClaimed).Cursor().Seek(prefix)
		if k == nil || !bytes.HasPrefix(k, prefix) || !lease.Expired(time.Unix(0, timeFromKey(k, len(prefix))), now) {
			return nil, nil
		}
		rec, err := getIndexedJob(tx, idFromKey(k))
		if err != nil {
			return nil, err
		}
		if rec.Attempts < rec.MaxAttempts {
			return rec, nil
		}
		if err := s.killExpired(tx, now, rec); err != nil {
			return nil, err
		}
	}
}

func (s *Store) killExpired(tx *bbolt.Tx, now time.Time, old *jobRecord) error {
	rec := old.clone()
	rec.State = db.StateDead
	rec.addError(now, "lease expired")
	rec.ClaimedBy, rec.LeaseExpiresAt = "", 0
	rec.UpdatedAt = now.UnixNano()
	if err := s.putJob(tx, old, rec); err != nil {
		return err
	}
	return appendAudit(tx, now, db.AuditEvent{Principal: "system", Action: "dead", Job: rec.ID, Token: rec.Attempts,
		Details: map[string]string{"error": "lease expired", "holder": old.ClaimedBy}})
}

func (r *jobRecord) addError(now time.Time, msg string) {
	if len(msg) > db.MaxErrorBytes {
		msg = msg[:db.MaxErrorBytes]
	}
	r.LastError = msg
	r.Errors = append(r.Errors, errorRecord{Attempt: r.Attempts, At: now.UnixNano(), Error: msg})
	if len(r.Errors) > db.MaxErrorsKept {
		r.Errors = append([]errorRecord(nil), r.Errors[len(r.Errors)-db.MaxErrorsKept:]...)
	}
}

// fencedJob loads the job and applies the fencing rule; a caller that does
// not hold the current claim gets refused (wrapped in refused).
func fencedJob(tx *bbolt.Tx, f db.Fenced, refused db.Code) (*jobRecord, error) {
	rec, err := getJob(tx, f.ID)
	if err != nil {
		return nil, err
	}
	var claim lease.Claim
	if rec.State == db.StateClaimed {
		claim = lease.Claim{Holder: rec.ClaimedBy, Token: rec.Attempts}
	}
	holder := lease.Holder(f.Principal, f.Worker)
	switch err := lease.Check(claim, holder, f.FencingToken); {
	case err == nil:
		return rec, nil
	case errors.Is(err, lease.ErrStaleToken):
		return nil, notHeld(refused, "job %d: fencing token %d is not the current claim (%d); the job was claimed again", f.ID, f.FencingToken, rec.Attempts)
	case rec.State != db.StateClaimed:
		return nil, notHeld(refused, "job %d is %s, not claimed", f.ID, rec.State)
	default:
		return nil, notHeld(refused, "job %d is not claimed by %s", f.ID, holder)
	}
}

// HeartbeatJob extends the caller's lease to now+Lease. A caller that does
// not hold the current claim gets ErrClaimNotFound; a late heartbeat after
// expiry but before anybody claimed the job again is accepted.
func (s *Store) HeartbeatJob(ctx context.Context, req db.HeartbeatRequest) (db.Job, error) {
	if err := s.opts.ValidateFenced(req.Fenced); err != nil {
		return db.Job{}, err
	}
	d, err := s.opts.LeaseDuration(req.Lease)
	if err != nil {
		return db.Job{}, err
	}
	var job db.Job
	err = s.update(ctx, func(tx *bbolt.Tx) error {
		now := s.opts.Now()
		old, err := fencedJob(tx, req.Fenced, db.CodeNotFound)
		if err != nil {
			return err
		}
		rec := old.clone()
		rec.LeaseExpiresAt = lease.ExpiresAt(now, d).UnixNano()
		rec.UpdatedAt = now.UnixNano()
		if err := s.putJob(tx, old, rec); err != nil {
			return err
		}
		job = rec.job()
		return appendAudit(tx, now, db.AuditEvent{Principal: req.Principal, Action: "heartbeat", Job: rec.ID, Token: rec.Attempts,
			Details: map[string]string{"lease_expires_at": job.LeaseExpiresAt.Format(time.RFC3339Nano)}})
	})
	return job, err
}

// CompleteJob marks the caller's claim completed and stores its result and
// attestation. The fencing check comes first: a caller that does not hold
// the current claim gets ErrClaimMismatch and leaves nothing behind.
func (s *Store) CompleteJob(ctx context.Context, req db.CompleteRequest) (db.Job, error) {
	if err := s.opts.ValidateComplete(req); err != nil {
		return db.Job{}, err
	}
	var job db.Job
	err := s.update(ctx, func(tx *bbolt.Tx) error {
		rec, err := s.complete(tx, s.opts.Now(), req)
		if err == nil {
			job = rec.job()
		}
		return err
	})
	return job, err
}

// CompleteAndClaimJob completes the caller's claim and, in the same
// transaction, claims up to next.Max jobs for next.Worker (the same
// principal). It saves a commit and a round trip per job. A refused
// completion claims nothing; an empty next claim is not an error.
func (s *Store) CompleteAndClaimJob(ctx context.Context, req db.CompleteRequest, next db.ClaimRequest) (db.Job, []db.Job, error) {
	if err := s.opts.ValidateComplete(req); err != nil {
		return db.Job{}, nil, err
	}
	next.Principal = req.Principal
	if next.Worker == "" {
		next.Worker = req.Worker
	}
	if next.Wait != 0 {
		return db.Job{}, nil, db.Errorf(db.CodeInvalid, "claim_next cannot wait")
	}
	if err := s.opts.NormalizeClaim(&next); err != nil {
		return db.Job{}, nil, err
	}
	var (
		job  db.Job
		jobs []db.Job
	)
	err := s.update(ctx, func(tx *bbolt.Tx) error {
		now := s.opts.Now()
		rec, err := s.complete(tx, now, req)
		if err != nil {
			return err
		}
		job, jobs = rec.job(), nil
		return s.claimInTx(tx, now, next, &jobs)
	})
	return job, jobs, err
}

// complete applies a completion in tx. The fencing check comes before
// anything is written, the attestation included.
func (s *Store) complete(tx *bbolt.Tx, now time.Time, req db.CompleteRequest) (*jobRecord, error) {
	old, err := fencedJob(tx, req.Fenced, db.CodeConflict)
	if err != nil {
		return nil, err
	}
	rec := old.clone()
	rec.State = db.StateCompleted
	rec.ClaimedBy, rec.LeaseExpiresAt = "", 0
	rec.CompletedAt, rec.UpdatedAt = now.UnixNano(), now.UnixNano()
	rec.Result, rec.Attestation = req.Result, req.Attestation
	if err := s.putJob(tx, old, rec); err != nil {
		return nil, err
	}
	details := map[string]string{"holder": old.ClaimedBy}
	if len(rec.Attestation) > 0 {
		details["attestation_sha256"] = db.SHA256Hex(rec.Attestation)
	}
	return rec, appendAudit(tx, now, db.AuditEvent{Principal: req.Principal, Action: "complete", Job: rec.ID, Token: rec.Attempts, Details: details})
}

// FailJob records the caller's failure. With Final, or when the attempts
// are used up, the job goes dead; otherwise it is scheduled again after
// RetryDelay (or the backoff). A caller that does not hold the current claim
// gets ErrClaimNotFound.
func (s *Store) FailJob(ctx context.Context, req db.FailRequest) (db.Job, error) {
	if err := s.opts.ValidateFenced(req.Fenced); err != nil {
		return db.Job{}, err
	}
	if req.RetryDelay != nil && (*req.RetryDelay < 0 || *req.RetryDelay > db.MaxDelay) {
		return db.Job{}, db.Errorf(db.CodeInvalid, "retry_delay_ms must be between 0 and %d (%v)", db.MaxDelay.Milliseconds(), db.MaxDelay)
	}
	var job db.Job
	err := s.update(ctx, func(tx *bbolt.Tx) error {
		now := s.opts.Now()
		old, err := fencedJob(tx, req.Fenced, db.CodeNotFound)
		if err != nil {
			return err
		}
		rec := old.clone()
		rec.addError(now, req.Error)
		rec.ClaimedBy, rec.LeaseExpiresAt = "", 0
		rec.UpdatedAt = now.UnixNano()
		action := "fail"
		if req.Final || rec.Attempts >= rec.MaxAttempts {
			rec.State = db.StateDead
			action = "dead"
		} else {
			delay := s.opts.Backoff.Delay(rec.Attempts, s.opts.Random())
			if req.RetryDelay != nil {
				delay = *req.RetryDelay
			}
			rec.RunAt = now.Add(delay).UnixNano()
			rec.State = db.StateScheduled
			if delay == 0 {
				rec.State = db.StateAvailable
			}
		}
		// Audited before putJob: an available job may be handed off to a
		// waiting claim there, and that claim comes after this failure.
		if err := appendAudit(tx, now, db.AuditEvent{Principal: req.Principal, Action: action, Job: rec.ID, Token: rec.Attempts,
			Details: map[string]string{"holder": old.ClaimedBy, "error": rec.LastError, "state": string(rec.State)}}); err != nil {
			return err
		}
		if err := s.putJob(tx, old, rec); err != nil {
			return err
		}
		job = rec.job()
		return nil
	})
	return job, err
}

// CancelJob cancels a job that has not finished (available, scheduled,
// claimed) or is dead. A worker holding a cancelled claim is refused on its
// next call. Completed and cancelled jobs give ErrWrongState.
func (s *Store) CancelJob(ctx context.Context, req db.JobRequest) (db.Job, error) {
	var job db.Job
	err := s.update(ctx, func(tx *bbolt.Tx) error {
		now := s.opts.Now()
		old, err := getJob(tx, req.ID)
		if err != nil {
			return err
		}
		if old.State == db.StateCompleted || old.State == db.StateCancelled {
			return db.Errorf(db.CodeConflict, "job state does not allow this: job %d is %s and cannot be cancelled", req.ID, old.State)
		}
		rec := old.clone()
		rec.State = db.StateCancelled
		rec.ClaimedBy, rec.LeaseExpiresAt = "", 0
		rec.UpdatedAt = now.UnixNano()
		if err := s.putJob(tx, old, rec); err != nil {
			return err
		}
		job = rec.job()
		return appendAudit(tx, now, db.AuditEvent{Principal: req.Principal, Action: "cancel", Job: rec.ID, Token: rec.Attempts,
			Details: map[string]string{"from": string(old.State)}})
	})
	return job, err
}

// RetryJob makes a dead or cancelled job available now. Attempts keep
// counting (they are the fencing tokens); MaxAttempts is raised so the job
// has its enqueue-time budget again. Other states give ErrWrongState.
func (s *Store) RetryJob(ctx context.Context, req db.JobRequest) (db.Job, error) {
	var job db.Job
	err := s.update(ctx, func(tx *bbolt.Tx) error {
		now := s.opts.Now()
		old, err := getJob(tx, req.ID)
		if err != nil {
			return err
		}
		if old.State != db.StateDead && old.State != db.StateCancelled {
			return db.Errorf(db.CodeConflict, "job state does not allow this: job %d is %s; only dead or cancelled jobs can be retried", req.ID, old.State)
		}
		rec := old.clone()
		rec.State = db.StateAvailable
		rec.RunAt, rec.UpdatedAt = now.UnixNano(), now.UnixNano()
		budget := max(rec.Budget, 1)
		rec.MaxAttempts = max(rec.MaxAttempts, min(rec.Attempts+budget, lease.MaxToken))
		// Audited before putJob, which may hand the job to a waiting claim.
		if err := appendAudit(tx, now, db.AuditEvent{Principal: req.Principal, Action: "retry", Job: rec.ID, Token: rec.Attempts,
			Details: map[string]string{"from": string(old.State), "max_attempts": fmt.Sprint(rec.MaxAttempts)}}); err != nil {
			return err
		}
		if err := s.putJob(tx, old, rec); err != nil {
			return err
		}
		job = rec.job()
		return nil
	})
	return job, err
}

// GetJob returns one job or ErrJobNotFound.
func (s *Store) GetJob(ctx context.Context, id uint64) (db.Job, error) {
	var job db.Job
	err := s.view(func(tx *bbolt.Tx) error {
		rec, err := getJob(tx, id)
		if err != nil {
			return err
		}
		job = rec.job()
		return nil
	})
	return job, err
}

// ListJobs returns jobs matching req in id order. A page scans at most
// listScanBudget records, so a selective filter over a large file returns a
// short page with a Next cursor rather than holding a read transaction long.
func (s *Store) ListJobs(ctx context.Context, req db.ListRequest) (db.JobPage, error) {
	if req.Queue != "" {
		if err := db.ValidateQueue(req.Queue); err != nil {
			return db.JobPage{}, err
		}
	}
	if req.State != "" && !db.ValidState(req.State) {
		return db.JobPage{}, db.Errorf(db.CodeInvalid, "state %q is not one of available, scheduled, claimed, completed, dead, cancelled", req.State)
	}
	var err error
	if req.Limit, err = db.ListLimit(req.Limit); err != nil {
		return db.JobPage{}, err
	}
	page := db.JobPage{Jobs: []db.Job{}}
	err = s.view(func(tx *bbolt.Tx) error {
		if req.After == ^uint64(0) {
			return nil
		}
		c := tx.Bucket(bucketJobs).Cursor()
		scanned, lastScanned := 0, uint64(0)
		for k, v := c.Seek(u64(req.After + 1)); k != nil; k, v = c.Next() {
			if len(page.Jobs) == req.Limit || scanned == listScanBudget {
				page.Next = lastScanned
				return nil
			}
			scanned++
			lastScanned = idFromKey(k)
			rec, err := decodeJob(v)
			if err != nil {
				return err
			}
			if (req.Queue == "" || rec.Queue == req.Queue) && (req.State == "" || rec.State == req.State) {
				page.Jobs = append(page.Jobs, rec.job())
			}
		}
		return nil
	})
	return page, err
}

// Stats returns job counts per queue and state, from counters kept in the
// same transactions as the jobs (no scan).
func (s *Store) Stats(ctx context.Context) ([]db.QueueStats, error) {
	var out []db.QueueStats
	err := s.view(func(tx *bbolt.Tx) error {
		return tx.Bucket(bucketCounts).ForEach(func(k, v []byte) error {
			i := bytes.IndexByte(k, 0)
			if i < 0 || len(v) != 8 {
				return fmt.Errorf("%w: count key %q", db.ErrCorrupt, k)
			}
			q, st := string(k[:i]), db.State(k[i+1:])
			if len(out) == 0 || out[len(out)-1].Queue != q {
				out = append(out, db.QueueStats{Queue: q, Counts: map[db.State]uint64{}})
			}
			out[len(out)-1].Counts[st] = idFromKey(v)
			return nil
		})
	})
	return out, err
}

func getJob(tx *bbolt.Tx, id uint64) (*jobRecord, error) {
	v := tx.Bucket(bucketJobs).Get(u64(id))
	if v == nil {
		return nil, db.Errorf(db.CodeNotFound, "job not found: job %d", id)
	}
	return decodeJob(v)
}

// getIndexedJob loads a job that an index entry points to. A missing record
// is corruption, not a refusal: it must abort the commit, never be answered
// as "job not found" after other writes of the same transaction.
func getIndexedJob(tx *bbolt.Tx, id uint64) (*jobRecord, error) {
	rec, err := getJob(tx, id)
	if db.ErrorCode(err) == db.CodeNotFound {
		return nil, fmt.Errorf("%w: an index points at job %d, which has no record", db.ErrCorrupt, id)
	}
	return rec, err
}

// indexEntry returns the index bucket and key a record belongs in, if any.
func indexEntry(r *jobRecord) (bucket, key []byte) {
	switch r.State {
	case db.StateAvailable:
		return bucketReady, readyKey(r)
	case db.StateScheduled:
		return bucketScheduled, scheduledKey(r)
	case db.StateClaimed:
		return bucketClaimed, claimedKey(r)
	case db.StateCompleted, db.StateCancelled:
		return bucketFinished, finishedKey(r)
	case db.StateDead:
		return bucketDead, deadKey(r)
	}
	return nil, nil
}

// putJob writes rec and moves its index entry and state count from what old
// had (nil for a new job). It is the only place that writes job records, so
// it is also where long-polling claims learn, after the commit, that a job
// became claimable now (available) or will at a time (run_at, lease expiry).
func (s *Store) putJob(tx *bbolt.Tx, old, rec *jobRecord) error {
	sameCount := old != nil && old.Queue == rec.Queue && old.State == rec.State
	if old != nil {
		if b, k := indexEntry(old); b != nil {
			if err := tx.Bucket(b).Delete(k); err != nil {
				return err
			}
		}
		if !sameCount {
			if err := addCount(tx, old.Queue, old.State, -1); err != nil {
				return err
			}
		}
	}
	if b, k := indexEntry(rec); b != nil {
		if err := tx.Bucket(b).Put(k, nil); err != nil {
			return err
		}
	}
	if !sameCount {
		if err := addCount(tx, rec.Queue, rec.State, 1); err != nil {
			return err
		}
	}
	v, err := encodeRecord(rec)
	if err != nil {
		return err
	}
	if err := tx.Bucket(bucketJobs).Put(u64(rec.ID), v); err != nil {
		return err
	}
	switch {
	case rec.State == db.StateAvailable && (old == nil || old.State != db.StateAvailable):
		if w := s.waiters.take(rec.Queue); w != nil {
			return s.handOff(tx, rec, w)
		}
		s.signalAvailable(tx, rec.Queue, 1)
	case rec.State == db.StateScheduled:
		s.signalLater(tx, time.Unix(0, rec.RunAt))
	case rec.State == db.StateClaimed:
		s.signalLater(tx, time.Unix(0, rec.LeaseExpiresAt))
	}
	return nil
}

// deleteJob removes a job, its index entries, its count and its
// idempotency key.
func deleteJob(tx *bbolt.Tx, rec *jobRecord) error {
	if b, k := indexEntry(rec); b != nil {
		if err := tx.Bucket(b).Delete(k); err != nil {
			return err
		}
	}
	if err := addCount(tx, rec.Queue, rec.State, -1); err != nil {
		return err
	}
	if rec.IdempotencyKey != "" {
		k := append(queuePrefix(rec.Queue), rec.IdempotencyKey...)
		if v := tx.Bucket(bucketIdempotency).Get(k); v != nil && idFromKey(v) == rec.ID {
			if err := tx.Bucket(bucketIdempotency).Delete(k); err != nil {
				return err
			}
		}
	}
	return tx.Bucket(bucketJobs).Delete(u64(rec.ID))
}

func addCount(tx *bbolt.Tx, queue string, state db.State, delta int64) error {
	b := tx.Bucket(bucketCounts)
	k := countKey(queue, state)
	var n uint64
	if v := b.Get(k); v != nil {
		n = idFromKey(v)
	}
	n = uint64(int64(n) + delta)
	if n == 0 {
		return b.Delete(k)
	}
	return b.Put(k, u64(n))
}

// checkIndexes verifies that every job has exactly the index entry its
// state calls for, that no index entry is orphaned, and that the counts
// match the records.
func checkIndexes(tx *bbolt.Tx) error {
	want := map[string]bool{}
	counts := map[string]uint64{}
	err := tx.Bucket(bucketJobs).ForEach(func(k, v []byte) error {
		rec, err := decodeJob(v)
		if err != nil {
			return err
		}
		if rec.ID != idFromKey(k) {
			return fmt.Errorf("db: job key %d holds job %d", idFromKey(k), rec.ID)
		}
		// A file opened read-only that predates an index bucket has none
		// of its entries; Open builds the bucket when it opens for writing.
		if b, key := indexEntry(rec); b != nil && tx.Bucket(b) != nil {
			want[string(b)+"/"+string(key)] = true
		}
		counts[string(countKey(rec.Queue, rec.State))]++
		return nil
	})
	if err != nil {
		return err
	}
	for _, b := range [][]byte{bucketReady, bucketScheduled, bucketClaimed, bucketFinished, bucketDead} {
		if tx.Bucket(b) == nil {
			continue
		}
		err := tx.Bucket(b).ForEach(func(k, _ []byte) error {
			name := string(b) + "/" + string(k)
			if !want[name] {
				return fmt.Errorf("db: index %s has an entry for job %d that its record does not call for", b, idFromKey(k))
			}
			delete(want, name)
			return nil
		})
		if err != nil {
			return err
		}
	}
	for name := range want {
		return fmt.Errorf("db: index entry %q is missing", name)
	}
	err = tx.Bucket(bucketCounts).ForEach(func(k, v []byte) error {
		if counts[string(k)] != idFromKey(v) {
			return fmt.Errorf("db: count %q is %d, records say %d", k, idFromKey(v), counts[string(k)])
		}
		delete(counts, string(k))
		return nil
	})
	if err != nil {
		return err
	}
	for k, n := range counts {
		return fmt.Errorf("db: count %q is missing (records say %d)", k, n)
	}
	return nil
}

// notHeld is the refusal of a caller that does not hold the job's current
// claim. Heartbeats and failures report it as CodeNotFound ("claim not
// found"), completions as CodeConflict: one condition, the operation
// decides the code.
func notHeld(code db.Code, format string, args ...any) error {
	prefix := "claim not found: "
	if code == db.CodeConflict {
		prefix = "job is not claimed by this worker with this fencing token: "
	}
	return db.Errorf(code, prefix+format, args...)
}
