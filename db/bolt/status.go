package bolt

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"time"

	"github.com/fenceq/fenceq/db"
	bbolt "go.etcd.io/bbolt"
)

// ListJobsInState returns up to req.Limit jobs of one state from that
// state's index (see db.StateListRequest). It refuses (CodeInvalid) a
// state without an index order, a bad queue or limit.
func (s *Store) ListJobsInState(ctx context.Context, req db.StateListRequest) ([]db.Job, error) {
	if err := db.ValidateStateList(&req); err != nil {
		return nil, err
	}
	list := listDead
	switch req.State {
	case db.StateClaimed:
		list = listClaimed
	case db.StateScheduled:
		list = listScheduled
	}
	var out []db.Job
	err := s.view(func(tx *bbolt.Tx) error {
		var err error
		out, err = list(tx, req)
		return err
	})
	return out, err
}

// Read methods for the status page and metrics. Each one walks an index
// bucket from its start and stops at the limit, so its cost does not grow
// with the number of jobs in other states.

// listClaimed lists up to req.Limit claimed jobs from the claimed
// index: queue by queue in name order, the lease that ends first first.
// Expired leases that nobody reclaimed yet are included (they are still the
// current claim). It returns CodeInvalid for a bad queue or limit.
func listClaimed(tx *bbolt.Tx, req db.StateListRequest) (out []db.Job, err error) {
	out = []db.Job{}
	err = func() error {
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
	}()
	return out, err
}

// listScheduled lists up to req.Limit scheduled jobs from the
// scheduled index, the earliest run_at first. That index is not keyed by
// queue or by attempts, so with req.Queue or req.Retry it reads at most
// listScanBudget entries and may return fewer jobs than exist. It returns CodeInvalid for a bad
// queue or limit.
func listScheduled(tx *bbolt.Tx, req db.StateListRequest) (out []db.Job, err error) {
	out = []db.Job{}
	err = func() error {
		c := tx.Bucket(bucketScheduled).Cursor()
		scanned := 0
		for k, _ := c.First(); k != nil && len(out) < req.Limit && scanned < listScanBudget; k, _ = c.Next() {
			scanned++
			rec, err := getIndexedJob(tx, idFromKey(k))
			if err != nil {
				return err
			}
			retrying := rec.Attempts > 0
			if (req.Queue == "" || rec.Queue == req.Queue) &&
				(req.Retry == db.RetryAny || retrying == (req.Retry == db.RetryOnly)) {
				out = append(out, rec.job())
			}
		}
		return nil
	}()
	return out, err
}

// listDead lists up to req.Limit dead jobs from the dead index: queue
// by queue in name order, the most recent death first within a queue. It
// returns CodeInvalid for a bad queue or limit.
func listDead(tx *bbolt.Tx, req db.StateListRequest) (out []db.Job, err error) {
	out = []db.Job{}
	err = func() error {
		b := tx.Bucket(bucketDead)
		if b == nil { // a read-only file from before the index
			return nil
		}
		c := b.Cursor()
		k, _ := c.Seek(queuePrefix(req.Queue))
		for k != nil && len(out) < req.Limit {
			i := bytes.IndexByte(k, 0)
			if i < 0 {
				return fmt.Errorf("%w: dead index key %q", db.ErrCorrupt, k)
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
	}()
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
