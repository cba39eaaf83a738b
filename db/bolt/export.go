package bolt

import (
	"context"

	bbolt "go.etcd.io/bbolt"

	"github.com/fenceq/fenceq/db"
)

// ExportJobs returns up to limit job records with an id above after, in id
// order, as the rules see them (db.JobRecord, Budget included): what
// "fenceq copy" moves to another engine.
func (s *Store) ExportJobs(ctx context.Context, after uint64, limit int) ([]db.JobRecord, error) {
	var out []db.JobRecord
	err := s.view(func(tx *bbolt.Tx) error {
		if after == ^uint64(0) {
			return nil
		}
		c := tx.Bucket(bucketJobs).Cursor()
		for k, v := c.Seek(u64(after + 1)); k != nil && len(out) < limit; k, v = c.Next() {
			rec, err := decodeJob(v)
			if err != nil {
				return err
			}
			out = append(out, rec.JobRecord.Clone())
		}
		return nil
	})
	return out, err
}

// JobSequence is the last job id the file issued (deleted jobs' ids
// included), so that a copy never gives an id twice.
func (s *Store) JobSequence() (uint64, error) {
	var seq uint64
	err := s.view(func(tx *bbolt.Tx) error {
		seq = tx.Bucket(bucketJobs).Sequence()
		return nil
	})
	return seq, err
}
