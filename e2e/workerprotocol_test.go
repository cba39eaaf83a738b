package e2e

// The worker-protocol suite (issue 27): every worker fenceq ships — the Go
// Worker (api/client), the Python Worker (clients/python), the TypeScript
// Worker (clients/typescript, built), fenceq worker --exec — runs as a process of its own language against
// the real binary, through the same scenarios. Each program takes WP_URL,
// WP_QUEUE, WP_NAME and WP_LEASE_MS, runs jobs whose payload is
// {"sleep_ms": N, "result": R} (it sleeps N ms, returns {"by": name, "r":
// R}), prints one JSON event a line (ready; start with id and token;
// cancelled; done with the outcome) and drains on SIGTERM. The workers
// reach the server through a proxy that can answer 503 for a while.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/fenceq/fenceq/api/client"
	"github.com/fenceq/fenceq/db/postgres/pgtest"
)

func init() {
	if os.Getenv("FENCEQ_TEST_PROTOCOL_WORKER") != "" {
		os.Exit(goProtocolWorkerMain())
	}
}

// goProtocolWorkerMain is the Go Worker as the suite drives it.
func goProtocolWorkerMain() int {
	name := os.Getenv("WP_NAME")
	leaseMS, _ := strconv.Atoi(os.Getenv("WP_LEASE_MS"))
	var opts []client.Option
	if tok := os.Getenv("WP_TOKEN"); tok != "" {
		opts = append(opts, client.WithToken(tok))
	}
	c, err := client.New(os.Getenv("WP_URL"), opts...)
	if err != nil {
		fmt.Fprintln(os.Stderr, "go worker:", err)
		return 1
	}
	var mu sync.Mutex
	event := func(kv map[string]any) {
		b, _ := json.Marshal(kv)
		mu.Lock()
		defer mu.Unlock()
		fmt.Println(string(b))
	}
	h := func(ctx context.Context, job client.Job) (any, any, error) {
		event(map[string]any{"event": "start", "id": job.ID, "token": job.FencingToken})
		var p struct {
			SleepMS int `json:"sleep_ms"`
			Result  any `json:"result"`
		}
		_ = json.Unmarshal(job.Payload, &p)
		select {
		case <-time.After(time.Duration(p.SleepMS) * time.Millisecond):
		case <-ctx.Done():
			event(map[string]any{"event": "cancelled", "id": job.ID})
			return nil, nil, context.Cause(ctx)
		}
		return map[string]any{"by": name, "r": p.Result}, nil, nil
	}
	w, err := client.NewWorker(c, h, client.WorkerConfig{
		Name: name, Queues: []string{os.Getenv("WP_QUEUE")}, Concurrency: 4,
		Lease: time.Duration(leaseMS) * time.Millisecond, Wait: 5 * time.Second, DrainTimeout: 10 * time.Second,
		OnDone: func(d client.Done) {
			event(map[string]any{"event": "done", "id": d.Job.ID, "outcome": string(d.Outcome)})
		},
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "go worker:", err)
		return 1
	}
	ctx, stop := signalContext()
	defer stop()
	event(map[string]any{"event": "ready"})
	if err := w.Run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "go worker:", err)
		return 1
	}
	return 0
}

// signalContext ends at SIGTERM or SIGINT.
func signalContext() (context.Context, context.CancelFunc) {
	return signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
}

// protocolWorker is one implementation under test: how to start it. With
// fromLog, the events are read from the process's stderr and translated
// (fenceq worker --exec: its JSON log and its command's start events).
type protocolWorker struct {
	name    string
	command func(t *testing.T) *exec.Cmd
	fromLog bool
}

