package e2e

// Queue pause on the real binary: a paused queue's job is not claimed for
// the whole pause while a long-poll waits on the queue, is claimed right
// after the resume, and a queue paused before a restart is still paused
// after it.

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestQueuePause_HoldsAgainstALongPollAndARestart(t *testing.T) {
	path := filepath.Join(t.TempDir(), "queue.db")
	p, base := startServing(t, nil, "--db", path, "--listen", "127.0.0.1:0")

	st, job := call(t, "POST", base+"/v1/jobs", `{"queue":"emails","payload":{"to":"ada@example.com"}}`)
	wantStatus(t, "enqueue", st, job, http.StatusCreated)
	id := uint64(job["id"].(float64))
	code, out, stderr := runFenceq(t, nil, "queue", "pause", "emails", "--server", base)
	if code != 0 || !strings.HasPrefix(out, "queue emails paused") {
		t.Fatalf("fenceq queue pause emails = exit %d, %q %q; want exit 0, \"queue emails paused …\"", code, out, stderr)
	}

	// A long-poll on the paused queue with a wait far longer than the pause.
	const waitMs = 20_000
	type answer struct {
		status int
		body   map[string]any
		at     time.Time
	}
	answered := make(chan answer, 1)
	go func() {
		st, body := callNoTimeout(t, "POST", base+"/v1/claim", fmt.Sprintf(`{"worker":"w1","queues":["emails"],"lease_ms":30000,"wait_ms":%d}`, waitMs))
		answered <- answer{st, body, time.Now()}
	}()
	polled := time.Now()

	// For the whole pause the job stays available and unclaimed, and the
	// long-poll keeps waiting, also when more jobs arrive for the queue.
	const pause = 1500 * time.Millisecond
	checks := 0
	for end := time.Now().Add(pause); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		select {
		case a := <-answered:
			t.Fatalf("the long-poll on the paused queue was answered %v after it started: %d %v", a.at.Sub(polled), a.status, a.body)
		default:
		}
		st, got := call(t, "GET", fmt.Sprintf("%s/v1/jobs/%d", base, id), "")
		wantStatus(t, "get the paused queue's job", st, got, http.StatusOK)
		if got["state"] != "available" || got["attempts"] != float64(0) {
			t.Fatalf("during the pause job %d = %v, want available with 0 attempts", id, got)
		}
		if checks == 3 {
			st, body := call(t, "POST", base+"/v1/jobs", `{"queue":"emails"}`)
			wantStatus(t, "enqueue to the paused queue", st, body, http.StatusCreated)
		}
		checks++
	}
	st, claim := call(t, "POST", base+"/v1/claim", `{"worker":"w2","queues":["emails"]}`)
	wantStatus(t, "a claim without wait on the paused queue", st, claim, http.StatusNoContent)

	st, res := call(t, "POST", base+"/v1/queues/emails/resume", "")
	wantStatus(t, "resume", st, res, http.StatusOK)
	resumed := time.Now()
	select {
	case a := <-answered:
		if a.status != http.StatusOK || uint64(a.body["id"].(float64)) != id || a.body["fencing_token"] != float64(1) {
			t.Fatalf("the long-poll after the resume = %d %v, want job %d with token 1", a.status, a.body, id)
		}
		t.Logf("the long-poll waited %v through the pause (%d checks) and was answered %v after the resume",
			resumed.Sub(polled).Round(time.Millisecond), checks, a.at.Sub(resumed).Round(time.Millisecond))
	case <-time.After(waitMs * time.Millisecond / 2):
		t.Fatalf("the long-poll was not answered within %v of the resume (its wait is %d ms)", waitMs*time.Millisecond/2, waitMs)
	}

	// Paused before a restart: paused after it.
	st, res = call(t, "POST", base+"/v1/queues/emails/pause", "")
	wantStatus(t, "pause before the restart", st, res, http.StatusOK)
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := p.exit(t, 10*time.Second); code != 0 {
		t.Fatalf("fenceq after SIGTERM exited %d; stderr:\n%s", code, p.stderr)
	}
	_, base = startServing(t, nil, "--db", path, "--listen", "127.0.0.1:0")
	code, out, stderr = runFenceq(t, nil, "queue", "list", "--server", base)
	if code != 0 || !strings.Contains(out, "emails") || !strings.Contains(out, "since ") {
		t.Fatalf("fenceq queue list after the restart = exit %d, %q %q; want emails paused", code, out, stderr)
	}
	st, claim = call(t, "POST", base+"/v1/claim", `{"worker":"w2","queues":["emails"],"wait_ms":500}`)
	wantStatus(t, "a long-poll on the queue paused before the restart", st, claim, http.StatusNoContent)
	if m := metricsText(t, base); !strings.Contains(m, `fenceq_queue_paused{queue="emails"} 1`) {
		t.Errorf("/metrics after the restart has no fenceq_queue_paused{queue=\"emails\"} 1")
	}
	st, res = call(t, "POST", base+"/v1/queues/emails/resume", "")
	wantStatus(t, "resume after the restart", st, res, http.StatusOK)
	st, claim = call(t, "POST", base+"/v1/claim", `{"worker":"w2","queues":["emails"]}`)
	wantStatus(t, "a claim after the resume", st, claim, http.StatusOK)
	if claim["queue"] != "emails" || uint64(claim["id"].(float64)) == id {
		t.Errorf("claim after the restart and resume = %v, want the second emails job", claim)
	}
}

// callNoTimeout is call for a long-poll, without call's 10 s client timeout.
func callNoTimeout(t *testing.T, method, url, body string) (int, map[string]any) {
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		return 0, map[string]any{"error": err.Error()}
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, map[string]any{"error": err.Error()}
	}
	defer resp.Body.Close()
	var out map[string]any
	raw, _ := io.ReadAll(resp.Body)
	if len(raw) > 0 {
		if err := json.Unmarshal(raw, &out); err != nil {
			return resp.StatusCode, map[string]any{"body": string(raw)}
		}
	}
	return resp.StatusCode, out
}

func metricsText(t *testing.T, base string) string {
	t.Helper()
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}
