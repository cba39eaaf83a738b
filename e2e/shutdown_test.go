//go:build linux

package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fenceq/fenceq/db/bolt"
)

// longPoll is one waiting request of the shutdown test and its answer.
type longPoll struct {
	what     string
	status   int
	body     string
	err      error
	answered time.Time
}

// SIGTERM under load: the server stops accepting, answers the waiting
// long-polls (204, or the job already handed off) and lease acquires (409,
// as a timed-out wait) at once, lets in-flight commits finish and exits 0.
// Every reply a client got is in the file.
func TestShutdown_SIGTERMUnderLoadAnswersWaitersAndLosesNothingAcknowledged(t *testing.T) {
	path := filepath.Join(t.TempDir(), "shutdown.db")
	run := randomHex(t, 4)
	queue, idle := "busy-"+run, "idle-"+run
	srv := &crashServer{t: t, path: path, listen: "127.0.0.1:0", client: newCrashClient()}
	srv.start()
	base := *srv.client.base.Load()

	// A held lease, for the acquires that wait on it.
	if status, raw, err := srv.client.do("POST", "/v1/leases/shutdown-lock/acquire", `{"holder":"a","ttl_ms":60000}`); err != nil || status != http.StatusOK {
		t.Fatalf("acquire: %d %s %v", status, raw, err)
	}

	acks := newCrashAcks()
	st := &crashStats{}
	stop := make(chan struct{})
	var load sync.WaitGroup
	for i := range 2 {
		load.Add(1)
		go func() { defer load.Done(); crashProducer(srv.client, acks, st, queue, fmt.Sprintf("p%d", i), stop) }()
	}
	for i := range 4 {
		load.Add(1)
		go func() {
			defer load.Done()
			crashWorker(srv.client, acks, st, queue, fmt.Sprintf("%s-w%d", run, i), stop)
		}()
	}

	// Waiters that the shutdown must answer long before their 50s wait ends:
	// claims on an empty queue, claims on the busy queue (some are handed a
	// job), and acquires of the held lease.
	slow := &http.Client{Timeout: 70 * time.Second}
	var polls []*longPoll
	var pollsMu sync.Mutex
	var waiting sync.WaitGroup
	claimed := map[uint64]uint64{} // job → token, for claims answered with a job
	wait := func(what, path, body string) {
		defer waiting.Done()
		for {
			p := &longPoll{what: what}
			resp, err := slow.Post(base+path, "application/json", strings.NewReader(body))
			p.answered, p.err = time.Now(), err
			if err == nil {
				var raw []byte
				raw, p.err = io.ReadAll(resp.Body)
				resp.Body.Close()
				p.status, p.body = resp.StatusCode, string(raw)
			}
			pollsMu.Lock()
			polls = append(polls, p)
			if p.status == http.StatusOK && strings.HasPrefix(path, "/v1/claim") {
				var j crashJob
				if json.Unmarshal([]byte(p.body), &j) == nil {
					claimed[j.ID] = j.FencingToken
				}
			}
			pollsMu.Unlock()
			select {
			case <-stop:
				return
			default:
			}
			if err != nil {
				return // the server is gone
			}
		}
	}
	for i := range 3 {
		waiting.Add(3)
		go wait("claim on the empty queue", "/v1/claim", fmt.Sprintf(`{"worker":"idle%d","queues":[%q],"wait_ms":50000}`, i, idle))
		go wait("claim on the busy queue", "/v1/claim", fmt.Sprintf(`{"worker":"lp%d","queues":[%q],"wait_ms":50000,"lease_ms":%d}`, i, queue, crashLease.Milliseconds()))
		go wait("lease acquire", "/v1/leases/shutdown-lock/acquire", fmt.Sprintf(`{"holder":"b%d","ttl_ms":1000,"wait_ms":50000}`, i))
	}

	time.Sleep(1500 * time.Millisecond)
	acks.mu.Lock()
	ackedBefore := len(acks.enqueued) + len(acks.completed)
	acks.mu.Unlock()
	signalled := time.Now()
	if err := srv.proc.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	code := srv.proc.exit(t, 30*time.Second)
	exited := time.Now()
	close(stop)
	load.Wait()
	waiting.Wait()
	if code != 0 {
		t.Fatalf("fenceq exited %d after SIGTERM; stderr:\n%s", code, srv.proc.stderr)
	}

	// Every waiter was answered, before the exit, as its wait running out
	// would have: 204, a job, or 409 for the held lease. None waited 50s.
	// The claims on the empty queue and the acquires were waiting when the
	// signal came (nothing could answer them before); a claim on the busy
	// queue may have been between two requests.
	answered := 0
	byKind := map[string]int{}
	for _, p := range polls {
		if p.err != nil {
			if p.answered.Before(signalled) {
				t.Errorf("%s failed before the signal: %v", p.what, p.err)
			}
			continue // asked after the server stopped accepting
		}
		if p.answered.Before(signalled) {
			continue
		}
		answered++
		byKind[p.what]++
		if p.answered.After(exited) {
			t.Errorf("%s answered %v after the exit", p.what, p.answered.Sub(exited))
		}
		switch {
		case p.what == "lease acquire" && p.status == http.StatusConflict && strings.Contains(p.body, "failed_precondition"):
		case p.what != "lease acquire" && (p.status == http.StatusNoContent || p.status == http.StatusOK):
		default:
			t.Errorf("%s answered %d %s during the shutdown", p.what, p.status, p.body)
		}
	}
	if byKind["claim on the empty queue"] != 3 || byKind["lease acquire"] != 3 {
		t.Errorf("answered after the signal: %v; want each of the 3 claims on the empty queue and the 3 acquires once", byKind)
	}

	time.Sleep(crashLease + 100*time.Millisecond) // every lease the load took has run out
	states := checkAcks(t, path, acks, "after SIGTERM")
	acks.reportAnomalies(t)
	acks.mu.Lock()
	defer acks.mu.Unlock()
	// A claim answered with a job was committed: the job's attempts reached its token.
	s, err := bolt.Open(path, bolt.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	for id, token := range claimed {
		j, err := s.GetJob(t.Context(), id)
		if err != nil || j.Attempts < token {
			t.Errorf("claim of job %d with token %d was answered, but the file has %+v, %v", id, token, j.Attempts, err)
		}
	}
	s.Close()
	acked := len(acks.enqueued) + len(acks.completed)
	if ackedBefore == 0 {
		t.Fatal("the load did nothing before the signal")
	}
	t.Logf("shutdown: SIGTERM after %d acknowledged enqueues and completions; %d acknowledged in all (%d after the signal), "+
		"%d claims answered with a job by long-polls; %d waiters answered after the signal; exit 0 %v after SIGTERM; states %v",
		ackedBefore, acked, acked-ackedBefore, len(claimed), answered, exited.Sub(signalled).Round(time.Millisecond), states)
}

// A request that does not finish holds the shutdown until
// --shutdown-timeout, after which its connection is closed and the server
// exits 0; a second signal does not wait for it.
func TestShutdown_HeldRequestTimeoutAndSecondSignal(t *testing.T) {
	held := func(t *testing.T, timeout string) (*proc, func() bool) {
		p, base := startServing(t, nil, "--db", filepath.Join(t.TempDir(), "f.db"), "--listen", "127.0.0.1:0",
			"--shutdown-timeout", timeout, "--read-timeout", "2m")
		c := rawConn(t, base)
		// Headers and a third of the body: the handler waits for the rest.
		fmt.Fprintf(c, "POST /v1/jobs HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 30\r\n\r\n{\"payload\":")
		time.Sleep(200 * time.Millisecond)
		if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		return p, func() bool {
			select {
			case <-p.done:
				return true
			case <-time.After(time.Second):
				return false
			}
		}
	}
	t.Run("timeout", func(t *testing.T) {
		p, exitedSoon := held(t, "1500ms")
		if exitedSoon() {
			t.Fatalf("fenceq exited within 1s of SIGTERM with a request in flight and --shutdown-timeout 1500ms; stderr:\n%s", p.stderr)
		}
		if code := p.exit(t, 10*time.Second); code != 0 {
			t.Fatalf("exit code after the shutdown timeout = %d, want 0; stderr:\n%s", code, p.stderr)
		}
		if !strings.Contains(p.stderr.String(), "shutdown timed out") {
			t.Fatalf("stderr does not say the shutdown timed out:\n%s", p.stderr)
		}
	})
	t.Run("second signal", func(t *testing.T) {
		p, exitedSoon := held(t, "1m")
		if exitedSoon() {
			t.Fatalf("fenceq exited within 1s of SIGTERM with a request in flight; stderr:\n%s", p.stderr)
		}
		sent := time.Now()
		if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		code := p.exit(t, 10*time.Second)
		if code != 128+int(syscall.SIGTERM) || !strings.Contains(p.stderr.String(), "second signal") {
			t.Fatalf("after a second SIGTERM: exit %d, want %d, stderr:\n%s", code, 128+int(syscall.SIGTERM), p.stderr)
		}
		t.Logf("second SIGTERM: exit %d after %v", code, time.Since(sent).Round(time.Millisecond))
	})
}
