//go:build linux

package e2e

import (
	"io"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fenceq/fenceq/db/postgres/pgtest"
)

// TestStuckPostgres_WritesAnswerByTheirDeadlineAndSIGTERMExits: with the
// database stopped (SIGSTOP: connections open, nothing answers), an
// enqueue is answered 503 unavailable by the request's deadline, below
// --write-timeout, and a replica with a commit waiting on the database
// exits shortly after --shutdown-timeout on SIGTERM (issue 30 item 2).
// Replica A has a short write timeout (its requests' deadlines come first);
// B a long one, so that at SIGTERM its commit still waits for the database
// and only the shutdown bounds it.
func TestStuckPostgres_WritesAnswerByTheirDeadlineAndSIGTERMExits(t *testing.T) {
	cluster := pgtest.NewCluster(t)
	const writeTimeout, shutdownTimeout = 5 * time.Second, 2 * time.Second
	a := start(t, nil, "serve", "--db", cluster.URL(), "--listen", "127.0.0.1:0",
		"--write-timeout", writeTimeout.String(), "--shutdown-timeout", shutdownTimeout.String())
	baseA := a.addr(t)
	b := start(t, nil, "serve", "--db", cluster.URL(), "--listen", "127.0.0.1:0",
		"--write-timeout", "60s", "--shutdown-timeout", shutdownTimeout.String())
	baseB := b.addr(t)
	client := &http.Client{Timeout: 30 * time.Second}
	post := func(base, body string) (int, string, time.Duration) {
		start := time.Now()
		resp, err := client.Post(base+"/v1/jobs", "application/json", strings.NewReader(body))
		if err != nil {
			return 0, err.Error(), time.Since(start)
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(raw), time.Since(start)
	}
	for _, base := range []string{baseA, baseB} {
		if status, body, _ := post(base, `{"queue":"q"}`); status != http.StatusCreated && status != http.StatusOK {
			t.Fatalf("enqueue through %s before the stop = %d %s", base, status, body)
		}
	}

	cluster.Stop()
	t.Cleanup(cluster.Cont) // before the cluster's own cleanup stops it

	status, body, took := post(baseA, `{"queue":"q"}`)
	t.Logf("enqueue with PostgreSQL stopped: %d after %v: %s", status, took.Round(time.Millisecond), body)
	if status != http.StatusServiceUnavailable || !strings.Contains(body, `"unavailable"`) {
		t.Fatalf("enqueue with PostgreSQL stopped = %d %s, want 503 unavailable", status, body)
	}
	if took >= writeTimeout {
		t.Fatalf("enqueue with PostgreSQL stopped answered after %v, want before --write-timeout %v", took, writeTimeout)
	}

	// B: a commit waiting for the database when SIGTERM comes.
	go post(baseB, `{"queue":"q"}`)
	time.Sleep(300 * time.Millisecond)
	for _, p := range []*proc{a, b} {
		if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
	}
	sent := time.Now()
	limit := shutdownTimeout + 4*time.Second // the store: 1 s for the commit in flight, 1 s for busy connections
	for name, p := range map[string]*proc{"A": a, "B": b} {
		select {
		case <-p.done:
		case <-time.After(time.Until(sent.Add(limit))):
			t.Fatalf("replica %s still running %v after SIGTERM with --shutdown-timeout %v and PostgreSQL stopped; stderr:\n%s",
				name, limit, shutdownTimeout, p.stderr)
		}
		t.Logf("replica %s exited %v after SIGTERM (%v); stderr ends:\n%s", name, time.Since(sent).Round(time.Millisecond),
			p.waitErr, tail(p.stderr.String(), 600))
	}
}

func tail(s string, n int) string { return s[max(0, len(s)-n):] }
