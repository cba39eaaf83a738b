package e2e

// The harness of the end-to-end tests: TestMain builds the real binary
// once; proc runs it; call and the crash client talk to it over HTTP; the
// load (producers and workers), the acknowledgement ledgers and the
// offline checks of a file are shared by the crash, fault, backup,
// power-loss, replica and shutdown tests. The tests live one file per
// guarantee (docs/guarantees.md names each).

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/fenceq/fenceq/db"
	"github.com/fenceq/fenceq/db/bolt"
)

// crashLease is the lease every worker of the crash test takes: short, so
// that a claim lost in a crash is claimable again soon.
const crashLease = 300 * time.Millisecond

// crashClient calls the server from the load goroutines. Unlike call, it
// returns errors (the server is killed under it) instead of failing the test.
type crashClient struct {
	http *http.Client
	base atomic.Pointer[string]
}

func newCrashClient() *crashClient {
	tr := &http.Transport{MaxIdleConnsPerHost: 32, DialContext: (&net.Dialer{Timeout: time.Second}).DialContext}
	return &crashClient{http: &http.Client{Timeout: 5 * time.Second, Transport: tr}}
}

// do sends a JSON body and returns the status and the whole body. An error
// means no answer (the server died, or was down).
func (c *crashClient) do(method, path, body string) (int, []byte, error) {
	base := c.base.Load()
	if base == nil || *base == "" {
		return 0, nil, errors.New("server down")
	}
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, *base+path, rd)
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.http.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, nil, err
	}
	return resp.StatusCode, raw, nil
}

// crashAcks is what the server acknowledged: enqueues (201) and completions
// (200, with the token and the result sent).
type crashAcks struct {
	mu        sync.Mutex
	enqueued  map[uint64]string // id → payload
	completed map[uint64]crashCompletion
	doubles   []string // completions acknowledged twice for one job
	bad       []string // answers no fault explains (5xx, malformed bodies)
}

type crashCompletion struct {
	token  uint64
	result string
}

func newCrashAcks() *crashAcks {
	return &crashAcks{enqueued: map[uint64]string{}, completed: map[uint64]crashCompletion{}}
}

func (a *crashAcks) badf(format string, args ...any) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.bad) < 20 {
		a.bad = append(a.bad, fmt.Sprintf(format, args...))
	}
}

// loadAcks records what the load goroutines were answered: crashAcks (by
// id) for kill -9, powerAcks (by payload) for power cuts.
type loadAcks interface {
	enqueueAcked(payloads []string, jobs []crashJob)
	completeAcked(job crashJob, result string)
	badf(format string, args ...any)
	// serverErrorsExpected: a 5xx is a failed commit (a power cut), not a bug.
	serverErrorsExpected() bool
}

func (a *crashAcks) enqueueAcked(payloads []string, jobs []crashJob) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for i, j := range jobs {
		a.enqueued[j.ID] = payloads[i]
	}
}

func (a *crashAcks) completeAcked(job crashJob, result string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if prev, ok := a.completed[job.ID]; ok {
		a.doubles = append(a.doubles, fmt.Sprintf("job %d: completed with token %d, then again with token %d", job.ID, prev.token, job.FencingToken))
	}
	a.completed[job.ID] = crashCompletion{token: job.FencingToken, result: result}
}

func (a *crashAcks) serverErrorsExpected() bool { return false }

type crashJob struct {
	ID           uint64          `json:"id"`
	State        string          `json:"state"`
	Payload      json.RawMessage `json:"payload"`
	FencingToken uint64          `json:"fencing_token"`
	Result       json.RawMessage `json:"result"`
}

// crashStats counts what the load did.
type crashStats struct {
	enqueueCalls, claims, stale, fails, heartbeats, noAnswer atomic.Int64
}

// startCrashLoad starts producers ("p0", "p1", …) and workers
// ("<run>-w0", …), the i-th of each through clients[i%len(clients)], and
// returns what stops them and waits until they have; calling it again does
// nothing.
func startCrashLoad(clients []*crashClient, acks loadAcks, st *crashStats, queue, run string, producers, workers int) (stop func()) {
	ch := make(chan struct{})
	var load sync.WaitGroup
	for i := range producers {
		c := clients[i%len(clients)]
		load.Go(func() { crashProducer(c, acks, st, queue, fmt.Sprintf("p%d", i), ch) })
	}
	for i := range workers {
		c := clients[i%len(clients)]
		load.Go(func() { crashWorker(c, acks, st, queue, fmt.Sprintf("%s-w%d", run, i), ch) })
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			close(ch)
			load.Wait()
		})
	}
}

