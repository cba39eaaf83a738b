package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fenceq/fenceq/db/bolt"
)

// cliServer starts "fenceq serve" on a fresh file and returns its base URL
// and the environment that points the client commands at it.
func cliServer(t *testing.T, args ...string) (base string, env []string) {
	t.Helper()
	_, base = startServing(t, nil, append([]string{"--db", filepath.Join(t.TempDir(), "q.db"), "--listen", "127.0.0.1:0"}, args...)...)
	return base, []string{"FENCEQ_SERVER=" + base}
}

// mustRun runs fenceq and fails unless it exits with want.
func mustRun(t *testing.T, env []string, want int, args ...string) (stdout, stderr string) {
	t.Helper()
	code, stdout, stderr := runFenceq(t, env, args...)
	if code != want {
		t.Fatalf("fenceq %s exited %d, want %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), code, want, stdout, stderr)
	}
	return stdout, stderr
}

// mustContain fails unless s contains every one of wants.
func mustContain(t *testing.T, what, s string, wants ...string) {
	t.Helper()
	for _, w := range wants {
		if !strings.Contains(s, w) {
			t.Errorf("%s = %q, want it to contain %q", what, s, w)
		}
	}
}

// cliJob reads a job through the API.
func cliJob(t *testing.T, base string, id uint64) map[string]any {
	t.Helper()
	st, j := call(t, "GET", fmt.Sprintf("%s/v1/jobs/%d", base, id), "")
	wantStatus(t, fmt.Sprintf("GET job %d", id), st, j, http.StatusOK)
	return j
}

// cliGet returns the body of GET base+path, which must be 200.
func cliGet(t *testing.T, base, path string) string {
	t.Helper()
	resp, err := http.Get(base + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %v", path, resp.StatusCode, err)
	}
	return string(b)
}

// cliWait polls cond every 20ms until it holds, or fails after timeout.
func cliWait(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, timeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestCLI_JobCommands(t *testing.T) {
	base, env := cliServer(t)

	out, _ := mustRun(t, env, 0, "enqueue", "--queue", "emails", "--kind", "welcome", "--payload", `{"to":"ada@example.com"}`)
	mustContain(t, "enqueue", out, "enqueued job 1 on queue emails (available)")
	out, _ = mustRun(t, env, 0, "enqueue", "--queue", "emails", "--payload", `"second"`, "--priority", "3", "-q")
	if strings.TrimSpace(out) != "2" {
		t.Fatalf("enqueue -q printed %q, want the id 2", out)
	}
	out, _ = mustRun(t, env, 0, "enqueue", "--queue", "emails", "--idempotency-key", "k1", "--json")
	var enq map[string]any
	if err := json.Unmarshal([]byte(out), &enq); err != nil || enq["id"] != float64(3) || enq["idempotency_key"] != "k1" {
		t.Fatalf("enqueue --json printed %q (%v), want job 3 as JSON", out, err)
	}
	out, _ = mustRun(t, env, 0, "enqueue", "--queue", "emails", "--idempotency-key", "k1")
	mustContain(t, "enqueue with an existing key", out, "job 3 already exists", `"k1"`)
	mustRun(t, env, 0, "enqueue", "--queue", "later", "--delay", "1h")

	// Usage mistakes exit 2 and send nothing.
	_, stderr := mustRun(t, env, 2, "enqueue", "--payload", "not json")
	mustContain(t, "enqueue with a bad payload", stderr, "not valid JSON")
	mustRun(t, env, 2, "get")
	mustRun(t, env, 2, "get", "seven")
	mustRun(t, env, 2, "list", "--state", "sleeping")
	mustRun(t, env, 2, "enqueue", "--run-at", "tomorrow")
	// The server's refusals exit 1 with its message.
	_, stderr = mustRun(t, env, 1, "enqueue", "--queue", "no spaces allowed")
	mustContain(t, "enqueue on a bad queue", stderr, "invalid_argument", "HTTP 400")
	_, stderr = mustRun(t, env, 1, "get", "99")
	mustContain(t, "get 99", stderr, "not_found", "HTTP 404")

	out, _ = mustRun(t, env, 0, "get", "1")
	mustContain(t, "get 1", out, "queue", "emails", "welcome", "available", `{"to":"ada@example.com"}`, "0 of 10")
	// Flags after the argument work too, and --json is the server's shape.
	out, _ = mustRun(t, env, 0, "get", "1", "--json")
	var got map[string]any
	if err := json.Unmarshal([]byte(out), &got); err != nil || got["kind"] != "welcome" || got["state"] != "available" {
		t.Fatalf("get 1 --json = %q (%v)", out, err)
	}
	if _, ok := got["lease_expires_at"]; ok {
		t.Errorf("get --json shows lease_expires_at for an unclaimed job: %s", out)
	}

	out, _ = mustRun(t, env, 0, "list", "--queue", "emails")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 4 || !strings.HasPrefix(lines[0], "ID") || !strings.HasPrefix(lines[1], "1 ") || !strings.HasPrefix(lines[3], "3 ") {
		t.Fatalf("list --queue emails =\n%s\nwant a header and jobs 1, 2, 3", out)
	}
	out, stderr = mustRun(t, env, 0, "list", "--limit", "2")
	mustContain(t, "list --limit 2 (stderr)", stderr, "--after 2")
	if n := strings.Count(strings.TrimSpace(out), "\n"); n != 2 {
		t.Errorf("list --limit 2 printed %d jobs, want 2:\n%s", n, out)
	}
	out, _ = mustRun(t, env, 0, "list", "--limit", "2", "--all", "--json")
	var page struct {
		Jobs []map[string]any `json:"jobs"`
	}
	if err := json.Unmarshal([]byte(out), &page); err != nil || len(page.Jobs) != 4 {
		t.Fatalf("list --all --json = %q (%v), want 4 jobs", out, err)
	}
	out, _ = mustRun(t, env, 0, "list", "--state", "scheduled")
	mustContain(t, "list --state scheduled", out, "later")

	out, _ = mustRun(t, env, 0, "cancel", "2")
	mustContain(t, "cancel 2", out, "job 2 cancelled")
	_, stderr = mustRun(t, env, 1, "cancel", "2")
	mustContain(t, "cancel 2 again", stderr, "failed_precondition")
	out, _ = mustRun(t, env, 0, "retry", "2")
	mustContain(t, "retry 2", out, "job 2 is available again")
	if j := cliJob(t, base, 2); j["state"] != "available" {
		t.Fatalf("job 2 after retry = %v", j)
	}

	out, _ = mustRun(t, env, 0, "stats")
	mustContain(t, "stats", out, "QUEUE", "AVAILABLE", "emails", "later", "commits", "refused")
	out, _ = mustRun(t, env, 0, "stats", "--json")
	var stats struct {
		Queues []struct {
			Queue  string            `json:"queue"`
			Counts map[string]uint64 `json:"counts"`
		} `json:"queues"`
		Server struct {
			Commits uint64 `json:"commits"`
		} `json:"server"`
	}
	if err := json.Unmarshal([]byte(out), &stats); err != nil || len(stats.Queues) != 2 || stats.Server.Commits == 0 {
		t.Fatalf("stats --json = %q (%v)", out, err)
	}
	for _, q := range stats.Queues {
		if q.Queue == "emails" && q.Counts["available"] != 3 {
			t.Errorf("stats --json: emails has %d available, want 3", q.Counts["available"])
		}
	}
}

func TestCLI_LeaseCommands(t *testing.T) {
	_, env := cliServer(t)
	name := "/data/a b.csv"

	out, _ := mustRun(t, env, 0, "lease", "acquire", name, "--holder", "etl-1", "--ttl", "30s")
	mustContain(t, "lease acquire", out, "acquired /data/a b.csv: fencing token 1, held by local|etl-1")
	_, stderr := mustRun(t, env, 1, "lease", "acquire", name, "--holder", "etl-2")
	mustContain(t, "lease acquire while held", stderr, "held", "failed_precondition")
	mustRun(t, env, 2, "lease", "acquire", name)                // no --holder
	mustRun(t, env, 2, "lease", "renew", name, "--holder", "x") // no token
	mustRun(t, env, 2, "lease", "steal", name)

	out, _ = mustRun(t, env, 0, "lease", "renew", name, "1", "--holder", "etl-1", "--ttl", "1m")
	mustContain(t, "lease renew", out, "renewed /data/a b.csv (token 1)")
	mustRun(t, env, 1, "lease", "renew", name, "2", "--holder", "etl-1")
	out, _ = mustRun(t, env, 0, "lease", "check", name, "1")
	mustContain(t, "lease check 1", out, "token 1 is current")
	mustRun(t, env, 1, "lease", "check", name, "2")

	out, _ = mustRun(t, env, 0, "lease", "show", name)
	mustContain(t, "lease show NAME", out, "local|etl-1", "true")
	mustRun(t, env, 0, "lease", "acquire", "/other", "--holder", "h", "-q")
	out, _ = mustRun(t, env, 0, "lease", "show", "--prefix", "/data/")
	mustContain(t, "lease show --prefix", out, "NAME", name)
	if strings.Contains(out, "/other") {
		t.Errorf("lease show --prefix /data/ lists /other:\n%s", out)
	}
	out, _ = mustRun(t, env, 0, "lease", "show", "--json")
	var page struct {
		Leases []map[string]any `json:"leases"`
	}
	if err := json.Unmarshal([]byte(out), &page); err != nil || len(page.Leases) != 2 {
		t.Fatalf("lease show --json = %q (%v), want 2 leases", out, err)
	}

	out, _ = mustRun(t, env, 0, "lease", "release", name, "1", "--holder", "etl-1")
	mustContain(t, "lease release", out, "released /data/a b.csv (token 1)")
	out, _ = mustRun(t, env, 0, "lease", "acquire", name, "--holder", "etl-2", "-q")
	if strings.TrimSpace(out) != "2" {
		t.Fatalf("lease acquire -q after the release printed %q, want token 2", out)
	}
	mustRun(t, env, 1, "lease", "check", name, "1")
	_, stderr = mustRun(t, env, 1, "lease", "show", "never-acquired")
	mustContain(t, "lease show of an unknown name", stderr, "not_found")
}

func TestCLI_AuditVerifyAndBackup(t *testing.T) {
	dir := t.TempDir()
	dbPath := filepath.Join(dir, "q.db")
	_, base := startServing(t, nil, "--db", dbPath, "--listen", "127.0.0.1:0")
	env := []string{"FENCEQ_SERVER=" + base}
	mustRun(t, env, 0, "enqueue", "--payload", `{"n":1}`)
	mustRun(t, env, 0, "enqueue", "--payload", `{"n":2}`)

	// Without --db but with a server: the server walks the chain.
	out, _ := mustRun(t, env, 0, "audit", "verify")
	mustContain(t, "audit verify (server)", out, "ok: 2 records, head 2")
	out, _ = mustRun(t, nil, 0, "audit", "verify", "--server", base, "--json")
	var rep map[string]any
	if err := json.Unmarshal([]byte(out), &rep); err != nil || rep["ok"] != true || rep["records"] != float64(2) {
		t.Fatalf("audit verify --server --json = %q (%v)", out, err)
	}
	// --db still means the file, offline (here a copy: the server holds it).
	out, stderr := mustRun(t, env, 0, "audit", "verify", "--db", dbPath)
	mustContain(t, "audit verify --db", out, "ok: 2 records")
	mustContain(t, "audit verify --db (stderr)", stderr, "verifying a copy")
	mustRun(t, env, 2, "audit", "check")

	backup := filepath.Join(dir, "backup.db")
	mustRun(t, env, 2, "backup")
	out, _ = mustRun(t, env, 0, "backup", "--out", backup)
	mustContain(t, "backup", out, "wrote "+backup, "audit chain ok (2 records)")
	if _, err := os.Stat(backup + ".partial"); !os.IsNotExist(err) {
		t.Errorf("backup left %s.partial behind (stat: %v)", backup, err)
	}
	s, err := bolt.Open(backup, bolt.Options{ReadOnly: true})
	if err != nil {
		t.Fatalf("bolt.Open(backup) = %v", err)
	}
	defer s.Close()
	if err := s.Check(); err != nil {
		t.Fatalf("Check() of the backup = %v", err)
	}
	j, err := s.GetJob(context.Background(), 2)
	if err != nil || string(j.Payload) != `{"n":2}` {
		t.Fatalf("job 2 in the backup = %+v, %v", j, err)
	}
	// A backup is a file a server can start on.
	restored := filepath.Join(dir, "restored.db")
	raw, err := os.ReadFile(backup)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(restored, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	_, base3 := startServing(t, nil, "--db", restored, "--listen", "127.0.0.1:0")
	if j := cliJob(t, base3, 1); string(mustJSON(t, j["payload"])) != `{"n":1}` {
		t.Fatalf("job 1 on a server started on the backup = %v", j)
	}
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestCLI_TokenFromTheEnvironmentOrFlag(t *testing.T) {
	dir := t.TempDir()
	var tokens []string
	var lines []string
	for _, p := range []struct{ name, roles string }{{"alice", "producer"}, {"root", "admin"}} {
		out, _ := mustRun(t, nil, 0, "token", "new", p.name, "--roles", p.roles)
		ls := strings.Split(strings.TrimSpace(out), "\n")
		tokens, lines = append(tokens, ls[1]), append(lines, ls[len(ls)-1])
	}
	authFile := filepath.Join(dir, "auth")
	if err := os.WriteFile(authFile, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, env := cliServer(t, "--auth-file", authFile)

	_, stderr := mustRun(t, env, 1, "enqueue")
	mustContain(t, "enqueue without a token", stderr, "unauthenticated", "HTTP 401")
	producer := append(env, "FENCEQ_TOKEN="+tokens[0])
	mustRun(t, producer, 0, "enqueue", "-q")
	_, stderr = mustRun(t, producer, 1, "cancel", "1")
	mustContain(t, "cancel as a producer", stderr, "permission_denied", "HTTP 403")
	// The flag wins over the environment.
	mustRun(t, producer, 0, "cancel", "1", "--token", tokens[1])
	mustRun(t, env, 0, "backup", "--out", filepath.Join(dir, "b.db"), "--token", tokens[1])
}

func TestCLI_UnreachableServer(t *testing.T) {
	_, stderr := mustRun(t, []string{"FENCEQ_SERVER=http://127.0.0.1:1"}, 1, "get", "1")
	mustContain(t, "get against no server", stderr, "cannot reach the server at http://127.0.0.1:1")
	_, stderr = mustRun(t, nil, 2, "list", "--server", "127.0.0.1:7420")
	mustContain(t, "list --server without a scheme", stderr, "--server")
}

func TestCLI_HelpListsEveryCommand(t *testing.T) {
	out, _ := mustRun(t, nil, 0, "help")
	for _, cmd := range []string{"serve", "token new", "bench", "enqueue", "get ID", "list", "cancel ID", "retry ID", "stats",
		"lease acquire", "lease renew", "lease release", "lease check", "lease show", "audit verify", "audit archive", "backup --out", "worker --exec"} {
		mustContain(t, "fenceq help", out, "fenceq "+cmd)
	}
	for _, args := range [][]string{{"enqueue"}, {"get"}, {"list"}, {"cancel"}, {"retry"}, {"stats"}, {"lease", "acquire"},
		{"lease", "renew"}, {"lease", "release"}, {"lease", "check"}, {"lease", "show"}, {"audit", "verify"}, {"audit", "archive"}, {"backup"}, {"worker"}} {
		stdout, _ := mustRun(t, nil, 0, append(args, "--help")...)
		mustContain(t, strings.Join(args, " ")+" --help", stdout, "usage: fenceq "+strings.Join(args, " "), "-server")
	}
	stdout, _ := mustRun(t, nil, 0, "worker", "--help")
	mustContain(t, "worker --help", stdout, "FENCEQ_JOB_ID", "FENCEQ_FENCING_TOKEN", "process group", "-exec", "-kill-grace", "-prefetch")
	_, stderr := mustRun(t, nil, 2, "worker", "--exec", "true", "--prefetch", "-1")
	mustContain(t, "worker --prefetch -1", stderr, "--prefetch not negative")
}

// jobIDOf reads the id out of a job JSON object.
func jobIDOf(t *testing.T, j map[string]any) uint64 {
	t.Helper()
	id, ok := j["id"].(float64)
	if !ok {
		t.Fatalf("no id in %v", j)
	}
	return uint64(id)
}

// enqueueJob enqueues a job through the API and returns its id.
func enqueueJob(t *testing.T, base, body string) uint64 {
	t.Helper()
	st, j := call(t, "POST", base+"/v1/jobs", body)
	wantStatus(t, "enqueue "+body, st, j, http.StatusCreated)
	return jobIDOf(t, j)
}

const execScript = `case "$FENCEQ_JOB_KIND" in
echo)  p=$(cat); printf '{"payload":%s,"id":%s,"queue":"%s","attempt":%s,"token":%s,"worker":"%s"}' "$p" "$FENCEQ_JOB_ID" "$FENCEQ_JOB_QUEUE" "$FENCEQ_JOB_ATTEMPT" "$FENCEQ_FENCING_TOKEN" "$FENCEQ_WORKER" ;;
text)  echo "hello from job $FENCEQ_JOB_ID"; echo "a warning" >&2 ;;
slow)  sleep 2.5; echo '"slow but kept"' ;;
fail)  echo "first line" >&2; echo "the disk is full" >&2; exit 3 ;;
esac`

func TestWorkerExec_CompletesFailsAndHeartbeats(t *testing.T) {
	base, env := cliServer(t)
	echo := enqueueJob(t, base, `{"queue":"shell","kind":"echo","payload":{"to":"ada"}}`)
	text := enqueueJob(t, base, `{"queue":"shell","kind":"text"}`)
	slow := enqueueJob(t, base, `{"queue":"shell","kind":"slow"}`)
	fail := enqueueJob(t, base, `{"queue":"shell","kind":"fail","max_attempts":1}`)

	// A 1s lease: the slow job (2.5s) is kept only by heartbeats (every 333ms;
	// a longer lease would not need them, a shorter one is lost to a stall
	// of a loaded machine).
	w := start(t, env, "worker", "--exec", execScript, "--queue", "shell", "--name", "w1", "--lease", "1s", "--concurrency", "2")
	final := func(id uint64) func() bool {
		return func() bool {
			s := cliJob(t, base, id)["state"]
			return s == "completed" || s == "dead"
		}
	}
	for _, id := range []uint64{echo, text, slow, fail} {
		cliWait(t, 10*time.Second, fmt.Sprintf("job %d finishes", id), final(id))
	}

	j := cliJob(t, base, echo)
	res, _ := j["result"].(map[string]any)
	if j["state"] != "completed" || res == nil || fmt.Sprint(res["payload"]) != "map[to:ada]" || res["id"] != float64(echo) ||
		res["queue"] != "shell" || res["attempt"] != float64(1) || res["token"] != float64(1) || res["worker"] != "w1" {
		t.Fatalf("echo job = %v; want completed with the payload and job variables as its JSON result", j)
	}
	if j := cliJob(t, base, text); j["state"] != "completed" || j["result"] != fmt.Sprintf("hello from job %d", text) {
		t.Fatalf("text job = %v; want completed with its stdout as a JSON string", j)
	}
	if j := cliJob(t, base, slow); j["state"] != "completed" || j["result"] != "slow but kept" || j["attempts"] != float64(1) {
		t.Fatalf("slow job = %v; want completed on its first claim (heartbeats kept the 1s lease)", j)
	}
	j = cliJob(t, base, fail)
	if j["state"] != "dead" || !strings.Contains(fmt.Sprint(j["last_error"]), "exit status 3") ||
		!strings.Contains(fmt.Sprint(j["last_error"]), "the disk is full") || j["result"] != nil {
		t.Fatalf("fail job = %v; want dead with the exit status and stderr's tail as the error", j)
	}
	cliWait(t, 5*time.Second, "the worker logs the command's stderr", func() bool {
		return strings.Contains(w.stderr.String(), fmt.Sprintf("[job %d] a warning", text))
	})
	// It went through the batched calls (client.Worker): completions,
	// failures and heartbeats on /v1/jobs/{complete,fail,heartbeat}, none
	// on the single-job routes.
	metrics := cliGet(t, base, "/metrics")
	for _, route := range []string{"/v1/jobs/complete", "/v1/jobs/fail", "/v1/jobs/heartbeat"} {
		if !strings.Contains(metrics, `route="`+route+`"`) {
			t.Errorf("/metrics has no request on %s; want the worker's batched calls there", route)
		}
	}
	for _, route := range []string{"/v1/jobs/:id/complete", "/v1/jobs/:id/fail", "/v1/jobs/:id/heartbeat"} {
		if strings.Contains(metrics, `route="`+route+`"`) {
			t.Errorf("/metrics shows requests on %s; want the worker to batch them", route)
		}
	}

	if err := w.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := w.exit(t, 10*time.Second); code != 0 {
		t.Fatalf("worker after SIGTERM exited %d; stderr:\n%s", code, w.stderr)
	}
}

// liveInGroup returns the processes of group pgid that are not zombies.
func liveInGroup(pgid int) []int {
	entries, _ := os.ReadDir("/proc")
	var live []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid pgrp …; comm may hold spaces and parentheses.
		i := strings.LastIndexByte(string(stat), ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(stat[i+1:]))
		if len(f) < 3 || f[0] == "Z" || f[0] == "X" {
			continue
		}
		if g, _ := strconv.Atoi(f[2]); g == pgid {
			live = append(live, pid)
		}
	}
	return live
}

func TestWorkerExec_ALostClaimKillsTheProcessGroup(t *testing.T) {
	base, env := cliServer(t)
	dir := t.TempDir()
	id := enqueueJob(t, base, `{"queue":"slow","payload":{}}`)

	// The command records its process group, runs 2s in a child, then
	// leaves a marker and a result — unless it is killed first.
	script := `echo $$ > "$TESTDIR/pgid.tmp" && mv "$TESTDIR/pgid.tmp" "$TESTDIR/pgid"; sleep 2; echo finished > "$TESTDIR/marker"; echo '"first"'`
	w := start(t, append(env, "TESTDIR="+dir), "worker", "--exec", script, "--queue", "slow", "--name", "w1", "--lease", "500ms")
	started := time.Now()
	var pgid int
	cliWait(t, 10*time.Second, "the command starts", func() bool {
		b, err := os.ReadFile(filepath.Join(dir, "pgid"))
		if err != nil {
			return false
		}
		pgid, err = strconv.Atoi(strings.TrimSpace(string(b)))
		return err == nil
	})
	if len(liveInGroup(pgid)) == 0 {
		t.Fatalf("process group %d has no live process while the command runs", pgid)
	}

	// The worker is paused past its lease; a restart of "w1" claims the
	// job again.
	if err := w.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.cmd.Process.Signal(syscall.SIGCONT) })
	time.Sleep(700 * time.Millisecond)
	st, claimed := call(t, "POST", base+"/v1/claim", `{"worker":"w1","queues":["slow"],"lease_ms":30000}`)
	wantStatus(t, "claim by the restarted w1", st, claimed, http.StatusOK)
	if jobIDOf(t, claimed) != id || claimed["fencing_token"] != float64(2) {
		t.Fatalf("claim = %v, want job %d with token 2", claimed, id)
	}

	// The worker wakes up: its heartbeat is refused, and the command's
	// whole group dies before the command could finish.
	if err := w.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	cliWait(t, 3*time.Second, "the command's process group is killed", func() bool { return len(liveInGroup(pgid)) == 0 })
	if time.Since(started) >= 2*time.Second {
		t.Fatalf("the group died %v after the start; the command (2s) may have finished on its own", time.Since(started))
	}
	time.Sleep(time.Until(started.Add(2500 * time.Millisecond)))
	if _, err := os.Stat(filepath.Join(dir, "marker")); !os.IsNotExist(err) {
		t.Fatalf("the command ran to its end after its claim was lost (marker: %v)", err)
	}
	j := cliJob(t, base, id)
	if j["state"] != "claimed" || j["attempts"] != float64(2) || j["result"] != nil {
		t.Fatalf("job = %v; want still claimed by token 2 with no result", j)
	}
	cliWait(t, 5*time.Second, "the worker reports the lost claim", func() bool {
		return strings.Contains(w.stderr.String(), "outcome=lost")
	})

	// The new claimant completes it.
	st, done := call(t, "POST", fmt.Sprintf("%s/v1/jobs/%d/complete", base, id), `{"worker":"w1","fencing_token":2,"result":"second"}`)
	wantStatus(t, "complete with token 2", st, done, http.StatusOK)
	if j := cliJob(t, base, id); j["state"] != "completed" || j["result"] != "second" {
		t.Fatalf("job = %v; want completed with \"second\"", j)
	}
	if err := w.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := w.exit(t, 10*time.Second); code != 0 {
		t.Fatalf("worker after SIGTERM exited %d; stderr:\n%s", code, w.stderr)
	}
}

func TestWorkerExec_StopDrainsThenKills(t *testing.T) {
	base, env := cliServer(t)
	dir := t.TempDir()
	short := enqueueJob(t, base, `{"queue":"drain","kind":"short"}`)
	long := enqueueJob(t, base, `{"queue":"drain","kind":"long"}`)
	script := `touch "$TESTDIR/started-$FENCEQ_JOB_KIND"; if [ "$FENCEQ_JOB_KIND" = short ]; then sleep 0.5; echo '"drained"'; else sleep 30; fi`
	w := start(t, append(env, "TESTDIR="+dir), "worker", "--exec", script, "--queue", "drain", "--name", "w1",
		"--concurrency", "2", "--drain-timeout", "1s", "--kill-grace", "200ms")
	cliWait(t, 10*time.Second, "both commands start", func() bool {
		_, e1 := os.Stat(filepath.Join(dir, "started-short"))
		_, e2 := os.Stat(filepath.Join(dir, "started-long"))
		return e1 == nil && e2 == nil
	})
	if err := w.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := w.exit(t, 10*time.Second); code != 0 {
		t.Fatalf("worker after SIGTERM exited %d; stderr:\n%s", code, w.stderr)
	}
	if j := cliJob(t, base, short); j["state"] != "completed" || j["result"] != "drained" {
		t.Fatalf("short job = %v; want completed during the drain", j)
	}
	j := cliJob(t, base, long)
	if (j["state"] != "available" && j["state"] != "scheduled") || !strings.Contains(fmt.Sprint(j["last_error"]), "worker stopped") {
		t.Fatalf("long job = %v; want failed back to the queue with \"worker stopped\"", j)
	}
}