// protocolWorkers are the workers the suite runs. Outside CI a worker
// whose language is not installed skips; with CI=true it fails.
func protocolWorkers(t *testing.T) []protocolWorker {
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	need := func(t *testing.T, tool, why string) string {
		p, err := exec.LookPath(tool)
		if err != nil {
			if os.Getenv("CI") == "true" {
				t.Fatalf("%s is needed for %s (.ci/clients.sh installs it)", tool, why)
			}
			t.Skipf("%s not found: %s skipped", tool, why)
		}
		return p
	}
	return []protocolWorker{
		{"go", func(t *testing.T) *exec.Cmd {
			self, err := os.Executable()
			if err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command(self, "-test.run=^$")
			cmd.Env = append(os.Environ(), "FENCEQ_TEST_PROTOCOL_WORKER=1")
			return cmd
		}, false},
		{"python", func(t *testing.T) *exec.Cmd {
			py := "/usr/bin/python3"
			if _, err := os.Stat(py); err != nil {
				py = need(t, "python3", "the Python worker")
			}
			if err := exec.Command(py, "-c", "import sys; assert sys.version_info >= (3, 11)").Run(); err != nil {
				if os.Getenv("CI") == "true" {
					t.Fatalf("%s is not Python >= 3.11", py)
				}
				t.Skipf("%s is not Python >= 3.11", py)
			}
			cmd := exec.Command(py, "-u", filepath.Join(root, "e2e", "testdata", "workers", "worker.py"))
			cmd.Env = append(os.Environ(), "PYTHONPATH="+filepath.Join(root, "clients", "python"))
			return cmd
		}, false},
		{"typescript", func(t *testing.T) *exec.Cmd {
			node := need(t, "node", "the TypeScript worker")
			if _, err := os.Stat(filepath.Join(root, "clients", "typescript", "dist", "src", "index.js")); err != nil {
				if os.Getenv("CI") == "true" {
					t.Fatalf("clients/typescript is not built (.ci/clients.sh builds it before go test): %v", err)
				}
				t.Skipf("clients/typescript is not built (cd clients/typescript && npm ci && npm run build): %v", err)
			}
			cmd := exec.Command(node, filepath.Join(root, "e2e", "testdata", "workers", "worker.mjs"))
			cmd.Env = os.Environ()
			return cmd
		}, false},
		{"exec", func(t *testing.T) *exec.Cmd {
			// exec: the process the suite stops and signals is the fenceq worker itself.
			cmd := exec.Command("/bin/sh", "-c", `FENCEQ_TOKEN="$WP_TOKEN" exec "$WP_FENCEQ" worker --json --server "$WP_URL" --queue "$WP_QUEUE" --name "$WP_NAME" `+
				`--lease "${WP_LEASE_MS}ms" --concurrency 4 --drain-timeout 10s --exec "sh '$WP_HANDLER'"`)
			cmd.Env = append(cleanEnv(), "WP_FENCEQ="+fenceqBin, "WP_HANDLER="+filepath.Join(root, "e2e", "testdata", "workers", "exec-handler.sh"))
			return cmd
		}, true},
	}
}

// faultProxy forwards to the server, or answers 503 unavailable while
// failing is set, counting the 503s by path suffix.
type faultProxy struct {
	failing atomic.Bool
	mu      sync.Mutex
	refused map[string]int
}

func startFaultProxy(t *testing.T, upstream string) (*faultProxy, string) {
	u, err := url.Parse(upstream)
	if err != nil {
		t.Fatal(err)
	}
	fp := &faultProxy{refused: map[string]int{}}
	rp := httputil.NewSingleHostReverseProxy(u)
	rp.FlushInterval = -1
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if fp.failing.Load() {
			fp.mu.Lock()
			fp.refused[r.URL.Path[strings.LastIndex(r.URL.Path, "/")+1:]]++
			fp.mu.Unlock()
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprint(w, `{"error":{"code":"unavailable","message":"the test's proxy is failing"}}`)
			return
		}
		rp.ServeHTTP(w, r)
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return fp, "http://" + ln.Addr().String()
}

func (fp *faultProxy) refusedCount(suffix string) int {
	fp.mu.Lock()
	defer fp.mu.Unlock()
	return fp.refused[suffix]
}

