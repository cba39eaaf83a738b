package e2e

// BenchmarkHTTPCost asks what HTTP, with the load generator on the same two
// cores, costs the raw baseline itself. Issue 5 compares fenceq over HTTP
// with the raw bbolt db.Batch baseline of db/bench_test.go, which has no
// HTTP at all. Here that baseline's own transactions (one bucket of jobs,
// db.Batch with a 1 ms delay, no index: the next job to claim is a counter)
// run three ways in one benchmark run:
//
//   - raw: 16 goroutines call them, no HTTP (the baseline as issue 5 has it);
//   - raw-http: a bare net/http server in a process of its own serves them
//     as POST /v1/jobs, /v1/claim and /v1/jobs/{id}/complete, driven by the
//     real `fenceq bench` (16 producers, then 16 workers);
//   - fenceq-http: `fenceq serve` under the same `fenceq bench`.
//
// Each reports enqueue and drain jobs/s as extra metrics. The figures are
// in docs/performance.md; CI runs it with -benchtime 1x to keep it working.

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	bbolt "go.etcd.io/bbolt"
)

// With FENCEQ_TEST_RAW_HTTP set to a file path, the test binary is the raw
// server (rawHTTPMain) instead of running tests.
func init() {
	if path := os.Getenv("FENCEQ_TEST_RAW_HTTP"); path != "" {
		if err := rawHTTPMain(path); err != nil {
			fmt.Fprintln(os.Stderr, "raw http server:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
}

var rawBucket = []byte("jobs")

// rawStore is the baseline's storage: one bucket, key the job id (8 bytes),
// value a state byte and the job's bytes.
type rawStore struct {
	db      *bbolt.DB
	ops     atomic.Uint64
	firstTx int
}

const (
	rawStateAvailable byte = 'a'
	rawStateClaimed   byte = 'c'
	rawStateCompleted byte = 'd'
)

func openRawStore(path string) (*rawStore, error) {
	db, err := bbolt.Open(path, 0o600, nil)
	if err != nil {
		return nil, err
	}
	db.MaxBatchDelay = time.Millisecond
	err = db.Update(func(tx *bbolt.Tx) error {
		_, err := tx.CreateBucketIfNotExists(rawBucket)
		return err
	})
	if err != nil {
		db.Close()
		return nil, err
	}
	r := &rawStore{db: db}
	r.firstTx = r.lastTx()
	return r, nil
}

func (r *rawStore) lastTx() int {
	var id int
	_ = r.db.View(func(tx *bbolt.Tx) error { id = tx.ID(); return nil })
	return id
}

func rawJobKey(id uint64) []byte { return binary.BigEndian.AppendUint64(nil, id) }

// batch runs fn in a shared db.Batch commit. fn may run twice (bbolt retries
// a batch without the call that failed), so it only puts what it computes.
func (r *rawStore) batch(fn func(b *bbolt.Bucket) error) error {
	err := r.db.Batch(func(tx *bbolt.Tx) error { return fn(tx.Bucket(rawBucket)) })
	if err == nil {
		r.ops.Add(1)
	}
	return err
}

func (r *rawStore) enqueue(id uint64, job []byte) error {
	return r.batch(func(b *bbolt.Bucket) error {
		return b.Put(rawJobKey(id), append([]byte{rawStateAvailable}, job...))
	})
}

// transition moves job id from one state to the next (a claim, a
// completion): a read and a put, as the baseline's claim.
func (r *rawStore) transition(id uint64, from, to byte) error {
	return r.batch(func(b *bbolt.Bucket) error {
		v := b.Get(rawJobKey(id))
		if len(v) == 0 || v[0] != from {
			return fmt.Errorf("raw job %d is not in state %c", id, from)
		}
		rec := bytes.Clone(v)
		rec[0] = to
		return b.Put(rawJobKey(id), rec)
	})
}

func (r *rawStore) claim(id uint64) error {
	return r.transition(id, rawStateAvailable, rawStateClaimed)
}
func (r *rawStore) complete(id uint64) error {
	return r.transition(id, rawStateClaimed, rawStateCompleted)
}

// rawHTTPMain serves a rawStore on 127.0.0.1 with the routes and replies
// `fenceq bench` uses, prints "listening URL" and serves until stdin closes.
func rawHTTPMain(path string) error {
	r, err := openRawStore(path)
	if err != nil {
		return err
	}
	defer r.db.Close()
	var enqueued, claimed atomic.Uint64
	fail := func(w http.ResponseWriter, err error) { http.Error(w, err.Error(), http.StatusInternalServerError) }
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/jobs", func(w http.ResponseWriter, req *http.Request) {
		body, err := io.ReadAll(req.Body)
		if err != nil {
			fail(w, err)
			return
		}
		id := enqueued.Add(1)
		if err := r.enqueue(id, body); err != nil {
			fail(w, err)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"id":%d}`, id)
	})
	mux.HandleFunc("POST /v1/claim", func(w http.ResponseWriter, req *http.Request) {
		if _, err := io.Copy(io.Discard, req.Body); err != nil {
			fail(w, err)
			return
		}
		id := claimed.Add(1)
		if id > enqueued.Load() {
			claimed.Add(^uint64(0))
			w.WriteHeader(http.StatusNoContent)
			return
		}
		if err := r.claim(id); err != nil {
			fail(w, err)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"id":%d,"attempts":1,"fencing_token":1}`, id)
	})
	mux.HandleFunc("POST /v1/jobs/{id}/complete", func(w http.ResponseWriter, req *http.Request) {
		if _, err := io.Copy(io.Discard, req.Body); err != nil {
			fail(w, err)
			return
		}
		id, err := strconv.ParseUint(req.PathValue("id"), 10, 64)
		if err == nil {
			err = r.complete(id)
		}
		if err != nil {
			fail(w, err)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"id":%d,"state":"completed"}`, id)
	})
	mux.HandleFunc("GET /v1/stats", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]uint64{"commits": uint64(r.lastTx() - r.firstTx), "committed_ops": r.ops.Load()})
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second, IdleTimeout: time.Minute}
	fmt.Printf("listening http://%s\n", ln.Addr())
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		_ = srv.Close()
	}()
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// startRawHTTP runs this test binary as the raw server on a file in dir
// and returns its base URL; the server stops at cleanup.
func startRawHTTP(b *testing.B, dir string) string {
	b.Helper()
	cmd, stdin, stdout := startTestHelper(b, "FENCEQ_TEST_RAW_HTTP="+filepath.Join(dir, "raw.db"))
	b.Cleanup(func() {
		stdin.Close()
		if err := cmd.Wait(); err != nil {
			b.Errorf("raw http server: %v", err)
		}
	})
	line, err := bufio.NewReader(stdout).ReadString('\n')
	base, ok := strings.CutPrefix(strings.TrimSpace(line), "listening ")
	if err != nil || !ok {
		b.Fatalf("raw http server did not say where it listens: %q, %v", line, err)
	}
	return base
}

// rawInProcess runs the baseline with 16 goroutines and no HTTP: n
// enqueues, then n claims and completions. It returns the two phases'
// jobs/s.
func rawInProcess(b *testing.B, dir string, n int) (enqueue, drain float64) {
	b.Helper()
	r, err := openRawStore(filepath.Join(dir, "raw-inprocess.db"))
	if err != nil {
		b.Fatal(err)
	}
	defer r.db.Close()
	job := bytes.Repeat([]byte("x"), 100)
	var next atomic.Uint64
	run := func(op func(id uint64) error) float64 {
		next.Store(0)
		start := time.Now()
		var wg sync.WaitGroup
		var failed atomic.Value
		for range 16 {
			wg.Go(func() {
				for id := next.Add(1); id <= uint64(n); id = next.Add(1) {
					if err := op(id); err != nil {
						failed.CompareAndSwap(nil, err)
						return
					}
				}
			})
		}
		wg.Wait()
		if err, _ := failed.Load().(error); err != nil {
			b.Fatal(err)
		}
		return float64(n) / time.Since(start).Seconds()
	}
	enqueue = run(func(id uint64) error { return r.enqueue(id, job) })
	drain = run(func(id uint64) error {
		if err := r.claim(id); err != nil {
			return err
		}
		return r.complete(id)
	})
	return enqueue, drain
}

// benchPhasesPerSec runs `fenceq bench` against base and returns its
// enqueue and drain jobs/s, checking that every job was done.
func benchPhasesPerSec(b *testing.B, base string, n int) (enqueue, drain float64) {
	b.Helper()
	rep := runBench(b, base, "--jobs", strconv.Itoa(n))
	if rep.Enqueued != int64(n) || rep.Completed != int64(n) || len(rep.Phases) != 2 {
		b.Fatalf("fenceq bench against %s: enqueued %d, completed %d, %d phases; want %d, %d, 2",
			base, rep.Enqueued, rep.Completed, len(rep.Phases), n, n)
	}
	return rep.Phases[0].JobsPerSec, rep.Phases[1].JobsPerSec
}

// httpCostRuns rotates the order of BenchmarkHTTPCost's three variants from
// one run to the next (-count N): on this machine whatever runs first in a
// round tends to be faster.
var httpCostRuns atomic.Int64

func BenchmarkHTTPCost(b *testing.B) {
	n := b.N
	dir := b.TempDir()
	var rawEnqueue, rawDrain, rawHTTPEnqueue, rawHTTPDrain, fenceqEnqueue, fenceqDrain float64
	variants := []func(){
		func() { rawEnqueue, rawDrain = rawInProcess(b, dir, n) },
		func() { rawHTTPEnqueue, rawHTTPDrain = benchPhasesPerSec(b, startRawHTTP(b, dir), n) },
		func() {
			_, base := startServing(b, nil, "--db", filepath.Join(dir, "fenceq.db"), "--listen", "127.0.0.1:0")
			fenceqEnqueue, fenceqDrain = benchPhasesPerSec(b, base, n)
		},
	}
	first := int(httpCostRuns.Add(1)-1) % len(variants)
	for i := range variants {
		variants[(first+i)%len(variants)]()
	}
	b.ReportMetric(rawEnqueue, "raw-enqueue-jobs/s")
	b.ReportMetric(rawDrain, "raw-drain-jobs/s")
	b.ReportMetric(rawHTTPEnqueue, "raw-http-enqueue-jobs/s")
	b.ReportMetric(rawHTTPDrain, "raw-http-drain-jobs/s")
	b.ReportMetric(fenceqEnqueue, "fenceq-http-enqueue-jobs/s")
	b.ReportMetric(fenceqDrain, "fenceq-http-drain-jobs/s")
}
