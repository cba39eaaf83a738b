// Command fenceq-bench compares fenceq (bbolt, and PostgreSQL with one and
// three replicas) with River on the same PostgreSQL, on one workload, in
// alternated rounds, and prints medians and ratios. See
// docs/performance.md#postgresql for how to run it.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"maps"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fenceq/fenceq/api/client"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
)

var (
	pgURL       = flag.String("pg", "", "PostgreSQL URL where the harness may create and drop schemas (required)")
	pgData      = flag.String("pgdata", "", "that server's data directory: its CPU is read from postmaster.pid's process and children (optional)")
	binPath     = flag.String("fenceq", "", "the fenceq binary to run (go build -o /tmp/fenceq . at the repository's root)")
	basePath    = flag.String("fenceq-base", "", "an older fenceq binary for the targets bolt-base, pg1-base and pg3-base (before/after in one run)")
	nJobs       = flag.Int("n", 20000, "jobs per phase")
	rounds      = flag.Int("rounds", 3, "alternated rounds")
	targets     = flag.String("targets", "river,bolt,pg1,pg3", "targets, in the order the first round runs them; round r starts r-1 places further on (-rotate)")
	rotate      = flag.Bool("rotate", true, "rotate the targets' order from round to round, so that none always follows the same one")
	checkpoint  = flag.Bool("checkpoint", true, "ask PostgreSQL for a CHECKPOINT before each target, so that none meets one its phases did not cause")
	latDur      = flag.Duration("lat-dur", 10*time.Second, "length of the offered-load phase")
	latRate     = flag.Int("lat-rate", 500, "jobs/s offered in the latency phase")
	latConsumer = flag.String("lat-consumer", "worker", "fenceq's consumer in the latency phase: worker (the Go Worker, 4 handlers) or calls (4 loops of claim and complete-and-claim calls)")
	workDir     = flag.String("dir", "", "directory for bbolt files (default: a temporary one)")
	oneStore    = flag.Bool("one-store", false, "run a single-replica target's Worker drain and latency phase in the store its enqueue and separate-call phases used (the harness before 2026-12-05), not in a fresh one as River's drain follows only its own inserts")
	payload     = strings.Repeat("x", 100)
	procs       = 16
	prefetch    = flag.Int("prefetch", 16, "WorkerConfig.Prefetch of the Worker drains of targets named with +pf (bolt+pf, pg1+pf, pg3+pf): jobs each Worker may hold claimed beyond its handlers")
	handlers    = flag.Int("handlers", 16, "handlers of each drain through client.Worker, and River's MaxWorkers in its drain (the separate-call drain keeps 16 workers)")
	phaseMax    = 5 * time.Minute
)

// result is one target's figures in one round.
type result map[string]float64

func main() {
	flag.Parse()
	if *pgURL == "" || *binPath == "" {
		log.Fatal("-pg and -fenceq are required")
	}
	if *workDir == "" {
		d, err := os.MkdirTemp("", "fenceq-bench")
		if err != nil {
			log.Fatal(err)
		}
		defer os.RemoveAll(d)
		*workDir = d
	}
	names := strings.Split(*targets, ",")
	all := map[string][]result{}
	for r := 1; r <= *rounds; r++ {
		order := names
		if *rotate {
			k := (r - 1) % len(names)
			order = append(slices.Clone(names[k:]), names[:k]...)
		}
		for _, t := range order {
			if *checkpoint {
				if err := pgCheckpoint(context.Background()); err != nil {
					log.Fatalf("round %d: checkpoint: %v", r, err)
				}
			}
			res, err := run(t, r)
			if err != nil {
				log.Fatalf("round %d, %s: %v", r, t, err)
			}
			log.Printf("round %d %-5s %s", r, t, format(res))
			all[t] = append(all[t], res)
		}
	}
	report(names, all)
}