// checkDrained fails the test unless every job of states is completed, no
// completion was acknowledged twice, no answer was unexplained, and the
// load did something.
func (a *crashAcks) checkDrained(t *testing.T, states map[db.State]int) {
	t.Helper()
	wantAllCompleted(t, states)
	a.reportAnomalies(t)
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.enqueued) == 0 || len(a.completed) == 0 {
		t.Fatalf("the load did nothing: %d enqueues and %d completions acknowledged", len(a.enqueued), len(a.completed))
	}
}

// reportAnomalies fails the test for every completion acknowledged twice
// and every answer the load could not explain.
func (a *crashAcks) reportAnomalies(t *testing.T) {
	t.Helper()
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, d := range a.doubles {
		t.Errorf("double completion: %s", d)
	}
	for _, b := range a.bad {
		t.Errorf("unexpected answer: %s", b)
	}
}

// wantAllCompleted fails the test for every state but completed in states.
func wantAllCompleted(t *testing.T, states map[db.State]int) {
	t.Helper()
	for state, n := range states {
		if state != db.StateCompleted {
			t.Errorf("after the drain: %d jobs are %s, want every job completed", n, state)
		}
	}
}

// crashProducer enqueues until stop, one job or a batch of three at a time.
func crashProducer(c *crashClient, acks loadAcks, st *crashStats, queue, name string, stop <-chan struct{}) {
	rng := mrand.New(mrand.NewPCG(uint64(time.Now().UnixNano()), 1))
	for n := 0; ; n++ {
		select {
		case <-stop:
			return
		default:
		}
		payloads := []string{fmt.Sprintf(`{"p":"%s-%d"}`, name, n)}
		if rng.IntN(5) == 0 {
			payloads = append(payloads, fmt.Sprintf(`{"p":"%s-%d-b"}`, name, n), fmt.Sprintf(`{"p":"%s-%d-c"}`, name, n))
		}
		var reqs []string
		for _, p := range payloads {
			reqs = append(reqs, fmt.Sprintf(`{"queue":%q,"payload":%s,"max_attempts":100000}`, queue, p))
		}
		body := reqs[0]
		if len(reqs) > 1 {
			body = "[" + strings.Join(reqs, ",") + "]"
		}
		st.enqueueCalls.Add(1)
		status, raw, err := c.do("POST", "/v1/jobs", body)
		if err != nil {
			st.noAnswer.Add(1)
			time.Sleep(5 * time.Millisecond)
			continue
		}
		if status != http.StatusCreated {
			if status < 500 || !acks.serverErrorsExpected() {
				acks.badf("enqueue: status %d %s", status, raw)
			}
			continue
		}
		// Producers pace themselves a little so that the workers keep up
		// and the run ends with a mix of states, not a backlog.
		time.Sleep(time.Duration(rng.IntN(4)) * time.Millisecond)
		var jobs []crashJob
		if len(reqs) == 1 {
			var j crashJob
			if json.Unmarshal(raw, &j) == nil {
				jobs = append(jobs, j)
			}
		} else {
			var page struct{ Jobs []crashJob }
			_ = json.Unmarshal(raw, &page)
			jobs = page.Jobs
		}
		if len(jobs) != len(payloads) {
			acks.badf("enqueue of %d jobs answered %s", len(payloads), raw)
			continue
		}
		acks.enqueueAcked(payloads, jobs)
	}
}

