package cli

// fenceq worker --exec CMD: a Worker (api/client) whose handler runs a
// shell command per job, in its own process group.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/fenceq/fenceq/api/client"
)

const workerAbout = `Claim jobs and run CMD for each one with /bin/sh -c, in its own process group:
  stdin            the job's payload as JSON ("null" when it has none)
  environment      FENCEQ_JOB_ID, FENCEQ_JOB_QUEUE, FENCEQ_JOB_KIND, FENCEQ_JOB_ATTEMPT,
                   FENCEQ_JOB_MAX_ATTEMPTS, FENCEQ_FENCING_TOKEN, FENCEQ_WORKER, FENCEQ_SERVER
                   (and the worker's own environment)
  stdout           the result: stored as JSON when it parses as JSON, otherwise as a JSON
                   string (trailing newlines removed); empty is null
  exit status 0    completes the job; anything else fails it with the tail of stderr as
                   the error (the server retries it after its backoff)
While CMD runs the worker heartbeats the claim with its fencing token. If the claim is
lost (the job was claimed again after a pause, or cancelled) the whole process group is
killed at once (SIGKILL) and nothing is completed. CMD's own side effects are NOT fenced:
what it did before the kill stays done, and a CMD paused past its lease may act while
another worker runs the same job. Run "fenceq job check" right before a side effect
(exit 0 only while this claim is current), and give FENCEQ_FENCING_TOKEN to services
that can check it (docs/leases.md). When CMD exits, whatever it left
running in its process group is killed too. On SIGINT/SIGTERM the worker stops claiming
and lets running commands finish for --drain-timeout, then sends them SIGTERM and,
after --kill-grace, SIGKILL; their jobs are failed so that another worker takes them.`

const workerSynopsis = "fenceq worker --exec CMD [--queue Q[,Q…]] [--name N] [--concurrency N] [flags]"

// workerCommand: fenceq worker --exec CMD [flags]
func workerCommand(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := NewFlagSet("fenceq worker", stderr)
	cf := addClientFlags(fs)
	host, _ := os.Hostname()
	if host == "" {
		host = "worker"
	}
	command := fs.String("exec", "", "shell command to run for each job (required)")
	queues := fs.String("queue", "default", "queues to claim from, comma-separated")
	name := fs.String("name", host, "worker label; claims are held by principal|name")
	concurrency := fs.Int("concurrency", 1, "commands running at once")
	prefetch := fs.Int("prefetch", 0, "jobs held claimed beyond --concurrency, heartbeated, each started when a command ends (for short commands; WorkerConfig.Prefetch)")
	leaseD := fs.Duration("lease", 30*time.Second, "lease of each claim; heartbeats go every lease/3")
	wait := fs.Duration("wait", 30*time.Second, "long-poll of each claim")
	drain := fs.Duration("drain-timeout", 30*time.Second, "on SIGINT/SIGTERM, how long running commands may finish")
	grace := fs.Duration("kill-grace", 10*time.Second, "after the drain timeout, time between SIGTERM and SIGKILL")
	maxOutput := fs.Int("max-output", 1<<20, "largest stdout kept as the result, in bytes (more fails the job)")
	asJSON := fs.Bool("json", false, "log as JSON lines instead of text")
	startTimeout := fs.Duration("start-timeout", 0, "exit non-zero when the server has not answered at all for this long after the start (a wrong --server); 0: keep trying")
	SetUsage(fs, stdout, workerSynopsis, workerAbout)
	if _, err := parseCommand(fs, args, 0, 0); err != nil {
		return err
	}
	if strings.TrimSpace(*command) == "" {
		return UsageError{"fenceq worker needs --exec CMD; see \"fenceq worker --help\""}
	}
	if *concurrency < 1 || *maxOutput < 1 || *grace < 0 || *prefetch < 0 {
		return UsageError{"--concurrency and --max-output must be positive, --kill-grace and --prefetch not negative"}
	}
	var qs []string
	for _, q := range strings.Split(*queues, ",") {
		if q = strings.TrimSpace(q); q != "" {
			qs = append(qs, q)
		}
	}
	c, err := cf.client()
	if err != nil {
		return err
	}
	var handler slog.Handler = slog.NewTextHandler(stderr, nil)
	if *asJSON {
		handler = slog.NewJSONHandler(stderr, nil)
	}
	logger := slog.New(handler)

	h := &execHandler{command: *command, grace: *grace, maxOutput: *maxOutput, worker: *name,
		server: c.BaseURL(), token: cf.token, stderr: &lockedWriter{w: stderr}}
	w, err := client.NewWorker(c, h.handle, client.WorkerConfig{
		Name: *name, Queues: qs, Concurrency: *concurrency, Prefetch: *prefetch, Lease: *leaseD, Wait: *wait, DrainTimeout: *drain,
		StartTimeout: *startTimeout, Logger: logger,
		OnDone: func(d client.Done) {
			attrs := []any{"job", d.Job.ID, "queue", d.Job.Queue, "token", d.Job.FencingToken, "outcome", d.Outcome}
			if d.Err != nil {
				attrs = append(attrs, "err", d.Err)
			}
			if d.Outcome == client.OutcomeFailed {
				attrs = append(attrs, "state", d.Stored.State)
			}
			logger.Info("job done", attrs...)
		},
	})
	if err != nil {
		return UsageError{err.Error()}
	}
	logger.Info("fenceq worker started", "server", c.BaseURL(), "name", *name, "queues", strings.Join(qs, ","),
		"concurrency", *concurrency, "lease", *leaseD)
	if err := w.Run(ctx); err != nil {
		return cliError(c, err)
	}
	logger.Info("fenceq worker stopped")
	return nil
}