func run(target string, round int) (result, error) {
	ctx := context.Background()
	kind, pf := target, 0
	if k, ok := strings.CutSuffix(target, "+pf"); ok {
		kind, pf = k, *prefetch
	}
	switch kind {
	case "river":
		return runRiver(ctx, round)
	case "bolt", "bolt-base", "pg1", "pg1-base":
		// Each measured drain starts as River's does, on a store whose only
		// history is the jobs it drains: the enqueue and separate-call
		// phases in one store, the Worker drain and the latency phase (after
		// that drain, as River's) in a fresh one.
		parts := partCalls
		if *oneStore {
			parts |= partWorker
		}
		if pf > 0 {
			// Prefetch changes only the Worker: no separate calls.
			return withStore(ctx, target, round, "worker", func(db string) (result, error) {
				return runFenceq(ctx, binFor(kind), db, 1, partWorker, pf)
			})
		}
		res, err := withStore(ctx, target, round, "calls", func(db string) (result, error) {
			return runFenceq(ctx, binFor(kind), db, 1, parts, pf)
		})
		if err != nil || *oneStore {
			return res, err
		}
		w, err := withStore(ctx, target, round, "worker", func(db string) (result, error) {
			return runFenceq(ctx, binFor(kind), db, 1, partWorker, pf)
		})
		maps.Copy(res, w)
		return res, err
	case "pg3", "pg3-base":
		return withStore(ctx, target, round, "worker", func(db string) (result, error) {
			return runFenceq(ctx, binFor(kind), db, 3, partWorker, pf)
		})
	}
	return nil, fmt.Errorf("unknown target %q", target)
}

// withStore runs fn on a new store of target's engine: a bbolt file, or a
// PostgreSQL schema dropped afterwards.
func withStore(ctx context.Context, target string, round int, part string, fn func(db string) (result, error)) (result, error) {
	if strings.HasPrefix(target, "bolt") {
		return fn(filepath.Join(*workDir, fmt.Sprintf("%s-r%d-%s.db", target, round, part)))
	}
	schema := fmt.Sprintf("fenceq_bench_%s_%s_%d_%d", strings.NewReplacer("-", "_", "+", "_").Replace(target), part, round, time.Now().UnixNano()%1e6)
	u, drop, err := newSchema(ctx, schema)
	if err != nil {
		return nil, err
	}
	defer drop()
	return fn(u)
}

// newSchema creates schema and returns a URL whose search_path is it.
func newSchema(ctx context.Context, schema string) (string, func(), error) {
	conn, err := pgx.Connect(ctx, *pgURL)
	if err != nil {
		return "", nil, err
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `CREATE SCHEMA `+schema); err != nil {
		return "", nil, err
	}
	u, err := url.Parse(*pgURL)
	if err != nil {
		return "", nil, err
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String(), func() {
		if c, err := pgx.Connect(ctx, *pgURL); err == nil {
			_, _ = c.Exec(ctx, `DROP SCHEMA `+schema+` CASCADE`)
			c.Close(ctx)
		}
	}, nil
}

// pgCheckpoint makes PostgreSQL write its dirty buffers now: each target
// then starts right after a checkpoint (and pays the full-page images that
// follow one) instead of meeting one at a random point of a phase.
func pgCheckpoint(ctx context.Context) error {
	conn, err := pgx.Connect(ctx, *pgURL)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, `CHECKPOINT`)
	return err
}

// server is one fenceq serve process.
type server struct {
	cmd  *exec.Cmd
	c    *client.Client
	addr string
}

func binFor(target string) string {
	if strings.HasSuffix(target, "-base") {
		return *basePath
	}
	return *binPath
}

func startServer(ctx context.Context, bin, dbArg string) (*server, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	addr := l.Addr().String()
	l.Close()
	cmd := exec.Command(bin, "serve", "--listen", addr, "--db", dbArg, "--log-level", "warn")
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	c, err := client.New("http://" + addr)
	if err != nil {
		return nil, err
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if c.Readyz(ctx) == nil {
			return &server{cmd: cmd, c: c, addr: addr}, nil
		}
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			return nil, fmt.Errorf("fenceq serve on %s did not become ready", addr)
		}
	}
}

func (s *server) stop() {
	_ = s.cmd.Process.Signal(os.Interrupt)
	done := make(chan struct{})
	go func() { _ = s.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		_ = s.cmd.Process.Kill()
		<-done
	}
}

// cpu is the CPU time (user+system) of the fenceq servers, the PostgreSQL
// server (when -pgdata is given) and this process.
type cpu struct{ servers, pg, self time.Duration }

func readCPU(servers []*server) cpu {
	var c cpu
	for _, s := range servers {
		c.servers += procCPU(s.cmd.Process.Pid, true)
	}
	c.self = procCPU(os.Getpid(), false)
	if *pgData != "" {
		if b, err := os.ReadFile(filepath.Join(*pgData, "postmaster.pid")); err == nil {
			if pid, err := strconv.Atoi(strings.SplitN(string(b), "\n", 2)[0]); err == nil {
				c.pg = procCPU(pid, true)
				for _, child := range children(pid) {
					c.pg += procCPU(child, false)
				}
			}
		}
	}
	return c
}

