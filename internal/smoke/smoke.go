// Package smoke runs a fenceq binary through the life of a job, as an
// operator would on a new box: serve on a fresh file, enqueue, claim, a
// stale fencing token refused, complete, restart, the job still completed;
// and, with a small --max-db-size, a full file refusing writes while reads
// go on. The binary may run under an emulator (qemu-arm-static for the
// armv7 release build), which is what .ci/qemu.sh does: it is the proof
// that the cross-built binaries work, 64-bit atomics and bbolt's memory
// map on 32-bit ARM included.
package smoke

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Config says what to run.
type Config struct {
	Bin      string   // the fenceq binary
	Emulator []string // run Bin under this command (e.g. qemu-arm-static); empty: natively
	Dir      string   // where the database files go
	// MaxDBSize also runs the full-file check with this --max-db-size (0: skip).
	MaxDBSize int64
	Out       io.Writer // one line per check
	// Lease is the claims' lease; the stale-token check waits it out.
	Lease time.Duration
}

// Run runs the checks and returns the first failure.
func Run(ctx context.Context, cfg Config) error {
	if cfg.Lease == 0 {
		cfg.Lease = 500 * time.Millisecond
	}
	r := &runner{cfg: cfg, http: &http.Client{Timeout: 30 * time.Second}}
	return r.run(ctx)
}

type runner struct {
	cfg  Config
	http *http.Client
}

func (r *runner) ok(format string, args ...any) {
	fmt.Fprintf(r.cfg.Out, "ok   "+format+"\n", args...)
}

func (r *runner) command(args ...string) *exec.Cmd {
	argv := append(append([]string{}, r.cfg.Emulator...), r.cfg.Bin)
	argv = append(argv, args...)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = cleanEnv()
	return cmd
}

// cleanEnv drops FENCEQ_* variables so that only the flags given count.
func cleanEnv() []string {
	var out []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "FENCEQ_") {
			out = append(out, kv)
		}
	}
	return out
}

func (r *runner) run(ctx context.Context) error {
	out, err := r.command("version").CombinedOutput()
	if err != nil {
		return fmt.Errorf("smoke: fenceq version: %v: %s", err, out)
	}
	r.ok("version: %s", bytes.TrimSpace(out))

	path := filepath.Join(r.cfg.Dir, "smoke.db")
	if _, err := os.Stat(path); err == nil {
		return fmt.Errorf("smoke: %s exists; the check starts from a fresh file", path)
	}
	srv, err := r.serve(ctx, path)
	if err != nil {
		return err
	}
	r.ok("serve on a fresh file %s: %s (max_db_size=%s)", path, srv.base, srv.maxDBSize)

	var job struct {
		ID           uint64          `json:"id"`
		State        string          `json:"state"`
		Attempts     uint64          `json:"attempts"`
		FencingToken uint64          `json:"fencing_token"`
		Result       json.RawMessage `json:"result"`
	}
	var errBody struct {
		Error struct{ Code, Message string } `json:"error"`
	}
	if err := srv.call("POST", "/v1/jobs", `{"queue":"smoke","payload":{"board":"edge"}}`, http.StatusCreated, &job); err != nil {
		return srv.fail(err)
	}
	id := job.ID
	r.ok("enqueue: job %d, %s", id, job.State)

	lease := r.cfg.Lease.Milliseconds()
	claim := fmt.Sprintf(`{"worker":"w1","queues":["smoke"],"lease_ms":%d}`, lease)
	if err := srv.call("POST", "/v1/claim", claim, http.StatusOK, &job); err != nil {
		return srv.fail(err)
	}
	if job.ID != id || job.FencingToken != 1 {
		return srv.fail(fmt.Errorf("claim answered job %d with token %d, want job %d with token 1", job.ID, job.FencingToken, id))
	}
	r.ok("claim: job %d, fencing token %d, lease %dms", id, job.FencingToken, lease)

	time.Sleep(r.cfg.Lease + 200*time.Millisecond)
	if err := srv.call("POST", "/v1/claim", claim, http.StatusOK, &job); err != nil {
		return srv.fail(err)
	}
	if job.FencingToken != 2 {
		return srv.fail(fmt.Errorf("claim after the lease ran out answered token %d, want 2", job.FencingToken))
	}
	r.ok("claim again after the lease ran out (same worker name): token %d", job.FencingToken)

	jobPath := fmt.Sprintf("/v1/jobs/%d", id)
	if err := srv.call("POST", jobPath+"/complete", `{"worker":"w1","fencing_token":1,"result":"stale"}`, http.StatusConflict, &errBody); err != nil {
		return srv.fail(err)
	}
	if errBody.Error.Code != "failed_precondition" {
		return srv.fail(fmt.Errorf("stale completion refused with code %q, want failed_precondition", errBody.Error.Code))
	}
	if err := srv.call("GET", jobPath, "", http.StatusOK, &job); err != nil {
		return srv.fail(err)
	}
	if job.State != "claimed" || job.Attempts != 2 || (string(job.Result) != "null" && len(job.Result) != 0) {
		return srv.fail(fmt.Errorf("after the stale completion the job is %s, attempts %d, result %s; want it claimed with token 2 and no result", job.State, job.Attempts, job.Result))
	}
	r.ok("stale token 1 refused: 409 %s, job unchanged (claimed, attempts 2, no result)", errBody.Error.Code)

	if err := srv.call("POST", jobPath+"/complete", `{"worker":"w1","fencing_token":2,"result":{"ok":true}}`, http.StatusOK, &job); err != nil {
		return srv.fail(err)
	}
	r.ok("complete with token 2: %s", job.State)

	if err := srv.call("GET", "/metrics", "", http.StatusOK, nil); err != nil {
		return srv.fail(err)
	}
	r.ok("GET /metrics: 200")

	if err := srv.stop(); err != nil {
		return err
	}
	r.ok("SIGTERM: exit 0")

	if srv, err = r.serve(ctx, path); err != nil {
		return err
	}
	if err := srv.call("GET", jobPath, "", http.StatusOK, &job); err != nil {
		return srv.fail(err)
	}
	if job.State != "completed" || job.Attempts != 2 || compact(job.Result) != `{"ok":true}` {
		return srv.fail(fmt.Errorf("after the restart job %d is %s, attempts %d, result %s; want completed, 2, {\"ok\":true}", id, job.State, job.Attempts, job.Result))
	}
	r.ok("restart on the same file: job %d still completed, attempts %d, result %s", id, job.Attempts, compact(job.Result))
	var audit struct {
		OK      bool   `json:"ok"`
		Records uint64 `json:"records"`
	}
	if err := srv.call("GET", "/v1/audit/verify", "", http.StatusOK, &audit); err != nil || !audit.OK {
		return srv.fail(fmt.Errorf("audit verify after the restart: %+v, %v", audit, err))
	}
	r.ok("audit chain verifies: %d records", audit.Records)
	if err := srv.stop(); err != nil {
		return err
	}

	if r.cfg.MaxDBSize > 0 {
		return r.full(ctx)
	}
	return nil
}

