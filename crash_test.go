//go:build linux

package main

// Fault tests on the real binary: kill -9 under load, disk faults (a
// read-only file, a full disk), and a backup taken under load. Each test
// logs its figures (t.Logf); README's "Guarantees" lists them.
//
// Longer runs: FENCEQ_CRASHES=200 go test -run TestCrash -v .

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
}

func (s *crashServer) start() {
	s.t.Helper()
	p := start(s.t, nil, "serve", "--db", s.path, "--listen", s.listen, "--max-lease", "1m")
	base := p.addrOrEmpty()
	if base == "" && s.listen != "127.0.0.1:0" {
		// Somebody took the port while the server was down: a new one.
		s.listen = "127.0.0.1:0"
		p = start(s.t, nil, "serve", "--db", s.path, "--listen", s.listen, "--max-lease", "1m")
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

func TestCrash_KillNineUnderLoadLosesNothingAcknowledged(t *testing.T) {
	crashes := crashCount(t)
	started := time.Now()
	path := filepath.Join(t.TempDir(), "crash.db")
	run := randomHex(t, 4)
	queue := "crash-" + run
	srv := &crashServer{t: t, path: path, listen: "127.0.0.1:0", client: newCrashClient()}
	srv.start()

	acks := newCrashAcks()
	st := &crashStats{}
	stop := startCrashLoad([]*crashClient{srv.client}, acks, st, queue, run, 2, 4)

	rng := mrand.New(mrand.NewPCG(uint64(time.Now().UnixNano()), 3))
	for range crashes {
		time.Sleep(time.Duration(rng.IntN(300)) * time.Millisecond)
		srv.kill()
		srv.start()
	}
	// The last crash: stop the load with the server dead, so that the
	// file is checked as a crash left it.
	time.Sleep(time.Duration(50+rng.IntN(250)) * time.Millisecond)
	srv.kill()
	stop()
	crashed := time.Now()

	// Every lease the test gave has run out.
	time.Sleep(time.Until(crashed.Add(crashLease + 100*time.Millisecond)))
	before := checkAcks(t, path, acks, "after the last SIGKILL")

	// Restart and drain: every job that is not completed must be
	// claimable (none stuck claimed), and completing it must leave the
	// acknowledged completions alone.
	srv.start()
	drained := srv.drain(queue)
	acks.checkDrained(t, checkAcks(t, path, acks, "after the drain"))
	acks.mu.Lock()
	defer acks.mu.Unlock()
	t.Logf("crash: %d SIGKILLs under load in %v; %d enqueues acknowledged (%d calls), %d completions acknowledged, "+
		"%d claims, %d stale completions refused, %d fails, %d heartbeats, %d calls without an answer; "+
		"after the last kill %v; %d jobs drained after the restart; none lost, none completed twice",
		crashes, time.Since(started).Round(time.Millisecond), len(acks.enqueued), st.enqueueCalls.Load(), len(acks.completed),
		st.claims.Load(), st.stale.Load(), st.fails.Load(), st.heartbeats.Load(), st.noAnswer.Load(), before, drained)
}

// faultDir is a new directory that any user may enter (the read-only tests
// run fenceq as an unprivileged user when the test runs as root, and root
// ignores file permissions).
func faultDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "fenceq-fault-")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = filepath.Walk(dir, func(p string, _ os.FileInfo, _ error) error { _ = os.Chmod(p, 0o755); return nil })
		os.RemoveAll(dir)
	})
	return dir
}

// faultMount mounts a tmpfs of the given size on a new directory and
// unmounts it at cleanup, or skips the test when it cannot (mounting needs
// root; CI runs as root).
func faultMount(t *testing.T, size string) string {
	t.Helper()
	dir := filepath.Join(faultDir(t), "mnt")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size="+size+",mode=0755"); err != nil {
		t.Skipf("cannot mount a %s tmpfs on %s (%v): this test needs root", size, dir, err)
	}
	t.Cleanup(func() {
		if err := syscall.Unmount(dir, syscall.MNT_DETACH); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
	})
	return dir
}

