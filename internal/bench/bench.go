// Package bench is "fenceq bench": a load generator that drives a running
// fenceq server over HTTP and reports jobs/s, request latency and the
// server's commits per job. docs/performance.md holds what it measured.
package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/fenceq/fenceq/api/client"
	"github.com/fenceq/fenceq/internal/cli"
)

// config is what "fenceq bench" was asked to do.
type config struct {
	Server       string        `json:"server"`
	Protocol     string        `json:"protocol"` // json, grpc or connect
	Token        string        `json:"-"`
	Jobs         int           `json:"jobs"`
	Producers    int           `json:"producers"`
	Workers      int           `json:"workers"`
	Payload      int           `json:"payload_bytes"`
	Queue        string        `json:"queue"`
	EnqueueBatch int           `json:"enqueue_batch"`
	ClaimMax     int           `json:"claim_max"`
	ClaimNext    bool          `json:"claim_next"`
	Worker       bool          `json:"worker"`
	Concurrency  int           `json:"concurrency,omitempty"`
	Prefetch     int           `json:"prefetch,omitempty"`
	LeaseMs      int64         `json:"lease_ms"`
	WaitMs       int64         `json:"wait_ms"`
	Rate         float64       `json:"rate,omitempty"`
	Duration     time.Duration `json:"-"`
	DurationSec  float64       `json:"duration_s,omitempty"`
	Phases       []string      `json:"phases"`
	Timeout      time.Duration `json:"-"`
	JSON         bool          `json:"-"`
}

const benchUsage = `Drive a running fenceq server over HTTP and report what it measured.

Throughput mode (the default): P producers enqueue N jobs, then W workers
claim and complete them until all N are done. Each phase reports jobs/s,
request latency (p50/p99/max) and the server's commits and jobs per commit
(from GET /v1/stats, so run it against a server nobody else is using).

Latency mode (--rate R --duration D): open loop. Job i is due at start+i/R and
is sent at its due time by its own goroutine whatever the server does (one job
per request; --producers and --enqueue-batch do not apply). W workers wait in
long-poll claims (--wait-ms). Enqueue->claim latency is measured from each
job's due time, so a server that falls behind cannot hide its delay.

With --worker the drain (and the latency mode's workers) go through the real
Go client.Worker with a no-op handler: --workers Workers (1 unless given),
each with --concurrency handlers; it claims for its free handlers (and
--prefetch more, waiting in the Worker for a handler), batches
completions (claiming replacements in the same transaction) and heartbeats.

With --protocol grpc or connect, every call but the commit figures goes
through the protobuf API (the generated connect client, gRPC over HTTP/2 —
h2c on http:// — or the Connect protocol over HTTP/1.1), each producer and
worker with a connection of its own; the report is the same.

Run it against a queue of its own (--queue): jobs already waiting there are
claimed and completed too.`

// Command runs "fenceq bench [flags]"; a flag mistake is a cli.UsageError.
func Command(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg := config{}
	fs := cli.NewFlagSet("fenceq bench", stderr)
	cli.SetUsage(fs, stdout, "fenceq bench [flags]", benchUsage)
	fs.StringVar(&cfg.Server, "server", "http://127.0.0.1:7420", "base URL of the fenceq server")
	fs.StringVar(&cfg.Protocol, "protocol", "json", "the API to drive: json, grpc or connect (protobuf; not with --worker)")
	fs.StringVar(&cfg.Token, "token", "", "bearer token (a principal with the producer and worker roles); empty: none")
	fs.IntVar(&cfg.Jobs, "jobs", 10000, "jobs to enqueue and drain (throughput mode)")
	fs.IntVar(&cfg.Producers, "producers", 16, "concurrent producers (throughput mode)")
	fs.IntVar(&cfg.Workers, "workers", 16, "concurrent workers")
	fs.IntVar(&cfg.Payload, "payload", 100, "payload size in bytes (a JSON object padded to this size; at least ~40)")
	fs.StringVar(&cfg.Queue, "queue", "bench", "queue to enqueue to and claim from")
	fs.IntVar(&cfg.EnqueueBatch, "enqueue-batch", 1, "jobs per enqueue request (above 1 sends a JSON list)")
	fs.IntVar(&cfg.ClaimMax, "claim-max", 0, "claim up to this many jobs per request (0: one job, no \"max\" field)")
	fs.BoolVar(&cfg.ClaimNext, "claim-next", false, "complete with claim_next: completing the last job a worker holds also claims its next (up to --claim-max)")
	fs.BoolVar(&cfg.Worker, "worker", false, "drain through the Go client.Worker (no-op handler) instead of separate calls")
	fs.IntVar(&cfg.Concurrency, "concurrency", 16, "with --worker: handlers per Worker")
	fs.IntVar(&cfg.Prefetch, "prefetch", 0, "with --worker: jobs each Worker may hold claimed beyond its handlers (WorkerConfig.Prefetch)")
	fs.Int64Var(&cfg.LeaseMs, "lease-ms", 30000, "lease of each claim, in milliseconds")
	fs.Int64Var(&cfg.WaitMs, "wait-ms", 1000, "long-poll wait of each claim, in milliseconds (0-60000)")
	fs.Float64Var(&cfg.Rate, "rate", 0, "latency mode: jobs per second, sent at fixed times (0: throughput mode)")
	fs.DurationVar(&cfg.Duration, "duration", 10*time.Second, "latency mode: how long to send jobs")
	phases := fs.String("phases", "enqueue,drain", "throughput mode: the phases to run, in order (enqueue, drain)")
	fs.DurationVar(&cfg.Timeout, "timeout", 30*time.Minute, "give up when the whole run takes longer")
	fs.BoolVar(&cfg.JSON, "json", false, "print the report as JSON")
	if err := cli.ParseWithEnv(fs, args); err != nil {
		return err
	}
	workersGiven := false
	fs.Visit(func(f *flag.Flag) { workersGiven = workersGiven || f.Name == "workers" })
	if cfg.Worker && !workersGiven {
		cfg.Workers = 1
	}
	if !cfg.Worker {
		cfg.Concurrency, cfg.Prefetch = 0, 0
	}
	for _, p := range strings.Split(*phases, ",") {
		if p = strings.TrimSpace(p); p != "" {
			cfg.Phases = append(cfg.Phases, p)
		}
	}
	if err := cfg.validate(); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()

	b := newBencher(cfg, stderr)
	defer b.hc.CloseIdleConnections()
	var rep *Report
	var err error
	if cfg.Rate > 0 {
		rep, err = b.runLatency(ctx)
	} else {
		rep, err = b.runThroughput(ctx)
	}
	if err != nil {
		return err
	}
	if cfg.JSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	rep.writeText(stdout)
	return nil
}

