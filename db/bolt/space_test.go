package bolt

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/fenceq/fenceq/db"
	bbolt "go.etcd.io/bbolt"
)

var spacePayload = json.RawMessage(`{"pad":"` + strings.Repeat("x", 100-len(`{"pad":""}`)) + `"}`)

// bucketSpace is one bucket's share of the file: the bytes of its pages
// (allocated) and of the data on them (in use).
type bucketSpace struct {
	name             string
	keys             int
	alloc, inuse     int
	leafPages, pages int
}

// spaceOf reads the per-bucket page statistics (bbolt's Bucket.Stats, what
// "bbolt stats" prints) and the file's size.
func spaceOf(tb testing.TB, s *Store) (size int64, buckets []bucketSpace) {
	tb.Helper()
	err := s.bolt.View(func(tx *bbolt.Tx) error {
		size = tx.Size()
		for _, name := range allBuckets {
			st := tx.Bucket(name).Stats()
			buckets = append(buckets, bucketSpace{name: string(name), keys: st.KeyN,
				alloc: st.BranchAlloc + st.LeafAlloc, inuse: st.BranchInuse + st.LeafInuse,
				leafPages: st.LeafPageN, pages: st.BranchPageN + st.LeafPageN + st.BranchOverflowN + st.LeafOverflowN})
		}
		return nil
	})
	if err != nil {
		tb.Fatal(err)
	}
	return size, buckets
}

func bucketNamed(buckets []bucketSpace, name []byte) bucketSpace {
	for _, b := range buckets {
		if b.name == string(name) {
			return b
		}
	}
	return bucketSpace{}
}