// faultFile makes a fenceq file with one job at path and returns its bytes.
func faultFile(t *testing.T, path string) []byte {
	t.Helper()
	s, err := bolt.Open(path, bolt.Options{})
	if err != nil {
		t.Fatalf("bolt.Open(%s) error = %v", path, err)
	}
	if _, err := s.EnqueueJob(context.Background(), db.EnqueueRequest{Principal: "local"}); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// runUnprivileged runs "fenceq serve --db path" as user nobody when the
// test runs as root (so that file permissions apply), else as the test's
// user, and returns its exit code and stderr.
func runUnprivileged(t *testing.T, dir, path string) (int, string) {
	t.Helper()
	bin := fenceqBin
	var attr *syscall.SysProcAttr
	if os.Geteuid() == 0 {
		// fenceqBin sits in a directory only root may enter.
		bin = filepath.Join(dir, "fenceq-bin")
		raw, err := os.ReadFile(fenceqBin)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(bin, raw, 0o755); err != nil {
			t.Fatal(err)
		}
		attr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	}
	cmd := exec.Command(bin, "serve", "--db", path, "--listen", "127.0.0.1:0")
	cmd.Env = cleanEnv()
	cmd.SysProcAttr = attr
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	done := make(chan error, 1)
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", bin, err)
	}
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return ee.ExitCode(), stderr.String()
		}
		return 0, stderr.String()
	case <-time.After(10 * time.Second):
		_ = cmd.Process.Kill()
		<-done
		t.Fatalf("fenceq on %s kept running (stderr %q); want it to refuse the file", path, stderr.String())
	}
	return -1, ""
}

func TestFault_AReadOnlyDatabaseIsAClearErrorAtStart(t *testing.T) {
	t.Run("read-only file", func(t *testing.T) {
		dir := faultDir(t)
		path := filepath.Join(dir, "q.db")
		orig := faultFile(t, path)
		if err := os.Chmod(path, 0o444); err != nil {
			t.Fatal(err)
		}
		code, stderr := runUnprivileged(t, dir, path)
		if code != 1 || !strings.Contains(stderr, path) || !strings.Contains(stderr, "permission denied") || strings.Contains(stderr, "fenceq serving") {
			t.Fatalf("fenceq on a read-only file: exit %d, stderr %q; want exit 1 and a message naming %s and \"permission denied\"", code, stderr, path)
		}
		if got, _ := os.ReadFile(path); !bytes.Equal(got, orig) {
			t.Fatalf("the read-only file was changed")
		}
		t.Logf("read-only file: exit %d, %s", code, strings.TrimSpace(stderr))
	})
	t.Run("read-only directory and no file yet", func(t *testing.T) {
		dir := faultDir(t)
		ro := filepath.Join(dir, "ro")
		if err := os.Mkdir(ro, 0o555); err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(ro, "q.db")
		code, stderr := runUnprivileged(t, dir, path)
		if code != 1 || !strings.Contains(stderr, path) || !strings.Contains(stderr, "permission denied") {
			t.Fatalf("fenceq in a read-only directory: exit %d, stderr %q; want exit 1 and a message naming %s and \"permission denied\"", code, stderr, path)
		}
		if _, err := os.Stat(path); !os.IsNotExist(err) {
			t.Fatalf("%s was created (%v)", path, err)
		}
	})
	t.Run("read-only file system", func(t *testing.T) {
		dir := faultMount(t, "4m")
		path := filepath.Join(dir, "q.db")
		orig := faultFile(t, path)
		if err := syscall.Mount("tmpfs", dir, "tmpfs", syscall.MS_REMOUNT|syscall.MS_RDONLY, ""); err != nil {
			t.Skipf("cannot remount %s read-only: %v", dir, err)
		}
		code, _, stderr := runFenceq(t, nil, "serve", "--db", path, "--listen", "127.0.0.1:0")
		if code != 1 || !strings.Contains(stderr, path) || !strings.Contains(stderr, "read-only file system") {
			t.Fatalf("fenceq on a read-only file system: exit %d, stderr %q; want exit 1 and a message naming %s and \"read-only file system\"", code, stderr, path)
		}
		if got, _ := os.ReadFile(path); !bytes.Equal(got, orig) {
			t.Fatalf("the file on the read-only file system was changed")
		}
	})
}