func (c *config) validate() error {
	c.Server = strings.TrimRight(c.Server, "/")
	if !strings.HasPrefix(c.Server, "http://") && !strings.HasPrefix(c.Server, "https://") {
		return cli.Usagef("--server %q must start with http:// or https://", c.Server)
	}
	switch {
	case c.Protocol != "json" && c.Protocol != "grpc" && c.Protocol != "connect":
		return cli.Usagef("--protocol %q: use json, grpc or connect", c.Protocol)
	case c.Worker && c.Protocol != "json":
		return cli.Usagef("--worker drives the Go client.Worker, which speaks JSON: not with --protocol %s", c.Protocol)
	case c.Jobs < 1:
		return cli.Usagef("--jobs must be at least 1")
	case c.Producers < 1 || c.Workers < 1:
		return cli.Usagef("--producers and --workers must be at least 1")
	case c.Payload < 0 || c.Payload > 1<<20:
		return cli.Usagef("--payload must be between 0 and 1048576 bytes")
	case c.EnqueueBatch < 1:
		return cli.Usagef("--enqueue-batch must be at least 1")
	case c.Worker && (c.Concurrency < 1 || c.Concurrency > 10000):
		return cli.Usagef("--concurrency must be between 1 and 10000")
	case c.Prefetch < 0 || c.Prefetch > 10000:
		return cli.Usagef("--prefetch must be between 0 and 10000")
	case c.ClaimMax < 0:
		return cli.Usagef("--claim-max must be 0 or more")
	case c.LeaseMs < 1:
		return cli.Usagef("--lease-ms must be at least 1")
	case c.WaitMs < 0 || c.WaitMs > 60000:
		return cli.Usagef("--wait-ms must be between 0 and 60000")
	case c.Rate < 0 || math.IsInf(c.Rate, 0) || math.IsNaN(c.Rate):
		return cli.Usagef("--rate must be a positive number of jobs per second")
	case c.Rate > 0 && c.Duration <= 0:
		return cli.Usagef("--duration must be positive")
	case c.Timeout <= 0:
		return cli.Usagef("--timeout must be positive")
	}
	if c.Rate > 0 {
		c.DurationSec = c.Duration.Seconds()
		c.Phases = []string{"latency"}
		return nil
	}
	if len(c.Phases) == 0 {
		return cli.Usagef("--phases names no phase")
	}
	for _, p := range c.Phases {
		if p != "enqueue" && p != "drain" {
			return cli.Usagef("--phases: unknown phase %q (enqueue, drain)", p)
		}
	}
	return nil
}

// Report is what "fenceq bench --json" prints.
type Report struct {
	Mode      string  `json:"mode"` // "throughput" or "latency"
	Config    config  `json:"config"`
	Enqueued  int64   `json:"enqueued"`
	Completed int64   `json:"completed"`
	Phases    []Phase `json:"phases"`
	// Latency mode only.
	EnqueueToClaim *LatencySummary `json:"enqueue_to_claim,omitempty"`
	SentRate       float64         `json:"sent_rate,omitempty"`  // jobs/s actually sent
	LateSends      int64           `json:"late_sends,omitempty"` // sent more than 1 ms after their due time
}

// Phase is one phase's figures. Jobs is what the phase did (enqueued
// or completed); the commit figures are deltas of the server's /v1/stats
// around the phase and are absent when the server does not serve them.
type Phase struct {
	Name          string                    `json:"name"`
	Jobs          int64                     `json:"jobs"`
	Seconds       float64                   `json:"seconds"`
	JobsPerSec    float64                   `json:"jobs_per_sec"`
	Requests      map[string]LatencySummary `json:"requests"`
	EmptyClaims   int64                     `json:"empty_claims,omitempty"`
	Refused       int64                     `json:"refused,omitempty"`
	Commits       *uint64                   `json:"commits,omitempty"`
	CommittedOps  *uint64                   `json:"committed_ops,omitempty"`
	JobsPerCommit float64                   `json:"jobs_per_commit,omitempty"`
	CommitsPerJob float64                   `json:"commits_per_job,omitempty"`
	OpsPerCommit  float64                   `json:"ops_per_commit,omitempty"`
}

// LatencySummary is a latency distribution in milliseconds.
type LatencySummary struct {
	Count int     `json:"count"`
	P50   float64 `json:"p50_ms"`
	P99   float64 `json:"p99_ms"`
	Max   float64 `json:"max_ms"`
}

func summarize(d []time.Duration) LatencySummary {
	if len(d) == 0 {
		return LatencySummary{}
	}
	slices.Sort(d)
	rank := func(p float64) time.Duration { // nearest rank
		i := int(math.Ceil(p*float64(len(d)))) - 1
		return d[max(i, 0)]
	}
	ms := func(x time.Duration) float64 { return math.Round(float64(x)/1e3) / 1e3 }
	return LatencySummary{Count: len(d), P50: ms(rank(0.50)), P99: ms(rank(0.99)), Max: ms(d[len(d)-1])}
}

