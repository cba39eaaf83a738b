// Command fenceq is a durable job queue in one binary: a bbolt file, fenced
// claims, and an HTTP API. Run "fenceq help" for the commands.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"runtime/debug"
	"strings"
	"time"

	"github.com/fenceq/fenceq/api"
	"github.com/fenceq/fenceq/db"
	"github.com/fenceq/fenceq/internal/bench"
	"github.com/fenceq/fenceq/internal/buildinfo"
	"github.com/fenceq/fenceq/internal/cli"
	"github.com/fenceq/fenceq/internal/engine"
	"github.com/fenceq/fenceq/web"
)

func main() {
	ctx, stop := signalContext(os.Stderr) // signals.go
	defer stop()
	setGCDefault()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "fenceq:", err)
		}
		os.Exit(cli.ExitCode(err))
	}
}

const usage = `fenceq — a durable job queue in one binary

Usage:
  fenceq [serve] [flags]                      run the server (the default command)
  fenceq token new NAME --roles ROLE[,ROLE]   print a new bearer token and its auth-file line
  fenceq bench [flags]                        load a running server over HTTP and report jobs/s, latency, commits
  fenceq copy --from FILE --to postgres://…   copy a bbolt file (server stopped) into an empty PostgreSQL database
  fenceq migrate [--dry-run] --db FILE|URL    bring a store to this build's schema (serve does at start); --dry-run prints the steps
  fenceq version [--json]                     print the version, commit and Go version (also --version)
  fenceq help [COMMAND]                       show this help, or a command's (as COMMAND --help)

Commands for a running server (--server URL, --token TOKEN; or FENCEQ_SERVER, FENCEQ_TOKEN):
  fenceq enqueue [--queue Q] [--payload JSON|-] [flags]    enqueue a job and print its id
  fenceq get ID                                            show one job
  fenceq list [--queue Q] [--state S] [--all]              list jobs
  fenceq cancel ID                                         cancel a job (admin)
  fenceq retry ID                                          make a dead or cancelled job available again (admin)
  fenceq stats                                             job counts per queue and state, commits, refusals
  fenceq lease acquire NAME --holder H [--ttl D] [--wait D]    take a named lease, print its fencing token
  fenceq lease renew NAME TOKEN --holder H [--ttl D]           extend it
  fenceq lease release NAME TOKEN --holder H                   give it back
  fenceq lease check NAME TOKEN                                exit 0 while TOKEN is current
  fenceq lease show [NAME] [--prefix P]                        show one lease, or list them
  fenceq queue pause QUEUE                                 stop claims of a queue; it still takes enqueues (admin)
  fenceq queue resume QUEUE                                let claims take its jobs again (admin)
  fenceq queue list                                        queues, whether each is paused, job counts
  fenceq audit verify [--db FILE | --server URL]           verify the audit chain: of a file (a database or an archive)
                                                           offline, or by the server
  fenceq audit archive --out FILE                          move the audit records older than the server's
                                                           --audit-retention into FILE (admin)
  fenceq backup --out FILE                                 download a consistent snapshot of the database (admin)
  fenceq worker --exec CMD [--queue Q] [--concurrency N]   run CMD for each claimed job (payload on stdin,
                                                           stdout the result, exit 0 completes)
  fenceq job check                                         in CMD: exit 0 only while its claim is current

Output is for people; --json prints JSON for scripts. Exit status: 0 done,
1 refused by the server or an error, 2 a usage mistake.

Run "fenceq COMMAND --help" (or "fenceq help COMMAND") for a command's flags
("fenceq serve --help" for the server's). Every flag can also be set by an environment variable:
--max-lease is FENCEQ_MAX_LEASE, and so on. A flag on the command line wins
over the environment.
`

