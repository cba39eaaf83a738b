package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/fenceq/fenceq/api"
	"github.com/fenceq/fenceq/db"
	"github.com/fenceq/fenceq/internal/apitest"
)

// Streamed downloads (GET /v1/backup, GET /v1/audit/archive) may outlast
// the write timeout while the client keeps reading; a client that stops
// reading is cut after the stall timeout (issue 30 item 8).

// smallBuffers makes the kernel's socket buffers small on both ends, so
// that a client that stops reading holds the server's writes after a few
// KB, not after megabytes of loopback buffers.
const smallBuffers = 32 << 10

type smallBufListener struct{ net.Listener }

func (l smallBufListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetWriteBuffer(smallBuffers)
	}
	return c, err
}

// serveStreaming serves api.New(store, cfg) on 127.0.0.1:0 with the
// server's write timeout set to cfg.WriteTimeout, as serve sets it, and
// returns its URL and a client whose connections read through small
// buffers.
func serveStreaming(t *testing.T, store db.Store, cfg api.Config) (string, *http.Client) {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	srv := httptest.NewUnstartedServer(api.New(store, cfg))
	srv.Config.WriteTimeout = cfg.WriteTimeout
	srv.Listener = smallBufListener{srv.Listener}
	srv.Start()
	t.Cleanup(func() { srv.CloseClientConnections(); srv.Close() })
	dialer := &net.Dialer{}
	client := &http.Client{Timeout: time.Minute, Transport: &http.Transport{
		DisableKeepAlives: true,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := dialer.DialContext(ctx, network, addr)
			if tc, ok := c.(*net.TCPConn); ok {
				_ = tc.SetReadBuffer(smallBuffers)
			}
			return c, err
		}}}
	return srv.URL, client
}

// readSlowly reads body 16 KB at a time with a pause after each: a client
// that keeps reading, slowly.
func readSlowly(body io.Reader, pause time.Duration) ([]byte, error) {
	var out bytes.Buffer
	buf := make([]byte, 16<<10)
	for {
		n, err := io.ReadFull(body, buf)
		out.Write(buf[:n])
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			return out.Bytes(), nil
		}
		if err != nil {
			return out.Bytes(), err
		}
		time.Sleep(pause)
	}
}

// enqueueBig enqueues n jobs with payloads of size bytes each, in one
// transaction.
func enqueueBig(store db.Store, n, size int) error {
	payload, _ := json.Marshal(strings.Repeat("x", size))
	reqs := make([]db.EnqueueRequest, n)
	for i := range reqs {
		reqs[i] = db.EnqueueRequest{Principal: api.LocalPrincipal, Queue: "q", Payload: payload}
	}
	_, err := store.EnqueueJobs(context.Background(), reqs)
	return err
}

func mustEnqueueBig(t *testing.T, store db.Store, n, size int) {
	t.Helper()
	if err := enqueueBig(store, n, size); err != nil {
		t.Fatalf("EnqueueJobs(%d jobs of %d bytes) = %v", n, size, err)
	}
}

func TestBackup_ASlowSteadyReaderGetsTheWholeFilePastTheWriteTimeout(t *testing.T) {
	const writeTimeout = time.Second
	store := apitest.Bolt(t, db.Rules{})
	url, client := serveStreaming(t, store, api.Config{WriteTimeout: writeTimeout, StallTimeout: 5 * time.Second})
	mustEnqueueBig(t, store, 12, 100<<10)

	start := time.Now()
	resp, err := client.Get(url + "/v1/backup")
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /v1/backup = %v, %v", resp, err)
	}
	slow, err := readSlowly(resp.Body, 40*time.Millisecond)
	resp.Body.Close()
	took := time.Since(start)
	t.Logf("read %d bytes in %v (write timeout %v)", len(slow), took.Round(time.Millisecond), writeTimeout)
	if err != nil {
		t.Fatalf("reading the backup slowly: %v after %d bytes and %v", err, len(slow), took)
	}
	if took <= writeTimeout {
		t.Fatalf("the slow read took %v, not past the write timeout %v: the test proves nothing", took, writeTimeout)
	}
	resp, err = http.Get(url + "/v1/backup")
	if err != nil {
		t.Fatal(err)
	}
	fast, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || len(fast) < 1<<20 {
		t.Fatalf("a fast backup: %d bytes, %v", len(fast), err)
	}
	if !bytes.Equal(slow, fast) {
		t.Fatalf("the slow reader got %d bytes, a fast one %d: want the whole file", len(slow), len(fast))
	}
}

