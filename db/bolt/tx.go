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
type reader struct {
	tx   *bbolt.Tx
	tail *tail
}

// tail is what a commit's operations leave to be written once, at its end
// (writer.flush), rather than once an operation: the changes to the job
// counts and the audit counts, and the audit chain's head, which every
// link of the commit reads and moves. They are small values in small
// buckets that most operations touch; writing them once a commit took
// 4–8% off the store's CPU per job in-process (docs/performance.md). Reads
// in the same transaction go through auditHead.
type tail struct {
	counts      map[string]int64  // countKey → change
	auditCounts map[string]uint64 // audit count key → records added
	head        auditHead
}

// auditHead is the audit chain's head within a commit.
type auditHead struct {
	seq   uint64
	hash  []byte
	read  bool // seq and hash hold the head (read from meta, or moved)
	moved bool // a link was appended: meta's copy is behind
}

// auditHead returns the chain's head as this transaction has it. A head
// in meta that is not a sequence and a hash is corruption: appending after
// it could overwrite a link.
func (r reader) auditHead() (uint64, []byte, error) {
	h := &r.tail.head
	if !h.read {
		h.seq, h.hash = readAuditHead(r.tx)
		if h.hash == nil { // no head, or one readAuditHead cannot read
			if v := r.tx.Bucket(bucketMeta).Get(metaAuditHead); v != nil {
				return 0, nil, fmt.Errorf("%w: the audit head is %d bytes, not a sequence and a hash", db.ErrCorrupt, len(v))
			}
		}
		h.read = true
	}
	return h.seq, h.hash, nil
}

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
		if b, k := queueIndexEntry(old); b != nil {
			if err := tx.Bucket(b).Delete(k); err != nil {
				return err
			}
		}
		if !sameCount {
			w.addCount(old.Queue, old.State, -1)
		}
	}
	if b, k := indexEntry(rec); b != nil {
		if err := tx.Bucket(b).Put(k, nil); err != nil {
			return err
		}
	}
	if b, k := queueIndexEntry(rec); b != nil {
		if err := tx.Bucket(b).Put(k, nil); err != nil {
			return err
		}
	}
	if !sameCount {
		w.addCount(rec.Queue, rec.State, 1)
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

// addCount changes the count of queue's jobs in state by delta, when the
// commit ends (flush).
func (w *writer) addCount(queue string, state db.State, delta int64) {
	if w.tail.counts == nil {
		w.tail.counts = map[string]int64{}
	}
	w.tail.counts[string(countKey(queue, state))] += delta
}

// flush writes the tail of the commit: called once, after its last
// operation and before it commits.
func (w *writer) flush() error {
	t := w.tail
	counts := w.tx.Bucket(bucketCounts)
	for k, delta := range t.counts {
		if delta == 0 {
			continue
		}
		var n uint64
		if v := counts.Get([]byte(k)); v != nil {
			n = idFromKey(v)
		}
		var err error
		if n = uint64(int64(n) + delta); n == 0 {
			err = counts.Delete([]byte(k))
		} else {
			err = counts.Put([]byte(k), u64(n))
		}
		if err != nil {
			return err
		}
	}
	auditCounts := w.tx.Bucket(bucketAuditCounts)
	for k, added := range t.auditCounts {
		var n uint64
		if v := auditCounts.Get([]byte(k)); len(v) == 8 {
			n = idFromKey(v)
		}
		if err := auditCounts.Put([]byte(k), u64(n+added)); err != nil {
			return err
		}
	}
	clear(t.counts)
	clear(t.auditCounts)
	if !t.head.moved {
		return nil
	}
	t.head.moved = false
	return w.tx.Bucket(bucketMeta).Put(metaAuditHead, append(u64(t.head.seq), t.head.hash...))
}

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

// queueIndexEntry returns the second index entry a record belongs in, if
// any: a scheduled job is in idx_scheduled and, by queue, in
// idx_scheduled_queue.
func queueIndexEntry(r *jobRecord) (bucket, key []byte) {
	if r.State == db.StateScheduled {
		return bucketScheduledQueue, scheduledQueueKey(r)
	}
	return nil, nil
}

// deleteJob removes a job, its index entries, its count and its
// idempotency key.
func (w *writer) deleteJob(rec *jobRecord) error {
	tx := w.tx
	if b, k := indexEntry(rec); b != nil {
		if err := tx.Bucket(b).Delete(k); err != nil {
			return err
		}
	}
	if b, k := queueIndexEntry(rec); b != nil {
		if err := tx.Bucket(b).Delete(k); err != nil {
			return err
		}
	}
	w.addCount(rec.Queue, rec.State, -1)
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