// run is main without the process: arguments, output streams and a context
// that ends on SIGINT/SIGTERM.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cmd := "serve"
	// "-h" and "--help" first are the general help, not serve's flags.
	if len(args) > 0 && (!strings.HasPrefix(args[0], "-") || args[0] == "-h" || args[0] == "--help" || args[0] == "--version") {
		cmd, args = args[0], args[1:]
	}
	switch cmd {
	case "--version":
		cmd = "version"
	case "help", "-h", "--help":
		if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
			// "fenceq help lease acquire" is "fenceq lease acquire --help".
			return run(ctx, append(append([]string{}, args...), "--help"), stdout, stderr)
		}
		fmt.Fprint(stdout, usage)
		return nil
	}
	if c, ok := mainCommands[cmd]; ok {
		return c(ctx, args, stdout, stderr)
	}
	return cli.Run(ctx, cmd, args, cli.Env{Stdin: os.Stdin, Stdout: stdout, Stderr: stderr})
}

// mainCommands are the commands of package main; every other command is
// internal/cli's (cli.Names), and "help" is run's own.
var mainCommands = map[string]func(ctx context.Context, args []string, stdout, stderr io.Writer) error{
	"serve":   serve,
	"bench":   bench.Command,
	"copy":    cli.Copy,
	"migrate": cli.Migrate,
	"version": func(_ context.Context, args []string, stdout, stderr io.Writer) error {
		return versionCommand(args, stdout, stderr)
	},
}

type serveConfig struct {
	listen         string
	requireFencing bool
	defaultLease   time.Duration
	maxLease       time.Duration
	maxPayload     int
	maxBody        int64
	shutdownWait   time.Duration
	authFile       string
	insecure       bool
	tlsCert        string
	tlsKey         string
	readHeader     time.Duration
	readTimeout    time.Duration
	writeTimeout   time.Duration
	stallTimeout   time.Duration
	idleTimeout    time.Duration
	maxHeaderBytes int
	retention      time.Duration
	sweepEvery     time.Duration
	logFormat      string
	logLevel       string
	auditRetention time.Duration
}