// headHeld sums the seconds the servers' batches held the audit chain's
// head (fenceq_postgres_audit_head_held_seconds_total, PostgreSQL only):
// its growth over a phase's time is how busy the chain, which every
// replica's commits take turns at, was.
func headHeld(ctx context.Context, servers []*server) (float64, error) {
	var sum float64
	for _, s := range servers {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+s.addr+"/metrics", nil)
		if err != nil {
			return 0, err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, err
		}
		p := expfmt.NewTextParser(model.UTF8Validation)
		fams, err := p.TextToMetricFamilies(resp.Body)
		resp.Body.Close()
		if err != nil {
			return 0, err
		}
		f, ok := fams["fenceq_postgres_audit_head_held_seconds_total"]
		if !ok || len(f.GetMetric()) != 1 {
			return 0, fmt.Errorf("%s/metrics has no fenceq_postgres_audit_head_held_seconds_total (a build before it?)", s.addr)
		}
		sum += f.GetMetric()[0].GetCounter().GetValue()
	}
	return sum, nil
}

// walAt is PostgreSQL's current WAL position in bytes (exact, unlike the
// cumulative statistics views, which backends report up to seconds late):
// the WAL a phase wrote, on a cluster nothing else writes to.
func walAt(ctx context.Context) (float64, error) {
	conn, err := pgx.Connect(ctx, *pgURL)
	if err != nil {
		return 0, err
	}
	defer conn.Close(ctx)
	var at float64
	err = conn.QueryRow(ctx, `SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::float8`).Scan(&at)
	return at, err
}

func (c cpu) sub(d cpu) cpu { return cpu{c.servers - d.servers, c.pg - d.pg, c.self - d.self} }

// procCPU reads /proc/pid/stat: utime+stime, and with reaped the times of
// its children that ended.
func procCPU(pid int, reaped bool) time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
	var ticks int64
	for i, idx := range []int{11, 12, 13, 14} { // utime stime cutime cstime, after pid and comm
		if i >= 2 && !reaped {
			break
		}
		n, _ := strconv.ParseInt(f[idx], 10, 64)
		ticks += n
	}
	return time.Duration(ticks) * 10 * time.Millisecond // USER_HZ 100
}

func children(pid int) []int {
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p))
		if err != nil {
			continue
		}
		f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
		if pp, _ := strconv.Atoi(f[1]); pp == pid {
			out = append(out, p)
		}
	}
	return out
}

// part is a set of runFenceq's phases.
type part int

const (
	partCalls  part = 1 << iota // single enqueues, then the drain by separate calls (one replica)
	partWorker                  // the drain through client.Worker, then (one replica) the latency phase
)

