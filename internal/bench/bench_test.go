package bench

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fenceq/fenceq/internal/cli"
)

func TestBenchCommandRefusesBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"--jobs", "0"},
		{"--server", "127.0.0.1:7420"},
		{"--wait-ms", "60001"},
		{"--phases", "enqueue,sweep"},
		{"--rate", "10", "--duration", "0s"},
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