// full fills a file bounded by --max-db-size: the write past it is refused
// 507 resource_exhausted naming the flag, reads go on, the file stays
// within the bound and whole after a restart.
func (r *runner) full(ctx context.Context) error {
	path := filepath.Join(r.cfg.Dir, "full.db")
	srv, err := r.serve(ctx, path, "--max-db-size", fmt.Sprint(r.cfg.MaxDBSize))
	if err != nil {
		return err
	}
	payload := `{"queue":"fill","payload":"` + strings.Repeat("x", 60<<10) + `"}`
	var job struct {
		ID uint64 `json:"id"`
	}
	var errBody struct {
		Error struct{ Code, Message string } `json:"error"`
	}
	acked := 0
	for ; ; acked++ {
		status, raw, err := srv.do("POST", "/v1/jobs", payload)
		if err != nil {
			return srv.fail(err)
		}
		if status == http.StatusCreated {
			if err := json.Unmarshal(raw, &job); err != nil {
				return srv.fail(err)
			}
			if int64(acked)*(60<<10) > 2*r.cfg.MaxDBSize {
				return srv.fail(fmt.Errorf("%d jobs of 60 KiB were accepted into a file bounded at %d bytes", acked+1, r.cfg.MaxDBSize))
			}
			continue
		}
		if status != http.StatusInsufficientStorage || json.Unmarshal(raw, &errBody) != nil ||
			errBody.Error.Code != "resource_exhausted" || !strings.Contains(errBody.Error.Message, "--max-db-size") {
			return srv.fail(fmt.Errorf("enqueue into a full file answered %d %s; want 507 resource_exhausted naming --max-db-size", status, raw))
		}
		break
	}
	fi, err := os.Stat(path)
	if err != nil {
		return srv.fail(err)
	}
	if fi.Size() > r.cfg.MaxDBSize {
		return srv.fail(fmt.Errorf("the file is %d bytes, above --max-db-size %d", fi.Size(), r.cfg.MaxDBSize))
	}
	r.ok("--max-db-size %d: %d jobs of 60 KiB accepted, the next refused 507 %s (%q); file %d bytes",
		r.cfg.MaxDBSize, acked, errBody.Error.Code, errBody.Error.Message, fi.Size())
	var page struct {
		Jobs []json.RawMessage `json:"jobs"`
	}
	if err := srv.call("GET", "/v1/jobs?queue=fill&limit=1000", "", http.StatusOK, &page); err != nil {
		return srv.fail(err)
	}
	if len(page.Jobs) != acked {
		return srv.fail(fmt.Errorf("GET /v1/jobs in the full file lists %d jobs, want the %d acknowledged", len(page.Jobs), acked))
	}
	if err := srv.call("GET", fmt.Sprintf("/v1/jobs/%d", job.ID), "", http.StatusOK, nil); err != nil {
		return srv.fail(err)
	}
	r.ok("reads go on in the full file: %d jobs listed, job %d read", len(page.Jobs), job.ID)
	if err := srv.stop(); err != nil {
		return err
	}
	if srv, err = r.serve(ctx, path, "--max-db-size", fmt.Sprint(r.cfg.MaxDBSize)); err != nil {
		return err
	}
	if err := srv.call("GET", "/v1/jobs?queue=fill&limit=1000", "", http.StatusOK, &page); err != nil || len(page.Jobs) != acked {
		return srv.fail(fmt.Errorf("after a restart the full file lists %d jobs (%v), want %d", len(page.Jobs), err, acked))
	}
	r.ok("restart on the full file: %d jobs, all there", acked)
	return srv.stop()
}

