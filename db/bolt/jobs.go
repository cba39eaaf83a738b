package bolt

import (
	"bytes"
	"context"
	"fmt"
	"time"

	"github.com/fenceq/fenceq/db"
	bbolt "go.etcd.io/bbolt"
)

// listScanBudget bounds the records one listing page reads, so that a
// selective filter over a large file holds its read transaction briefly.
const listScanBudget = 10_000

// EnqueueJob adds one job. Refusals: CodeInvalid, CodeTooLarge.
func (s *Store) EnqueueJob(ctx context.Context, req db.EnqueueRequest) (db.EnqueueResult, error) {
	res, err := s.EnqueueJobs(ctx, []db.EnqueueRequest{req})
	if err != nil {
		return db.EnqueueResult{}, err
	}
	return res[0], nil
}

// EnqueueJobs adds several jobs in one transaction: all of them or, when
// any request is invalid, none. A refusal names the index of the bad request.
func (s *Store) EnqueueJobs(ctx context.Context, reqs []db.EnqueueRequest) ([]db.EnqueueResult, error) {
	reqs, err := s.opts.NormalizeEnqueueBatch(reqs)
	if err != nil {
		return nil, err
	}
	op := &enqueueOp{reqs: reqs, recs: make([]*jobRecord, len(reqs)), created: make([]bool, len(reqs))}
	if err := s.updateItems(ctx, len(reqs), op); err != nil {
		return nil, err
	}
	results := make([]db.EnqueueResult, len(reqs))
	for i, rec := range op.recs {
		results[i] = db.EnqueueResult{Job: rec.job(), Created: op.created[i]}
	}
	return results, nil
}

// enqueueOp adds its jobs one step each, so that a job handed to a waiting
// long-poll is claimed right after its own enqueue (audit: enqueue, claim,
// enqueue, claim …). A valid enqueue is never refused.
type enqueueOp struct {
	reqs    []db.EnqueueRequest
	recs    []*jobRecord
	created []bool
}

func (op *enqueueOp) decide(reader, time.Time) error { return nil }

func (op *enqueueOp) apply(w *writer, i int) (more bool, err error) {
	op.recs[i], op.created[i], err = enqueue(w, op.reqs[i])
	return i+1 < len(op.reqs), err
}

// enqueue writes one job, or returns the job its idempotency key already
// names (created false).
func enqueue(w *writer, req db.EnqueueRequest) (*jobRecord, bool, error) {
	tx := w.tx
	var idemKey []byte
	if req.IdempotencyKey != "" {
		idemKey = append(queuePrefix(req.Queue), req.IdempotencyKey...)
		if v := tx.Bucket(bucketIdempotency).Get(idemKey); v != nil {
			rec, err := getIndexedJob(tx, idFromKey(v))
			return rec, false, err
		}
	}
	id, err := tx.Bucket(bucketJobs).NextSequence()
	if err != nil {
		return nil, false, err
	}
	next, ev := db.Enqueue(id, req, w.now)
	if idemKey != nil {
		if err := tx.Bucket(bucketIdempotency).Put(idemKey, u64(id)); err != nil {
			return nil, false, err
		}
	}
	rec, err := w.put(nil, next, ev)
	return rec, true, err
}

// fencedOp is a heartbeat, completion or failure: decide loads the job and
// applies the transition (which checks the fencing rule first); apply
// writes what it returned.
type fencedOp struct {
	id         uint64
	transition func(old *db.JobRecord, now time.Time) (db.JobRecord, db.AuditEvent, error)
	old, rec   *jobRecord
	next       db.JobRecord
	ev         db.AuditEvent
}

func (op *fencedOp) decide(r reader, now time.Time) error {
	old, err := r.job(op.id)
	if err != nil {
		return err
	}
	op.next, op.ev, err = op.transition(&old.JobRecord, now)
	op.old = old
	return err
}

func (op *fencedOp) apply(w *writer, _ int) (more bool, err error) {
	op.rec, err = w.put(op.old, op.next, op.ev)
	return false, err
}

// change runs a one-record transition and returns the job as written (and
// as a hand-off left it).
func (s *Store) change(ctx context.Context, id uint64, transition func(old *db.JobRecord, now time.Time) (db.JobRecord, db.AuditEvent, error)) (db.Job, error) {
	op := &fencedOp{id: id, transition: transition}
	if err := s.update(ctx, op); err != nil {
		return db.Job{}, err
	}
	return op.rec.job(), nil
}