// latencies collects durations from many goroutines.
type latencies struct {
	mu sync.Mutex
	d  map[string][]time.Duration
}

func (l *latencies) add(kind string, d []time.Duration) {
	if len(d) == 0 {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.d == nil {
		l.d = map[string][]time.Duration{}
	}
	l.d[kind] = append(l.d[kind], d...)
}

func (l *latencies) summaries() map[string]LatencySummary {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := map[string]LatencySummary{}
	for k, d := range l.d {
		out[k] = summarize(d)
	}
	return out
}

// bencher holds the HTTP client and the prepared request pieces.
type bencher struct {
	cfg    config
	hc     *http.Client // https:// servers (and http:// through a proxy)
	stderr io.Writer
	pad    string // payload padding
	run    string // this run's id, in every payload

	// The lean client (plain http:// only): where to dial, the Host
	// header, the path prefix of --server and the Authorization line.
	lean     bool
	addr     string
	host     string
	prefix   string
	auth     string
	authErr  error
	reqLimit time.Duration // a request that takes longer fails
}

func newBencher(cfg config, stderr io.Writer) *bencher {
	conns := cfg.Producers + cfg.Workers + 8
	tr := &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:          conns,
		MaxIdleConnsPerHost:   conns, // every producer and worker keeps its connection
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ExpectContinueTimeout: time.Second,
		DisableCompression:    true,
	}
	if cfg.Rate > 0 {
		// One goroutine per due job: allow a burst of connections.
		tr.MaxIdleConnsPerHost = max(conns, int(cfg.Rate)/10+cfg.Workers)
		tr.MaxIdleConns = tr.MaxIdleConnsPerHost
	}
	b := &bencher{cfg: cfg, stderr: stderr,
		hc: &http.Client{Transport: tr, Timeout: time.Duration(cfg.WaitMs)*time.Millisecond + time.Minute}}
	b.setupLean()
	// {"run":"<16 hex>","due":<19 digits>,"pad":"…"}: the due time is an
	// offset in ns from the start of the run (latency mode; 0 otherwise),
	// fixed width so every payload has the same size. The run id keeps jobs
	// left over from another run out of the latency figures.
	frame := len(`{"run":"0000000000000000","due":0000000000000000000,"pad":""}`)
	b.pad = strings.Repeat("x", max(cfg.Payload-frame, 0))
	b.run = fmt.Sprintf("%016x", uint64(time.Now().UnixNano()))
	return b
}

func (b *bencher) appendJob(buf []byte, due time.Duration) []byte {
	buf = append(buf, `{"queue":`...)
	buf = strconv.AppendQuote(buf, b.cfg.Queue)
	buf = append(buf, `,"payload":`...)
	buf = b.appendPayload(buf, due)
	return append(buf, '}')
}

// appendPayload appends a job's payload, due at due.
func (b *bencher) appendPayload(buf []byte, due time.Duration) []byte {
	buf = append(buf, `{"run":"`...)
	buf = append(buf, b.run...)
	buf = append(buf, `","due":`...)
	buf = fmt.Appendf(buf, "%19d", int64(due)) // space-padded: JSON has no leading zeros
	buf = append(buf, `,"pad":"`...)
	buf = append(buf, b.pad...)
	return append(buf, `"}`...)
}

// httpStatusError is an answer the bench did not expect.
type httpStatusError struct {
	method, path string
	status       int
	body         string
}

func (e *httpStatusError) Error() string {
	return fmt.Sprintf("%s %s: HTTP %d: %s", e.method, e.path, e.status, e.body)
}

// httpDo sends one request through net/http and returns the status and
// body. It serves https:// servers (and http:// ones reached through a
// proxy); plain http:// goes through the lean client (benchConn).
func (b *bencher) httpDo(ctx context.Context, method, path string, body []byte) (int, []byte, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, b.cfg.Server+path, rd)
	if err != nil {
		return 0, nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if b.cfg.Token != "" {
		req.Header.Set("Authorization", "Bearer "+b.cfg.Token)
	}
	resp, err := b.hc.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, nil, err
	}
	return resp.StatusCode, out, nil
}

// The lean client. The load generator shares the machine with the server
// it measures, so its own CPU per request is taken from the server. For
// plain http:// servers each producer and worker keeps one HTTP/1.1
// keep-alive connection, writes each request itself in one Write and parses
// the reply with http.ReadResponse; https:// servers, and http:// ones
// reached through a proxy from the environment, keep net/http's client
// (httpDo). Why it exists, measured: docs/performance.md, "A leaner load generator".

// setupLean prepares the lean client when --server allows it.
func (b *bencher) setupLean() {
	u, err := url.Parse(b.cfg.Server)
	if err != nil || u.Scheme != "http" || u.Host == "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" {
		return
	}
	if proxy, err := http.ProxyFromEnvironment(&http.Request{URL: u}); err != nil || proxy != nil {
		return
	}
	b.lean = true
	b.host, b.addr, b.prefix = u.Host, u.Host, u.EscapedPath()
	if u.Port() == "" {
		b.addr = net.JoinHostPort(u.Hostname(), "80")
	}
	if b.cfg.Token != "" {
		if strings.ContainsFunc(b.cfg.Token, func(r rune) bool { return r < ' ' && r != '\t' || r == 0x7f }) {
			b.authErr = errors.New(`net/http: invalid header field value for "Authorization"`)
		}
		b.auth = "Authorization: Bearer " + b.cfg.Token + "\r\n"
	}
	b.reqLimit = time.Duration(b.cfg.WaitMs)*time.Millisecond + time.Minute
}