// enqueueConcurrently enqueues n jobs of 100-byte payloads, one job per
// call, from producers goroutines (so that commits are shared as they are
// under HTTP traffic), spread over the given queues.
func enqueueConcurrently(tb testing.TB, s *Store, n, producers int, queues []string) {
	tb.Helper()
	var next atomic.Int64
	var wg sync.WaitGroup
	var failed atomic.Value
	for range producers {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				if _, err := s.EnqueueJob(ctx, db.EnqueueRequest{Principal: "bench", Queue: queues[i%len(queues)], Payload: spacePayload}); err != nil {
					failed.Store(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if err := failed.Load(); err != nil {
		tb.Fatal(err)
	}
}

// drainConcurrently claims and completes n jobs with workers goroutines.
func drainConcurrently(tb testing.TB, s *Store, n, workers int, queues []string) {
	tb.Helper()
	var next atomic.Int64
	var wg sync.WaitGroup
	var failed atomic.Value
	for w := range workers {
		worker := "w" + strconv.Itoa(w)
		wg.Go(func() {
			for next.Add(1) <= int64(n) {
				jobs, err := s.ClaimJobs(ctx, db.ClaimRequest{Principal: "bench", Worker: worker, Queues: queues})
				if err == nil && len(jobs) != 1 {
					err = fmt.Errorf("ClaimJobs() = %d jobs, want 1", len(jobs))
				}
				if err == nil {
					_, err = s.CompleteJob(ctx, db.CompleteRequest{Fenced: db.Fenced{ID: jobs[0].ID, Principal: "bench",
						Worker: worker, FencingToken: jobs[0].FencingToken()}, Result: json.RawMessage(`{"ok":true}`)})
				}
				if err != nil {
					failed.Store(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if err := failed.Load(); err != nil {
		tb.Fatal(err)
	}
}

// TestStore_AppendOnlyBucketsAreFilledDensely: the buckets whose keys
// grow at the right edge (jobs, audit, idx_ready of one queue) fill their
// pages (fillPercents) instead of leaving every split page half empty, in
// the write transactions of the commit loop.
func TestStore_AppendOnlyBucketsAreFilledDensely(t *testing.T) {
	s := mustOpenStore(t, Options{})
	enqueueConcurrently(t, s, 3000, 8, []string{"a"})
	_, buckets := spaceOf(t, s)
	for _, name := range [][]byte{bucketJobs, bucketAudit, bucketReady} {
		b := bucketNamed(buckets, name)
		if fill := float64(b.inuse) / float64(b.alloc); fill < 0.8 {
			t.Errorf("bucket %s: %d of %d bytes in use (%.0f%%), want at least 80%%", name, b.inuse, b.alloc, 100*fill)
		}
	}
}

// BenchmarkSpacePerJob measures bytes on disk per queued job, on a fresh
// fill and after half of it was claimed and completed, and the speed of
// that drain, for bbolt's default fill everywhere but the audit bucket
// (the layout before dense filling) and for fillPercents. Run the two
// alternated: go test ./db/bolt -run '^$' -bench SpacePerJob -count 3
// with FENCEQ_SPACE_JOBS=100000 (the figures in docs/performance.md; the
// default, 5000, keeps the run of every benchmark in CI short).
func BenchmarkSpacePerJob(b *testing.B) {
	n := 5000
	if v := os.Getenv("FENCEQ_SPACE_JOBS"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil {
			b.Fatal(err)
		}
	}
	queues := []string{"bench"}
	if q := os.Getenv("FENCEQ_SPACE_QUEUES"); q != "" {
		queues = strings.Split(q, ",")
	}
	dense := fillPercents
	if f := os.Getenv("FENCEQ_SPACE_FILLS"); f != "" { // e.g. jobs=1,idx_ready=0.9: try another layout
		fillPercents = map[string]float64{}
		for _, kv := range strings.Split(f, ",") {
			k, v, _ := strings.Cut(kv, "=")
			p, err := strconv.ParseFloat(v, 64)
			if err != nil {
				b.Fatal(err)
			}
			fillPercents[k] = p
		}
		defer func() { fillPercents = dense }()
		dense = fillPercents
	}
	variants := []struct {
		name  string
		fills map[string]float64
	}{
		{"before", map[string]float64{string(bucketAudit): 1.0}},
		{"dense", dense},
	}
	for _, v := range variants {
		b.Run(v.name, func(b *testing.B) {
			fillPercents = v.fills
			defer func() { fillPercents = dense }()
			for range b.N {
				dir := b.TempDir()
				s, err := Open(filepath.Join(dir, "fenceq.db"), Options{})
				if err != nil {
					b.Fatal(err)
				}
				enqueueConcurrently(b, s, n, 16, queues)
				size, fresh := spaceOf(b, s)
				b.ReportMetric(float64(size)/float64(n), "fresh-B/job")
				start, cpu0, writes0 := time.Now(), cpuUsed(), pageWrites(s)
				commits0, _ := s.CommitStats()
				drainConcurrently(b, s, n/2, 16, queues)
				b.ReportMetric(float64(n/2)/time.Since(start).Seconds(), "drain-jobs/s")
				b.ReportMetric(float64((cpuUsed()-cpu0).Microseconds())/float64(n/2), "drain-cpu-µs/job")
				b.ReportMetric(float64(pageWrites(s)-writes0)/float64(n/2), "drain-pagewrites/job")
				commits1, _ := s.CommitStats()
				b.ReportMetric(float64(commits1-commits0)/float64(n/2), "drain-commits/job")
				size2, churned := spaceOf(b, s)
				b.ReportMetric(float64(size2)/float64(n), "churned-B/job")
				if os.Getenv("FENCEQ_SPACE_VERBOSE") != "" {
					b.Logf("%s, %d jobs: fresh %d bytes, after half drained %d bytes\n%s", v.name, n, size, size2, spaceTable(fresh, churned))
				}
				if err := s.Close(); err != nil {
					b.Fatal(err)
				}
				os.RemoveAll(dir)
			}
		})
	}
}

func spaceTable(fresh, churned []bucketSpace) string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "%-18s %9s %11s %11s %5s | %9s %11s %11s %5s\n", "bucket", "keys", "alloc", "inuse", "fill", "keys", "alloc", "inuse", "fill")
	order := slices.Clone(fresh)
	slices.SortFunc(order, func(a, b bucketSpace) int { return b.alloc - a.alloc })
	for _, f := range order {
		c := bucketNamed(churned, []byte(f.name))
		fmt.Fprintf(&sb, "%-18s %9d %11d %11d %4.0f%% | %9d %11d %11d %4.0f%%\n", f.name, f.keys, f.alloc, f.inuse, pct(f.inuse, f.alloc),
			c.keys, c.alloc, c.inuse, pct(c.inuse, c.alloc))
	}
	return sb.String()
}

func pct(a, b int) float64 {
	if b == 0 {
		return 0
	}
	return 100 * float64(a) / float64(b)
}

// cpuUsed is the CPU time (user and system) this process has used.
func cpuUsed() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// pageWrites is how many pages the store's write transactions wrote.
func pageWrites(s *Store) int64 {
	st := s.bolt.Stats()
	return st.TxStats.GetWrite()
}