func TestFault_AFullDiskFailsWritesClearlyAndLosesNothing(t *testing.T) {
	dir := faultMount(t, "8m")
	path := filepath.Join(dir, "q.db")
	srv := &crashServer{t: t, path: path, listen: "127.0.0.1:0", client: newCrashClient()}
	srv.start()
	c := srv.client

	acked := map[uint64]string{}
	enqueue := func(payload string) (int, []byte) {
		t.Helper()
		status, raw, err := c.do("POST", "/v1/jobs", `{"queue":"full","payload":`+payload+`}`)
		if err != nil {
			t.Fatalf("enqueue: %v", err)
		}
		if status == http.StatusCreated {
			var j crashJob
			if err := json.Unmarshal(raw, &j); err != nil {
				t.Fatalf("enqueue answered %s: %v", raw, err)
			}
			acked[j.ID] = payload
		}
		return status, raw
	}
	for i := range 20 {
		if st, raw := enqueue(fmt.Sprintf(`{"n":%d}`, i)); st != http.StatusCreated {
			t.Fatalf("enqueue before the disk is full: %d %s", st, raw)
		}
	}

	// Something else fills the disk.
	filler := filepath.Join(dir, "filler")
	f, err := os.Create(filler)
	if err != nil {
		t.Fatal(err)
	}
	chunk := make([]byte, 64<<10)
	for {
		if _, err := f.Write(chunk); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("filling %s: %v", dir, err)
			}
			break
		}
	}
	f.Close()

	// Writes that need new pages fail with a clear 5xx; small ones may
	// still fit in pages the file already has, and are acknowledged.
	big := `"` + strings.Repeat("x", 200<<10) + `"`
	var failed []byte
	refused := 0
	for i := 0; i < 50 && failed == nil; i++ {
		payload := big
		if i%2 == 1 {
			payload = fmt.Sprintf(`{"during":%d}`, i)
		}
		status, raw := enqueue(payload)
		switch {
		case status == http.StatusCreated:
		case status >= 500:
			refused++
			failed = raw
			if status != http.StatusServiceUnavailable || !strings.Contains(string(raw), "no space left on device") {
				t.Fatalf("enqueue on a full disk: status %d %s; want 503 naming \"no space left on device\"", status, raw)
			}
		default:
			t.Fatalf("enqueue on a full disk: status %d %s", status, raw)
		}
	}
	if failed == nil {
		t.Fatalf("50 enqueues of up to 200 KiB on a full %s all succeeded; the disk was not full", dir)
	}
	// Reads still work while the disk is full.
	if status, raw, err := c.do("GET", "/v1/queues", ""); err != nil || status != http.StatusOK {
		t.Fatalf("GET /v1/queues on a full disk: %d %s %v", status, raw, err)
	}

	// The fault clears: the same server takes writes again.
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	if st, raw := enqueue(big); st != http.StatusCreated {
		t.Fatalf("enqueue after space was freed: %d %s", st, raw)
	}

	// Restart on the same file (the hard way): everything acknowledged is there.
	srv.kill()
	srv.start()
	for id, payload := range acked {
		status, raw, err := c.do("GET", fmt.Sprintf("/v1/jobs/%d", id), "")
		var j crashJob
		if err != nil || status != http.StatusOK || json.Unmarshal(raw, &j) != nil {
			t.Fatalf("acknowledged job %d after the restart: %d %.200s %v", id, status, raw, err)
		}
		if string(j.Payload) != payload {
			t.Fatalf("acknowledged job %d after the restart has payload %.100s, want %.100s", id, j.Payload, payload)
		}
	}
	srv.kill()
	checkAcks(t, path, &crashAcks{enqueued: acked, completed: map[uint64]crashCompletion{}}, "after the disk was full")
	t.Logf("full disk: %d enqueues acknowledged, the first refusal was %s; after freeing space and a SIGKILL and restart all %d are there, Check() and the audit chain pass",
		len(acked), bytes.TrimSpace(failed), len(acked))
}

