package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fenceq/fenceq/api"
	"github.com/fenceq/fenceq/db"
	"github.com/fenceq/fenceq/internal/apitest"
	"github.com/fenceq/fenceq/internal/cli"
)

func TestBenchCommandRefusesBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"--jobs", "0"},
		{"--server", "127.0.0.1:7420"},
		{"--wait-ms", "60001"},
		{"--phases", "enqueue,sweep"},
		{"--rate", "10", "--duration", "0s"},
		{"--protocol", "thrift"},
		{"--protocol", "grpc", "--worker"},
		{"--worker", "--prefetch", "-1"},
	} {
		var stdout, stderr bytes.Buffer
		err := Command(context.Background(), args, &stdout, &stderr)
		var ue cli.UsageError
		if !errors.As(err, &ue) {
			t.Errorf("bench %v error = %v, want a usage error", args, err)
		}
	}
	var stdout, stderr bytes.Buffer
	if err := Command(context.Background(), []string{"--help"}, &stdout, &stderr); cli.ExitCode(err) != 0 {
		t.Errorf("bench --help exit code = %d, want 0", cli.ExitCode(err))
	}
	if !strings.Contains(stdout.String(), "-claim-next") || stderr.Len() != 0 {
		t.Errorf("bench --help does not list -claim-next on stdout:\n%s\nstderr: %s", stdout.String(), stderr.String())
	}
}

func TestSummarizeUsesNearestRank(t *testing.T) {
	var d []time.Duration
	for i := 100; i >= 1; i-- {
		d = append(d, time.Duration(i)*time.Millisecond)
	}
	got := summarize(d)
	want := LatencySummary{Count: 100, P50: 50, P99: 99, Max: 100}
	if got != want {
		t.Errorf("summarize(1..100 ms) = %+v, want %+v", got, want)
	}
	if got := summarize(nil); got != (LatencySummary{}) {
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

	b := newBencher(config{Server: ts.URL + "/base", Token: "s3cret", WaitMs: 1000}, io.Discard)
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

	b := newBencher(config{Server: ts.URL, WaitMs: 60000}, io.Discard)
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

// protoServer is the real API over a bbolt file on 127.0.0.1 (h2c too, as
// serve has it), recording how each call came: its HTTP version and
// content type, and the connections opened.
type protoServer struct {
	URL   string
	conns atomic.Int64
	mu    sync.Mutex
	seen  map[string]int // "POST /v1/jobs HTTP/1 application/json", "… /fenceq.v1.JobService/ClaimJob HTTP/2 application/grpc"
}

func startProtoServer(t *testing.T) *protoServer {
	t.Helper()
	ps := &protoServer{seen: map[string]int{}}
	h := api.New(apitest.Bolt(t, db.Rules{}), api.Config{Logger: slog.New(slog.DiscardHandler)})
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		path := r.URL.Path
		if strings.HasPrefix(path, "/v1/jobs/") && path != "/v1/jobs/" {
			path = "/v1/jobs/{id}/" + path[strings.LastIndex(path, "/")+1:]
		}
		ps.mu.Lock()
		ps.seen[fmt.Sprintf("%s %s HTTP/%d %s", r.Method, path, r.ProtoMajor, r.Header.Get("Content-Type"))]++
		ps.mu.Unlock()
		h.ServeHTTP(w, r)
	}))
	srv.Config.Protocols = api.Protocols()
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			ps.conns.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	ps.URL = srv.URL
	return ps
}

func (ps *protoServer) calls() map[string]int {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	out := maps.Clone(ps.seen)
	clear(ps.seen)
	return out
}