type server struct {
	r         *runner
	cmd       *exec.Cmd
	base      string
	maxDBSize string
	stderr    *lockedBuffer
	done      chan error
}

var listenRE = regexp.MustCompile(`msg="fenceq serving".* listen=(http://\S+).* max_db_size=(\d+)`)

func (r *runner) serve(ctx context.Context, path string, args ...string) (*server, error) {
	cmd := r.command(append([]string{"serve", "--db", path, "--listen", "127.0.0.1:0"}, args...)...)
	s := &server{r: r, cmd: cmd, stderr: &lockedBuffer{}, done: make(chan error, 1)}
	pr, pw := io.Pipe()
	cmd.Stderr = io.MultiWriter(pw, s.stderr)
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("smoke: start %v: %w", cmd.Args, err)
	}
	go func() { s.done <- cmd.Wait(); pw.Close() }()
	found := make(chan []string, 1)
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			if m := listenRE.FindStringSubmatch(sc.Text()); m != nil {
				found <- m
				break
			}
		}
		_, _ = io.Copy(io.Discard, pr)
		close(found)
	}()
	select {
	case m, ok := <-found:
		if !ok {
			return nil, fmt.Errorf("smoke: fenceq serve exited before serving:\n%s", s.stderr)
		}
		s.base, s.maxDBSize = m[1], m[2]
		return s, nil
	case <-time.After(60 * time.Second):
		_ = cmd.Process.Kill()
		return nil, fmt.Errorf("smoke: fenceq serve did not say where it listens within 60s:\n%s", s.stderr)
	case <-ctx.Done():
		_ = cmd.Process.Kill()
		return nil, ctx.Err()
	}
}

func (s *server) do(method, path, body string) (int, []byte, error) {
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, s.base+path, rd)
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := s.r.http.Do(req)
	if err != nil {
		return 0, nil, fmt.Errorf("smoke: %s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	return resp.StatusCode, raw, err
}

// call sends a request, wants status, and decodes the body into out.
func (s *server) call(method, path, body string, status int, out any) error {
	got, raw, err := s.do(method, path, body)
	if err != nil {
		return err
	}
	if got != status {
		return fmt.Errorf("smoke: %s %s answered %d %s, want %d", method, path, got, bytes.TrimSpace(raw), status)
	}
	if out != nil {
		if err := json.Unmarshal(raw, out); err != nil {
			return fmt.Errorf("smoke: %s %s: body %s: %w", method, path, raw, err)
		}
	}
	return nil
}

// stop sends SIGTERM and wants exit 0.
func (s *server) stop() error {
	if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		return err
	}
	select {
	case err := <-s.done:
		if err != nil {
			return fmt.Errorf("smoke: fenceq after SIGTERM: %v; stderr:\n%s", err, s.stderr)
		}
		return nil
	case <-time.After(60 * time.Second):
		_ = s.cmd.Process.Kill()
		return fmt.Errorf("smoke: fenceq did not exit within 60s of SIGTERM; stderr:\n%s", s.stderr)
	}
}

// fail stops the server and returns err with its log.
func (s *server) fail(err error) error {
	_ = s.cmd.Process.Kill()
	<-s.done
	return fmt.Errorf("%w\nserver log:\n%s", err, s.stderr)
}

func compact(raw json.RawMessage) string {
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		return string(raw)
	}
	return b.String()
}

type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