// crashWorker claims and completes until stop. Now and then it fails an
// attempt (the job comes back), heartbeats first, or stalls past its lease
// before completing, so that some completions are stale.
func crashWorker(c *crashClient, acks loadAcks, st *crashStats, queue, worker string, stop <-chan struct{}) {
	rng := mrand.New(mrand.NewPCG(uint64(time.Now().UnixNano()), 2))
	for {
		select {
		case <-stop:
			return
		default:
		}
		status, raw, err := c.do("POST", "/v1/claim",
			fmt.Sprintf(`{"worker":%q,"queues":[%q],"lease_ms":%d}`, worker, queue, crashLease.Milliseconds()))
		if err != nil {
			st.noAnswer.Add(1)
			time.Sleep(5 * time.Millisecond)
			continue
		}
		if status == http.StatusNoContent {
			time.Sleep(2 * time.Millisecond)
			continue
		}
		var job crashJob
		if status >= 500 && acks.serverErrorsExpected() {
			continue
		}
		if status != http.StatusOK || json.Unmarshal(raw, &job) != nil || job.ID == 0 || job.FencingToken == 0 {
			acks.badf("claim: status %d %s", status, raw)
			continue
		}
		st.claims.Add(1)
		jobPath := fmt.Sprintf("/v1/jobs/%d", job.ID)
		switch r := rng.IntN(100); {
		case r < 10:
			st.fails.Add(1)
			c.do("POST", jobPath+"/fail", fmt.Sprintf(`{"worker":%q,"fencing_token":%d,"error":"crash test","retry_delay_ms":0}`, worker, job.FencingToken))
			continue
		case r < 15:
			time.Sleep(crashLease + 50*time.Millisecond) // a stall: somebody may claim it meanwhile
		case r < 45:
			st.heartbeats.Add(1)
			c.do("POST", jobPath+"/heartbeat", fmt.Sprintf(`{"worker":%q,"fencing_token":%d,"lease_ms":%d}`, worker, job.FencingToken, crashLease.Milliseconds()))
		}
		result := fmt.Sprintf(`{"job":%d,"token":%d,"by":%q}`, job.ID, job.FencingToken, worker)
		status, raw, err = c.do("POST", jobPath+"/complete",
			fmt.Sprintf(`{"worker":%q,"fencing_token":%d,"result":%s}`, worker, job.FencingToken, result))
		switch {
		case err != nil:
			st.noAnswer.Add(1)
		case status == http.StatusConflict:
			st.stale.Add(1)
		case status == http.StatusOK:
			acks.completeAcked(job, result)
		case status >= 500 && acks.serverErrorsExpected():
		default:
			acks.badf("complete: status %d %s", status, raw)
		}
	}
}

// crashServer is the server under test, restarted on the same file and,
// when it can be, the same port.
type crashServer struct {
	t      *testing.T
	path   string
	listen string
	proc   *proc
	client *crashClient
	bin    string // the binary to run; "" is fenceqBin (another build: builds_test.go)
}

func (s *crashServer) start() {
	s.t.Helper()
	bin := s.bin
	if bin == "" {
		bin = fenceqBin
	}
	p := startBin(s.t, bin, nil, "serve", "--db", s.path, "--listen", s.listen, "--max-lease", "1m")
	base := p.addrOrEmpty()
	if base == "" && s.listen != "127.0.0.1:0" {
		// Somebody took the port while the server was down: a new one.
		s.listen = "127.0.0.1:0"
		p = startBin(s.t, bin, nil, "serve", "--db", s.path, "--listen", s.listen, "--max-lease", "1m")
		base = p.addrOrEmpty()
	}
	if base == "" {
		s.t.Fatalf("fenceq did not start on %s; stderr:\n%s", s.path, p.stderr)
	}
	s.listen = strings.TrimPrefix(base, "http://")
	s.proc = p
	s.client.base.Store(&base)
}

// kill sends SIGKILL and waits for the process to be gone.
func (s *crashServer) kill() {
	s.t.Helper()
	empty := ""
	s.client.base.Store(&empty)
	if err := s.proc.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		s.t.Fatalf("SIGKILL: %v", err)
	}
	select {
	case <-s.proc.done:
	case <-time.After(10 * time.Second):
		s.t.Fatalf("fenceq did not die within 10s of SIGKILL")
	}
}

// drain claims and completes every job of queue that can be claimed, then
// stops the server with SIGTERM; it returns how many it completed.
func (s *crashServer) drain(queue string) int {
	t := s.t
	t.Helper()
	drained := 0
	for {
		status, raw, err := s.client.do("POST", "/v1/claim", fmt.Sprintf(`{"worker":"drain","queues":[%q],"lease_ms":30000,"max":100}`, queue))
		if err != nil {
			t.Fatalf("drain claim: %v", err)
		}
		if status == http.StatusNoContent {
			break
		}
		var page struct{ Jobs []crashJob }
		if status != http.StatusOK || json.Unmarshal(raw, &page) != nil {
			t.Fatalf("drain claim: status %d %s", status, raw)
		}
		for _, j := range page.Jobs {
			status, raw, err := s.client.do("POST", fmt.Sprintf("/v1/jobs/%d/complete", j.ID),
				fmt.Sprintf(`{"worker":"drain","fencing_token":%d,"result":"drained"}`, j.FencingToken))
			if err != nil || status != http.StatusOK {
				t.Fatalf("drain complete of job %d: %d %s %v", j.ID, status, raw, err)
			}
			drained++
		}
	}
	if err := s.proc.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := s.proc.exit(t, 30*time.Second); code != 0 {
		t.Fatalf("fenceq after SIGTERM exited %d; stderr:\n%s", code, s.proc.stderr)
	}
	return drained
}

