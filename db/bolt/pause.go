package bolt

// Queue pause and resume. A pause is a record in bucketPaused; claims read
// that bucket in their own transaction (unpausedQueues), so a pause
// committed in the same batch ahead of a claim already holds for it, and
// none of the claim paths — ClaimJobs, CompleteAndClaimJob's next claim,
// the hand-off of a new job to a sleeping long-poll, the timer that wakes
// long-polls at a run_at or a lease expiry — gives out a job of a paused
// queue. A resume wakes the long-polls of its queue after its commit.

import (
	"context"
	"fmt"
	"time"

	"github.com/fenceq/fenceq/db"
	"github.com/fenceq/fenceq/internal/msgrec"
	bbolt "go.etcd.io/bbolt"
)

const pauseRecordVersion = 1

// pauseRecord is the stored form of a queue's pause, keyed by the queue's
// name. Tags are short, explicit and never reused; times are Unix
// nanoseconds.
type pauseRecord struct {
	V        uint8  `msgpack:"v"`
	PausedAt int64  `msgpack:"pa"`
	PausedBy string `msgpack:"pb,omitempty"`
}

func decodePause(queue string, b []byte) (*db.PauseRecord, error) {
	var r pauseRecord
	if err := msgrec.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("%w: pause of queue %q: %v", db.ErrCorrupt, queue, err)
	}
	if r.V == 0 || r.V > pauseRecordVersion || r.PausedAt == 0 {
		return nil, fmt.Errorf("%w: pause of queue %q: version %d, paused at %d", db.ErrCorrupt, queue, r.V, r.PausedAt)
	}
	return &db.PauseRecord{PausedAt: r.PausedAt, PausedBy: r.PausedBy}, nil
}

// getPause returns the pause of queue, or nil when it runs. A file of
// schema version 2 opened read-only has no bucket: nothing is paused.
func getPause(tx *bbolt.Tx, queue string) (*db.PauseRecord, error) {
	b := tx.Bucket(bucketPaused)
	if b == nil {
		return nil, nil
	}
	v := b.Get([]byte(queue))
	if v == nil {
		return nil, nil
	}
	return decodePause(queue, v)
}

// unpausedQueues returns queues without the paused ones (queues itself
// when none is paused, the common case: one lookup of an empty bucket).
func unpausedQueues(tx *bbolt.Tx, queues []string) []string {
	b := tx.Bucket(bucketPaused)
	if b == nil || isEmptyBucket(b) {
		return queues
	}
	out := make([]string, 0, len(queues))
	for _, q := range queues {
		if b.Get([]byte(q)) == nil {
			out = append(out, q)
		}
	}
	return out
}

// isPaused reports whether queue is paused in tx.
func isPaused(tx *bbolt.Tx, queue string) bool {
	b := tx.Bucket(bucketPaused)
	return b != nil && b.Get([]byte(queue)) != nil
}

// SetQueuePaused pauses or resumes req.Queue in one transaction with its
// audit link (db.SetPause); see db.Store. A resume wakes the long-polls
// waiting on the queue once it committed. Refusals: CodeInvalid,
// CodeTooLarge (db.MaxPausedQueues), ErrClosed.
func (s *Store) SetQueuePaused(ctx context.Context, req db.PauseRequest) (db.PauseResult, error) {
	if err := db.ValidateQueue(req.Queue); err != nil {
		return db.PauseResult{}, err
	}
	op := &pauseOp{req: req}
	if err := s.update(ctx, op); err != nil {
		return db.PauseResult{}, err
	}
	return op.next.Result(req.Queue, op.changed), nil
}

// pauseOp: decide reads the queue's pause and the number of paused queues
// and applies db.SetPause; apply writes or deletes the record and audits.
type pauseOp struct {
	req     db.PauseRequest
	next    *db.PauseRecord
	changed bool
	ev      db.AuditEvent
}

func (op *pauseOp) decide(r reader, now time.Time) error {
	old, err := getPause(r.tx, op.req.Queue)
	if err != nil {
		return err
	}
	paused := 0
	if op.req.Paused && old == nil {
		// A cursor sees the pauses written earlier in this commit
		// (Bucket.Stats reads committed pages only). At most
		// MaxPausedQueues keys.
		c := r.tx.Bucket(bucketPaused).Cursor()
		for k, _ := c.First(); k != nil && paused < db.MaxPausedQueues; k, _ = c.Next() {
			paused++
		}
	}
	op.next, op.changed, op.ev, err = db.SetPause(old, paused, op.req, now)
	return err
}

func (op *pauseOp) apply(w *writer, _ int) (bool, error) {
	if !op.changed {
		return false, nil
	}
	if err := w.putPause(op.req.Queue, op.next); err != nil {
		return false, err
	}
	return false, w.audit(op.ev)
}

// putPause writes the pause of queue, or deletes it (rec nil: resumed). It
// is the only place that writes pause records; a resume is noted for
// handOff, which wakes the queue's long-polls after the commit.
func (w *writer) putPause(queue string, rec *db.PauseRecord) error {
	b := w.tx.Bucket(bucketPaused)
	if rec == nil {
		w.resumed = append(w.resumed, queue)
		return b.Delete([]byte(queue))
	}
	v, err := encodeRecord(&pauseRecord{V: pauseRecordVersion, PausedAt: rec.PausedAt, PausedBy: rec.PausedBy})
	if err != nil {
		return err
	}
	return b.Put([]byte(queue), v)
}

// PausedQueues lists the paused queues in name order, in one read
// transaction.
func (s *Store) PausedQueues(ctx context.Context) ([]db.QueuePause, error) {
	out := []db.QueuePause{}
	err := s.view(func(tx *bbolt.Tx) error {
		b := tx.Bucket(bucketPaused)
		if b == nil {
			return nil
		}
		return b.ForEach(func(k, v []byte) error {
			rec, err := decodePause(string(k), v)
			if err != nil {
				return err
			}
			out = append(out, rec.Pause(string(k)))
			return nil
		})
	})
	return out, err
}

// checkPauses verifies that every pause record decodes and is keyed by a
// valid queue name, and that no more than db.MaxPausedQueues are paused.
func checkPauses(tx *bbolt.Tx) error {
	b := tx.Bucket(bucketPaused)
	if b == nil {
		return nil
	}
	n := 0
	err := b.ForEach(func(k, v []byte) error {
		n++
		if err := db.ValidateQueue(string(k)); err != nil {
			return fmt.Errorf("%w: pause of queue %q: %v", db.ErrCorrupt, k, err)
		}
		_, err := decodePause(string(k), v)
		return err
	})
	if err == nil && n > db.MaxPausedQueues {
		err = fmt.Errorf("db: %d queues are paused, more than %d", n, db.MaxPausedQueues)
	}
	return err
}
