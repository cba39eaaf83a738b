package bolt

import (
	"fmt"
	"time"

	"github.com/fenceq/fenceq/db"
	bbolt "go.etcd.io/bbolt"
)

// A mutation is one request's change inside a shared commit, in two steps.
//
// decide reads what the change depends on and settles it — by calling the
// rules in package db — or refuses. It gets a reader, which has no way to
// write: a refused mutation cannot have left anything in the commit, and
// any error from decide fails that mutation alone.
//
// apply writes what decide settled, one step at a time (step 0, 1, …
// while more). After each step the commit loop hands the jobs that the
// step made available to waiting long-polls (handOff), in the same
// transaction. Any error from apply aborts the whole commit.
type mutation interface {
	decide(r reader, now time.Time) error
	apply(w *writer, step int) (more bool, err error)
}

// reader is the read side of a write transaction, for decide.
type reader struct{ tx *bbolt.Tx }

func (r reader) job(id uint64) (*jobRecord, error)       { return getJob(r.tx, id) }
func (r reader) lease(name string) (*leaseRecord, error) { return getLease(r.tx, name) }

// writer writes records, their index entries and counts, and audit links,
// in the transaction of a commit. It only writes: what the commit loop must
// do after a step — hand a job that became available to a waiting
// long-poll, wake waiters once the transaction committed — it notes in
// available, wakeAt and released for handOff.
type writer struct {
	reader
	now time.Time

	available []*jobRecord // became available in this step, in order
	wakeAt    int64        // earliest run_at or lease expiry written, 0 for none
	released  []string     // named leases released
	resumed   []string     // queues resumed
}

// putJob writes rec and moves its index entry and state count from what
// old had (nil for a new job). It is the only place that writes job records.
func (w *writer) putJob(old, rec *jobRecord) error {
	tx := w.tx
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
		w.available = append(w.available, rec)
	case rec.State == db.StateScheduled:
		w.wakeBy(rec.RunAt)
	case rec.State == db.StateClaimed:
		w.wakeBy(rec.LeaseExpiresAt)
	}
	return nil
}

// put writes the record a transition returned in place of old, with its
// audit link: the change and its audit in the same transaction.
func (w *writer) put(old *jobRecord, next db.JobRecord, e db.AuditEvent) (*jobRecord, error) {
	rec := jobRecordOf(next)
	if err := w.putJob(old, rec); err != nil {
		return nil, err
	}
	return rec, w.audit(e)
}

func (w *writer) wakeBy(ns int64) {
	if w.wakeAt == 0 || ns < w.wakeAt {
		w.wakeAt = ns
	}
}

// audit appends e to the audit chain.
func (w *writer) audit(e db.AuditEvent) error { return appendAudit(w.tx, w.now, e) }

// deleteJob removes a job, its index entries, its count and its
// idempotency key.
func (w *writer) deleteJob(rec *jobRecord) error { return deleteJob(w.tx, rec) }

// putLease writes the lease record of name. It is the only place that
// writes lease records.
func (w *writer) putLease(name string, rec *leaseRecord) error { return putLease(w.tx, name, rec) }

func getJob(tx *bbolt.Tx, id uint64) (*jobRecord, error) {
	v := tx.Bucket(bucketJobs).Get(u64(id))
	if v == nil {
		return nil, db.JobNotFound(id)
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