// runFenceq runs the phases of parts on fenceq with replicas servers over
// dbArg.
func runFenceq(ctx context.Context, bin, dbArg string, replicas int, parts part, prefetch int) (result, error) {
	var servers []*server
	defer func() {
		for _, s := range servers {
			s.stop()
		}
	}()
	for range replicas {
		s, err := startServer(ctx, bin, dbArg)
		if err != nil {
			return nil, err
		}
		servers = append(servers, s)
	}
	res := result{}
	c := servers[0].c
	n := *nJobs
	if replicas == 1 && parts&partCalls != 0 {
		// Single enqueues, 16 producers.
		el, err := parallel(n, func(i int) error {
			_, err := c.Enqueue(ctx, client.NewJob{Queue: "e", Payload: map[string]string{"p": payload}})
			return err
		})
		if err != nil {
			return nil, err
		}
		res["enqueue/s"] = float64(n) / el.Seconds()
		// Drain with a call per claim and per completion, 16 workers.
		var done atomic.Int64
		c0 := readCPU(servers)
		start := time.Now()
		var wg sync.WaitGroup
		var ferr atomic.Value
		for w := range procs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				p := client.ClaimParams{Worker: fmt.Sprint("w", w), Queues: []string{"e"}, Lease: time.Minute}
				for done.Load() < int64(n) && time.Since(start) < phaseMax {
					j, ok, err := c.Claim(ctx, p)
					if err != nil {
						ferr.Store(err)
						return
					}
					if !ok {
						return
					}
					if _, err := c.Complete(ctx, j.ID, client.CompleteParams{Worker: p.Worker, FencingToken: j.FencingToken}); err != nil {
						ferr.Store(err)
						return
					}
					done.Add(1)
				}
			}()
		}
		wg.Wait()
		if err, _ := ferr.Load().(error); err != nil {
			return nil, err
		}
		if done.Load() != int64(n) {
			return nil, fmt.Errorf("separate calls drained %d of %d", done.Load(), n)
		}
		el = time.Since(start)
		d := readCPU(servers).sub(c0)
		res["drain-calls/s"] = float64(n) / el.Seconds()
		res["calls-server-cpu-µs/job"] = float64(d.servers.Microseconds()) / float64(n)
		res["calls-pg-cpu-µs/job"] = float64(d.pg.Microseconds()) / float64(n)
	}
	if parts&partWorker == 0 {
		return res, nil
	}
	// Drain through client.Worker (-handlers on each replica).
	if err := fill(ctx, c, "w", n); err != nil {
		return nil, err
	}
	var done atomic.Int64
	all := make(chan struct{})
	onPG := strings.HasPrefix(dbArg, "postgres")
	var w0, h0 float64
	headKnown := false
	if onPG {
		var err error
		if w0, err = walAt(ctx); err != nil {
			return nil, err
		}
		// An older build (-fenceq-base) may not report the head's hold.
		h0, err = headHeld(ctx, servers)
		headKnown = err == nil
	}
	c0 := readCPU(servers)
	start := time.Now()
	wctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for i, s := range servers {
		w, err := client.NewWorker(s.c, func(ctx context.Context, j client.Job) (any, any, error) { return nil, nil, nil },
			client.WorkerConfig{Name: fmt.Sprint("r", i), Queues: []string{"w"}, Concurrency: *handlers, Prefetch: prefetch, Lease: time.Minute, Wait: 2 * time.Second,
				OnDone: func(client.Done) {
					if done.Add(1) == int64(n) {
						close(all)
					}
				}})
		if err != nil {
			cancel()
			return nil, err
		}
		wg.Add(1)
		go func() { defer wg.Done(); _ = w.Run(wctx) }()
	}
	select {
	case <-all:
	case <-time.After(phaseMax):
	}
	el := time.Since(start)
	d := readCPU(servers).sub(c0)
	var h1 float64
	if headKnown {
		var err error
		h1, err = headHeld(ctx, servers)
		headKnown = err == nil
	}
	cancel()
	wg.Wait()
	if done.Load() < int64(n) {
		return nil, fmt.Errorf("the Worker drained %d of %d", done.Load(), n)
	}
	res["drain-worker/s"] = float64(n) / el.Seconds()
	res["worker-server-cpu-µs/job"] = float64(d.servers.Microseconds()) / float64(n)
	res["worker-pg-cpu-µs/job"] = float64(d.pg.Microseconds()) / float64(n)
	if onPG {
		w1, err := walAt(ctx)
		if err != nil {
			return nil, err
		}
		res["worker-wal-bytes/job"] = (w1 - w0) / float64(n)
		if headKnown {
			// The share of the drain's time some batch held the head:
			// near 1, the chain is what limits the replicas.
			res["worker-head-busy"] = (h1 - h0) / el.Seconds()
		}
	}
	if replicas == 1 {
		p50, p99, err := latency(ctx, func(due int64) error {
			_, err := c.Enqueue(ctx, client.NewJob{Queue: "l", Payload: map[string]int64{"due": due}})
			return err
		}, func(stop <-chan struct{}, got func(due int64)) {
			if *latConsumer == "calls" {
				consumeByCalls(ctx, c, stop, got)
				return
			}
			consumeByWorker(ctx, c, stop, got)
		})
		if err != nil {
			return nil, err
		}
		res["lat-p50-ms"], res["lat-p99-ms"] = p50, p99
	}
	return res, nil
}

// fill enqueues n jobs on queue in batches (not measured).
func fill(ctx context.Context, c *client.Client, queue string, n int) error {
	for i := 0; i < n; i += 500 {
		var jobs []client.NewJob
		for range min(500, n-i) {
			jobs = append(jobs, client.NewJob{Queue: queue, Payload: map[string]string{"p": payload}})
		}
		if _, err := c.EnqueueBatch(ctx, jobs); err != nil {
			return err
		}
	}
	return nil
}

