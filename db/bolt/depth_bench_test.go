//go:build unix

package bolt_test

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fenceq/fenceq/db"
	"github.com/fenceq/fenceq/db/bolt"
)

// benchClock is the store's clock in the timed-work benchmark: real time
// plus an offset that the benchmark moves forward to make scheduled jobs
// due and leases expire, so that every claim still sees distinct times.
type benchClock struct{ offset atomic.Int64 }

func (c *benchClock) Now() time.Time {
	return time.Now().Add(time.Duration(c.offset.Load()))
}

func (c *benchClock) Advance(d time.Duration) { c.offset.Add(int64(d)) }

// timedStore opens a store in its own directory with clk as its clock and
// room for the long leases the benchmark holds. closeStore closes it and removes
// the file at once (a 1M-job file is about 1 GB), not at the end of the
// whole benchmark.
func timedStore(b *testing.B, clk *benchClock) (s *bolt.Store, closeStore func()) {
	b.Helper()
	dir := b.TempDir()
	s, err := bolt.Open(filepath.Join(dir, "fenceq.db"), bolt.Options{Rules: db.Rules{Now: clk.Now, MaxLease: 7 * 24 * time.Hour}})
	if err != nil {
		b.Fatal(err)
	}
	return s, func() {
		if err := s.Close(); err != nil {
			b.Error(err)
		}
		_ = os.RemoveAll(dir)
	}
}

// enqueueMany enqueues n jobs made by mk(i) in transactions of 1000.
func enqueueMany(b testing.TB, s *bolt.Store, n int, mk func(i int) db.EnqueueRequest) {
	b.Helper()
	reqs := make([]db.EnqueueRequest, 0, 1000)
	for done := 0; done < n; done += len(reqs) {
		reqs = reqs[:0]
		for i := range min(1000, n-done) {
			reqs = append(reqs, mk(done+i))
		}
		if _, err := s.EnqueueJobs(context.Background(), reqs); err != nil {
			b.Fatal(err)
		}
	}
}

func readyJob(int) db.EnqueueRequest {
	return db.EnqueueRequest{Principal: "bench", Queue: "bench", Payload: benchPayload}
}

// claimMany claims n jobs of queue "bench" for worker with lease d, in
// claims of up to db.MaxClaimBatch (one transaction each).
func claimMany(b testing.TB, s *bolt.Store, n int, worker string, d time.Duration) {
	b.Helper()
	for done := 0; done < n; {
		jobs, err := s.ClaimJobs(context.Background(), db.ClaimRequest{Principal: "bench", Worker: worker,
			Queues: []string{"bench"}, Lease: d, Max: min(db.MaxClaimBatch, n-done)})
		if err != nil {
			b.Fatal(err)
		}
		if len(jobs) == 0 {
			b.Fatalf("claimed %d jobs of %d, then nothing was claimable", done, n)
		}
		done += len(jobs)
	}
}

// queueCounts returns queue "bench"'s job counts by state.
func queueCounts(b testing.TB, s *bolt.Store) map[db.State]uint64 {
	b.Helper()
	stats, err := s.Stats(context.Background())
	if err != nil {
		b.Fatal(err)
	}
	for _, q := range stats {
		if q.Queue == "bench" {
			return q.Counts
		}
	}
	return map[db.State]uint64{}
}

const (
	farAhead  = 24 * time.Hour     // run_at of the future scheduled jobs (and more, see below)
	longLease = 3 * 24 * time.Hour // lease of the claims that stay held
	shortWait = time.Minute        // delay or lease of the jobs the benchmark claims; the clock then moves past it
)

// timedVariant is one way to make the claimed jobs claimable while depth
// jobs of timed work are held behind them.
type timedVariant struct {
	name string
	// ahead makes n jobs claimable for the round (untimed).
	ahead func(b *testing.B, s *bolt.Store, clk *benchClock, n int)
}

// timedBackground is depth jobs of timed work that no claim may take during
// the benchmark, held in state held, and the variants run over it (on one
// store, one after the other).
type timedBackground struct {
	fill     func(b *testing.B, s *bolt.Store, depth int)
	held     db.State
	variants []timedVariant
}