// addrOrEmpty is addr without failing: "" when the process exited first.
func (p *proc) addrOrEmpty() string {
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if m := listenRE.FindStringSubmatch(p.stderr.String()); m != nil {
			return "http://" + m[1]
		}
		select {
		case <-p.done:
			return ""
		case <-time.After(5 * time.Millisecond):
		}
	}
	return ""
}

func crashCount(t *testing.T) int {
	n := 20
	if v := os.Getenv("FENCEQ_CRASHES"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 1 {
			t.Fatalf("FENCEQ_CRASHES=%q: want a positive number", v)
		}
	}
	return n
}

func randomHex(t *testing.T, n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// checkAcks opens the file (no server holds it) and checks what was
// acknowledged: every enqueue exists with its payload, every completion is
// still completed with its token and result; the file and the audit chain
// are sound. It returns the store's jobs of the queue by state.
func checkAcks(t *testing.T, path string, acks *crashAcks, when string) map[db.State]int {
	t.Helper()
	s, err := bolt.Open(path, bolt.Options{LockTimeout: 5 * time.Second})
	if err != nil {
		t.Fatalf("%s: bolt.Open(%s) error = %v", when, path, err)
	}
	defer s.Close()
	return checkStoreAcks(t, s, acks, when)
}

// checkStoreAcks is checkAcks on an open store of any engine.
func checkStoreAcks(t *testing.T, s interface {
	db.Store
	Check() error
}, acks *crashAcks, when string) map[db.State]int {
	t.Helper()
	if err := s.Check(); err != nil {
		t.Fatalf("%s: Check() = %v", when, err)
	}
	rep, err := s.VerifyAudit(context.Background())
	if err != nil || !rep.OK {
		t.Fatalf("%s: VerifyAudit() = %+v, %v; want OK", when, rep, err)
	}
	ctx := context.Background()
	acks.mu.Lock()
	defer acks.mu.Unlock()
	missing := 0
	for id, payload := range acks.enqueued {
		j, err := s.GetJob(ctx, id)
		if err != nil {
			if missing++; missing <= 5 {
				t.Errorf("%s: acknowledged job %d (payload %s): GetJob error = %v", when, id, payload, err)
			}
			continue
		}
		if string(j.Payload) != payload {
			t.Errorf("%s: acknowledged job %d has payload %s, want %s", when, id, j.Payload, payload)
		}
	}
	if missing > 0 {
		t.Fatalf("%s: %d of %d acknowledged enqueues are missing", when, missing, len(acks.enqueued))
	}
	for id, c := range acks.completed {
		j, err := s.GetJob(ctx, id)
		if err != nil {
			t.Fatalf("%s: job %d, whose completion was acknowledged: GetJob error = %v", when, id, err)
		}
		if j.State != db.StateCompleted || string(j.Result) != c.result {
			t.Errorf("%s: job %d's completion with token %d was acknowledged, but it is %s with result %s", when, id, c.token, j.State, j.Result)
		}
		if j.Attempts != c.token {
			t.Errorf("%s: job %d: a completion with token %d was acknowledged, but the job's last claim is %d: completed twice", when, id, c.token, j.Attempts)
		}
	}
	states := map[db.State]int{}
	now := time.Now()
	for after := uint64(0); ; {
		page, err := s.ListJobs(ctx, db.ListRequest{After: after, Limit: db.MaxListLimit})
		if err != nil {
			t.Fatalf("%s: ListJobs error = %v", when, err)
		}
		for _, j := range page.Jobs {
			states[j.State]++
			if j.State == db.StateClaimed && j.LeaseExpiresAt.After(now) {
				t.Errorf("%s: job %d is claimed by %s until %v, past every lease the test gave", when, j.ID, j.ClaimedBy, j.LeaseExpiresAt)
			}
		}
		if page.Next == 0 {
			break
		}
		after = page.Next
	}
	return states
}

// fenceqBin is the real binary, built once by TestMain.
var fenceqBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "fenceq-e2e-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		os.Exit(1)
	}
	fenceqBin = filepath.Join(dir, "fenceq")
	build := exec.Command("go", "build", "-o", fenceqBin, "github.com/fenceq/fenceq")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "e2e: go build:", err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	cleanupBuilds()
	os.Exit(code)
}

// syncBuffer collects a process's output while it runs.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// proc is a running fenceq.
type proc struct {
	cmd            *exec.Cmd
	stdout, stderr *syncBuffer
	done           chan struct{} // closed when the process has exited
	waitErr        error
}

