package e2e

// The paused worker: a worker process claims a job, is stopped (SIGSTOP)
// past its lease, a restart of the same worker name claims the job again,
// and the first is resumed (SIGCONT). Its heartbeat, fail and complete must
// be refused and change nothing.
//
// The worker is this test binary run again as a helper process: with
// FENCEQ_TEST_PAUSE_WORKER set, init runs pauseWorkerMain instead of the
// tests (and before TestMain, which would build the binary again).

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

func init() {
	if os.Getenv("FENCEQ_TEST_PAUSE_WORKER") != "" {
		os.Exit(pauseWorkerMain())
	}
}

// pauseWorkerMain is a worker: it claims one job under PAUSE_WORKER with a
// lease of PAUSE_LEASE_MS and prints "claimed ID TOKEN". With
// PAUSE_HEARTBEAT_MS it then heartbeats at that interval, printing
// "heartbeat STATUS", until a heartbeat is refused; then it tries to fail
// and to complete the job anyway, printing "fail STATUS" and "complete
// STATUS". Without it, it waits for a line on stdin and completes the job.
func pauseWorkerMain() int {
	base, worker := os.Getenv("PAUSE_URL"), os.Getenv("PAUSE_WORKER")
	lease, _ := strconv.Atoi(os.Getenv("PAUSE_LEASE_MS"))
	every, _ := strconv.Atoi(os.Getenv("PAUSE_HEARTBEAT_MS"))
	client := &http.Client{Timeout: 10 * time.Second}
	post := func(path, body string) (int, []byte) {
		resp, err := client.Post(base+path, "application/json", strings.NewReader(body))
		if err != nil {
			fmt.Fprintln(os.Stderr, "pause worker:", err)
			os.Exit(2)
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, raw
	}
	var job struct {
		ID           uint64 `json:"id"`
		FencingToken uint64 `json:"fencing_token"`
	}
	for deadline := time.Now().Add(10 * time.Second); ; {
		status, raw := post("/v1/claim", fmt.Sprintf(`{"worker":%q,"lease_ms":%d}`, worker, lease))
		if status == http.StatusOK {
			if err := json.Unmarshal(raw, &job); err != nil {
				fmt.Fprintln(os.Stderr, "pause worker: claim:", err)
				return 2
			}
			break
		}
		if status != http.StatusNoContent || time.Now().After(deadline) {
			fmt.Fprintf(os.Stderr, "pause worker: claim: %d %s\n", status, raw)
			return 2
		}
		time.Sleep(20 * time.Millisecond)
	}
	fmt.Printf("claimed %d %d\n", job.ID, job.FencingToken)
	jobPath := fmt.Sprintf("/v1/jobs/%d", job.ID)
	if every == 0 {
		bufio.NewReader(os.Stdin).ReadString('\n')
		status, _ := post(jobPath+"/complete", fmt.Sprintf(`{"worker":%q,"fencing_token":%d,"result":{"by":"second"}}`, worker, job.FencingToken))
		fmt.Printf("complete %d\n", status)
		return 0
	}
	tick := time.NewTicker(time.Duration(every) * time.Millisecond)
	defer tick.Stop()
	for range tick.C {
		status, _ := post(jobPath+"/heartbeat", fmt.Sprintf(`{"worker":%q,"fencing_token":%d,"lease_ms":%d}`, worker, job.FencingToken, lease))
		fmt.Printf("heartbeat %d\n", status)
		if status != http.StatusOK {
			break
		}
	}
	status, _ := post(jobPath+"/fail", fmt.Sprintf(`{"worker":%q,"fencing_token":%d,"error":"resumed"}`, worker, job.FencingToken))
	fmt.Printf("fail %d\n", status)
	status, _ = post(jobPath+"/complete", fmt.Sprintf(`{"worker":%q,"fencing_token":%d,"result":{"by":"first"}}`, worker, job.FencingToken))
	fmt.Printf("complete %d\n", status)
	return 0
}

// pauseWorker is a running helper worker process.
type pauseWorker struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	lines chan string
	done  chan error
}

func startPauseWorker(t *testing.T, base, worker string, lease, heartbeat time.Duration) *pauseWorker {
	t.Helper()
	cmd, stdin, stdout := startTestHelper(t, "FENCEQ_TEST_PAUSE_WORKER=1", "PAUSE_URL="+base, "PAUSE_WORKER="+worker,
		fmt.Sprintf("PAUSE_LEASE_MS=%d", lease.Milliseconds()), fmt.Sprintf("PAUSE_HEARTBEAT_MS=%d", heartbeat.Milliseconds()))
	w := &pauseWorker{cmd: cmd, stdin: stdin, lines: make(chan string, 100), done: make(chan error, 1)}
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			w.lines <- sc.Text()
		}
		close(w.lines)
		w.done <- cmd.Wait()
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGCONT)
		_ = cmd.Process.Kill()
	})
	return w
}

