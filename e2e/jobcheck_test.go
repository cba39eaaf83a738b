package e2e

// fenceq job check, end to end with the real binary (issue 31): the command
// of "fenceq worker --exec" checks its claim right before a side effect.
// The worker is paused (SIGSTOP) past its lease while the command runs,
// another worker takes the job over, and the command's check exits 1, so
// it skips the side effect; a check of the current claim exits 0 and
// prints nothing (under the worker, stdout is the job's result).

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestJobCheck_ACommandWhoseClaimWasTakenOverGetsNonZero(t *testing.T) {
	dir := t.TempDir()
	_, base := startServing(t, nil, "--db", filepath.Join(dir, "fenceq.db"), "--listen", "127.0.0.1:0")
	env := []string{"FENCEQ_SERVER=" + base}

	code, out, errOut := runFenceq(t, env, "enqueue", "--queue", "takeover", "-q")
	if code != 0 {
		t.Fatalf("enqueue: exit %d, %s", code, errOut)
	}
	id := strings.TrimSpace(out)

	// The command: say it started, wait until the test has let another
	// worker take the job over (the worker is stopped meanwhile), check,
	// and do the side effect only if the check passed.
	script := fmt.Sprintf(`echo "$FENCEQ_FENCING_TOKEN $FENCEQ_WORKER" > %[1]s/started
while [ ! -f %[1]s/taken ]; do sleep 0.05; done
%[2]s job check 2> %[1]s/check.err
echo $? > %[1]s/check.exit
%[2]s job check && echo done > %[1]s/side-effect
exit 0`, dir, fenceqBin)
	w := start(t, env, "worker", "--queue", "takeover", "--name", "w1", "--lease", "1s", "--wait", "1s", "--exec", script)
	started := waitFile(t, filepath.Join(dir, "started"), 20*time.Second, w)
	if got := strings.TrimSpace(started); got != "1 w1" {
		t.Fatalf("the command saw token and worker %q, want \"1 w1\"", got)
	}
	// The worker stops heartbeating; the command, in its own process
	// group, runs on.
	if err := w.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	defer w.cmd.Process.Signal(syscall.SIGCONT)

	// Another worker claims the job once the 1 s lease has run out.
	status, body := call(t, "POST", base+"/v1/claim", `{"worker":"w2","queues":["takeover"],"lease_ms":60000,"wait_ms":5000}`)
	if status != 200 || fmt.Sprint(body["id"]) != id || body["fencing_token"] != float64(2) {
		t.Fatalf("claim by w2 = %d %v; want job %s with token 2", status, body, id)
	}
	if err := os.WriteFile(filepath.Join(dir, "taken"), nil, 0o644); err != nil {
		t.Fatal(err)
	}

	exit := strings.TrimSpace(waitFile(t, filepath.Join(dir, "check.exit"), 20*time.Second, w))
	checkErr, _ := os.ReadFile(filepath.Join(dir, "check.err"))
	if exit != "1" || !strings.Contains(string(checkErr), "not current") {
		t.Errorf("fenceq job check in the command whose claim was taken over: exit %s, stderr %q; want 1 saying the claim is not current", exit, checkErr)
	}
	time.Sleep(200 * time.Millisecond) // the script's last line ran, or not
	if _, err := os.Stat(filepath.Join(dir, "side-effect")); err == nil {
		t.Errorf("the side effect ran after the claim was taken over")
	}
	if err := w.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	if err := w.cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	w.exit(t, 30*time.Second)

	// The current claim (w2's token 2) checks out: exit 0, nothing on
	// stdout. The stale one, from the environment as the worker sets it,
	// exits 1.
	jobEnv := append(env, "FENCEQ_JOB_ID="+id, "FENCEQ_WORKER=w2", "FENCEQ_FENCING_TOKEN=2")
	if code, out, errOut := runFenceq(t, jobEnv, "job", "check"); code != 0 || out != "" || errOut != "" {
		t.Errorf("job check of the current claim: exit %d, stdout %q, stderr %q; want 0 and nothing printed", code, out, errOut)
	}
	jobEnv[len(jobEnv)-1] = "FENCEQ_FENCING_TOKEN=1"
	if code, _, errOut := runFenceq(t, jobEnv, "job", "check"); code != 1 || !strings.Contains(errOut, "token 1") {
		t.Errorf("job check of the stale claim: exit %d, stderr %q; want 1 naming token 1", code, errOut)
	}
	if code, _, _ := runFenceq(t, env, "job", "check", id, "2"); code != 0 {
		t.Errorf("job check %s 2: exit %d, want 0", id, code)
	}
	if code, _, errOut := runFenceq(t, env, "job", "check"); code != 2 || !strings.Contains(errOut, "FENCEQ_JOB_ID") {
		t.Errorf("job check without a job: exit %d, stderr %q; want 2 naming FENCEQ_JOB_ID", code, errOut)
	}
	// The job is w2's, untouched by anything the stale command did.
	status, body = call(t, "GET", base+"/v1/jobs/"+id, "")
	if status != 200 || body["state"] != "claimed" || body["claimed_by"] != "local|w2" {
		t.Errorf("job after the takeover = %d %v; want claimed by local|w2", status, body)
	}
}

// waitFile waits for path to hold a line and returns its content; it fails
// when p exits first or the time runs out.
func waitFile(t *testing.T, path string, timeout time.Duration, p *proc) string {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		if raw, err := os.ReadFile(path); err == nil && strings.HasSuffix(string(raw), "\n") {
			return string(raw)
		}
		select {
		case <-p.done:
			t.Fatalf("the worker exited before %s appeared; stderr:\n%s", path, p.stderr)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not appear within %v; worker stderr:\n%s", path, timeout, p.stderr)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