func serve(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var cfg serveConfig
	fs := cli.NewFlagSet("fenceq serve", stderr)
	ef := engine.AddFlags(fs) // --db, --commit-settle, --max-db-size
	fs.StringVar(&cfg.listen, "listen", "127.0.0.1:7420", "address to serve HTTP on (port 0 picks a free port)")
	fs.BoolVar(&cfg.requireFencing, "require-fencing", false, "refuse heartbeat, complete and fail without a fencing_token")
	fs.DurationVar(&cfg.defaultLease, "default-lease", 30*time.Second, "lease of a claim or heartbeat that gives no lease_ms")
	fs.DurationVar(&cfg.maxLease, "max-lease", time.Hour, "longest lease a worker may ask for")
	fs.IntVar(&cfg.maxPayload, "max-payload", 1<<20, "largest job payload or result, in bytes")
	fs.Int64Var(&cfg.maxBody, "max-body", 4<<20, "largest request body, in bytes")
	fs.DurationVar(&cfg.shutdownWait, "shutdown-timeout", 30*time.Second, "on SIGINT/SIGTERM, how long in-flight requests may take to finish before their connections are closed (waiting claims and lease acquires are answered at once; a second signal exits at once)")
	fs.StringVar(&cfg.authFile, "auth-file", "", "principals file: one \"name roles sha256-of-token\" a line; without it every request is principal \"local\" and only loopback addresses may be served")
	fs.BoolVar(&cfg.insecure, "insecure", false, "allow a non-loopback --listen without --auth-file")
	fs.StringVar(&cfg.tlsCert, "tls-cert", "", "TLS certificate file (PEM); serve HTTPS with --tls-key")
	fs.StringVar(&cfg.tlsKey, "tls-key", "", "TLS private key file (PEM)")
	fs.DurationVar(&cfg.readHeader, "read-header-timeout", 5*time.Second, "time allowed to read a request's headers")
	fs.DurationVar(&cfg.readTimeout, "read-timeout", 30*time.Second, "time allowed to read a whole request")
	fs.DurationVar(&cfg.writeTimeout, "write-timeout", 90*time.Second, "time allowed to write a response (above the longest long-poll wait)")
	fs.DurationVar(&cfg.stallTimeout, "stall-timeout", 30*time.Second, "a streamed download (GET /v1/backup, /v1/audit/archive) may outlast --write-timeout while its client reads; one whose client stops reading for this long is cut (on bbolt a commit that grows the file waits up to this long for a stalled backup)")
	fs.DurationVar(&cfg.idleTimeout, "idle-timeout", 2*time.Minute, "how long an idle keep-alive connection stays open")
	fs.IntVar(&cfg.maxHeaderBytes, "max-header-bytes", 64<<10, "largest request header block, in bytes")
	fs.DurationVar(&cfg.retention, "retention", 7*24*time.Hour, "completed and cancelled jobs are deleted this long after they finished (0 keeps them)")
	fs.DurationVar(&cfg.sweepEvery, "sweep-interval", time.Minute, "how often the retention sweeper runs")
	fs.StringVar(&cfg.logFormat, "log-format", "text", "log lines as text (key=value) or json (one object a line)")
	fs.StringVar(&cfg.logLevel, "log-level", "info", "least severe log level written: debug (also one line per request), info, warn or error")
	fs.DurationVar(&cfg.auditRetention, "audit-retention", 0, "audit records older than this may be moved out by \"fenceq audit archive\" (archived to a file, then removed); 0 keeps every record for ever")
	cli.SetUsage(fs, stdout, "fenceq [serve] [flags]", "Serve the HTTP API, the status page and /metrics over a bbolt file (--db, created if missing)\n"+
		"or a PostgreSQL database (--db postgres://…, shared by several servers). Ctrl-C or SIGTERM\n"+
		"stops it gracefully (docs/operations.md, docs/edge.md).")
	if err := cli.ParseWithEnv(fs, args); err != nil {
		return err
	}
	opts, err := ef.Options(db.Rules{DefaultLease: cfg.defaultLease, MaxLease: cfg.maxLease,
		MaxPayloadBytes: cfg.maxPayload, RequireFencing: cfg.requireFencing})
	if err != nil {
		return cli.Usagef("%v", err)
	}
	if (cfg.tlsCert == "") != (cfg.tlsKey == "") {
		return cli.Usagef("--tls-cert and --tls-key go together")
	}
	var principals *api.Principals
	if cfg.authFile != "" {
		f, err := os.Open(cfg.authFile)
		if err != nil {
			return fmt.Errorf("auth file: %w", err)
		}
		principals, err = api.ParsePrincipals(f)
		f.Close()
		if err != nil {
			return fmt.Errorf("%s: %w", cfg.authFile, err)
		}
	} else if !cfg.insecure && !isLoopback(cfg.listen) {
		return cli.Usagef("refusing to serve %s without --auth-file: anyone who can reach it could claim, complete and cancel jobs; "+
			"give --auth-file (see \"fenceq token new\"), listen on 127.0.0.1, or pass --insecure if the network is trusted", cfg.listen)
	}
	if cfg.stallTimeout <= 0 {
		return cli.Usagef("--stall-timeout must be positive")
	}
	if cfg.auditRetention < 0 {
		return cli.Usagef("--audit-retention must not be negative (0 keeps every audit record)")
	}
	if cfg.defaultLease <= 0 || cfg.maxLease <= 0 || cfg.defaultLease > cfg.maxLease {
		return cli.Usagef("--default-lease and --max-lease must be positive, and the default at most the max")
	}
	logger, err := newLogger(cfg.logFormat, cfg.logLevel, stderr)
	if err != nil {
		return err
	}
	for _, ig := range ef.Ignored() { // a warning, not a refusal: replicas share environments during upgrades
		logger.Warn(ig.String(), "flag", "--"+ig.Flag, "engine", ig.Engine.String())
	}

	// Listen before opening the store: a start that fails on a taken port
	// must not leave a new, empty --db file behind.
	ln, err := net.Listen("tcp", cfg.listen)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", cfg.listen, err)
	}
	defer ln.Close()

	// FENCEQ_TEST_NOSYNC=1 is for the power-loss test's control only
	// (docs/powerloss.md): commits are acknowledged unsynced.
	opts.NoSync = os.Getenv("FENCEQ_TEST_NOSYNC") == "1"
	if opts.NoSync {
		logger.Warn("FENCEQ_TEST_NOSYNC=1: commits are not synced, a power cut loses acknowledged writes (for tests only)")
	}
	store, err := engine.Open(ctx, ef.DB, opts) // the one place that picks an engine
	if err != nil {
		return err
	}
	defer store.Close()

	handler := api.New(store, api.Config{MaxBodyBytes: cfg.maxBody, Logger: logger, Index: web.Handler(),
		Principals: principals, WriteTimeout: cfg.writeTimeout, StallTimeout: cfg.stallTimeout, AuditRetention: cfg.auditRetention})
	srv := &http.Server{
		Handler:           handler,
		ReadHeaderTimeout: cfg.readHeader,
		ReadTimeout:       cfg.readTimeout,
		WriteTimeout:      cfg.writeTimeout,
		IdleTimeout:       cfg.idleTimeout,
		MaxHeaderBytes:    cfg.maxHeaderBytes,
		Protocols:         api.Protocols(), // HTTP/1.1, HTTP/2 and h2c for gRPC (api/rpc.go)
		ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
	}
	scheme := "http"
	if cfg.tlsCert != "" {
		scheme = "https"
	}
	logger.Info("fenceq serving", "listen", scheme+"://"+ln.Addr().String(), "db", engine.Display(ef.DB), "engine", ef.Kind().String(), "version", buildinfo.Read().Version,
		"require_fencing", cfg.requireFencing, "auth", principals != nil, "max_db_size", opts.MaxSize)

	if cfg.retention > 0 && cfg.sweepEvery > 0 {
		go sweepLoop(ctx, store, cfg.retention, cfg.sweepEvery, logger)
	}
	stopTicks := startTicks(store, handler, cfg.writeTimeout, logger) // ticks.go

	served := make(chan error, 1)
	go func() {
		if cfg.tlsCert != "" {
			served <- srv.ServeTLS(ln, cfg.tlsCert, cfg.tlsKey)
			return
		}
		served <- srv.Serve(ln)
	}()
	select {
	case err := <-served:
		stopTicks()
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	// No tick is decided once the shutdown starts (another replica, or
	// the next start, decides it); the loop has returned before the store
	// closes.
	stopTicks()
	shutdown(srv, store, cfg.shutdownWait, logger) // shutdown.go
	if err := store.Close(); err != nil {
		return fmt.Errorf("close %s: %w", engine.Display(ef.DB), err)
	}
	logger.Info("stopped", "db", engine.Display(ef.DB))
	return nil
}