// runningWorker is a started worker process and the events it printed.
type runningWorker struct {
	cmd    *exec.Cmd
	stderr *syncBuffer // what the worker wrote to stderr (with fromLog: its log)
	mu     sync.Mutex
	events []map[string]any
	more   chan struct{} // signalled on each event
	exited chan struct{}
	err    error
}

func startProtocolWorker(t *testing.T, pw protocolWorker, proxyURL, queue, name string, leaseMS int, env ...string) *runningWorker {
	t.Helper()
	cmd := pw.command(t)
	cmd.Env = append(cmd.Env, "WP_URL="+proxyURL, "WP_QUEUE="+queue, "WP_NAME="+name, "WP_LEASE_MS="+strconv.Itoa(leaseMS))
	cmd.Env = append(cmd.Env, env...)
	errBuf := &syncBuffer{}
	var out io.Reader
	var err error
	if pw.fromLog {
		cmd.Stdout = os.Stderr
		var pipe io.Reader
		pipe, err = cmd.StderrPipe()
		out = io.TeeReader(pipe, errBuf)
	} else {
		cmd.Stderr = io.MultiWriter(os.Stderr, errBuf)
		out, err = cmd.StdoutPipe()
	}
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting the %s worker: %v", pw.name, err)
	}
	rw := &runningWorker{cmd: cmd, stderr: errBuf, more: make(chan struct{}, 1), exited: make(chan struct{})}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			line := sc.Bytes()
			if pw.fromLog {
				line = line[max(0, bytes.IndexByte(line, '{')):] // "[job N] {…}": the command's stderr
			}
			var ev map[string]any
			if json.Unmarshal(line, &ev) != nil {
				continue
			}
			if pw.fromLog {
				ev = rw.translate(ev)
			}
			rw.add(ev)
		}
		rw.err = cmd.Wait()
		close(rw.exited)
	}()
	t.Cleanup(func() {
		select {
		case <-rw.exited:
		default:
			_ = cmd.Process.Signal(syscall.SIGCONT)
			_ = cmd.Process.Kill()
			<-rw.exited
		}
	})
	rw.waitEvent(t, "ready", 0, 20*time.Second)
	return rw
}

func (rw *runningWorker) add(ev map[string]any) {
	if ev == nil {
		return
	}
	rw.mu.Lock()
	rw.events = append(rw.events, ev)
	rw.mu.Unlock()
	select {
	case rw.more <- struct{}{}:
	default:
	}
}

// translate turns fenceq worker --exec's JSON log into the suite's events.
// A command's start event names its pid: when that process is gone before
// its sleep ended, the command was killed — the event "cancelled".
func (rw *runningWorker) translate(ev map[string]any) map[string]any {
	switch {
	case ev["event"] == "start":
		pid, _ := ev["pid"].(float64)
		sleep, _ := ev["sleep_ms"].(float64)
		go func(id any, started time.Time) {
			for processRuns(int(pid)) {
				time.Sleep(10 * time.Millisecond)
			}
			if time.Since(started) < time.Duration(sleep)*time.Millisecond-100*time.Millisecond {
				rw.add(map[string]any{"event": "cancelled", "id": id})
			}
		}(ev["id"], time.Now())
		return ev
	case ev["msg"] == "fenceq worker started":
		return map[string]any{"event": "ready"}
	case ev["msg"] == "job done":
		return map[string]any{"event": "done", "id": ev["job"], "outcome": ev["outcome"]}
	}
	return nil
}

// processRuns reports whether pid is a process that has not ended: a
// killed command whose parent died too may stay a zombie until PID 1 gets
// to it, and a zombie has ended.
func processRuns(pid int) bool {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return syscall.Kill(pid, 0) == nil // no /proc: as good as it gets
	}
	_, rest, _ := bytes.Cut(stat, []byte(") "))
	return len(rest) > 0 && rest[0] != 'Z' && rest[0] != 'X'
}

