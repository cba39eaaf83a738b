package db

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"time"

	bolt "go.etcd.io/bbolt"
)

// Read methods for the status page and metrics. Each one walks an index
// bucket from its start and stops at the limit, so its cost does not grow
// with the number of jobs in other states.

// IndexListRequest asks for the first jobs of one state's index.
type IndexListRequest struct {
	Queue string // empty: every queue
	Limit int    // 0: DefaultListLimit; at most MaxListLimit
}

func normalizeIndexList(req *IndexListRequest) error {
	if req.Queue != "" {
		if err := ValidateQueue(req.Queue); err != nil {
			return err
		}
	}
	var err error
	req.Limit, err = listLimit(req.Limit)
	return err
}

// ListClaimedJobs returns up to req.Limit claimed jobs from the claimed
// index: queue by queue in name order, the lease that ends first first.
// Expired leases that nobody reclaimed yet are included (they are still the
// current claim). It returns ErrInvalidArgument for a bad queue or limit.
func (s *Store) ListClaimedJobs(ctx context.Context, req IndexListRequest) ([]Job, error) {
	if err := normalizeIndexList(&req); err != nil {
		return nil, err
	}
	out := []Job{}
	err := s.view(func(tx *bolt.Tx) error {
		var prefix []byte
		if req.Queue != "" {
			prefix = queuePrefix(req.Queue)
		}
		c := tx.Bucket(bucketClaimed).Cursor()
		for k, _ := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix) && len(out) < req.Limit; k, _ = c.Next() {
			rec, err := getIndexedJob(tx, idFromKey(k))
			if err != nil {
				return err
			}
			out = append(out, rec.job())
		}
		return nil
	})
	return out, err
}

// ListScheduledJobs returns up to req.Limit scheduled jobs from the
// scheduled index, the earliest run_at first. That index is not keyed by
// queue, so with req.Queue it reads at most listScanBudget entries and may
// return fewer jobs than exist. It returns ErrInvalidArgument for a bad
// queue or limit.
func (s *Store) ListScheduledJobs(ctx context.Context, req IndexListRequest) ([]Job, error) {
	if err := normalizeIndexList(&req); err != nil {
		return nil, err
	}
	out := []Job{}
	err := s.view(func(tx *bolt.Tx) error {
		c := tx.Bucket(bucketScheduled).Cursor()
		scanned := 0
		for k, _ := c.First(); k != nil && len(out) < req.Limit && scanned < listScanBudget; k, _ = c.Next() {
			scanned++
			rec, err := getIndexedJob(tx, idFromKey(k))
			if err != nil {
				return err
			}
			if req.Queue == "" || rec.Queue == req.Queue {
				out = append(out, rec.job())
			}
		}
		return nil
	})
	return out, err
}

// ListDeadJobs returns up to req.Limit dead jobs from the dead index: queue
// by queue in name order, the most recent death first within a queue. It
// returns ErrInvalidArgument for a bad queue or limit.
func (s *Store) ListDeadJobs(ctx context.Context, req IndexListRequest) ([]Job, error) {
	if err := normalizeIndexList(&req); err != nil {
		return nil, err
	}
	out := []Job{}
	err := s.view(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketDead)
		if b == nil { // a read-only file from before the index
			return nil
		}
		c := b.Cursor()
		k, _ := c.Seek(queuePrefix(req.Queue))
		for k != nil && len(out) < req.Limit {
			i := bytes.IndexByte(k, 0)
			if i < 0 {
				return fmt.Errorf("%w: dead index key %q", ErrCorrupt, k)
			}
			queue := bytes.Clone(k[:i+1])
			if req.Queue != "" && string(queue[:i]) != req.Queue {
				return nil
			}
			// Queue names have no byte below 0x01, so queue‖0x01 sorts
			// after every key of queue and before the next queue's.
			end := append(bytes.Clone(k[:i]), 1)
			if next, _ := c.Seek(end); next == nil {
				k, _ = c.Last()
			} else {
				k, _ = c.Prev()
			}
			for ; k != nil && bytes.HasPrefix(k, queue) && len(out) < req.Limit; k, _ = c.Prev() {
				rec, err := getIndexedJob(tx, idFromKey(k))
				if err != nil {
					return err
				}
				out = append(out, rec.job())
			}
			k, _ = c.Seek(end)
		}
		return nil
	})
	return out, err
}

// FileStats are figures about the bbolt file, for metrics.
type FileStats struct {
	// SizeBytes is the file's size on disk.
	SizeBytes int64
	// ReadTxs is the number of read transactions started since Open;
	// OpenReadTxs the number open now.
	ReadTxs     uint64
	OpenReadTxs int
	// PageWrites is the number of page writes made by commits since Open,
	// WriteTime the time they took, SpillTime the time spent preparing
	// the pages of commits.
	PageWrites uint64
	WriteTime  time.Duration
	SpillTime  time.Duration
	// FreePages and PendingPages are pages on bbolt's freelist: free to
	// reuse, and freed but still visible to an open read transaction.
	FreePages    int
	PendingPages int
	// FreeBytes is the size of the free pages.
	FreeBytes int
}

// FileStats reads bbolt's statistics and the file's size. It takes no
// transaction.
func (s *Store) FileStats() (FileStats, error) {
	st := s.bolt.Stats()
	fs := FileStats{
		ReadTxs: uint64(st.TxN), OpenReadTxs: st.OpenTxN,
		PageWrites: uint64(st.TxStats.GetWrite()), WriteTime: st.TxStats.GetWriteTime(),
		SpillTime: st.TxStats.GetSpillTime(),
		FreePages: st.FreePageN, PendingPages: st.PendingPageN, FreeBytes: st.FreeAlloc,
	}
	fi, err := os.Stat(s.path)
	if err != nil {
		return fs, fmt.Errorf("db: file stats: %w", err)
	}
	fs.SizeBytes = fi.Size()
	return fs, nil
}

// buildNewIndexes fills index buckets that a file made by an earlier build
// does not have yet (Open creates them empty): the dead-jobs index, the
// audit subject index and the audit counters. On a file that has them it
// costs a few lookups.
func buildNewIndexes(tx *bolt.Tx) error {
	if err := buildDeadIndex(tx); err != nil {
		return err
	}
	return buildAuditIndexes(tx)
}

// buildDeadIndex adds every dead job to an empty idx_dead when the counts
// say dead jobs exist: one scan of the jobs, once.
func buildDeadIndex(tx *bolt.Tx) error {
	dead := tx.Bucket(bucketDead)
	if !isEmptyBucket(dead) {
		return nil
	}
	suffix := append([]byte{0}, StateDead...)
	found := false
	err := tx.Bucket(bucketCounts).ForEach(func(k, _ []byte) error {
		found = found || bytes.HasSuffix(k, suffix)
		return nil
	})
	if err != nil || !found {
		return err
	}
	return tx.Bucket(bucketJobs).ForEach(func(_, v []byte) error {
		rec, err := decodeJob(v)
		if err != nil {
			return err
		}
		if rec.State != StateDead {
			return nil
		}
		return dead.Put(deadKey(rec), nil)
	})
}