// execHandler runs the command of "fenceq worker --exec" for one job.
type execHandler struct {
	command   string
	grace     time.Duration
	maxOutput int
	worker    string
	server    string
	token     string        // the worker's bearer token, passed on as FENCEQ_TOKEN
	stderr    *lockedWriter // the worker's stderr, shared by concurrent jobs
}

// stderrTail is how much of a failed command's stderr becomes the job's
// error (the server keeps at most 4096 bytes).
const stderrTail = 3000

func (h *execHandler) handle(ctx context.Context, job client.Job) (result, attestation any, err error) {
	payload := []byte(job.Payload)
	if len(payload) == 0 {
		payload = []byte("null")
	}
	token := job.FencingToken
	if token == 0 {
		token = job.Attempts
	}

	// Plain pipes, not exec's copying goroutines: the command has ended
	// when the shell exits, whatever its children still hold open.
	stdinR, stdinW, err := os.Pipe()
	if err != nil {
		return nil, nil, err
	}
	stdoutR, stdoutW, err := os.Pipe()
	if err != nil {
		stdinR.Close()
		stdinW.Close()
		return nil, nil, err
	}
	stderrR, stderrW, err := os.Pipe()
	if err != nil {
		stdinR.Close()
		stdinW.Close()
		stdoutR.Close()
		stdoutW.Close()
		return nil, nil, err
	}

	cmd := exec.Command("/bin/sh", "-c", h.command)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = stdinR, stdoutW, stderrW
	cmd.Env = append(jobFreeEnviron(),
		"FENCEQ_JOB_ID="+strconv.FormatUint(job.ID, 10),
		"FENCEQ_JOB_QUEUE="+job.Queue,
		"FENCEQ_JOB_KIND="+job.Kind,
		"FENCEQ_JOB_ATTEMPT="+strconv.FormatUint(job.Attempts, 10),
		"FENCEQ_JOB_MAX_ATTEMPTS="+strconv.FormatUint(job.MaxAttempts, 10),
		"FENCEQ_FENCING_TOKEN="+strconv.FormatUint(token, 10),
		"FENCEQ_WORKER="+h.worker,
		"FENCEQ_SERVER="+h.server,
	)
	if h.token != "" {
		// So that "fenceq job check" in the command reaches a server with
		// an --auth-file as the worker does, also when the token came from
		// --token rather than the environment.
		cmd.Env = append(cmd.Env, "FENCEQ_TOKEN="+h.token)
	}
	startErr := cmd.Start()
	// The child has its copies; the parent keeps only its ends.
	stdinR.Close()
	stdoutW.Close()
	stderrW.Close()
	if startErr != nil {
		stdinW.Close()
		stdoutR.Close()
		stderrR.Close()
		return nil, nil, fmt.Errorf("starting /bin/sh: %w", startErr)
	}
	pgid := cmd.Process.Pid

	var readers sync.WaitGroup
	go func() {
		// A command that does not read its stdin gets EPIPE here, once it
		// and its group are gone; that is not an error of the job.
		_, _ = stdinW.Write(payload)
		stdinW.Close()
	}()
	out := &cappedBuffer{max: h.maxOutput}
	readers.Go(func() {
		_, _ = io.Copy(out, stdoutR)
		stdoutR.Close()
	})
	tail := &tailBuffer{max: stderrTail}
	readers.Go(func() {
		prefix := fmt.Sprintf("[job %d] ", job.ID)
		sc := bufio.NewScanner(stderrR)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Bytes()
			tail.Write(line)
			tail.Write([]byte{'\n'})
			h.stderr.writeLine(prefix, line)
		}
		_, _ = io.Copy(io.Discard, stderrR) // after an overlong line
		stderrR.Close()
	})

	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	var waitErr error
	var stopped error
	select {
	case waitErr = <-waited:
	case <-ctx.Done():
		stopped = context.Cause(ctx)
		if errors.Is(stopped, client.ErrClaimLost) {
			// Somebody else holds the job now: stop at once.
			killGroup(pgid, syscall.SIGKILL)
			waitErr = <-waited
		} else {
			killGroup(pgid, syscall.SIGTERM)
			select {
			case waitErr = <-waited:
			case <-time.After(h.grace):
				killGroup(pgid, syscall.SIGKILL)
				waitErr = <-waited
			}
		}
	}
	// Whatever the command left running in its group ends with it; then
	// its pipes close and the readers finish.
	killGroup(pgid, syscall.SIGKILL)
	readers.Wait()

	// A command that exits 0 on the stop's SIGTERM has finished its job;
	// one whose claim was lost must not complete, whatever it says.
	if stopped != nil && (waitErr != nil || errors.Is(stopped, client.ErrClaimLost)) {
		return nil, nil, fmt.Errorf("%w (command killed: %v)", stopped, waitErr)
	}
	if waitErr != nil {
		msg := waitErr.Error()
		if t := strings.TrimSpace(tail.String()); t != "" {
			msg += ": " + t
		}
		return nil, nil, errors.New(msg)
	}
	if out.overflow {
		return nil, nil, fmt.Errorf("the command wrote more than %d bytes to stdout (--max-output)", h.maxOutput)
	}
	return commandResult(out.Bytes()), nil, nil
}