// HeartbeatJob extends the caller's lease to now+Lease (db.Heartbeat). A
// caller that does not hold the current claim gets CodeNotFound; a late
// heartbeat after expiry but before anybody claimed the job again is
// accepted.
func (s *Store) HeartbeatJob(ctx context.Context, req db.HeartbeatRequest) (db.Job, error) {
	d, err := s.opts.ValidateHeartbeat(req)
	if err != nil {
		return db.Job{}, err
	}
	return s.change(ctx, req.ID, func(old *db.JobRecord, now time.Time) (db.JobRecord, db.AuditEvent, error) {
		return db.Heartbeat(old, req, d, now)
	})
}

// CompleteJob marks the caller's claim completed and stores its result and
// attestation (db.Complete). The fencing check comes first: a caller that
// does not hold the current claim gets CodeConflict and leaves nothing behind.
func (s *Store) CompleteJob(ctx context.Context, req db.CompleteRequest) (db.Job, error) {
	if err := s.opts.ValidateComplete(req); err != nil {
		return db.Job{}, err
	}
	return s.change(ctx, req.ID, func(old *db.JobRecord, now time.Time) (db.JobRecord, db.AuditEvent, error) {
		return db.Complete(old, req, now)
	})
}

// CompleteAndClaimJob completes the caller's claim and, in the same
// transaction, claims up to next.Max jobs for next.Worker (the same
// principal). It saves a commit and a round trip per job. A refused
// completion claims nothing; an empty next claim is not an error.
func (s *Store) CompleteAndClaimJob(ctx context.Context, req db.CompleteRequest, next db.ClaimRequest) (db.Job, []db.Job, error) {
	if err := s.opts.ValidateComplete(req); err != nil {
		return db.Job{}, nil, err
	}
	if err := s.opts.NormalizeClaimNext(req, &next); err != nil {
		return db.Job{}, nil, err
	}
	op := &completeAndClaimOp{s: s, complete: fencedOp{id: req.ID, transition: func(old *db.JobRecord, now time.Time) (db.JobRecord, db.AuditEvent, error) {
		return db.Complete(old, req, now)
	}}, next: next}
	if err := s.updateItems(ctx, 1+next.Max, op); err != nil {
		return db.Job{}, nil, err
	}
	return op.complete.rec.job(), jobsOf(op.got), nil
}

// completeAndClaimOp: decide is the completion's; apply writes it (step
// 0), then runs a claim's steps.
type completeAndClaimOp struct {
	s        *Store
	complete fencedOp
	next     db.ClaimRequest
	got      []*jobRecord
}

func (op *completeAndClaimOp) decide(r reader, now time.Time) error {
	return op.complete.decide(r, now)
}

func (op *completeAndClaimOp) apply(w *writer, step int) (bool, error) {
	if step == 0 {
		_, err := op.complete.apply(w, 0)
		return true, err
	}
	return op.s.claimSteps(w, step-1, op.next, &op.got)
}

// FailJob records the caller's failure (db.Rules.Fail). With Final, or when
// the attempts are used up, the job goes dead; otherwise it is scheduled
// again after RetryDelay (or the backoff). A caller that does not hold the
// current claim gets CodeNotFound.
func (s *Store) FailJob(ctx context.Context, req db.FailRequest) (db.Job, error) {
	if err := s.opts.ValidateFail(req); err != nil {
		return db.Job{}, err
	}
	return s.change(ctx, req.ID, func(old *db.JobRecord, now time.Time) (db.JobRecord, db.AuditEvent, error) {
		return s.opts.Fail(old, req, now)
	})
}

// CancelJob cancels a job that has not finished (available, scheduled,
// claimed) or is dead (db.Cancel). A worker holding a cancelled claim is
// refused on its next call. Completed and cancelled jobs give CodeConflict.
func (s *Store) CancelJob(ctx context.Context, req db.JobRequest) (db.Job, error) {
	return s.change(ctx, req.ID, func(old *db.JobRecord, now time.Time) (db.JobRecord, db.AuditEvent, error) {
		return db.Cancel(old, req, now)
	})
}

// RetryJob makes a dead or cancelled job available now (db.Retry). Other
// states give CodeConflict.
func (s *Store) RetryJob(ctx context.Context, req db.JobRequest) (db.Job, error) {
	return s.change(ctx, req.ID, func(old *db.JobRecord, now time.Time) (db.JobRecord, db.AuditEvent, error) {
		return db.Retry(old, req, now)
	})
}

// GetJob returns one job, or CodeNotFound.
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
		if b, key := queueIndexEntry(rec); b != nil && tx.Bucket(b) != nil {
			want[string(b)+"/"+string(key)] = true
		}
		counts[string(countKey(rec.Queue, rec.State))]++
		return nil
	})
	if err != nil {
		return err
	}
	for _, b := range [][]byte{bucketReady, bucketScheduled, bucketScheduledQueue, bucketClaimed, bucketFinished, bucketDead} {
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