// waitEvent waits for an event of kind about job id (0: any) and returns it.
func (rw *runningWorker) waitEvent(t *testing.T, kind string, id float64, timeout time.Duration) map[string]any {
	t.Helper()
	deadline := time.After(timeout)
	for {
		if ev := rw.find(kind, id); ev != nil {
			return ev
		}
		select {
		case <-rw.more:
		case <-rw.exited:
			if ev := rw.find(kind, id); ev != nil {
				return ev
			}
			t.Fatalf("the worker exited (%v) before the event %q for job %v; events: %v", rw.err, kind, id, rw.snapshot())
		case <-deadline:
			t.Fatalf("no event %q for job %v within %v; events: %v", kind, id, timeout, rw.snapshot())
		}
	}
}

func (rw *runningWorker) find(kind string, id float64) map[string]any {
	rw.mu.Lock()
	defer rw.mu.Unlock()
	for _, ev := range rw.events {
		if ev["event"] == kind && (id == 0 || ev["id"] == id) {
			return ev
		}
	}
	return nil
}

func (rw *runningWorker) snapshot() []map[string]any {
	rw.mu.Lock()
	defer rw.mu.Unlock()
	return append([]map[string]any(nil), rw.events...)
}

// enqueueSleep enqueues one job that sleeps ms and returns its id.
func enqueueSleep(t *testing.T, base, queue string, ms int, result string) float64 {
	t.Helper()
	status, job := call(t, "POST", base+"/v1/jobs", fmt.Sprintf(`{"queue":%q,"payload":{"sleep_ms":%d,"result":%q}}`, queue, ms, result))
	wantStatus(t, "enqueue", status, job, http.StatusCreated)
	return job["id"].(float64)
}

func getJob(t *testing.T, base string, id float64) map[string]any {
	t.Helper()
	status, job := call(t, "GET", fmt.Sprintf("%s/v1/jobs/%d", base, int64(id)), "")
	wantStatus(t, "get job", status, job, http.StatusOK)
	return job
}