// appendRequest appends an HTTP/1.1 request for the lean client.
func (b *bencher) appendRequest(buf []byte, method, path string, body []byte) []byte {
	buf = append(buf, method...)
	buf = append(buf, ' ')
	buf = append(buf, b.prefix...)
	buf = append(buf, path...)
	buf = append(buf, " HTTP/1.1\r\nHost: "...)
	buf = append(buf, b.host...)
	buf = append(buf, "\r\n"...)
	if body != nil {
		buf = append(buf, "Content-Type: application/json\r\nContent-Length: "...)
		buf = strconv.AppendInt(buf, int64(len(body)), 10)
		buf = append(buf, "\r\n"...)
	}
	buf = append(buf, b.auth...)
	buf = append(buf, "\r\n"...)
	return append(buf, body...)
}

// benchConn is what one producer, worker or latency-mode send talks to the
// server through: with the lean client, its own keep-alive connection and
// buffers; otherwise the shared net/http client. Its context ends any
// request blocked on it. A benchConn is used by one goroutine at a time.
type benchConn struct {
	b   *bencher
	ctx context.Context
	// Lean client only.
	nc    net.Conn // nil: not connected
	stop  func() bool
	br    *bufio.Reader
	used  bool      // nc has answered a request
	until time.Time // nc's deadline
	wbuf  []byte
	body  bytes.Buffer
}

func (b *bencher) newConn(ctx context.Context) *benchConn { return &benchConn{b: b, ctx: ctx} }

// do sends one request and returns the status and body. The body is only
// valid until the next do on c.
func (c *benchConn) do(method, path string, body []byte) (int, []byte, error) {
	if !c.b.lean {
		return c.b.httpDo(c.ctx, method, path, body)
	}
	status, out, retry, err := 0, []byte(nil), false, c.b.authErr
	if err == nil {
		status, out, retry, err = c.try(method, path, body)
	}
	if retry && c.ctx.Err() == nil {
		// The server closed the connection while it was idle (it had
		// answered before and nothing of this reply arrived): redial once.
		status, out, _, err = c.try(method, path, body)
	}
	if err != nil {
		if ctx := c.ctx.Err(); ctx != nil {
			err = ctx
		}
		// As net/http reports it.
		return 0, nil, &url.Error{Op: method[:1] + strings.ToLower(method[1:]), URL: c.b.cfg.Server + path, Err: err}
	}
	return status, out, nil
}

// try sends one request on c's connection, dialling when there is none.
// retry tells that it failed on a connection that had answered before and
// before anything of the reply arrived: the server most likely closed it
// as idle and never saw the request. Any failure closes the connection.
func (c *benchConn) try(method, path string, body []byte) (status int, out []byte, retry bool, err error) {
	if c.nc == nil {
		if err := c.dial(); err != nil {
			return 0, nil, false, err
		}
	}
	reused := c.used
	fail := func(err error, mayRetry bool) (int, []byte, bool, error) {
		c.close()
		return 0, nil, mayRetry && reused && !errors.Is(err, os.ErrDeadlineExceeded), err
	}
	// The deadline bounds a request as the net/http client's Timeout did
	// (wait_ms + 1 minute, here up to 30 s more); it is moved only when it
	// comes closer than that. Cancelling ctx sets it in the past.
	if now := time.Now(); c.until.Sub(now) < c.b.reqLimit {
		c.until = now.Add(c.b.reqLimit + 30*time.Second)
		if err := c.nc.SetDeadline(c.until); err != nil {
			return fail(err, false)
		}
		if err := c.ctx.Err(); err != nil { // it may have come before this deadline
			return fail(err, false)
		}
	}
	c.wbuf = c.b.appendRequest(c.wbuf[:0], method, path, body)
	if _, err := c.nc.Write(c.wbuf); err != nil {
		return fail(err, true)
	}
	if _, err := c.br.Peek(1); err != nil {
		return fail(err, true)
	}
	resp, err := http.ReadResponse(c.br, nil)
	if err != nil {
		return fail(err, false)
	}
	c.body.Reset()
	_, err = io.Copy(&c.body, resp.Body)
	resp.Body.Close()
	if err != nil {
		return fail(err, false)
	}
	c.used = true
	if resp.Close {
		c.close()
	}
	return resp.StatusCode, c.body.Bytes(), false, nil
}

func (c *benchConn) dial() error {
	d := net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}
	nc, err := d.DialContext(c.ctx, "tcp", c.b.addr)
	if err != nil {
		return err
	}
	c.nc, c.used, c.until = nc, false, time.Time{}
	c.stop = context.AfterFunc(c.ctx, func() { nc.SetDeadline(time.Unix(1, 0)) })
	if c.br == nil {
		c.br = bufio.NewReader(nc)
	} else {
		c.br.Reset(nc)
	}
	return nil
}

// close closes c's connection, if any; c can still be used (it redials).
func (c *benchConn) close() {
	if c.nc != nil {
		c.stop()
		c.nc.Close()
		c.nc = nil
	}
}

// connPool holds idle callers (and their connections) for latency mode,
// where each due job is sent by its own goroutine.
type connPool struct {
	b    *bencher
	ctx  context.Context
	idle chan caller
}

func (p *connPool) get() caller {
	select {
	case c := <-p.idle:
		return c
	default:
		return p.b.newCaller(p.ctx, "")
	}
}

func (p *connPool) put(c caller) {
	select {
	case p.idle <- c:
	default:
		c.close()
	}
}

func (p *connPool) closeAll() {
	for {
		select {
		case c := <-p.idle:
			c.close()
		default:
			return
		}
	}
}

func unexpected(method, path string, status int, body []byte) error {
	s := strings.TrimSpace(string(body))
	if len(s) > 300 {
		s = s[:300] + "…"
	}
	return &httpStatusError{method: method, path: path, status: status, body: s}
}