// parallel runs fn for 0..n-1 on procs goroutines and returns the time.
func parallel(n int, fn func(i int) error) (time.Duration, error) {
	var next atomic.Int64
	var ferr atomic.Value
	start := time.Now()
	var wg sync.WaitGroup
	for range procs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= n || ferr.Load() != nil {
					return
				}
				if err := fn(i); err != nil {
					ferr.Store(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if err, _ := ferr.Load().(error); err != nil {
		return 0, err
	}
	return time.Since(start), nil
}

// latency offers latRate jobs/s for latDur from one producer (up to 8
// enqueues in flight, so that a slow one does not lower the rate), each
// carrying its due time; consume claims them and reports each due time.
// Latency is claim time minus due time (no coordinated omission); jobs not
// claimed 30 s after the last send count with the time waited so far.
func latency(ctx context.Context, enqueue func(due int64) error, consume func(stop <-chan struct{}, got func(due int64))) (p50, p99 float64, err error) {
	total := int(latDur.Seconds() * float64(*latRate))
	var mu sync.Mutex
	var lats []float64
	stop := make(chan struct{})
	consumed := make(chan struct{})
	go func() {
		consume(stop, func(due int64) {
			l := float64(time.Now().UnixNano()-due) / 1e6
			mu.Lock()
			lats = append(lats, l)
			mu.Unlock()
		})
		close(consumed)
	}()
	t0 := time.Now()
	sem := make(chan struct{}, 8)
	var ferr atomic.Value
	var wg sync.WaitGroup
	for i := range total {
		due := t0.Add(time.Duration(i) * time.Second / time.Duration(*latRate))
		time.Sleep(time.Until(due))
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			if err := enqueue(due.UnixNano()); err != nil {
				ferr.Store(err)
			}
		}()
	}
	wg.Wait()
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		mu.Lock()
		got := len(lats)
		mu.Unlock()
		if got >= total {
			break
		}
	}
	close(stop)
	<-consumed
	if err, _ := ferr.Load().(error); err != nil {
		return 0, 0, err
	}
	mu.Lock()
	defer mu.Unlock()
	for len(lats) < total {
		lats = append(lats, float64(time.Since(t0).Milliseconds())) // unclaimed: a lower bound
	}
	slices.Sort(lats)
	return lats[len(lats)/2], lats[len(lats)*99/100], nil
}

// River: v0.51.2 over riverpgxv5 on the same PostgreSQL, in a schema of
// its own, with a 1 ms fetch cooldown (its default of 100 ms caps a
// client far below what it can do).
type benchArgs struct {
	P   string `json:"p"`
	Due int64  `json:"due,omitempty"`
}

func (benchArgs) Kind() string { return "bench" }

type benchWorker struct {
	river.WorkerDefaults[benchArgs]
	onWork func(benchArgs)
}

func (w *benchWorker) Work(ctx context.Context, j *river.Job[benchArgs]) error {
	if w.onWork != nil {
		w.onWork(j.Args)
	}
	return nil
}