func TestWorkerProtocol_EveryWorkerFencesHeartbeatsCancelsDrainsAndRetries(t *testing.T) {
	_, base := startServing(t, nil, "--db", filepath.Join(t.TempDir(), "wp.db"), "--listen", "127.0.0.1:0")
	// A server that refuses a fenced call without its token.
	_, fencedBase := startServing(t, nil, "--db", filepath.Join(t.TempDir(), "fenced.db"), "--listen", "127.0.0.1:0", "--require-fencing")
	// A server that wants a bearer token of its auth file.
	code, out, stderr := runFenceq(t, nil, "token", "new", "alice", "--roles", "producer,worker")
	if code != 0 {
		t.Fatalf("token new = %d %s", code, stderr)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	authFile := filepath.Join(t.TempDir(), "auth")
	if err := os.WriteFile(authFile, []byte(lines[len(lines)-1]+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, authBase := startServing(t, nil, "--db", filepath.Join(t.TempDir(), "auth.db"), "--listen", "127.0.0.1:0", "--auth-file", authFile)
	for _, pw := range protocolWorkers(t) {
		t.Run(pw.name, func(t *testing.T) {
			fp, proxy := startFaultProxy(t, base)
			_, fencedProxy := startFaultProxy(t, fencedBase)

			t.Run("a worker paused past its lease whose job was claimed again does not complete it", func(t *testing.T) {
				pausedWorkerScenario(t, pw, base, proxy, "wp-fence-"+pw.name)
			})

			t.Run("the same with --require-fencing", func(t *testing.T) {
				pausedWorkerScenario(t, pw, fencedBase, fencedProxy, "wp-fence-"+pw.name)
			})

			t.Run("the same on PostgreSQL", func(t *testing.T) {
				_, pgBase := startServing(t, nil, "--db", pgtest.NewSchema(t), "--listen", "127.0.0.1:0")
				_, pgProxy := startFaultProxy(t, pgBase)
				pausedWorkerScenario(t, pw, pgBase, pgProxy, "wp-fence-"+pw.name)
			})

			t.Run("heartbeats keep a 1 s lease alive for a 3 s handler", func(t *testing.T) {
				queue := "wp-beat-" + pw.name
				rw := startProtocolWorker(t, pw, proxy, queue, "wp-"+pw.name, 1000)
				id := enqueueSleep(t, base, queue, 3000, "slow")
				if d := rw.waitEvent(t, "done", id, 15*time.Second); d["outcome"] != "completed" {
					t.Fatalf("outcome %v, want completed", d)
				}
				j := getJob(t, base, id)
				if j["state"] != "completed" || j["attempts"] != float64(1) {
					t.Fatalf("job %v, want completed on its first claim", j)
				}
				if r, _ := j["result"].(map[string]any); r["r"] != "slow" {
					t.Fatalf("result %v, want the handler's", j["result"])
				}
			})

			t.Run("a lost claim cancels the handler and nothing is reported", func(t *testing.T) {
				queue := "wp-lost-" + pw.name
				rw := startProtocolWorker(t, pw, proxy, queue, "wp-"+pw.name, 1000)
				id := enqueueSleep(t, base, queue, 30000, "never")
				rw.waitEvent(t, "start", id, 10*time.Second)
				status, body := call(t, "POST", fmt.Sprintf("%s/v1/jobs/%d/cancel", base, int64(id)), "")
				wantStatus(t, "cancel", status, body, http.StatusOK)
				t0 := time.Now()
				rw.waitEvent(t, "cancelled", id, 5*time.Second)
				if el := time.Since(t0); el > 2*time.Second {
					t.Errorf("the handler was cancelled %v after the claim was lost; the heartbeat interval is 333 ms", el)
				}
				if d := rw.waitEvent(t, "done", id, 5*time.Second); d["outcome"] != "lost" {
					t.Fatalf("outcome %v, want lost", d)
				}
				if j := getJob(t, base, id); j["state"] != "cancelled" || j["result"] != nil {
					t.Fatalf("job %v, want cancelled with no result", j)
				}
			})

			t.Run("SIGTERM drains the job in flight and exits 0", func(t *testing.T) {
				queue := "wp-drain-" + pw.name
				rw := startProtocolWorker(t, pw, proxy, queue, "wp-"+pw.name, 1000)
				id := enqueueSleep(t, base, queue, 1500, "drained")
				rw.waitEvent(t, "start", id, 10*time.Second)
				if err := rw.cmd.Process.Signal(syscall.SIGTERM); err != nil {
					t.Fatal(err)
				}
				select {
				case <-rw.exited:
				case <-time.After(15 * time.Second):
					t.Fatalf("the worker did not exit within 15 s of SIGTERM; events %v", rw.snapshot())
				}
				if rw.err != nil {
					t.Fatalf("the worker exited with %v after SIGTERM, want 0", rw.err)
				}
				if d := rw.find("done", id); d == nil || d["outcome"] != "completed" {
					t.Fatalf("events %v: want job %v completed before the exit", rw.snapshot(), id)
				}
				if j := getJob(t, base, id); j["state"] != "completed" {
					t.Fatalf("job %v, want completed", j)
				}
			})

			t.Run("503 answers are retried within the lease and nothing is lost", func(t *testing.T) {
				queue := "wp-503-" + pw.name
				rw := startProtocolWorker(t, pw, proxy, queue, "wp-"+pw.name, 3000)
				id := enqueueSleep(t, base, queue, 1200, "through")
				rw.waitEvent(t, "start", id, 10*time.Second)
				// Every call is 503 from now until the completion was refused
				// twice (the heartbeat at 1 s, the completion at 1.2 s), at
				// most 2.5 s: within the 3 s lease.
				fp.failing.Store(true)
				for until := time.Now().Add(2500 * time.Millisecond); fp.refusedCount("complete") < 2 && time.Now().Before(until); {
					time.Sleep(5 * time.Millisecond)
				}
				fp.failing.Store(false)
				if d := rw.waitEvent(t, "done", id, 10*time.Second); d["outcome"] != "completed" {
					t.Fatalf("outcome %v, want completed", d)
				}
				if n := fp.refusedCount("complete"); n == 0 {
					t.Fatalf("the proxy refused no completion (refused: %v): the scenario did not test a retry", fp.refused)
				}
				if j := getJob(t, base, id); j["state"] != "completed" || j["attempts"] != float64(1) {
					t.Fatalf("job %v, want completed on its first claim", j)
				}
			})

			t.Run("a refused bearer token stops the worker with an error naming it and a non-zero exit", func(t *testing.T) {
				rw := startProtocolWorker(t, pw, authBase, "wp-auth-"+pw.name, "wp-"+pw.name, 1000, "WP_TOKEN=not-a-token-of-the-auth-file")
				select {
				case <-rw.exited:
				case <-time.After(15 * time.Second):
					t.Fatalf("the worker still runs 15 s after its claims were refused as unauthenticated; stderr:\n%s", rw.stderr)
				}
				if rw.err == nil {
					t.Fatalf("the worker exited 0 after its token was refused; stderr:\n%s", rw.stderr)
				}
				if !strings.Contains(rw.stderr.String(), "unauthenticated") {
					t.Fatalf("the worker's stderr does not name the refusal (unauthenticated):\n%s", rw.stderr)
				}
			})
		})
	}
}

// docBlock returns the fenced block right after the line marker in a page of docs/.
func docBlock(t *testing.T, page, marker string) string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "docs", page))
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(raw), marker+"\n")
	if !ok || !strings.HasPrefix(rest, "```") {
		t.Fatalf("docs/%s has no fenced block right after %q", page, marker)
	}
	_, rest, _ = strings.Cut(rest, "\n")
	block, _, ok := strings.Cut(rest, "\n```")
	if !ok {
		t.Fatalf("docs/%s: the block after %q does not end", page, marker)
	}
	return block + "\n"
}