// commandResult turns a command's stdout into a result: JSON as it is,
// other text as a JSON string without its trailing newlines, nothing as null.
func commandResult(out []byte) any {
	trimmed := bytes.TrimSpace(out)
	switch {
	case len(trimmed) == 0:
		return nil
	case json.Valid(trimmed):
		return json.RawMessage(trimmed)
	}
	return string(bytes.TrimRight(out, "\r\n"))
}

// jobFreeEnviron is the worker's environment without job variables a
// parent worker may have set (a worker started by a job's command).
func jobFreeEnviron() []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "FENCEQ_JOB_") || k == "FENCEQ_FENCING_TOKEN" || k == "FENCEQ_WORKER" {
			continue
		}
		env = append(env, kv)
	}
	return env
}

// killGroup signals every process of the group; a group that is already
// gone is not an error.
func killGroup(pgid int, sig syscall.Signal) {
	if pgid > 0 {
		_ = syscall.Kill(-pgid, sig)
	}
}

// cappedBuffer keeps the first max bytes and notes whether more came.
type cappedBuffer struct {
	bytes.Buffer
	max      int
	overflow bool
}

func (b *cappedBuffer) Write(p []byte) (int, error) {
	if room := b.max - b.Len(); len(p) > room {
		b.overflow = true
		b.Buffer.Write(p[:max(room, 0)])
		return len(p), nil
	}
	return b.Buffer.Write(p)
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	buf []byte
	max int
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if len(t.buf) > 2*t.max {
		t.buf = append(t.buf[:0], t.buf[len(t.buf)-t.max:]...)
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	b := t.buf
	if len(b) > t.max {
		b = b[len(b)-t.max:]
		// Start at a line, or at least at a character.
		if i := bytes.IndexByte(b, '\n'); i >= 0 && i < len(b)-1 {
			b = b[i+1:]
		}
		for len(b) > 0 && b[0]&0xC0 == 0x80 {
			b = b[1:]
		}
		return "…" + string(b)
	}
	return string(b)
}

// lockedWriter writes whole lines from concurrent jobs without mixing them.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) writeLine(prefix string, line []byte) {
	l.mu.Lock()
	defer l.mu.Unlock()
	fmt.Fprintf(l.w, "%s%s\n", prefix, line)
}