func runRiver(ctx context.Context, round int) (result, error) {
	schema := fmt.Sprintf("river_bench_%d_%d", round, time.Now().UnixNano()%1e6)
	u, drop, err := newSchema(ctx, schema)
	if err != nil {
		return nil, err
	}
	defer drop()
	pool, err := pgxpool.New(ctx, u)
	if err != nil {
		return nil, err
	}
	defer pool.Close()
	drv := riverpgxv5.New(pool)
	mig, err := rivermigrate.New(drv, &rivermigrate.Config{Schema: schema})
	if err != nil {
		return nil, err
	}
	if _, err := mig.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return nil, err
	}
	bw := &benchWorker{}
	workers := river.NewWorkers()
	river.AddWorker(workers, bw)
	newClient := func(maxWorkers int) (*river.Client[pgx.Tx], error) {
		return river.NewClient(drv, &river.Config{Schema: schema, Queues: map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: maxWorkers}},
			Workers: workers, FetchCooldown: time.Millisecond, FetchPollInterval: 50 * time.Millisecond})
	}
	ins, err := newClient(procs) // inserts only: never started
	if err != nil {
		return nil, err
	}
	res := result{}
	n := *nJobs
	el, err := parallel(n, func(i int) error {
		_, err := ins.Insert(ctx, benchArgs{P: payload}, nil)
		return err
	})
	if err != nil {
		return nil, err
	}
	res["enqueue/s"] = float64(n) / el.Seconds()
	// Drain: the jobs inserted above, -handlers workers; a job counts once its
	// completion is committed (River's completed event).
	rc, err := newClient(*handlers)
	if err != nil {
		return nil, err
	}
	// A channel for every event of the phase: River drops the events a
	// full channel cannot take (1,000 by default), and a drop on a loaded
	// machine would leave this loop waiting for completions it never hears of.
	events, cancelSub := rc.SubscribeConfig(&river.SubscribeConfig{Kinds: []river.EventKind{river.EventKindJobCompleted}, ChanSize: n})
	w0, err := walAt(ctx)
	if err != nil {
		return nil, err
	}
	c0 := readCPU(nil)
	start := time.Now()
	if err := rc.Start(ctx); err != nil {
		return nil, err
	}
	for got := 0; got < n; got++ {
		select {
		case <-events:
		case <-time.After(phaseMax):
			return nil, fmt.Errorf("river drained %d of %d", got, n)
		}
	}
	el = time.Since(start)
	d := readCPU(nil).sub(c0)
	w1, err := walAt(ctx)
	if err != nil {
		return nil, err
	}
	cancelSub()
	_ = rc.Stop(ctx)
	res["drain/s"] = float64(n) / el.Seconds()
	res["drain-self-cpu-µs/job"] = float64(d.self.Microseconds()) / float64(n)
	res["drain-pg-cpu-µs/job"] = float64(d.pg.Microseconds()) / float64(n)
	res["drain-wal-bytes/job"] = (w1 - w0) / float64(n)
	// Offered load: 4 workers.
	lc, err := newClient(4)
	if err != nil {
		return nil, err
	}
	var got func(due int64)
	var gmu sync.Mutex
	bw.onWork = func(a benchArgs) {
		gmu.Lock()
		g := got
		gmu.Unlock()
		if g != nil && a.Due != 0 {
			g(a.Due)
		}
	}
	if err := lc.Start(ctx); err != nil {
		return nil, err
	}
	// Inserted through the started client: its inserts wake its own
	// producer at once (an insert-only client's do not, and the producer
	// then fetches at its poll interval only).
	p50, p99, err := latency(ctx, func(due int64) error {
		_, err := lc.Insert(ctx, benchArgs{P: payload, Due: due}, nil)
		return err
	}, func(stop <-chan struct{}, g func(due int64)) {
		gmu.Lock()
		got = g
		gmu.Unlock()
		<-stop
	})
	_ = lc.Stop(ctx)
	if err != nil {
		return nil, err
	}
	res["lat-p50-ms"], res["lat-p99-ms"] = p50, p99
	return res, nil
}

func format(r result) string {
	keys := make([]string, 0, len(r))
	for k := range r {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "%s=%.1f ", k, r[k])
	}
	return b.String()
}

func median(rs []result, key string) (float64, bool) {
	var v []float64
	for _, r := range rs {
		if x, ok := r[key]; ok {
			v = append(v, x)
		}
	}
	if len(v) == 0 {
		return 0, false
	}
	slices.Sort(v)
	return v[len(v)/2], true
}