var timedBackgrounds = []timedBackground{
	{
		// Jobs scheduled a day (and up to 12 more days, one second apart)
		// ahead.
		fill: futureScheduled,
		held: db.StateScheduled,
		variants: []timedVariant{
			{
				// The claims take ready jobs.
				name:  "future-scheduled",
				ahead: func(b *testing.B, s *bolt.Store, _ *benchClock, n int) { enqueueMany(b, s, n, readyJob) },
			},
			{
				// The claims take jobs enqueued with a delay of a minute
				// that the clock has passed, so a claim transaction first
				// promotes due jobs (up to 1000) from the scheduled index.
				name: "due-scheduled",
				ahead: func(b *testing.B, s *bolt.Store, clk *benchClock, n int) {
					enqueueMany(b, s, n, func(int) db.EnqueueRequest {
						return db.EnqueueRequest{Principal: "bench", Queue: "bench", Payload: benchPayload, Delay: shortWait}
					})
					if c := queueCounts(b, s); c[db.StateAvailable] != 0 {
						b.Fatalf("%d jobs available before the clock moved, want 0", c[db.StateAvailable])
					}
					clk.Advance(shortWait + time.Second)
				},
			},
		},
	},
	{
		// Jobs claimed by worker "holder" with a lease of 3 days, in the
		// queue the benchmark claims from.
		fill: heldLeases,
		held: db.StateClaimed,
		variants: []timedVariant{
			{
				// The claims take ready jobs.
				name:  "unexpired-leases",
				ahead: func(b *testing.B, s *bolt.Store, _ *benchClock, n int) { enqueueMany(b, s, n, readyJob) },
			},
			{
				// The claims take jobs that worker "gone" claimed with a
				// lease of a minute that the clock has passed (reclaims:
				// each is found in the claimed index by its expiry).
				name: "expired-leases",
				ahead: func(b *testing.B, s *bolt.Store, clk *benchClock, n int) {
					enqueueMany(b, s, n, readyJob)
					claimMany(b, s, n, "gone", shortWait)
					clk.Advance(shortWait + time.Second)
				},
			},
		},
	},
}

func futureScheduled(b *testing.B, s *bolt.Store, depth int) {
	base := time.Now().Add(farAhead) // the clock moves a minute a round at most
	enqueueMany(b, s, depth, func(i int) db.EnqueueRequest {
		return db.EnqueueRequest{Principal: "bench", Queue: "bench", Payload: benchPayload,
			RunAt: base.Add(time.Duration(i) * time.Second)}
	})
}

func heldLeases(b *testing.B, s *bolt.Store, depth int) {
	enqueueMany(b, s, depth, readyJob)
	claimMany(b, s, depth, "holder", longLease)
}

// benchOnce reports whether the benchmarks run with -benchtime 1x (as CI
// runs them: to see that they work, not to measure).
func benchOnce() bool {
	f := flag.Lookup("test.benchtime")
	return f != nil && f.Value.String() == "1x"
}

// BenchmarkClaimPastTimedWork is the second half of issue 5: a claim must
// find scheduled work that came due and leases that expired without
// scanning, and must not walk the timed work that is not claimable yet.
// Each variant holds depth jobs (10k, 100k; 1M with FENCEQ_BIG=1) in the
// claim's queue that no claim may take — scheduled a day or more ahead
// (future-scheduled, due-scheduled) or claimed by another worker with a
// lease of 3 days (unexpired-leases, expired-leases) — and each round
// makes b.N jobs claimable, untimed:
//
//   - future-scheduled, unexpired-leases: b.N ready jobs;
//   - due-scheduled: b.N jobs enqueued with a delay of a minute, then the
//     store's clock moves past it (the claims promote them);
//   - expired-leases: b.N jobs claimed by another worker with a lease of a
//     minute, then the clock moves past it (the claims reclaim them).
//
// Then 1 and 16 workers claim and complete the b.N jobs, as in
// BenchmarkClaimCompleteAtDepth (ns/op is per job); after the round the
// depth jobs must still be held, so no claim took one. The cost should
// not grow with depth (the bound is 1.3x from 10k to 1M). The two
// variants of each kind of timed work share one store per depth.
//
// Setup is in transactions of 1000 (enqueue, and claims of up to
// db.MaxClaimBatch). Filling the 100k stores takes about 8 s, so with
// -benchtime 1x (CI) only 10k runs unless FENCEQ_BIG=1; that takes about
// a second.
func BenchmarkClaimPastTimedWork(b *testing.B) {
	depths := []int{10_000, 100_000}
	switch {
	case bigRun():
		depths = append(depths, 1_000_000)
	case benchOnce():
		depths = depths[:1]
	}
	for _, depth := range depths {
		for _, bg := range timedBackgrounds {
			clk := &benchClock{}
			s, closeStore := timedStore(b, clk)
			filled := false // filled by the first sub-benchmark that -bench selects
			fill := func(b *testing.B) {
				if filled {
					return
				}
				filled = true
				bg.fill(b, s, depth)
				if c := queueCounts(b, s); c[bg.held] != uint64(depth) {
					b.Fatalf("%d jobs %s after setup, want %d", c[bg.held], bg.held, depth)
				}
			}
			for _, v := range bg.variants {
				for _, workers := range []int{1, benchConcurrency} {
					b.Run(fmt.Sprintf("%s/depth=%s/workers=%d", v.name, count(depth), workers), func(b *testing.B) {
						fill(b)
						v.ahead(b, s, clk, b.N)
						claimCompleteRound(b, s, workers)
						c := queueCounts(b, s)
						if c[bg.held] != uint64(depth) || c[db.StateAvailable]+c[db.StateClaimed]+c[db.StateScheduled] != uint64(depth) {
							b.Fatalf("after the round: %v, want %d %s and nothing else unfinished", c, depth, bg.held)
						}
					})
				}
			}
			closeStore()
		}
	}
}
