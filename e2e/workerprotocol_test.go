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
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
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
	if ca := os.Getenv("WP_CA_FILE"); ca != "" {
		pem, err := os.ReadFile(ca)
		if err != nil {
			fmt.Fprintln(os.Stderr, "go worker:", err)
			return 1
		}
		pool := x509.NewCertPool()
		pool.AppendCertsFromPEM(pem)
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.TLSClientConfig = &tls.Config{RootCAs: pool}
		opts = append(opts, client.WithHTTPClient(&http.Client{Transport: tr}))
	}
	startMS, _ := strconv.Atoi(os.Getenv("WP_START_TIMEOUT_MS"))
	prefetch, _ := strconv.Atoi(os.Getenv("WP_PREFETCH"))
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
		Name: name, Queues: []string{os.Getenv("WP_QUEUE")}, Concurrency: 4, Prefetch: prefetch,
		Lease: time.Duration(leaseMS) * time.Millisecond, Wait: 5 * time.Second, DrainTimeout: 10 * time.Second,
		StartTimeout: time.Duration(startMS) * time.Millisecond,
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
	goWorker := func(env ...string) func(t *testing.T) *exec.Cmd {
		return func(t *testing.T) *exec.Cmd {
			self, err := os.Executable()
			if err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command(self, "-test.run=^$")
			cmd.Env = append(append(os.Environ(), "FENCEQ_TEST_PROTOCOL_WORKER=1"), env...)
			return cmd
		}
	}
	return []protocolWorker{
		{"go", goWorker(), false},
		// The Go Worker holding 4 claimed jobs beyond its 4 handlers
		// (WorkerConfig.Prefetch) makes the same promises.
		{"go-prefetch", goWorker("WP_PREFETCH=4"), false},
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
				`--lease "${WP_LEASE_MS}ms" --concurrency 4 --drain-timeout 10s --start-timeout "${WP_START_TIMEOUT_MS:-0}ms" --exec "sh '$WP_HANDLER'"`)
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