// slowReader reads a response body in small pieces with pauses, so that a
// backup's read transaction stays open while writers commit.
type slowReader struct{ r io.Reader }

func (s slowReader) Read(p []byte) (int, error) {
	time.Sleep(time.Millisecond)
	return s.r.Read(p[:min(len(p), 16<<10)])
}

func TestBackup_UnderLoadHoldsEverythingAcknowledgedBeforeIt(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "live.db")
	srv := &crashServer{t: t, path: path, listen: "127.0.0.1:0", client: newCrashClient()}
	srv.start()
	run := randomHex(t, 4)
	queue := "backup-" + run
	acks := newCrashAcks()
	st := &crashStats{}
	stop := startCrashLoad([]*crashClient{srv.client}, acks, st, queue, run, 2, 2)
	defer stop()

	type backup struct {
		file      string
		enqueued  map[uint64]string
		completed map[uint64]crashCompletion
		bytes     int64
	}
	var backups []backup
	for i := range 3 {
		time.Sleep(300 * time.Millisecond)
		b := backup{file: filepath.Join(dir, fmt.Sprintf("backup-%d.db", i)),
			enqueued: map[uint64]string{}, completed: map[uint64]crashCompletion{}}
		acks.mu.Lock()
		for id, p := range acks.enqueued {
			b.enqueued[id] = p
		}
		for id, c := range acks.completed {
			b.completed[id] = c
		}
		acks.mu.Unlock()

		resp, err := http.Get(*srv.client.base.Load() + "/v1/backup")
		if err != nil {
			t.Fatalf("GET /v1/backup: %v", err)
		}
		if resp.StatusCode != http.StatusOK {
			raw, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			t.Fatalf("GET /v1/backup: %d %s", resp.StatusCode, raw)
		}
		f, err := os.Create(b.file)
		if err != nil {
			t.Fatal(err)
		}
		b.bytes, err = io.Copy(f, slowReader{resp.Body})
		resp.Body.Close()
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			t.Fatalf("reading the backup: %v", err)
		}
		backups = append(backups, b)
	}
	stop()
	if err := srv.proc.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	srv.proc.exit(t, 30*time.Second)
	// A backup holds the leases running when it was taken; checkAcks
	// refuses a lease still running when it looks, so let the last ones end.
	time.Sleep(crashLease + 100*time.Millisecond)

	var figures []string
	for i, b := range backups {
		if len(b.enqueued) == 0 {
			t.Fatalf("backup %d: nothing was acknowledged before it; the load did not run", i)
		}
		states := checkAcks(t, b.file, &crashAcks{enqueued: b.enqueued, completed: b.completed}, fmt.Sprintf("backup %d", i))
		total := 0
		for _, n := range states {
			total += n
		}
		figures = append(figures, fmt.Sprintf("backup %d: %d bytes, %d jobs (%d acknowledged before it, %d completions)",
			i, b.bytes, total, len(b.enqueued), len(b.completed)))
	}
	t.Logf("backup under load (%d enqueues and %d completions acknowledged in all): %s; each opens, passes Check() and the audit chain, and holds everything acknowledged before it began",
		len(acks.enqueued), len(acks.completed), strings.Join(figures, "; "))
}
