package bolt

import (
	"bytes"
	"context"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/fenceq/fenceq/db"
	"github.com/fenceq/fenceq/internal/testclock"
	bbolt "go.etcd.io/bbolt"
)

var ctx = context.Background()

func newFakeClock() *testclock.Clock {
	return testclock.New(time.Date(2031, 3, 14, 15, 9, 26, 0, time.UTC))
}

// testOptions are the options most tests use: the fake clock and a fixed
// jitter, so that a backoff is a known number.
func testOptions(clk *testclock.Clock) Options {
	return Options{Rules: db.Rules{Now: clk.Now, Random: func() float64 { return 0.5 }}}
}

// mustOpenStore opens a store on a new file in tb.TempDir(). On cleanup it
// runs Check (bbolt's tx.Check and the store's index and count invariants)
// and fails the test if the file is inconsistent, then closes the store.
func mustOpenStore(tb testing.TB, opts Options) *Store {
	tb.Helper()
	return mustOpenStoreAt(tb, filepath.Join(tb.TempDir(), "fenceq.db"), opts)
}

// mustOpenStoreAt is mustOpenStore on a given path, for reopen tests. A
// store the test closed itself is not checked again on cleanup.
func mustOpenStoreAt(tb testing.TB, path string, opts Options) *Store {
	tb.Helper()
	if opts.LockTimeout == 0 {
		opts.LockTimeout = 200 * time.Millisecond
	}
	s, err := Open(path, opts)
	if err != nil {
		tb.Fatalf("Open(%s) error = %v", path, err)
	}
	tb.Cleanup(func() {
		if !storeClosed(s) {
			if err := s.Check(); err != nil {
				tb.Errorf("Check() at cleanup: %v", err)
			}
		}
		if err := s.Close(); err != nil {
			tb.Errorf("Close() error = %v", err)
		}
	})
	return s
}

func storeClosed(s *Store) bool {
	select {
	case <-s.closing:
		return true
	default:
		return false
	}
}

func mustEnqueue(tb testing.TB, s *Store, req db.EnqueueRequest) db.Job {
	tb.Helper()
	if req.Principal == "" {
		req.Principal = "local"
	}
	res, err := s.EnqueueJob(context.Background(), req)
	if err != nil {
		tb.Fatalf("EnqueueJob(%+v) error = %v", req, err)
	}
	if !res.Created {
		tb.Fatalf("EnqueueJob(%+v) Created = false, want true", req)
	}
	return res.Job
}

// rawJob returns a copy of the stored bytes of job id (nil when absent).
func rawJob(tb testing.TB, s *Store, id uint64) []byte {
	tb.Helper()
	var b []byte
	if err := s.bolt.View(func(tx *bbolt.Tx) error {
		if v := tx.Bucket(bucketJobs).Get(u64(id)); v != nil {
			b = bytes.Clone(v)
		}
		return nil
	}); err != nil {
		tb.Fatalf("read job %d: %v", id, err)
	}
	return b
}

func itoa(n uint64) string { return strconv.FormatUint(n, 10) }

// claimAll claims one job at a time for local|w1 until none is left and
// returns their ids in claim order.
func claimAll(t *testing.T, s *Store, queues ...string) []uint64 {
	t.Helper()
	var ids []uint64
	for {
		jobs, err := s.ClaimJobs(ctx, db.ClaimRequest{Principal: "local", Worker: "w1", Queues: queues})
		if err != nil {
			t.Fatalf("ClaimJobs(%v) error = %v", queues, err)
		}
		if len(jobs) == 0 {
			return ids
		}
		ids = append(ids, jobs[0].ID)
	}
}