func startFaultProxy(t *testing.T, upstream string, tc *wpTLS) (*faultProxy, string) {
	u, err := url.Parse(upstream)
	if err != nil {
		t.Fatal(err)
	}
	fp := &faultProxy{refused: map[string]int{}}
	rp := httputil.NewSingleHostReverseProxy(u)
	rp.FlushInterval = -1
	if tc != nil {
		rp.Transport = &http.Transport{TLSClientConfig: &tls.Config{RootCAs: tc.pool}}
	}
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
	scheme := "http"
	if tc != nil {
		scheme = "https"
		go srv.ServeTLS(ln, tc.cert, tc.key)
	} else {
		go srv.Serve(ln)
	}
	t.Cleanup(func() { srv.Close() })
	return fp, scheme + "://" + ln.Addr().String()
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

// all returns the events of kind so far.
func (rw *runningWorker) all(kind string) []map[string]any {
	rw.mu.Lock()
	defer rw.mu.Unlock()
	var out []map[string]any
	for _, ev := range rw.events {
		if ev["event"] == kind {
			out = append(out, ev)
		}
	}
	return out
}

func (rw *runningWorker) snapshot() []map[string]any {
	rw.mu.Lock()
	defer rw.mu.Unlock()
	return append([]map[string]any(nil), rw.events...)
}

func getJob(t *testing.T, base string, id float64) map[string]any {
	t.Helper()
	status, job := call(t, "GET", fmt.Sprintf("%s/v1/jobs/%d", base, int64(id)), "")
	wantStatus(t, "get job", status, job, http.StatusOK)
	return job
}

// wpTLS is the suite's self-signed certificate for 127.0.0.1: the
// server's and the CA file every worker is told to trust.
type wpTLS struct {
	cert, key string // PEM files; the certificate is its own CA
	pool      *x509.CertPool
}

func newWPTLS(t *testing.T) *wpTLS {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "fenceq worker-protocol suite"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, DNSNames: []string{"localhost"},
		KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, IsCA: true, BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	tc := &wpTLS{cert: filepath.Join(dir, "cert.pem"), key: filepath.Join(dir, "key.pem"), pool: x509.NewCertPool()}
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	if err := os.WriteFile(tc.cert, certPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(tc.key, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		t.Fatal(err)
	}
	tc.pool.AppendCertsFromPEM(certPEM)
	return tc
}

// wpConfig is one server setting of the suite's matrix. Every server
// wants a bearer token of its auth file.
type wpConfig struct {
	name     string
	postgres bool
	fencing  bool // --require-fencing
	tls      bool
}

// wpServer is a fenceq of the matrix as the suite and its workers reach it.
type wpServer struct {
	cfg   wpConfig
	args  []string // serve's arguments, for a restart
	proc  *proc
	base  string // its URL (https:// over TLS)
	token string
	tc    *wpTLS
	hc    *http.Client
}

var listenAnyRE = regexp.MustCompile(`msg="fenceq serving".* listen=(https?://\S+)`)

// startWPServer starts a server of cfg on a fresh file or schema; with
// listen, on that address (a restart: the same file, the same port).
func startWPServer(t *testing.T, cfg wpConfig, token, authFile string, tc *wpTLS) *wpServer {
	t.Helper()
	db := filepath.Join(t.TempDir(), "wp.db")
	if cfg.postgres {
		db = pgtest.NewSchema(t)
	}
	args := []string{"serve", "--db", db, "--auth-file", authFile}
	if cfg.fencing {
		args = append(args, "--require-fencing")
	}
	s := &wpServer{cfg: cfg, token: token, hc: &http.Client{Timeout: 10 * time.Second}}
	if cfg.tls {
		s.tc = tc
		args = append(args, "--tls-cert", tc.cert, "--tls-key", tc.key)
		s.hc.Transport = &http.Transport{TLSClientConfig: &tls.Config{RootCAs: tc.pool}}
	}
	s.args = args
	s.start(t, "127.0.0.1:0")
	return s
}

func (s *wpServer) start(t *testing.T, listen string) {
	t.Helper()
	s.proc = start(t, nil, append(append([]string(nil), s.args...), "--listen", listen)...)
	deadline := time.Now().Add(10 * time.Second)
	for {
		if m := listenAnyRE.FindStringSubmatch(s.proc.stderr.String()); m != nil {
			s.base = m[1]
			return
		}
		select {
		case <-s.proc.done:
			t.Fatalf("fenceq %v exited before serving; stderr:\n%s", s.args, s.proc.stderr)
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("fenceq %v did not serve within 10 s; stderr:\n%s", s.args, s.proc.stderr)
		}
	}
}

// restart stops the server with SIGTERM and starts it again on the same
// file or database and the same port.
func (s *wpServer) restart(t *testing.T) {
	t.Helper()
	addr := strings.TrimPrefix(strings.TrimPrefix(s.base, "https://"), "http://")
	if err := s.proc.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := s.proc.exit(t, 30*time.Second); code != 0 {
		t.Fatalf("fenceq exited %d after SIGTERM; stderr:\n%s", code, s.proc.stderr)
	}
	s.start(t, addr)
}

// env is what a worker needs to reach s: its token and, over TLS, the CA
// file in each worker's own option (WP_CA_FILE: the Go and the Python
// program's; NODE_EXTRA_CA_CERTS: Node's; SSL_CERT_FILE: fenceq worker's,
// as of any Go program on Linux).
func (s *wpServer) env() []string {
	env := []string{"WP_TOKEN=" + s.token}
	if s.tc != nil {
		env = append(env, "WP_CA_FILE="+s.tc.cert, "NODE_EXTRA_CA_CERTS="+s.tc.cert, "SSL_CERT_FILE="+s.tc.cert)
	}
	return env
}

// call sends a JSON request with the bearer token.
func (s *wpServer) call(t *testing.T, method, path, body string) (int, map[string]any) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, s.base+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+s.token)
	resp, err := s.hc.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: reading body: %v", method, path, err)
	}
	var out map[string]any
	if len(raw) > 0 {
		if err := json.Unmarshal(raw, &out); err != nil {
			t.Fatalf("%s %s: body %s is not a JSON object: %v", method, path, raw, err)
		}
	}
	return resp.StatusCode, out
}

func (s *wpServer) enqueueSleep(t *testing.T, queue string, ms int, result string) float64 {
	t.Helper()
	status, job := s.call(t, "POST", "/v1/jobs", fmt.Sprintf(`{"queue":%q,"payload":{"sleep_ms":%d,"result":%q}}`, queue, ms, result))
	wantStatus(t, "enqueue", status, job, http.StatusCreated)
	return job["id"].(float64)
}

func (s *wpServer) getJob(t *testing.T, id float64) map[string]any {
	t.Helper()
	status, job := s.call(t, "GET", fmt.Sprintf("/v1/jobs/%d", int64(id)), "")
	wantStatus(t, "get job", status, job, http.StatusOK)
	return job
}