// isLoopback reports whether a listen address only accepts connections from
// this machine. An empty host (all interfaces) is not loopback.
func isLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// sweepLoop deletes finished jobs past their retention, in small
// transactions (db.DefaultSweepBatch jobs each) that share commits with
// the traffic and never hold the writer long.
func sweepLoop(ctx context.Context, store db.Store, retention, every time.Duration, logger *slog.Logger) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		n, err := store.Sweep(ctx, retention)
		if err != nil && ctx.Err() == nil {
			logger.Warn("retention sweep failed", "err", err)
		} else if n > 0 {
			logger.Info("retention sweep", "deleted", n, "retention", retention)
		}
	}
}

// The collector's defaults, each used unless its variable (GOGC,
// GOMEMLIMIT) is set. The live heap of a server is small (records live in
// bbolt's mmap, not on the heap), so at Go's default GOGC of 100 the
// collector runs every few hundred requests; a higher GOGC lets the heap
// grow further between collections, and the soft memory limit bounds that
// growth under large batch enqueues. The measurements behind both numbers
// are in docs/performance.md ("GC settings").
const (
	gcPercentDefault   = 400
	memoryLimitDefault = 64 << 20
)

func setGCDefault() {
	if _, set := os.LookupEnv("GOGC"); !set {
		debug.SetGCPercent(gcPercentDefault)
	}
	if _, set := os.LookupEnv("GOMEMLIMIT"); !set {
		debug.SetMemoryLimit(memoryLimitDefault)
	}
}
