package bolt

import (
	"context"
	"time"

	"github.com/fenceq/fenceq/db"
)

// SweepOnce deletes up to limit completed or cancelled jobs that finished
// at or before now minus retention, oldest first, in one transaction, and
// returns how many it deleted. Their idempotency keys are freed with them.
// The pages they used return to bbolt's freelist and are reused by later
// writes; the file itself does not shrink (docs/operations.md says how
// to compact it offline with bbolt's own compact command).
func (s *Store) SweepOnce(ctx context.Context, retention time.Duration, limit int) (int, error) {
	if err := db.CheckSweepArgs(retention); err != nil {
		return 0, err
	}
	op := &sweepOp{retention: retention, limit: limit}
	if err := s.update(ctx, op); err != nil {
		return 0, err
	}
	return len(op.ids), nil
}

// sweepOp: decide reads the jobs its plan (db.PlanSweep) removes, from
// idx_finished, whose keys are the finished jobs' UpdatedAt and id in the
// plan's order; apply deletes them with one audit link. A sweep is never
// refused.
type sweepOp struct {
	retention time.Duration
	limit     int
	plan      db.Sweep
	ids       []uint64
}

func (op *sweepOp) decide(r reader, now time.Time) error {
	var err error
	if op.plan, err = db.PlanSweep(op.retention, op.limit, now); err != nil {
		return err
	}
	c := r.tx.Bucket(bucketFinished).Cursor()
	for k, _ := c.First(); k != nil && len(op.ids) < op.plan.Limit; k, _ = c.Next() {
		if timeFromKey(k, 0) > op.plan.FinishedBy {
			break
		}
		op.ids = append(op.ids, idFromKey(k))
	}
	return nil
}

func (op *sweepOp) apply(w *writer, _ int) (bool, error) {
	if len(op.ids) == 0 {
		return false, nil
	}
	for _, id := range op.ids {
		rec, err := getIndexedJob(w.tx, id)
		if err != nil {
			return false, err
		}
		if err := w.deleteJob(rec); err != nil {
			return false, err
		}
	}
	return false, w.audit(op.plan.Event(op.ids))
}

// Sweep runs SweepOnce until a pass deletes fewer than a full batch
// (db.SweepPasses), and returns the total deleted.
func (s *Store) Sweep(ctx context.Context, retention time.Duration) (int, error) {
	return db.SweepPasses(ctx, retention, s.SweepOnce)
}
