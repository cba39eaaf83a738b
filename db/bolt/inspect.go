package bolt

import (
	"encoding/hex"
	"fmt"

	bbolt "go.etcd.io/bbolt"
)

// Snapshot lists every key and value of every bucket, and every bucket's
// sequence, as text: the whole stored state, for tests that show a request
// changed nothing (db/dbtest compares two snapshots).
func (s *Store) Snapshot() (map[string]string, error) {
	snap := map[string]string{}
	err := s.view(func(tx *bbolt.Tx) error {
		for _, name := range allBuckets {
			b := tx.Bucket(name)
			if b == nil {
				continue
			}
			snap[string(name)+" sequence"] = fmt.Sprint(b.Sequence())
			if err := b.ForEach(func(k, v []byte) error {
				snap[string(name)+"/"+hex.EncodeToString(k)] = string(v)
				return nil
			}); err != nil {
				return err
			}
		}
		return nil
	})
	return snap, err
}

// WaitingClaims is the number of long-polling claims on queue whose
// claim found nothing and that sleep.
func (s *Store) WaitingClaims(queue string) int { return s.waits.Sleeping(queue) }

// WaitingAcquires is the number of acquires waiting for the lease name.
func (s *Store) WaitingAcquires(name string) int {
	return s.waits.Acquiring(name)
}