type serverStats struct {
	Commits      uint64 `json:"commits"`
	CommittedOps uint64 `json:"committed_ops"`
}

// stats reads GET /v1/stats; ok is false when the server does not serve it.
func (b *bencher) stats(ctx context.Context) (serverStats, bool) {
	var st serverStats
	c := b.newConn(ctx)
	defer c.close()
	status, body, err := c.do(http.MethodGet, "/v1/stats", nil)
	if err == nil && status != http.StatusOK {
		err = unexpected("GET", "/v1/stats", status, body)
	}
	if err == nil {
		err = json.Unmarshal(body, &st)
	}
	if err != nil {
		if ctx.Err() == nil {
			fmt.Fprintf(b.stderr, "fenceq bench: no commit figures: %v\n", err)
		}
		return st, false
	}
	return st, true
}

// setCommits fills p's commit figures from two /v1/stats readings.
func (p *Phase) setCommits(before, after serverStats, ok bool) {
	if !ok || after.Commits < before.Commits {
		return
	}
	commits, ops := after.Commits-before.Commits, after.CommittedOps-before.CommittedOps
	p.Commits, p.CommittedOps = &commits, &ops
	if commits > 0 {
		p.JobsPerCommit = round3(float64(p.Jobs) / float64(commits))
		p.OpsPerCommit = round3(float64(ops) / float64(commits))
	}
	if p.Jobs > 0 {
		p.CommitsPerJob = round3(float64(commits) / float64(p.Jobs))
	}
}

func round3(x float64) float64 { return math.Round(x*1000) / 1000 }

// firstError keeps the first error of a group of goroutines and cancels
// the rest.
type firstError struct {
	once   sync.Once
	err    error
	cancel context.CancelFunc
}

func (f *firstError) set(err error) {
	f.once.Do(func() { f.err = err; f.cancel() })
}

func (b *bencher) runThroughput(ctx context.Context) (*Report, error) {
	rep := &Report{Mode: "throughput", Config: b.cfg}
	for _, name := range b.cfg.Phases {
		before, ok := b.stats(ctx)
		var p Phase
		var err error
		switch name {
		case "enqueue":
			p, err = b.enqueuePhase(ctx)
			rep.Enqueued += p.Jobs
		case "drain":
			p, err = b.drainPhase(ctx, int64(b.cfg.Jobs))
			rep.Completed += p.Jobs
		}
		if err != nil {
			return nil, fmt.Errorf("%s phase: %w", name, err)
		}
		after, ok2 := b.stats(ctx)
		p.setCommits(before, after, ok && ok2)
		rep.Phases = append(rep.Phases, p)
	}
	return rep, nil
}