func report(names []string, all map[string][]result) {
	fmt.Printf("\nmedians of %d alternated rounds, %d jobs of %d bytes, %d producers / %d workers (Worker drains: %d handlers)\n\n", *rounds, *nJobs, len(payload), procs, procs, *handlers)
	for _, t := range names {
		fmt.Printf("%-5s", t)
		keys := map[string]bool{}
		for _, r := range all[t] {
			for k := range r {
				keys[k] = true
			}
		}
		for _, k := range slices.Sorted(func(yield func(string) bool) {
			for k := range keys {
				if !yield(k) {
					return
				}
			}
		}) {
			m, _ := median(all[t], k)
			fmt.Printf(" %s=%.1f", k, m)
		}
		fmt.Println()
	}
	ratio := func(label, a, ka, b, kb string) {
		x, ok1 := median(all[a], ka)
		y, ok2 := median(all[b], kb)
		if ok1 && ok2 && y != 0 {
			fmt.Printf("%-58s %.2fx  (%.0f / %.0f)\n", label, x/y, x, y)
		}
	}
	fmt.Println()
	ratio("pg1 drain via client.Worker / River drain", "pg1", "drain-worker/s", "river", "drain/s")
	ratio("pg1 drain, separate calls / bolt separate calls", "pg1", "drain-calls/s", "bolt", "drain-calls/s")
	ratio("pg1 single enqueues / River single inserts", "pg1", "enqueue/s", "river", "enqueue/s")
	ratio("pg3 drain via Workers / pg1 drain via Worker", "pg3", "drain-worker/s", "pg1", "drain-worker/s")
	ratio("bolt drain via client.Worker / River drain", "bolt", "drain-worker/s", "river", "drain/s")
	ratio("pg1+pf drain via client.Worker / River drain", "pg1+pf", "drain-worker/s", "river", "drain/s")
	ratio("pg1+pf / pg1 drain via client.Worker", "pg1+pf", "drain-worker/s", "pg1", "drain-worker/s")
	ratio("pg3+pf drain via Workers / pg1+pf drain via Worker", "pg3+pf", "drain-worker/s", "pg1+pf", "drain-worker/s")
	ratio("pg3+pf / pg3 drain via Workers", "pg3+pf", "drain-worker/s", "pg3", "drain-worker/s")
	ratio("bolt+pf drain via client.Worker / River drain", "bolt+pf", "drain-worker/s", "river", "drain/s")
	for _, k := range []string{"enqueue/s", "drain-calls/s", "drain-worker/s"} {
		ratio("pg1 / pg1-base "+k, "pg1", k, "pg1-base", k)
		ratio("bolt / bolt-base "+k, "bolt", k, "bolt-base", k)
	}
	ratio("pg3 / pg3-base drain-worker/s", "pg3", "drain-worker/s", "pg3-base", "drain-worker/s")
	for _, t := range []string{"pg1", "pg1-base", "river", "bolt", "bolt-base"} {
		if p50, ok := median(all[t], "lat-p50-ms"); ok {
			p99, _ := median(all[t], "lat-p99-ms")
			fmt.Printf("%-58s p50 %.1f ms, p99 %.1f ms\n", t+": enqueue->claim at "+strconv.Itoa(*latRate)+" jobs/s offered", p50, p99)
		}
	}
}

// consumeByCalls is the latency phase's consumer as issue 24 first measured
// it: 4 loops, each holding one job, a blocking claim when it holds none
// and the next job with each completion (claim_next).
func consumeByCalls(ctx context.Context, c *client.Client, stop <-chan struct{}, got func(due int64)) {
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// A blocking claim when it holds nothing; the next job
			// with each completion (claim_next), as client.Worker does.
			p := client.ClaimParams{Worker: fmt.Sprint("l", w), Queues: []string{"l"}, Lease: time.Minute, Wait: time.Second}
			var held []client.Job
			for {
				select {
				case <-stop:
					return
				default:
				}
				if len(held) == 0 {
					j, ok, err := c.Claim(ctx, p)
					if err != nil || !ok {
						continue
					}
					held = []client.Job{j}
				}
				j := held[0]
				var body struct{ Due int64 }
				if err := jsonUnmarshal(j.Payload, &body); err == nil {
					got(body.Due)
				}
				_, next, err := c.CompleteAndClaim(ctx, j.ID, client.CompleteParams{Worker: p.Worker, FencingToken: j.FencingToken},
					client.ClaimNext{Queues: p.Queues, Lease: p.Lease})
				if err != nil {
					next = nil
				}
				held = next
			}
		}()
	}
	<-stop
	wg.Wait()
}

// consumeByWorker is the Go Worker with 4 handlers, as River's client has
// 4 workers: it long-polls for its free handlers and sends the completions
// of jobs that finish together in one call, with the next claim.
func consumeByWorker(ctx context.Context, c *client.Client, stop <-chan struct{}, got func(due int64)) {
	w, err := client.NewWorker(c, func(ctx context.Context, j client.Job) (any, any, error) {
		var body struct{ Due int64 }
		if err := jsonUnmarshal(j.Payload, &body); err == nil {
			got(body.Due)
		}
		return nil, nil, nil
	}, client.WorkerConfig{Name: "l", Queues: []string{"l"}, Concurrency: 4, Lease: time.Minute, Wait: time.Second})
	if err != nil {
		log.Printf("latency worker: %v", err)
		<-stop
		return
	}
	wctx, cancel := context.WithCancel(ctx)
	ran := make(chan struct{})
	go func() { defer close(ran); _ = w.Run(wctx) }()
	<-stop
	cancel()
	<-ran
}