// cleanEnv is the test's environment without FENCEQ_* variables, plus env.
func cleanEnv(env ...string) []string {
	var out []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "FENCEQ_") {
			out = append(out, kv)
		}
	}
	return append(out, env...)
}

// start runs the binary with args and env; the process is killed at cleanup
// if the test did not end it.
func start(t testing.TB, env []string, args ...string) *proc {
	t.Helper()
	return startBin(t, fenceqBin, env, args...)
}

// startWith runs another build of fenceq (builds_test.go) as start does.
func startWith(t testing.TB, bin string, args ...string) *proc {
	t.Helper()
	return startBin(t, bin, nil, args...)
}

func startBin(t testing.TB, bin string, env []string, args ...string) *proc {
	t.Helper()
	p := &proc{cmd: exec.Command(bin, args...), stdout: &syncBuffer{}, stderr: &syncBuffer{}, done: make(chan struct{})}
	p.cmd.Env = cleanEnv(env...)
	p.cmd.Stdout, p.cmd.Stderr = p.stdout, p.stderr
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start %s %v: %v", bin, args, err)
	}
	go func() {
		p.waitErr = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			_ = p.cmd.Process.Kill()
			<-p.done
		}
	})
	return p
}

// exit waits up to timeout for the process to end and returns its exit code.
func (p *proc) exit(t testing.TB, timeout time.Duration) int {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(timeout):
		t.Fatalf("fenceq %v did not exit within %v; stderr:\n%s", p.cmd.Args[1:], timeout, p.stderr)
	}
	var ee *exec.ExitError
	switch {
	case p.waitErr == nil:
		return 0
	case errors.As(p.waitErr, &ee):
		return ee.ExitCode()
	}
	t.Fatalf("fenceq %v: wait: %v", p.cmd.Args[1:], p.waitErr)
	return -1
}

// runFenceq runs the binary to completion (at most 10s).
func runFenceq(t *testing.T, env []string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	p := start(t, env, args...)
	code = p.exit(t, 10*time.Second)
	return code, p.stdout.String(), p.stderr.String()
}

var listenRE = regexp.MustCompile(`msg="fenceq serving".* listen=http://(\S+)`)

// addr waits for the "fenceq serving" line and returns the base URL.
func (p *proc) addr(t testing.TB) string {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if m := listenRE.FindStringSubmatch(p.stderr.String()); m != nil {
			return "http://" + m[1]
		}
		select {
		case <-p.done:
			t.Fatalf("fenceq %v exited before serving; stderr:\n%s", p.cmd.Args[1:], p.stderr)
		case <-time.After(10 * time.Millisecond):
		}
	}
	t.Fatalf("fenceq %v did not log its address within 10s; stderr:\n%s", p.cmd.Args[1:], p.stderr)
	return ""
}

// startTestHelper runs this test binary again as a helper process: env
// (added to this process's) makes an init function run the helper instead
// of tests. Its stderr is this process's.
func startTestHelper(t testing.TB, env ...string) (cmd *exec.Cmd, stdin io.WriteCloser, stdout io.ReadCloser) {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd = exec.Command(self, "-test.run=^$")
	cmd.Env = append(os.Environ(), env...)
	if stdin, err = cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	if stdout, err = cmd.StdoutPipe(); err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting the test helper %v: %v", env, err)
	}
	return cmd, stdin, stdout
}

// startServing starts "fenceq serve" on a fresh file (or the one in args) and
// returns the process and its base URL.
func startServing(t testing.TB, env []string, args ...string) (*proc, string) {
	t.Helper()
	p := start(t, env, append([]string{"serve"}, args...)...)
	return p, p.addr(t)
}

// call sends a JSON request and returns the status and the decoded body.
func call(t *testing.T, method, url, body string) (int, map[string]any) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	client := &http.Client{Timeout: 10 * time.Second}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: reading body: %v", method, url, err)
	}
	var out map[string]any
	if len(raw) > 0 {
		if err := json.Unmarshal(raw, &out); err != nil {
			t.Fatalf("%s %s: body %s is not a JSON object: %v", method, url, raw, err)
		}
	}
	return resp.StatusCode, out
}

// wantStatus fails unless status is want.
func wantStatus(t *testing.T, what string, status int, body map[string]any, want int) {
	t.Helper()
	if status != want {
		t.Fatalf("%s: status %d %v, want %d", what, status, body, want)
	}
}

func errorCode(body map[string]any) any {
	e, _ := body["error"].(map[string]any)
	return e["code"]
}