// TestBenchCommandDrivesEachProtocol: "fenceq bench --protocol" drives a
// real server through the JSON API, gRPC (HTTP/2) or Connect (HTTP/1.1),
// every producer and worker with a connection of its own, and reports
// the same figures.
func TestBenchCommandDrivesEachProtocol(t *testing.T) {
	const producers, workers, jobs = 3, 4, 120
	for _, tc := range []struct {
		protocol string
		extra    []string
		want     []string // calls that must have come, as protoServer records them
	}{
		{"json", nil, []string{"POST /v1/jobs HTTP/1 application/json", "POST /v1/claim HTTP/1 application/json", "POST /v1/jobs/{id}/complete HTTP/1 application/json"}},
		{"grpc", nil, []string{"POST /fenceq.v1.JobService/EnqueueJob HTTP/2 application/grpc", "POST /fenceq.v1.JobService/ClaimJob HTTP/2 application/grpc", "POST /fenceq.v1.JobService/CompleteJob HTTP/2 application/grpc"}},
		{"grpc", []string{"--enqueue-batch", "16", "--claim-max", "4", "--claim-next"}, []string{"POST /fenceq.v1.JobService/EnqueueJobs HTTP/2 application/grpc", "POST /fenceq.v1.JobService/CompleteJob HTTP/2 application/grpc"}},
		{"connect", nil, []string{"POST /fenceq.v1.JobService/EnqueueJob HTTP/1 application/proto", "POST /fenceq.v1.JobService/ClaimJob HTTP/1 application/proto", "POST /fenceq.v1.JobService/CompleteJob HTTP/1 application/proto"}},
	} {
		t.Run(strings.Join(append([]string{tc.protocol}, tc.extra...), " "), func(t *testing.T) {
			ps := startProtoServer(t)
			args := append([]string{"--server", ps.URL, "--protocol", tc.protocol, "--jobs", fmt.Sprint(jobs),
				"--producers", fmt.Sprint(producers), "--workers", fmt.Sprint(workers), "--json"}, tc.extra...)
			var stdout, stderr bytes.Buffer
			if err := Command(context.Background(), args, &stdout, &stderr); err != nil {
				t.Fatalf("bench %v = %v; stderr:\n%s", args, err, stderr.String())
			}
			var rep Report
			if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
				t.Fatalf("report does not decode: %v\n%s", err, stdout.String())
			}
			if rep.Config.Protocol != tc.protocol || rep.Enqueued != jobs || rep.Completed != jobs || len(rep.Phases) != 2 {
				t.Fatalf("report protocol %q, enqueued %d, completed %d, %d phases; want %s, %d, %d, 2",
					rep.Config.Protocol, rep.Enqueued, rep.Completed, len(rep.Phases), tc.protocol, jobs, jobs)
			}
			for _, p := range rep.Phases {
				if p.Jobs != jobs || p.JobsPerSec <= 0 || p.Commits == nil || *p.Commits == 0 {
					t.Errorf("%s: jobs %d, jobs/s %v, commits %v; want %d, > 0, > 0", p.Name, p.Jobs, p.JobsPerSec, p.Commits, jobs)
				}
			}
			if c := rep.Phases[1].Requests["complete"]; c.Count != jobs || c.P50 <= 0 {
				t.Errorf("complete latency = %+v, want %d requests, p50 > 0", c, jobs)
			}
			calls := ps.calls()
			for _, w := range tc.want {
				if calls[w] == 0 {
					t.Errorf("no call %q; the server saw %v", w, calls)
				}
			}
			for c := range calls {
				// Only the commit figures (GET /v1/stats) go through JSON.
				if tc.protocol != "json" && !strings.Contains(c, "/fenceq.v1.") && !strings.HasPrefix(c, "GET /v1/stats ") {
					t.Errorf("--protocol %s made the call %q", tc.protocol, c)
				}
			}
			// A connection per producer and per worker, and one per reading
			// of /v1/stats (before and after each phase).
			if n := ps.conns.Load(); n < producers+workers || n > producers+workers+4 {
				t.Errorf("%d connections for %d producers and %d workers, want one each (and up to 4 for /v1/stats)", n, producers, workers)
			}
		})
	}

	t.Run("grpc latency mode", func(t *testing.T) {
		ps := startProtoServer(t)
		args := []string{"--server", ps.URL, "--protocol", "grpc", "--rate", "100", "--duration", "500ms", "--workers", "2", "--claim-next", "--json"}
		var stdout, stderr bytes.Buffer
		if err := Command(context.Background(), args, &stdout, &stderr); err != nil {
			t.Fatalf("bench %v = %v; stderr:\n%s", args, err, stderr.String())
		}
		var rep Report
		if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
			t.Fatal(err)
		}
		if rep.Mode != "latency" || rep.Enqueued != 50 || rep.Completed != 50 || rep.EnqueueToClaim == nil || rep.EnqueueToClaim.Count != 50 {
			t.Fatalf("report mode %q, enqueued %d, completed %d, enqueue_to_claim %+v; want latency, 50, 50, 50 samples",
				rep.Mode, rep.Enqueued, rep.Completed, rep.EnqueueToClaim)
		}
		if calls := ps.calls(); calls["POST /fenceq.v1.JobService/EnqueueJob HTTP/2 application/grpc"] != 50 {
			t.Errorf("gRPC enqueues = %d, want 50; the server saw %v", calls["POST /fenceq.v1.JobService/EnqueueJob HTTP/2 application/grpc"], calls)
		}
	})
}