// completions counts the audit log's completions of job id.
func (s *wpServer) completions(t *testing.T, id float64) int {
	t.Helper()
	status, body := s.call(t, "GET", fmt.Sprintf("/v1/jobs/%d/history?limit=1000", int64(id)), "")
	wantStatus(t, "job history", status, body, http.StatusOK)
	n := 0
	recs, _ := body["records"].([]any)
	for _, r := range recs {
		if rec, _ := r.(map[string]any); rec["action"] == "complete" {
			n++
		}
	}
	return n
}

// wpToken makes a principal with every role the suite needs and its auth file.
func wpToken(t *testing.T) (token, authFile string) {
	code, out, stderr := runFenceq(t, nil, "token", "new", "wp", "--roles", "producer,worker,admin")
	if code != 0 {
		t.Fatalf("token new = %d %s", code, stderr)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	for _, l := range lines {
		if strings.HasPrefix(l, "fq_") {
			token = strings.TrimSpace(l)
		}
	}
	if token == "" {
		t.Fatalf("token new printed no token:\n%s", out)
	}
	authFile = filepath.Join(t.TempDir(), "auth")
	if err := os.WriteFile(authFile, []byte(lines[len(lines)-1]+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return token, authFile
}

// wpMatrix is every server setting the suite runs its cases on.
var wpMatrix = []wpConfig{
	{name: "bbolt"},
	{name: "bbolt --require-fencing", fencing: true},
	{name: "postgres", postgres: true},
	{name: "postgres --require-fencing", postgres: true, fencing: true},
	{name: "bbolt over TLS", tls: true},
}

// TestWorkerProtocol_EveryWorkerFencesHeartbeatsCancelsDrainsAndRetries is
// the worker-protocol suite: its seven cases (docs/guarantees.md) for every
// worker, on every server of wpMatrix — bbolt and PostgreSQL, with and
// without --require-fencing, every one wanting a bearer token, and once
// over TLS. The five workers run side by side on one server (their queues
// apart); the settings one after the other.
func TestWorkerProtocol_EveryWorkerFencesHeartbeatsCancelsDrainsAndRetries(t *testing.T) {
	token, authFile := wpToken(t)
	tc := newWPTLS(t)
	workers := protocolWorkers(t)
	for _, cfg := range wpMatrix {
		t.Run(cfg.name, func(t *testing.T) {
			if cfg.postgres {
				pgtest.ServerURL(t) // skips (fails with CI=true) without PostgreSQL, before the workers start
			}
			srv := startWPServer(t, cfg, token, authFile, tc)
			for _, pw := range workers {
				t.Run(pw.name, func(t *testing.T) {
					t.Parallel()
					pw.command(t) // skips or fails here when the language is missing
					wpCases(t, pw, cfg, srv, token, authFile, tc)
				})
			}
		})
	}
}

func wpCases(t *testing.T, pw protocolWorker, cfg wpConfig, srv *wpServer, token, authFile string, tc *wpTLS) {
	var ptc *wpTLS
	if cfg.tls {
		ptc = tc
	}
	fp, proxy := startFaultProxy(t, srv.base, ptc)
	env := srv.env()
	name := "wp-" + pw.name

	t.Run("1 a worker paused past its lease whose job was claimed again does not complete it", func(t *testing.T) {
		pausedWorkerScenario(t, pw, srv, proxy, "wp-fence-"+pw.name)
	})

	t.Run("2 heartbeats keep a 2 s lease alive for a 4 s handler", func(t *testing.T) {
		// 2 s, not 1: five workers, their servers and the race-built
		// test binary share the machine, and a heartbeat late by a
		// lease loses the claim.
		queue := "wp-beat-" + pw.name
		rw := startProtocolWorker(t, pw, proxy, queue, name, 2000, env...)
		id := srv.enqueueSleep(t, queue, 4000, "slow")
		if d := rw.waitEvent(t, "done", id, 15*time.Second); d["outcome"] != "completed" {
			t.Fatalf("outcome %v, want completed", d)
		}
		j := srv.getJob(t, id)
		if j["state"] != "completed" || j["attempts"] != float64(1) {
			t.Fatalf("job %v, want completed on its first claim", j)
		}
		if r, _ := j["result"].(map[string]any); r["r"] != "slow" {
			t.Fatalf("result %v, want the handler's", j["result"])
		}
	})

	t.Run("2 a lost claim cancels the handler and nothing is reported", func(t *testing.T) {
		queue := "wp-lost-" + pw.name
		rw := startProtocolWorker(t, pw, proxy, queue, name, 1000, env...)
		id := srv.enqueueSleep(t, queue, 30000, "never")
		rw.waitEvent(t, "start", id, 10*time.Second)
		status, body := srv.call(t, "POST", fmt.Sprintf("/v1/jobs/%d/cancel", int64(id)), "")
		wantStatus(t, "cancel", status, body, http.StatusOK)
		t0 := time.Now()
		rw.waitEvent(t, "cancelled", id, 5*time.Second)
		if el := time.Since(t0); el > 2*time.Second {
			t.Errorf("the handler was cancelled %v after the claim was lost; the heartbeat interval is 333 ms", el)
		}
		if d := rw.waitEvent(t, "done", id, 5*time.Second); d["outcome"] != "lost" {
			t.Fatalf("outcome %v, want lost", d)
		}
		if j := srv.getJob(t, id); j["state"] != "cancelled" || j["result"] != nil {
			t.Fatalf("job %v, want cancelled with no result", j)
		}
	})

	t.Run("4 SIGTERM drains the job in flight and exits 0", func(t *testing.T) {
		queue := "wp-drain-" + pw.name
		rw := startProtocolWorker(t, pw, proxy, queue, name, 2000, env...)
		id := srv.enqueueSleep(t, queue, 1500, "drained")
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
		if j := srv.getJob(t, id); j["state"] != "completed" {
			t.Fatalf("job %v, want completed", j)
		}
	})

	t.Run("7 503 answers are retried within the lease and nothing is lost", func(t *testing.T) {
		queue := "wp-503-" + pw.name
		rw := startProtocolWorker(t, pw, proxy, queue, name, 3000, env...)
		id := srv.enqueueSleep(t, queue, 1200, "through")
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
		if j := srv.getJob(t, id); j["state"] != "completed" || j["attempts"] != float64(1) {
			t.Fatalf("job %v, want completed on its first claim", j)
		}
	})

	t.Run("5 the server restarted mid-run: the worker reconnects, nothing acknowledged is lost, no job is completed twice", func(t *testing.T) {
		restartScenario(t, pw, cfg, token, authFile, tc)
	})

	t.Run("6 a refused bearer token stops the worker with an error naming it and a non-zero exit", func(t *testing.T) {
		env := append(srv.env(), "WP_TOKEN=not-a-token-of-the-auth-file")
		rw := startProtocolWorker(t, pw, srv.base, "wp-auth-"+pw.name, name, 1000, env...)
		wantExitNaming(t, rw, "unauthenticated")
	})

	t.Run("6 a wrong server URL stops the worker with an error naming it and a non-zero exit", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		wrong := strings.SplitN(srv.base, "://", 2)[0] + "://" + ln.Addr().String()
		ln.Close() // nothing listens there now
		rw := startProtocolWorker(t, pw, wrong, "wp-nowhere-"+pw.name, name, 1000, append(env, "WP_START_TIMEOUT_MS=1500")...)
		wantExitNaming(t, rw, wrong)
	})
}

// wantExitNaming waits for the worker to exit non-zero with want in its stderr.
func wantExitNaming(t *testing.T, rw *runningWorker, want string) {
	t.Helper()
	select {
	case <-rw.exited:
	case <-time.After(15 * time.Second):
		t.Fatalf("the worker still runs 15 s after its start; stderr:\n%s", rw.stderr)
	}
	if rw.err == nil {
		t.Fatalf("the worker exited 0; stderr:\n%s", rw.stderr)
	}
	if !strings.Contains(rw.stderr.String(), want) {
		t.Fatalf("the worker's stderr does not name %q:\n%s", want, rw.stderr)
	}
}

// restartScenario: a worker runs jobs on a server of its own while the
// server is stopped with SIGTERM and started again on the same file or
// database and port. The worker keeps running and reconnects; every job
// acknowledged to the producer ends completed, with one completion in the
// audit log and the handler's result; every completion the worker was
// told of is kept.
func restartScenario(t *testing.T, pw protocolWorker, cfg wpConfig, token, authFile string, tc *wpTLS) {
	srv := startWPServer(t, cfg, token, authFile, tc)
	queue := "wp-restart-" + pw.name
	rw := startProtocolWorker(t, pw, srv.base, queue, "wp-"+pw.name, 3000, srv.env()...)
	var ids []float64
	for i := range 24 {
		ids = append(ids, srv.enqueueSleep(t, queue, 150, fmt.Sprintf("r%d", i)))
	}
	// Mid-run: some jobs done, others running or waiting.
	for deadline := time.Now().Add(20 * time.Second); ; {
		if n := len(rw.all("done")); n >= 4 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the worker finished no 4 jobs within 20 s; events %v", rw.snapshot())
		}
		time.Sleep(10 * time.Millisecond)
	}
	srv.restart(t)
	for i := range 8 {
		ids = append(ids, srv.enqueueSleep(t, queue, 50, fmt.Sprintf("after%d", i)))
	}
	deadline := time.Now().Add(30 * time.Second)
	for _, id := range ids {
		for srv.getJob(t, id)["state"] != "completed" {
			if time.Now().After(deadline) {
				t.Fatalf("job %v is %v 30 s after the restart; the worker's events: %v", id, srv.getJob(t, id), rw.snapshot())
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	select {
	case <-rw.exited:
		t.Fatalf("the worker exited (%v) instead of reconnecting; stderr:\n%s", rw.err, rw.stderr)
	default:
	}
	completedBy := map[float64]int{}
	for _, d := range rw.all("done") {
		if d["outcome"] == "completed" {
			completedBy[d["id"].(float64)]++
		}
	}
	for _, id := range ids {
		j := srv.getJob(t, id)
		if n := srv.completions(t, id); n != 1 {
			t.Errorf("job %v: %d completions in the audit log, want 1", id, n)
		}
		if r, _ := j["result"].(map[string]any); r["by"] != "wp-"+pw.name {
			t.Errorf("job %v: result %v, want the handler's", id, j["result"])
		}
		if completedBy[id] > 1 {
			t.Errorf("job %v: the worker reported %d completions, want at most 1", id, completedBy[id])
		}
	}
	if len(completedBy) == 0 {
		t.Fatalf("the worker reported no completion; events %v", rw.snapshot())
	}
	if err := rw.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-rw.exited:
	case <-time.After(15 * time.Second):
		t.Fatalf("the worker did not exit within 15 s of SIGTERM")
	}
	if rw.err != nil {
		t.Fatalf("the worker exited with %v after SIGTERM, want 0", rw.err)
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

// TestClientsDocs_TheWorkerExamplesCompleteAJobAndDrainOnSIGTERM runs the
// ten-line workers of docs/clients.md as they are printed: each completes
// a job with the token it was handed, then drains and exits 0 on SIGTERM.
func TestClientsDocs_TheWorkerExamplesCompleteAJobAndDrainOnSIGTERM(t *testing.T) {
	_, base := startServing(t, nil, "--db", filepath.Join(t.TempDir(), "docs.db"), "--listen", "127.0.0.1:0")
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	for _, pw := range protocolWorkers(t) {
		if pw.name == "exec" || pw.name == "go-prefetch" {
			continue // fenceq worker --exec's example runs in leases.md's walkthrough; go's is the Go Worker's
		}
		t.Run(pw.name, func(t *testing.T) {
			probe := pw.command(t) // skips or fails as the suite does when the language is missing
			dir := t.TempDir()
			var cmd *exec.Cmd
			switch pw.name {
			case "go":
				// Built inside the module, as a program of the user's module would be against its go.mod.
				src, err := os.MkdirTemp(root, "_docgo-")
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { os.RemoveAll(src) })
				if err := os.WriteFile(filepath.Join(src, "main.go"), []byte(docBlock(t, "clients.md", "<!-- test: go-worker -->")), 0o644); err != nil {
					t.Fatal(err)
				}
				bin := filepath.Join(dir, "worker")
				build := exec.Command("go", "build", "-o", bin, "./"+filepath.Base(src))
				build.Dir = root
				if out, err := build.CombinedOutput(); err != nil {
					t.Fatalf("go build of the Go example: %v\n%s", err, out)
				}
				cmd = exec.Command(bin)
				cmd.Env = cleanEnv()
			case "python":
				file := filepath.Join(dir, "worker.py")
				if err := os.WriteFile(file, []byte(docBlock(t, "clients.md", "<!-- test: python-worker -->")), 0o644); err != nil {
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
				if err := os.WriteFile(file, []byte(docBlock(t, "clients.md", "<!-- test: typescript-worker -->")), 0o644); err != nil {
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

// TestClientsDocs_TheInstallBlocksWorkPastedTwice runs docs/clients.md's
// install blocks for Python and TypeScript twice, in bash, in a directory
// holding the checkout's clients/ (Python's copied, as pip builds in the
// source tree; TypeScript's linked, built by .ci/clients.sh), with
// Debian's python3 first on the PATH. Each must print its last line.
func TestClientsDocs_TheInstallBlocksWorkPastedTwice(t *testing.T) {
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	for _, pw := range protocolWorkers(t) {
		var marker, want string
		switch pw.name {
		case "python":
			marker, want = "<!-- test: python-install -->", "fenceq for Python installed"
		case "typescript":
			marker, want = "<!-- test: typescript-install -->", "fenceq for Node installed: function"
		default:
			continue
		}
		t.Run(pw.name, func(t *testing.T) {
			pw.command(t) // skips or fails as the suite does when the language is missing
			dir := t.TempDir()
			if err := os.MkdirAll(filepath.Join(dir, "clients"), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(filepath.Join(root, "clients", "typescript"), filepath.Join(dir, "clients", "typescript")); err != nil {
				t.Fatal(err)
			}
			if out, err := exec.Command("cp", "-r", filepath.Join(root, "clients", "python"), filepath.Join(dir, "clients", "python")).CombinedOutput(); err != nil {
				t.Fatalf("cp: %v %s", err, out)
			}
			block := docBlock(t, "clients.md", marker)
			for paste := 1; paste <= 2; paste++ {
				cmd := exec.Command("bash", "-e", "-c", block)
				cmd.Dir = dir
				cmd.Env = append(cleanEnv(), "PATH=/usr/bin:"+os.Getenv("PATH"))
				out, err := cmd.CombinedOutput()
				if err != nil || !strings.Contains(string(out), want) {
					t.Fatalf("paste %d of docs/clients.md's %s block: %v, want %q in its output:\n%s", paste, pw.name, err, want, out)
				}
			}
		})
	}
}

// pausedWorkerScenario: the worker is stopped (SIGSTOP) past its 1 s lease
// while a claim of the same worker name takes its job; after SIGCONT it
// reports the claim lost, the check endpoint answers stale for the token
// its handler was given, and the job ends with the second claim's result.
func pausedWorkerScenario(t *testing.T, pw protocolWorker, srv *wpServer, proxy, queue string) {
	name := "wp-" + pw.name
	rw := startProtocolWorker(t, pw, proxy, queue, name, 1000, srv.env()...)
	id := srv.enqueueSleep(t, queue, 3000, "first")
	if tok := rw.waitEvent(t, "start", id, 10*time.Second)["token"]; tok != float64(1) {
		t.Fatalf("the handler got token %v, want 1", tok)
	}
	status, check := srv.call(t, "POST", fmt.Sprintf("/v1/jobs/%d/check", int64(id)), `{"fencing_token":1}`)
	wantStatus(t, "the check of the handler's token while it holds the claim", status, check, http.StatusOK)
	if err := rw.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1500 * time.Millisecond) // past the 1 s lease
	// The stopped worker's own long-poll, in the server, may take
	// the job first (token 2) and lose it the same way: the
	// re-claim waits, and gets token 2 or 3.
	status, job := srv.call(t, "POST", "/v1/claim", fmt.Sprintf(`{"worker":%q,"queues":[%q],"lease_ms":30000,"wait_ms":5000}`, name, queue))
	wantStatus(t, "the re-claim under the same worker name", status, job, http.StatusOK)
	token, _ := job["fencing_token"].(float64)
	if job["id"] != id || token < 2 {
		t.Fatalf("re-claim: %v, want job %v with a token above 1", job, id)
	}
	status, check = srv.call(t, "POST", fmt.Sprintf("/v1/jobs/%d/check", int64(id)), `{"fencing_token":1}`)
	wantStatus(t, "the check of the handler's token after the re-claim", status, check, http.StatusConflict)
	if err := rw.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	if d := rw.waitEvent(t, "done", id, 10*time.Second); d["outcome"] != "lost" {
		t.Fatalf("the resumed worker reported %v, want the claim lost", d)
	}
	if j := srv.getJob(t, id); j["state"] != "claimed" || j["attempts"] != token || j["result"] != nil {
		t.Fatalf("after the resumed worker: job %v, want still claimed by the second claim, no result", j)
	}
	status, done := srv.call(t, "POST", fmt.Sprintf("/v1/jobs/%d/complete", int64(id)), fmt.Sprintf(`{"worker":%q,"fencing_token":%d,"result":"second"}`, name, int64(token)))
	wantStatus(t, "the second claim's completion", status, done, http.StatusOK)
	if j := srv.getJob(t, id); j["result"] != "second" {
		t.Fatalf("job ended as %v, want the second claim's result", j)
	}
}