// next returns the worker's next line, which must start with prefix.
func (w *pauseWorker) next(t *testing.T, prefix string, timeout time.Duration) string {
	t.Helper()
	select {
	case line, ok := <-w.lines:
		if !ok {
			t.Fatalf("the worker exited (%v) before printing %q", <-w.done, prefix)
		}
		if !strings.HasPrefix(line, prefix) {
			t.Fatalf("the worker printed %q, want a line starting with %q", line, prefix)
		}
		return line
	case <-time.After(timeout):
		t.Fatalf("the worker printed no %q line within %v", prefix, timeout)
	}
	return ""
}

func (w *pauseWorker) claimed(t *testing.T) (id, token uint64) {
	t.Helper()
	line := w.next(t, "claimed ", 10*time.Second)
	if _, err := fmt.Sscanf(line, "claimed %d %d", &id, &token); err != nil {
		t.Fatalf("the worker printed %q: %v", line, err)
	}
	return id, token
}

// rawGet returns a GET's status and body as they came.
func rawGet(t *testing.T, url string) (int, []byte) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, raw
}

func TestPause_AResumedWorkerIsFencedOffAndChangesNothing(t *testing.T) {
	const lease = 300 * time.Millisecond
	path := filepath.Join(t.TempDir(), "pause.db")
	_, base := startServing(t, nil, "--db", path, "--listen", "127.0.0.1:0")
	st, job := call(t, "POST", base+"/v1/jobs", `{"payload":{"n":1}}`)
	wantStatus(t, "enqueue", st, job, http.StatusCreated)

	// The first incarnation of w1 claims the job and keeps it with
	// heartbeats while it runs.
	first := startPauseWorker(t, base, "w1", lease, 50*time.Millisecond)
	id, token1 := first.claimed(t)
	first.next(t, "heartbeat 200", 5*time.Second)
	first.next(t, "heartbeat 200", 5*time.Second)

	// Paused past its lease.
	if err := first.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()
	jobURL := fmt.Sprintf("%s/v1/jobs/%d", base, id)
	for {
		_, j := call(t, "GET", jobURL, "")
		exp, err := time.Parse(time.RFC3339Nano, fmt.Sprint(j["lease_expires_at"]))
		if err != nil {
			t.Fatalf("job %d while w1 is stopped: %v (lease_expires_at %v)", id, err, j["lease_expires_at"])
		}
		if j["state"] != "claimed" || j["fencing_token"] != float64(token1) {
			t.Fatalf("job %d while w1 is stopped = %v, want still claimed with token %d", id, j, token1)
		}
		if time.Now().After(exp) {
			break
		}
		time.Sleep(time.Until(exp) + 20*time.Millisecond)
	}

	// A restart of the same worker name claims the job again.
	second := startPauseWorker(t, base, "w1", 30*time.Second, 0)
	id2, token2 := second.claimed(t)
	if id2 != id || token2 != token1+1 {
		t.Fatalf("the restarted w1 claimed job %d with token %d, want job %d with token %d", id2, token2, id, token1+1)
	}
	_, before := rawGet(t, jobURL)
	_, auditBefore := rawGet(t, base+"/v1/audit/verify")

	// The first one resumes: everything it tries is refused.
	if err := first.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	paused := time.Since(stopped)
	for _, want := range []string{"heartbeat 404", "fail 404", "complete 409"} {
		// Heartbeats the first sent just before it was stopped may still
		// be answered 200 after the resume; the first refusal ends them.
		for line := first.next(t, strings.Fields(want)[0], 10*time.Second); line != want; line = first.next(t, strings.Fields(want)[0], 10*time.Second) {
			if line != "heartbeat 200" {
				t.Fatalf("the resumed w1 printed %q, want %q", line, want)
			}
		}
	}
	if err := <-first.done; err != nil {
		t.Fatalf("the first worker: %v", err)
	}
	_, after := rawGet(t, jobURL)
	_, auditAfter := rawGet(t, base+"/v1/audit/verify")
	if !bytes.Equal(before, after) {
		t.Fatalf("the refused calls changed the job:\nbefore %s\nafter  %s", before, after)
	}
	if !bytes.Equal(auditBefore, auditAfter) {
		t.Fatalf("the refused calls changed the audit log:\nbefore %s\nafter  %s", auditBefore, auditAfter)
	}

	// The current holder completes.
	fmt.Fprintln(second.stdin, "go")
	if line := second.next(t, "complete", 10*time.Second); line != "complete 200" {
		t.Fatalf("the restarted w1 printed %q, want complete 200", line)
	}
	_, done := call(t, "GET", jobURL, "")
	if done["state"] != "completed" || done["attempts"] != float64(token2) || fmt.Sprint(done["result"]) != "map[by:second]" {
		t.Fatalf("job after the restarted w1 completed it = %v, want completed, attempts %d, result {by: second}", done, token2)
	}
	t.Logf("pause: w1 (token %d) stopped for %v with a %v lease; the restarted w1 claimed token %d; "+
		"the resumed first got heartbeat 404, fail 404, complete 409, and the job and audit log were byte-for-byte unchanged",
		token1, paused.Round(time.Millisecond), lease, token2)
}
