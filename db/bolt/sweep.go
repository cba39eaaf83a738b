package bolt

import (
	"context"
	"fmt"
	"time"

	"github.com/fenceq/fenceq/db"
	bbolt "go.etcd.io/bbolt"
)

// SweepOnce deletes up to limit completed or cancelled jobs that finished
// at or before now minus retention, oldest first, in one transaction, and
// returns how many it deleted. Their idempotency keys are freed with them.
// The pages they used return to bbolt's freelist and are reused by later
// writes; the file itself does not shrink (see "fenceq compact").
func (s *Store) SweepOnce(ctx context.Context, retention time.Duration, limit int) (int, error) {
	if retention < 0 {
		return 0, db.Errorf(db.CodeInvalid, "retention must not be negative")
	}
	if limit <= 0 {
		limit = db.DefaultSweepBatch
	}
	var deleted int
	err := s.update(ctx, func(tx *bbolt.Tx) error {
		now := s.opts.Now()
		cutoff := now.Add(-retention).UnixNano()
		var ids []uint64
		c := tx.Bucket(bucketFinished).Cursor()
		for k, _ := c.First(); k != nil && len(ids) < limit; k, _ = c.Next() {
			if timeFromKey(k, 0) > cutoff {
				break
			}
			ids = append(ids, idFromKey(k))
		}
		deleted = 0
		if len(ids) == 0 {
			return nil
		}
		for _, id := range ids {
			rec, err := getIndexedJob(tx, id)
			if err != nil {
				return err
			}
			if err := deleteJob(tx, rec); err != nil {
				return err
			}
		}
		deleted = len(ids)
		return appendAudit(tx, now, db.AuditEvent{Principal: "system", Action: "sweep", Subject: "jobs",
			Details: map[string]string{"deleted": fmt.Sprint(len(ids)), "first_id": fmt.Sprint(ids[0]),
				"last_id": fmt.Sprint(ids[len(ids)-1]), "retention": retention.String()}})
	})
	return deleted, err
}

// Sweep runs SweepOnce until a pass deletes fewer than a full batch, and
// returns the total deleted.
func (s *Store) Sweep(ctx context.Context, retention time.Duration) (int, error) {
	total := 0
	for {
		n, err := s.SweepOnce(ctx, retention, db.DefaultSweepBatch)
		total += n
		if err != nil || n < db.DefaultSweepBatch {
			return total, err
		}
	}
}
