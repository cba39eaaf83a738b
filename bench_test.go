package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// runBench runs "fenceq bench --json" (the real binary) against base and
// decodes its report.
func runBench(t testing.TB, base string, args ...string) benchReport {
	t.Helper()
	p := start(t, nil, append([]string{"bench", "--server", base, "--json"}, args...)...)
	if code := p.exit(t, 2*time.Minute); code != 0 {
		t.Fatalf("fenceq bench %v exit code = %d, want 0; stderr:\n%s", args, code, p.stderr)
	}
	var rep benchReport
	if err := json.Unmarshal([]byte(p.stdout.String()), &rep); err != nil {
		t.Fatalf("fenceq bench --json output does not decode: %v\n%s", err, p.stdout)
	}
	return rep
}

func TestBenchCommandDrivesARealServer(t *testing.T) {
	_, base := startServing(t, nil, "--db", filepath.Join(t.TempDir(), "bench.db"), "--listen", "127.0.0.1:0")

	for _, tc := range []struct {
		name string
		args []string
	}{
		{"separate calls", nil},
		{"batches and claim_next", []string{"--enqueue-batch", "16", "--claim-max", "4", "--claim-next"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"--jobs", "200", "--producers", "4", "--workers", "4"}, tc.args...)
			rep := runBench(t, base, args...)
			if rep.Mode != "throughput" || rep.Enqueued != 200 || rep.Completed != 200 {
				t.Fatalf("report mode %q, enqueued %d, completed %d; want throughput, 200, 200", rep.Mode, rep.Enqueued, rep.Completed)
			}
			if len(rep.Phases) != 2 || rep.Phases[0].Name != "enqueue" || rep.Phases[1].Name != "drain" {
				t.Fatalf("phases = %+v, want enqueue then drain", rep.Phases)
			}
			for _, p := range rep.Phases {
				if p.Jobs != 200 || p.JobsPerSec <= 0 {
					t.Errorf("%s: jobs %d, jobs/s %v; want 200 and > 0", p.Name, p.Jobs, p.JobsPerSec)
				}
				if p.Commits == nil || *p.Commits == 0 || p.JobsPerCommit <= 0 {
					t.Errorf("%s: commits %v, jobs/commit %v; want both > 0", p.Name, p.Commits, p.JobsPerCommit)
				}
			}
			if n := rep.Phases[0].Requests["enqueue"].Count; n != 200/rep.Config.EnqueueBatch+min(200%rep.Config.EnqueueBatch, 1) {
				t.Errorf("enqueue requests = %d for batches of %d", n, rep.Config.EnqueueBatch)
			}
			if c := rep.Phases[1].Requests["complete"]; c.Count != 200 || c.P50 <= 0 || c.P99 < c.P50 || c.Max < c.P99 {
				t.Errorf("complete latency = %+v, want 200 requests and 0 < p50 <= p99 <= max", c)
			}
			// A batch enqueue of 16 commits at most once per request.
			if tc.args != nil && *rep.Phases[0].Commits > 13 {
				t.Errorf("enqueue in batches of 16 took %d commits, want at most 13", *rep.Phases[0].Commits)
			}
		})
	}

	t.Run("through client.Worker", func(t *testing.T) {
		rep := runBench(t, base, "--jobs", "300", "--producers", "4", "--worker", "--concurrency", "8")
		if !rep.Config.Worker || rep.Config.Workers != 1 || rep.Config.Concurrency != 8 || rep.Completed < 300 {
			t.Fatalf("report config %+v, completed %d; want one Worker of 8 handlers, 300 completed", rep.Config, rep.Completed)
		}
		drain := rep.Phases[1]
		// Batched completions with claims in their transactions: fewer
		// commits than jobs (separate calls take about one per job).
		if drain.Commits == nil || *drain.Commits >= 300 {
			t.Errorf("drain through the Worker took %v commits for 300 jobs, want fewer than one per job", drain.Commits)
		}
	})

	t.Run("latency mode", func(t *testing.T) {
		rep := runBench(t, base, "--rate", "200", "--duration", "1s", "--workers", "2", "--claim-next")
		if rep.Mode != "latency" || rep.Enqueued != 200 || rep.Completed != 200 {
			t.Fatalf("report mode %q, enqueued %d, completed %d; want latency, 200, 200", rep.Mode, rep.Enqueued, rep.Completed)
		}
		e2c := rep.EnqueueToClaim
		if e2c == nil || e2c.Count != 200 || e2c.P50 <= 0 || e2c.Max < e2c.P50 {
			t.Fatalf("enqueue_to_claim = %+v, want 200 samples, 0 < p50 <= max", e2c)
		}
		if rep.SentRate < 150 || rep.SentRate > 250 {
			t.Errorf("sent_rate = %v, want about 200", rep.SentRate)
		}
	})
}

func TestBenchCommandRefusesBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"--jobs", "0"},
		{"--server", "127.0.0.1:7420"},
		{"--wait-ms", "60001"},
		{"--phases", "enqueue,sweep"},
		{"--rate", "10", "--duration", "0s"},
	} {
		var stdout, stderr bytes.Buffer
		err := run(context.Background(), append([]string{"bench"}, args...), &stdout, &stderr)
		var ue usageError
		if !errors.As(err, &ue) {
			t.Errorf("bench %v error = %v, want a usage error", args, err)
		}
	}
	var stdout, stderr bytes.Buffer
	if err := run(context.Background(), []string{"bench", "--help"}, &stdout, &stderr); exitCode(err) != 0 {
		t.Errorf("bench --help exit code = %d, want 0", exitCode(err))
	}
	if !strings.Contains(stderr.String(), "-claim-next") {
		t.Errorf("bench --help does not list -claim-next:\n%s", stderr.String())
	}
}

func TestSummarizeUsesNearestRank(t *testing.T) {
	var d []time.Duration
	for i := 100; i >= 1; i-- {
		d = append(d, time.Duration(i)*time.Millisecond)
	}
	got := summarize(d)
	want := latencySummary{Count: 100, P50: 50, P99: 99, Max: 100}
	if got != want {
		t.Errorf("summarize(1..100 ms) = %+v, want %+v", got, want)
	}
	if got := summarize(nil); got != (latencySummary{}) {
		t.Errorf("summarize(nil) = %+v, want zero", got)
	}
}

// The lean client keeps one connection, sends the token, reads chunked and
// Content-Length replies, and redials when the server closed its idle
// connection (net/http's server does after IdleTimeout) or said
// "Connection: close".
func TestBenchConnReusesAndRedials(t *testing.T) {
	var dials atomic.Int64
	ts := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer s3cret" || r.Header.Get("Content-Type") != "application/json" {
			http.Error(w, "bad headers", http.StatusUnauthorized)
			return
		}
		body, _ := io.ReadAll(r.Body)
		switch r.URL.Path {
		case "/base/chunked": // no Content-Length: chunked
			w.Write([]byte("echo:"))
			w.(http.Flusher).Flush()
			w.Write(body)
		case "/base/close":
			w.Header().Set("Connection", "close")
			w.Write(body)
		default:
			w.Write(body)
		}
	}))
	ts.Config.IdleTimeout = 100 * time.Millisecond
	ts.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			dials.Add(1)
		}
	}
	ts.Start()
	defer ts.Close()

	b := newBencher(benchConfig{Server: ts.URL + "/base", Token: "s3cret", WaitMs: 1000}, io.Discard)
	if !b.lean {
		t.Fatalf("bencher for %s does not use the lean client", ts.URL)
	}
	c := b.newConn(context.Background())
	defer c.close()
	send := func(path, body, want string) {
		t.Helper()
		status, got, err := c.do(http.MethodPost, path, []byte(body))
		if err != nil || status != http.StatusOK || string(got) != want {
			t.Fatalf("POST %s = %d %q, %v; want 200 %q", path, status, got, err, want)
		}
	}
	for i := range 5 {
		send("/x", strings.Repeat("a", i*3000), strings.Repeat("a", i*3000))
		send("/chunked", "b", "echo:b")
	}
	if n := dials.Load(); n != 1 {
		t.Fatalf("10 requests in a row took %d connections, want 1", n)
	}
	time.Sleep(300 * time.Millisecond) // the server closes the idle connection
	send("/x", "after idle", "after idle")
	if n := dials.Load(); n != 2 {
		t.Fatalf("connections after an idle close = %d, want 2", n)
	}
	send("/close", "c", "c")
	send("/x", "after close", "after close")
	if n := dials.Load(); n != 3 {
		t.Fatalf("connections after Connection: close = %d, want 3", n)
	}
}

// Cancelling the context ends a request the server does not answer.
func TestBenchConnCancelEndsABlockedRequest(t *testing.T) {
	release := make(chan struct{})
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		<-release
	}))
	defer ts.Close()
	defer close(release)

	b := newBencher(benchConfig{Server: ts.URL, WaitMs: 60000}, io.Discard)
	ctx, cancel := context.WithCancel(context.Background())
	c := b.newConn(ctx)
	defer c.close()
	time.AfterFunc(100*time.Millisecond, cancel)
	t0 := time.Now()
	_, _, err := c.do(http.MethodPost, "/v1/claim", []byte("{}"))
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("do after cancel = %v, want context.Canceled", err)
	}
	if d := time.Since(t0); d > 5*time.Second {
		t.Fatalf("do took %v to notice the cancel", d)
	}
}

// A server that closes idle connections sooner than the latency mode sends
// (a send every 200 ms, idle timeout 50 ms) loses no request.
func TestBenchCommandSurvivesIdleTimeouts(t *testing.T) {
	_, base := startServing(t, nil, "--db", filepath.Join(t.TempDir(), "bench.db"), "--listen", "127.0.0.1:0", "--idle-timeout", "50ms")
	rep := runBench(t, base, "--rate", "5", "--duration", "1s", "--workers", "2", "--wait-ms", "100")
	if rep.Enqueued != 5 || rep.Completed != 5 {
		t.Fatalf("enqueued %d, completed %d; want 5, 5", rep.Enqueued, rep.Completed)
	}
}