func TestAuditArchive_ASlowSteadyReaderGetsTheWholeArchivePastTheWriteTimeout(t *testing.T) {
	const writeTimeout = time.Second
	later := func() time.Time { return time.Now().Add(time.Hour) } // every record is past the retention
	store := newStore(t, db.Rules{})
	url, client := serveStreaming(t, store, api.Config{WriteTimeout: writeTimeout, StallTimeout: 5 * time.Second,
		AuditRetention: time.Minute, Now: later})
	for range 5 {
		mustEnqueueBig(t, store, 1000, 1)
	}
	start := time.Now()
	resp, err := client.Get(url + "/v1/audit/archive")
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /v1/audit/archive = %v, %v", resp, err)
	}
	body, err := readSlowly(resp.Body, 40*time.Millisecond)
	resp.Body.Close()
	took := time.Since(start)
	t.Logf("read %d bytes in %v (write timeout %v)", len(body), took.Round(time.Millisecond), writeTimeout)
	if err != nil {
		t.Fatalf("reading the archive slowly: %v after %d bytes and %v", err, len(body), took)
	}
	if took <= writeTimeout {
		t.Fatalf("the slow read took %v, not past the write timeout %v: the test proves nothing", took, writeTimeout)
	}
	rep, err := db.VerifyArchive(bytes.NewReader(body))
	if err != nil || !rep.OK || rep.Records != 5000 {
		t.Fatalf("the slowly read archive = %+v, %v; want 5,000 records that verify", rep, err)
	}
}

// TestBackup_AStalledReaderIsCutAfterTheStallTimeoutAndTheServerKeepsAnswering:
// a client that stops reading a backup holds its read transaction until
// the stall timeout cuts it, no longer; meanwhile /readyz answers at once
// and a commit that grows the file (which waits for the read transaction's
// memory map on bbolt) is answered once the reader is cut.
func TestBackup_AStalledReaderIsCutAfterTheStallTimeoutAndTheServerKeepsAnswering(t *testing.T) {
	const stall = 2 * time.Second
	store := apitest.Bolt(t, db.Rules{})
	url, client := serveStreaming(t, store, api.Config{WriteTimeout: 30 * time.Second, StallTimeout: stall})
	mustEnqueueBig(t, store, 12, 100<<10)

	start := time.Now()
	resp, err := client.Get(url + "/v1/backup")
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /v1/backup = %v, %v", resp, err)
	}
	defer resp.Body.Close()
	// The client stops reading. A commit that grows the file well past
	// its memory map comes meanwhile.
	grown := make(chan time.Duration, 1)
	go func() {
		t0 := time.Now()
		if err := enqueueBig(store, 30, 100<<10); err != nil {
			t.Errorf("the enqueue growing the file = %v", err)
		}
		grown <- time.Since(t0)
	}()
	time.Sleep(300 * time.Millisecond)
	t0 := time.Now()
	r, err := client.Get(url + "/readyz")
	if err != nil || r.StatusCode != http.StatusOK {
		t.Fatalf("/readyz while a backup reader stalls = %v, %v", r, err)
	}
	r.Body.Close()
	if d := time.Since(t0); d > stall/2 {
		t.Errorf("/readyz took %v while a backup reader stalled, want an answer at once (not after the stall timeout %v)", d, stall)
	}
	select {
	case d := <-grown:
		t.Logf("the growing enqueue was answered after %v", d)
	case <-time.After(stall + 10*time.Second):
		t.Fatalf("the enqueue growing the file was not answered %v after the stall timeout", 10*time.Second)
	}
	time.Sleep(stall) // well past it: the server has cut the reader
	got, err := io.ReadAll(resp.Body)
	t.Logf("the stalled reader then read %d bytes (%v) %v after the backup began", len(got), err, time.Since(start).Round(time.Millisecond))
	if err == nil {
		t.Fatalf("the stalled reader got the whole backup (%d bytes) after stalling past the stall timeout %v, want it cut", len(got), stall)
	}
	// The server keeps answering, backups included.
	resp2, err := http.Get(url + "/v1/backup")
	if err != nil {
		t.Fatal(err)
	}
	full, err := io.ReadAll(resp2.Body)
	resp2.Body.Close()
	if err != nil || resp2.StatusCode != http.StatusOK || len(full) < 4<<20 {
		t.Fatalf("a backup after the cut = %d, %d bytes, %v", resp2.StatusCode, len(full), err)
	}
}