func TestWorkersDocs_ThePythonAndTypeScriptExamplesCompleteAJobAndDrainOnSIGTERM(t *testing.T) {
	_, base := startServing(t, nil, "--db", filepath.Join(t.TempDir(), "docs.db"), "--listen", "127.0.0.1:0")
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	for _, pw := range protocolWorkers(t) {
		if pw.name != "python" && pw.name != "typescript" {
			continue // the Go Worker's example is api/client's Example tests; --exec's is in leases.md
		}
		t.Run(pw.name, func(t *testing.T) {
			probe := pw.command(t) // skips or fails as the suite does when the language is missing
			dir := t.TempDir()
			var cmd *exec.Cmd
			switch pw.name {
			case "python":
				file := filepath.Join(dir, "worker.py")
				if err := os.WriteFile(file, []byte(docBlock(t, "workers.md", "<!-- test: python-worker -->")), 0o644); err != nil {
					t.Fatal(err)
				}
				cmd = exec.Command(probe.Path, "-u", file)
				cmd.Env = append(os.Environ(), "PYTHONPATH="+filepath.Join(root, "clients", "python"))
			case "typescript":
				// "fenceq" resolves to clients/typescript through node_modules, as after npm install.
				if err := os.MkdirAll(filepath.Join(dir, "node_modules"), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.Symlink(filepath.Join(root, "clients", "typescript"), filepath.Join(dir, "node_modules", "fenceq")); err != nil {
					t.Fatal(err)
				}
				file := filepath.Join(dir, "worker.mjs")
				if err := os.WriteFile(file, []byte(docBlock(t, "workers.md", "<!-- test: typescript-worker -->")), 0o644); err != nil {
					t.Fatal(err)
				}
				cmd = exec.Command(probe.Path, file)
				cmd.Env = os.Environ()
			}
			cmd.Env = append(cmd.Env, "FENCEQ_URL="+base)
			out := &syncBuffer{}
			cmd.Stdout, cmd.Stderr = out, out
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			exited := make(chan error, 1)
			go func() { exited <- cmd.Wait() }()
			t.Cleanup(func() {
				_ = cmd.Process.Kill()
			})
			status, job := call(t, "POST", base+"/v1/jobs", `{"queue":"emails","payload":{"to":"ada@example.com"}}`)
			wantStatus(t, "enqueue", status, job, http.StatusCreated)
			id := job["id"].(float64)
			deadline := time.Now().Add(20 * time.Second)
			for getJob(t, base, id)["state"] != "completed" {
				if time.Now().After(deadline) {
					t.Fatalf("the example did not complete job %v within 20 s; its output:\n%s", id, out)
				}
				time.Sleep(50 * time.Millisecond)
			}
			if r, _ := getJob(t, base, id)["result"].(map[string]any); r["sent"] != true {
				t.Fatalf("result %v, want the example's {sent: true}", r)
			}
			if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			select {
			case err := <-exited:
				if err != nil {
					t.Fatalf("the example exited with %v after SIGTERM, want 0; output:\n%s", err, out)
				}
			case <-time.After(15 * time.Second):
				t.Fatalf("the example did not exit within 15 s of SIGTERM; output:\n%s", out)
			}
			if !strings.Contains(out.String(), "with token 1") {
				t.Errorf("the example's output %q does not show the token it was handed", out)
			}
		})
	}
}

// pausedWorkerScenario: the worker is stopped (SIGSTOP) past its 1 s lease
// while a claim of the same worker name takes its job; after SIGCONT it
// reports the claim lost, and the job ends with the second claim's result.
func pausedWorkerScenario(t *testing.T, pw protocolWorker, base, proxy, queue string) {
	name := "wp-" + pw.name
	rw := startProtocolWorker(t, pw, proxy, queue, name, 1000)
	id := enqueueSleep(t, base, queue, 3000, "first")
	if tok := rw.waitEvent(t, "start", id, 10*time.Second)["token"]; tok != float64(1) {
		t.Fatalf("the handler got token %v, want 1", tok)
	}
	if err := rw.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1500 * time.Millisecond) // past the 1 s lease
	// The stopped worker's own long-poll, in the server, may take
	// the job first (token 2) and lose it the same way: the
	// re-claim waits, and gets token 2 or 3.
	status, job := call(t, "POST", base+"/v1/claim", fmt.Sprintf(`{"worker":%q,"queues":[%q],"lease_ms":30000,"wait_ms":5000}`, name, queue))
	wantStatus(t, "the re-claim under the same worker name", status, job, http.StatusOK)
	token, _ := job["fencing_token"].(float64)
	if job["id"] != id || token < 2 {
		t.Fatalf("re-claim: %v, want job %v with a token above 1", job, id)
	}
	if err := rw.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	if d := rw.waitEvent(t, "done", id, 10*time.Second); d["outcome"] != "lost" {
		t.Fatalf("the resumed worker reported %v, want the claim lost", d)
	}
	if j := getJob(t, base, id); j["state"] != "claimed" || j["attempts"] != token || j["result"] != nil {
		t.Fatalf("after the resumed worker: job %v, want still claimed by the second claim, no result", j)
	}
	status, done := call(t, "POST", fmt.Sprintf("%s/v1/jobs/%d/complete", base, int64(id)), fmt.Sprintf(`{"worker":%q,"fencing_token":%d,"result":"second"}`, name, int64(token)))
	wantStatus(t, "the second claim's completion", status, done, http.StatusOK)
	if j := getJob(t, base, id); j["result"] != "second" {
		t.Fatalf("job ended as %v, want the second claim's result", j)
	}
}