// enqueuePhase: P producers enqueue N jobs, EnqueueBatch per request.
func (b *bencher) enqueuePhase(ctx context.Context) (Phase, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	fe := &firstError{cancel: cancel}
	var next, enqueued atomic.Int64
	var lat latencies
	var wg sync.WaitGroup
	n, k := int64(b.cfg.Jobs), int64(b.cfg.EnqueueBatch)
	start := time.Now()
	for range b.cfg.Producers {
		wg.Go(func() {
			var d []time.Duration
			defer func() { lat.add("enqueue", d) }()
			c := b.newCaller(ctx, "")
			defer c.close()
			for ctx.Err() == nil {
				first := next.Add(k) - k
				if first >= n {
					return
				}
				t0 := time.Now()
				got, err := c.enqueue(min(k, n-first), 0, k > 1)
				if err != nil {
					fe.set(err)
					return
				}
				d = append(d, time.Since(t0))
				enqueued.Add(got)
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	if fe.err != nil {
		return Phase{}, fe.err
	}
	if err := ctx.Err(); err != nil {
		return Phase{}, err
	}
	return newPhase("enqueue", enqueued.Load(), elapsed, lat.summaries()), nil
}

func newPhase(name string, jobs int64, elapsed time.Duration, req map[string]LatencySummary) Phase {
	p := Phase{Name: name, Jobs: jobs, Seconds: round3(elapsed.Seconds()), Requests: req}
	if elapsed > 0 {
		p.JobsPerSec = math.Round(float64(jobs) / elapsed.Seconds())
	}
	return p
}

// benchJob is the part of a Job the bench reads.
type benchJob struct {
	ID           uint64          `json:"id"`
	Attempts     uint64          `json:"attempts"`
	FencingToken uint64          `json:"fencing_token"`
	Payload      json.RawMessage `json:"payload"`
	// A completion with claim_next answers the job claimed next in "next",
	// or with claim_next.max, the jobs in "next_jobs".
	Next     *benchJob  `json:"next"`
	NextJobs []benchJob `json:"next_jobs"`
}

func (j *benchJob) token() uint64 {
	if j.FencingToken != 0 {
		return j.FencingToken
	}
	return j.Attempts
}

// due reads the due-time offset from a payload of run.
func (j *benchJob) due(run string) (time.Duration, bool) {
	var p struct {
		Run string `json:"run"`
		Due *int64 `json:"due"`
	}
	if json.Unmarshal(j.Payload, &p) != nil || p.Due == nil || p.Run != run {
		return 0, false
	}
	return time.Duration(*p.Due), true
}

// drainState is shared by the workers of a drain.
type drainState struct {
	target    atomic.Int64 // stop once this many completions were made
	completed atomic.Int64
	empty     atomic.Int64 // claims that answered 204
	refused   atomic.Int64 // completions answered 409: the claim was lost
	done      context.CancelFunc
	fe        *firstError
	lat       latencies
	// Latency mode: when the first job was due and the run's id, for
	// enqueue->claim latency. Set before the workers start.
	start time.Time
	run   string
	e2c   []time.Duration
	e2cMu sync.Mutex
}

func (s *drainState) completedOne() {
	if s.completed.Add(1) >= s.target.Load() {
		s.done()
	}
}

// drainPhase: W workers claim and complete until n completions were made.
func (b *bencher) drainPhase(ctx context.Context, n int64) (Phase, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	st := &drainState{done: cancel, fe: &firstError{cancel: cancel}}
	st.target.Store(n)
	start := time.Now()
	var wg sync.WaitGroup
	b.startWorkers(ctx, &wg, st)
	wg.Wait()
	elapsed := time.Since(start)
	if st.fe.err != nil {
		return Phase{}, st.fe.err
	}
	if st.completed.Load() < n {
		return Phase{}, fmt.Errorf("%d of %d jobs completed: %w", st.completed.Load(), n, context.Cause(ctx))
	}
	p := newPhase("drain", st.completed.Load(), elapsed, st.lat.summaries())
	p.EmptyClaims, p.Refused = st.empty.Load(), st.refused.Load()
	return p, nil
}

// startWorkers starts the drain's workers: separate calls (worker), or
// with --worker the Go client.Worker (clientWorker).
func (b *bencher) startWorkers(ctx context.Context, wg *sync.WaitGroup, st *drainState) {
	for w := range b.cfg.Workers {
		if b.cfg.Worker {
			wg.Go(func() { b.clientWorker(ctx, w, st) })
		} else {
			wg.Go(func() { b.worker(ctx, w, st) })
		}
	}
}

// clientWorker runs one client.Worker with a no-op handler until ctx ends
// (the drain has its completions), then lets it drain.
func (b *bencher) clientWorker(ctx context.Context, w int, st *drainState) {
	opts := []client.Option{client.WithHTTPClient(b.hc)}
	if b.cfg.Token != "" {
		opts = append(opts, client.WithToken(b.cfg.Token))
	}
	c, err := client.New(b.cfg.Server, opts...)
	if err != nil {
		st.fe.set(err)
		return
	}
	wait := time.Duration(b.cfg.WaitMs) * time.Millisecond
	if wait <= 0 {
		wait = time.Millisecond
	}
	worker, err := client.NewWorker(c, func(_ context.Context, job client.Job) (any, any, error) {
		st.claimed(benchJob{ID: job.ID, Payload: job.Payload})
		return nil, nil, nil
	}, client.WorkerConfig{
		Name: "bench-w" + strconv.Itoa(w), Queues: []string{b.cfg.Queue}, Concurrency: b.cfg.Concurrency,
		Prefetch: b.cfg.Prefetch, Lease: time.Duration(b.cfg.LeaseMs) * time.Millisecond, Wait: wait,
		Logger: slog.New(slog.DiscardHandler),
		OnDone: func(d client.Done) {
			switch d.Outcome {
			case client.OutcomeCompleted:
				st.completedOne()
			case client.OutcomeLost:
				st.refused.Add(1)
			default:
				st.fe.set(fmt.Errorf("job %d: %s: %v", d.Job.ID, d.Outcome, d.Err))
			}
		},
	})
	if err != nil {
		st.fe.set(err)
		return
	}
	if err := worker.Run(ctx); err != nil {
		st.fe.set(err)
	}
}

// worker claims (up to ClaimMax at a time) and completes until the drain
// has its completions. With ClaimNext, completing the last job it holds
// also claims its next one.
func (b *bencher) worker(ctx context.Context, w int, st *drainState) {
	var claimD, completeD []time.Duration
	defer func() {
		st.lat.add("claim", claimD)
		st.lat.add("complete", completeD)
	}()
	c := b.newCaller(ctx, "bench-w"+strconv.Itoa(w))
	defer c.close()
	var held []benchJob
	for ctx.Err() == nil {
		if len(held) == 0 {
			t0 := time.Now()
			jobs, err := c.claim()
			if err != nil {
				if ctx.Err() == nil {
					st.fe.set(err)
				}
				return
			}
			if len(jobs) == 0 {
				st.empty.Add(1)
				if b.cfg.WaitMs == 0 || time.Since(t0) < time.Duration(b.cfg.WaitMs)*time.Millisecond/2 {
					// The server did not wait (no long-poll, or wait_ms 0):
					// do not spin on it.
					time.Sleep(time.Millisecond)
				}
				continue
			}
			claimD = append(claimD, time.Since(t0))
			st.claimed(jobs...)
			held = jobs
			continue
		}
		j := held[0]
		held = held[1:]
		withNext := b.cfg.ClaimNext && len(held) == 0
		t0 := time.Now()
		next, lost, err := c.complete(j, withNext)
		if err != nil {
			if ctx.Err() == nil {
				st.fe.set(err)
			}
			return
		}
		if lost {
			// The lease ran out and the job went to someone else: it
			// will be completed by them. Not an error of the server.
			st.refused.Add(1)
			continue
		}
		completeD = append(completeD, time.Since(t0))
		st.claimed(next...)
		held = append(held, next...)
		st.completedOne()
	}
}

// claimed records enqueue->claim latency in latency mode.
func (s *drainState) claimed(jobs ...benchJob) {
	if s.start.IsZero() {
		return
	}
	now := time.Since(s.start)
	s.e2cMu.Lock()
	defer s.e2cMu.Unlock()
	for _, j := range jobs {
		if due, ok := j.due(s.run); ok {
			s.e2c = append(s.e2c, now-due)
		}
	}
}

// caller is how one producer, worker or latency-mode send calls the
// server: the JSON API over a benchConn (jsonCaller), or the protobuf API
// through the generated connect client on a connection of its own
// (rpcCaller, --protocol grpc or connect). A caller is used by one
// goroutine at a time.
type caller interface {
	// enqueue enqueues n jobs due at due in one request (a list when
	// list is set) and returns how many the server took.
	enqueue(n int64, due time.Duration, list bool) (int64, error)
	// claim claims up to ClaimMax jobs (one without it) and returns the
	// jobs it got, none when the queue had none.
	claim() ([]benchJob, error)
	// complete completes j; with next, the completion also claims (up to
	// ClaimMax) and returns what it claimed. lost: the completion was
	// refused because the claim was no longer j's holder's.
	complete(j benchJob, next bool) (claimed []benchJob, lost bool, err error)
	close()
}

// newCaller is the caller of a producer (worker "") or worker of ctx.
func (b *bencher) newCaller(ctx context.Context, worker string) caller {
	if b.cfg.Protocol != "json" {
		return b.newRPCCaller(ctx, worker)
	}
	c := &jsonCaller{b: b, c: b.newConn(ctx), worker: worker}
	cfg := b.cfg
	c.claimBody = fmt.Appendf(nil, `{"worker":%q,"queues":[%q],"lease_ms":%d,"wait_ms":%d`,
		worker, cfg.Queue, cfg.LeaseMs, cfg.WaitMs)
	if cfg.ClaimMax > 0 {
		c.claimBody = fmt.Appendf(c.claimBody, `,"max":%d`, cfg.ClaimMax)
	}
	c.claimBody = append(c.claimBody, '}')
	c.claimNext = fmt.Appendf(nil, `,"claim_next":{"queues":[%q],"lease_ms":%d`, cfg.Queue, cfg.LeaseMs)
	if cfg.ClaimMax > 0 {
		// The completion claims up to ClaimMax jobs ("next_jobs").
		c.claimNext = fmt.Appendf(c.claimNext, `,"max":%d`, cfg.ClaimMax)
	}
	c.claimNext = append(c.claimNext, '}')
	return c
}

// jsonCaller calls the JSON API.
type jsonCaller struct {
	b                    *bencher
	c                    *benchConn
	worker               string
	claimBody, claimNext []byte
	body                 []byte
}

func (c *jsonCaller) close() { c.c.close() }

func (c *jsonCaller) enqueue(n int64, due time.Duration, list bool) (int64, error) {
	body := c.body[:0]
	if list {
		body = append(body, '[')
	}
	for i := range n {
		if i > 0 {
			body = append(body, ',')
		}
		body = c.b.appendJob(body, due)
	}
	if list {
		body = append(body, ']')
	}
	c.body = body
	status, resp, err := c.c.do(http.MethodPost, "/v1/jobs", body)
	if err != nil {
		return 0, err
	}
	if status != http.StatusCreated && status != http.StatusOK {
		return 0, unexpected("POST", "/v1/jobs", status, resp)
	}
	if !list {
		return 1, nil
	}
	var out struct {
		Jobs []json.RawMessage `json:"jobs"`
	}
	if err := json.Unmarshal(resp, &out); err != nil {
		return 0, fmt.Errorf("POST /v1/jobs: %w", err)
	}
	return int64(len(out.Jobs)), nil
}

// claim sends one claim and returns the jobs it got (none on 204).
func (c *jsonCaller) claim() ([]benchJob, error) {
	status, resp, err := c.c.do(http.MethodPost, "/v1/claim", c.claimBody)
	if err != nil {
		return nil, err
	}
	switch status {
	case http.StatusNoContent:
		return nil, nil
	case http.StatusOK:
	default:
		return nil, unexpected("POST", "/v1/claim", status, resp)
	}
	if c.b.cfg.ClaimMax > 0 {
		var out struct {
			Jobs []benchJob `json:"jobs"`
		}
		if err := json.Unmarshal(resp, &out); err != nil {
			return nil, fmt.Errorf("POST /v1/claim: %w", err)
		}
		return out.Jobs, nil
	}
	var j benchJob
	if err := json.Unmarshal(resp, &j); err != nil {
		return nil, fmt.Errorf("POST /v1/claim: %w", err)
	}
	return []benchJob{j}, nil
}

func (c *jsonCaller) complete(j benchJob, next bool) ([]benchJob, bool, error) {
	path := "/v1/jobs/" + strconv.FormatUint(j.ID, 10) + "/complete"
	body := fmt.Appendf(c.body[:0], `{"worker":%q,"fencing_token":%d`, c.worker, j.token())
	if next {
		body = append(body, c.claimNext...)
	}
	body = append(body, '}')
	c.body = body
	status, resp, err := c.c.do(http.MethodPost, path, body)
	if err != nil {
		return nil, false, err
	}
	switch status {
	case http.StatusOK:
	case http.StatusConflict:
		return nil, true, nil
	default:
		return nil, false, unexpected("POST", path, status, resp)
	}
	if !next {
		return nil, false, nil
	}
	var done benchJob
	if err := json.Unmarshal(resp, &done); err != nil {
		return nil, false, fmt.Errorf("POST %s: %w", path, err)
	}
	if done.Next != nil {
		done.NextJobs = append(done.NextJobs, *done.Next)
	}
	return done.NextJobs, false, nil
}

// runLatency is the open-loop mode: job i is due at start+i/rate and sent
// then by its own goroutine; W workers long-poll, claim and complete until
// every job sent was completed.
func (b *bencher) runLatency(ctx context.Context) (*Report, error) {
	rep := &Report{Mode: "latency", Config: b.cfg}
	before, ok := b.stats(ctx)

	dctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// The first job is due a little after the workers start, so that their
	// first claims are waiting on the server when it arrives.
	start := time.Now().Add(50 * time.Millisecond)
	st := &drainState{done: cancel, fe: &firstError{cancel: cancel}, start: start, run: b.run}
	st.target.Store(math.MaxInt64)
	var workers sync.WaitGroup
	b.startWorkers(dctx, &workers, st)

	interval := time.Duration(float64(time.Second) / b.cfg.Rate)
	total := int64(b.cfg.Duration / interval)
	if total < 1 {
		total = 1
	}
	var sent, late atomic.Int64
	// The sends share idle connections (workers keep their own).
	pool := &connPool{b: b, ctx: dctx, idle: make(chan caller, max(b.cfg.Workers+8, int(b.cfg.Rate)/10+b.cfg.Workers))}
	defer pool.closeAll()
	var sends sync.WaitGroup
	var enqMu sync.Mutex
	var enqD []time.Duration
	for i := range total {
		if dctx.Err() != nil {
			break
		}
		due := time.Duration(i) * interval
		if wait := due - time.Since(start); wait > 0 {
			time.Sleep(wait)
		}
		if time.Since(start)-due > time.Millisecond {
			late.Add(1)
		}
		sends.Go(func() {
			c := pool.get()
			defer pool.put(c)
			if _, err := c.enqueue(1, due, false); err != nil {
				if dctx.Err() == nil {
					st.fe.set(err)
				}
				return
			}
			d := time.Since(start) - due
			enqMu.Lock()
			enqD = append(enqD, d)
			enqMu.Unlock()
			sent.Add(1)
		})
	}
	sends.Wait()
	sendElapsed := time.Since(start)
	st.target.Store(sent.Load())
	if st.completed.Load() >= sent.Load() {
		cancel()
	}
	workers.Wait()
	elapsed := time.Since(start)
	if st.fe.err != nil {
		return nil, st.fe.err
	}
	if st.completed.Load() < sent.Load() {
		return nil, fmt.Errorf("%d of %d jobs completed: %w", st.completed.Load(), sent.Load(), context.Cause(dctx))
	}
	after, ok2 := b.stats(ctx)

	req := st.lat.summaries()
	req["enqueue"] = summarize(enqD)
	p := newPhase("latency", st.completed.Load(), elapsed, req)
	p.EmptyClaims, p.Refused = st.empty.Load(), st.refused.Load()
	p.setCommits(before, after, ok && ok2)
	if p.Commits != nil && sent.Load() > 0 {
		// Each job is enqueued and completed in this phase: count per job,
		// not per completion only.
		p.CommitsPerJob = round3(float64(*p.Commits) / float64(sent.Load()))
	}
	rep.Phases = []Phase{p}
	rep.Enqueued, rep.Completed = sent.Load(), st.completed.Load()
	e2c := summarize(st.e2c)
	rep.EnqueueToClaim = &e2c
	rep.SentRate = math.Round(float64(sent.Load())/sendElapsed.Seconds()*10) / 10
	rep.LateSends = late.Load()
	return rep, nil
}

func (r *Report) writeText(w io.Writer) {
	c := r.Config
	fmt.Fprintf(w, "fenceq bench (%s, %s) against %s: queue %s, %d-byte payloads, %d workers", r.Mode, c.Protocol, c.Server, c.Queue, c.Payload, c.Workers)
	if r.Mode == "latency" {
		fmt.Fprintf(w, ", %.0f jobs/s for %v", c.Rate, c.Duration)
	} else {
		fmt.Fprintf(w, ", %d jobs, %d producers", c.Jobs, c.Producers)
	}
	fmt.Fprintf(w, "\nenqueue batch %d, claim max %d, claim_next %v, lease %d ms, wait %d ms",
		c.EnqueueBatch, c.ClaimMax, c.ClaimNext, c.LeaseMs, c.WaitMs)
	if c.Worker {
		fmt.Fprintf(w, ", client.Worker with %d handlers each", c.Concurrency)
		if c.Prefetch > 0 {
			fmt.Fprintf(w, " and prefetch %d", c.Prefetch)
		}
	}
	fmt.Fprint(w, "\n\n")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "phase\tjobs\tseconds\tjobs/s\tcommits\tjobs/commit\tcommits/job\t")
	for _, p := range r.Phases {
		commits, jpc, cpj := "-", "-", "-"
		if p.Commits != nil {
			commits = strconv.FormatUint(*p.Commits, 10)
			jpc, cpj = strconv.FormatFloat(p.JobsPerCommit, 'f', 2, 64), strconv.FormatFloat(p.CommitsPerJob, 'f', 3, 64)
		}
		fmt.Fprintf(tw, "%s\t%d\t%.2f\t%.0f\t%s\t%s\t%s\t\n", p.Name, p.Jobs, p.Seconds, p.JobsPerSec, commits, jpc, cpj)
	}
	tw.Flush()
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "latency (ms)\tcount\tp50\tp99\tmax\t")
	line := func(name string, s LatencySummary) {
		fmt.Fprintf(tw, "%s\t%d\t%.3f\t%.3f\t%.3f\t\n", name, s.Count, s.P50, s.P99, s.Max)
	}
	for _, p := range r.Phases {
		for _, kind := range []string{"enqueue", "claim", "complete"} {
			if s, ok := p.Requests[kind]; ok {
				line(p.Name+" "+kind+" request", s)
			}
		}
	}
	if r.EnqueueToClaim != nil {
		line("enqueue->claim (from due time)", *r.EnqueueToClaim)
	}
	tw.Flush()
	for _, p := range r.Phases {
		if p.EmptyClaims > 0 || p.Refused > 0 {
			fmt.Fprintf(w, "%s: %d claims found nothing, %d completions refused (lease lost)\n", p.Name, p.EmptyClaims, p.Refused)
		}
	}
	if r.Mode == "latency" {
		fmt.Fprintf(w, "sent %d jobs at %.1f/s (%d sent more than 1 ms late by this client)\n", r.Enqueued, r.SentRate, r.LateSends)
	}
}
