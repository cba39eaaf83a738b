// Package api serves fenceq's v1 HTTP API with echo. It consumes the small
// Store interface below, which every db.Store satisfies, maps the store's errors
// to API codes in one table (errors.go), and never decides queue rules
// itself: those live in db and lease.
package api

import (
	"context"
	"log/slog"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/fenceq/fenceq/db"
	"github.com/labstack/echo/v4"
)

// Store is the set of operations the API needs; every db.Store (any
// engine) has them. Engine-only extras are optional: a store that is also
// a db.Backuper serves GET /v1/backup, and one that is a
// prometheus.Collector adds its own figures to /metrics.
type Store interface {
	EnqueueJobs(ctx context.Context, reqs []db.EnqueueRequest) ([]db.EnqueueResult, error)
	ClaimJobs(ctx context.Context, req db.ClaimRequest) ([]db.Job, error)
	HeartbeatJob(ctx context.Context, req db.HeartbeatRequest) (db.Job, error)
	CompleteJob(ctx context.Context, req db.CompleteRequest) (db.Job, error)
	CompleteAndClaimJob(ctx context.Context, req db.CompleteRequest, next db.ClaimRequest) (db.Job, []db.Job, error)
	FailJob(ctx context.Context, req db.FailRequest) (db.Job, error)
	HeartbeatJobs(ctx context.Context, reqs []db.HeartbeatRequest) ([]db.ItemResult, error)
	CompleteJobs(ctx context.Context, req db.CompleteBatchRequest) (db.CompleteBatchResult, error)
	FailJobs(ctx context.Context, reqs []db.FailRequest) ([]db.ItemResult, error)
	CancelJob(ctx context.Context, req db.JobRequest) (db.Job, error)
	RetryJob(ctx context.Context, req db.JobRequest) (db.Job, error)
	GetJob(ctx context.Context, id uint64) (db.Job, error)
	ListJobs(ctx context.Context, req db.ListRequest) (db.JobPage, error)
	Stats(ctx context.Context) ([]db.QueueStats, error)
	SetQueuePaused(ctx context.Context, req db.PauseRequest) (db.PauseResult, error)
	PausedQueues(ctx context.Context) ([]db.QueuePause, error)
	Ping(ctx context.Context) error
	ListAudit(ctx context.Context, after uint64, limit int) ([]db.AuditRecord, error)
	VerifyAudit(ctx context.Context) (db.AuditReport, error)
	VerifyAuditFrom(ctx context.Context, req db.AuditVerifyRequest) (db.AuditReport, error)
	RemoveAudit(ctx context.Context, req db.RemoveAuditRequest) (db.AuditCheckpoint, error)
	ArchiveAudit(ctx context.Context, req db.ArchiveAuditRequest, start func(db.AuditCheckpoint) error, add func(db.AuditRecord) error) error

	// Named leases and token checks (leases.go).
	AcquireLease(ctx context.Context, req db.AcquireLeaseRequest) (db.Lease, error)
	RenewLease(ctx context.Context, req db.RenewLeaseRequest) (db.Lease, error)
	ReleaseLease(ctx context.Context, req db.ReleaseLeaseRequest) (db.Lease, error)
	CheckLease(ctx context.Context, name string, token uint64) (db.Lease, error)
	GetLease(ctx context.Context, name string) (db.Lease, error)
	ListLeases(ctx context.Context, req db.ListLeasesRequest) (db.LeasePage, error)
	CheckJob(ctx context.Context, id, token uint64) (db.Job, error)

	// The status page and metrics (status.go).
	StatusStore

	// Periodic jobs (schedules.go).
	db.Schedules
}

var _ Store = db.Store(nil)

// Config configures a Server.
type Config struct {
	// MaxBodyBytes bounds every request body. Default 4 MiB.
	MaxBodyBytes int64
	// Logger receives refusals and internal errors. Default slog.Default().
	Logger *slog.Logger
	// Index serves "/" (the status page). Optional.
	Index http.Handler
	// MaxWait caps a claim's and a lease acquire's wait_ms so that a
	// long-poll answers before the server's write timeout cuts it. Default
	// four fifths of WriteTimeout when that is set, else db.MaxWait.
	MaxWait time.Duration
	// WriteTimeout is the HTTP server's write timeout, if it has one. Every
	// request then gets a deadline at nine tenths of it: a mutation whose
	// turn to commit has not come by then is answered 503 unavailable with
	// nothing written, so no caller is left without a reply for something
	// that was committed.
	WriteTimeout time.Duration
	// StallTimeout is how long a streamed download (GET /v1/backup, GET
	// /v1/audit/archive) may wait for a client that stopped reading
	// before its connection is cut. These two have no overall deadline: a
	// download may outlast WriteTimeout as long as the client keeps
	// reading; each write must go through within StallTimeout. It also
	// bounds how long a stalled backup holds its read transaction (on
	// bbolt, a commit that grows the file waits for it). Default 30s.
	StallTimeout time.Duration
	// MetricsMaxQueues bounds the queues /metrics reports one by one: the
	// largest ones by job count; the rest are summed as queue "(other)",
	// which no queue can be named. Schedules are bounded by it too (the
	// first ones in name order; the rest as schedule "(other)"). Default 100.
	MetricsMaxQueues int
	// Principals enables bearer-token authentication and roles. Nil: every
	// request is principal "local" with every role (loopback use).
	Principals *Principals
	// Now is the clock of the status page (throughput buckets, zombie
	// times). Default time.Now.
	Now func() time.Time
	// AuditVerifyInterval is how often, at most, the status page verifies
	// the audit records appended since its last check (status.go).
	// Default 30s.
	AuditVerifyInterval time.Duration
	// AuditRetention is how old an audit record must be before GET
	// /v1/audit/archive hands it out and POST /v1/audit/archive/remove
	// removes it (audit_archive.go). 0, the default, keeps every record
	// for ever: both endpoints refuse.
	AuditRetention time.Duration
}

// Server is the HTTP API.
type Server struct {
	store    Store
	engine   Store // the store as given, for its optional extras (Backuper, prometheus.Collector)
	cfg      Config
	log      *slog.Logger
	echo     *echo.Echo
	refusals refusalCounter
	obs      *observer  // claims, completions, failures, zombies (status.go)
	audit    auditCheck // the status page's cached chain walk
	metrics  *metrics   // GET /metrics (metrics.go)
	rpc      *rpcFront  // the protobuf API (rpc.go)

	scheduleWake atomic.Pointer[func()] // the tick loop's wake (schedules.go)
}

// New returns the API server for store.
func New(store Store, cfg Config) *Server {
	if cfg.MaxBodyBytes <= 0 {
		cfg.MaxBodyBytes = 4 << 20
	}
	if cfg.MaxWait <= 0 && cfg.WriteTimeout > 0 {
		cfg.MaxWait = cfg.WriteTimeout * 4 / 5
	}
	if cfg.MaxWait <= 0 || cfg.MaxWait > db.MaxWait {
		cfg.MaxWait = db.MaxWait
	}
	if cfg.MetricsMaxQueues <= 0 {
		cfg.MetricsMaxQueues = 100
	}
	if cfg.StallTimeout <= 0 {
		cfg.StallTimeout = 30 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.AuditVerifyInterval <= 0 {
		cfg.AuditVerifyInterval = 30 * time.Second
	}
	obs := newObserver(cfg.Now)
	log := slog.New(requestIDHandler{cfg.Logger.Handler()})
	s := &Server{store: observedStore{store, obs, log}, engine: store, cfg: cfg, log: log,
		echo: echo.New(), obs: obs}
	s.initMetrics()
	s.initRPC()
	e := s.echo
	e.HideBanner, e.HidePort = true, true
	e.HTTPErrorHandler = s.handleError
	e.JSONSerializer = replySerializer{}
	e.Pre(headAsGet)
	e.Use(restoreHead, s.requestIDs, s.instrument, s.deadline) // requestid.go
	if cfg.Principals != nil {
		e.Use(s.limitBody, s.authenticate)
	} else {
		e.Use(s.limitBody, s.localPrincipal)
	}

	e.GET("/healthz", s.healthz)
	e.GET("/readyz", s.readyz)
	e.GET("/openapi.json", s.openAPI) // openapi.go
	v1 := e.Group("/v1")
	v1.POST("/jobs", s.enqueue)
	v1.GET("/jobs", s.listJobs)
	v1.GET("/jobs/:id", s.getJob)
	v1.POST("/jobs/:id/cancel", s.cancel)
	v1.POST("/jobs/:id/retry", s.retry)
	v1.POST("/jobs/:id/heartbeat", s.heartbeat)
	v1.POST("/jobs/:id/complete", s.complete)
	v1.POST("/jobs/:id/fail", s.fail)
	v1.POST("/jobs/heartbeat", s.heartbeatBatch) // batch.go
	v1.POST("/jobs/complete", s.completeBatch)
	v1.POST("/jobs/fail", s.failBatch)
	v1.POST("/claim", s.claim)
	v1.GET("/queues", s.queues)
	v1.POST("/queues/:queue/pause", s.pauseQueue) // queues.go
	v1.POST("/queues/:queue/resume", s.resumeQueue)
	v1.GET("/stats", s.stats)
	v1.GET("/audit", s.listAudit)
	v1.GET("/audit/verify", s.verifyAudit)
	v1.GET("/audit/archive", s.archiveAudit) // audit_archive.go
	v1.POST("/audit/archive/remove", s.removeArchivedAudit)
	v1.GET("/backup", s.backup)

	// Periodic jobs (schedules.go).
	v1.GET("/schedules", s.listSchedules)
	v1.PUT("/schedules/:name", s.putSchedule)
	v1.GET("/schedules/:name", s.getSchedule)
	v1.DELETE("/schedules/:name", s.deleteSchedule)
	v1.POST("/schedules/:name/pause", s.pauseSchedule)
	v1.POST("/schedules/:name/resume", s.resumeSchedule)
	v1.POST("/schedules/:name/trigger", s.triggerSchedule)

	// Named leases and token checks (leases.go). Lease names may contain
	// slashes: the wildcard routes hand the whole rest of the path to the
	// handlers, which split the action off the end.
	v1.POST("/jobs/:id/check", s.checkJob)
	v1.GET("/leases", s.listLeases)
	v1.GET("/leases/*", s.getLease)
	v1.POST("/leases/*", s.leaseAction)

	// The status page's data and metrics (status.go, metrics.go).
	v1.GET("/status", s.status)
	v1.GET("/whoami", s.whoami)
	v1.GET("/jobs/:id/history", s.jobHistory)
	v1.GET("/jobs/:id/refusals", s.jobRefusals)
	e.GET("/metrics", s.serveMetrics)

	if cfg.Index != nil {
		page := echo.WrapHandler(cfg.Index)
		e.GET("/", page)
		e.GET("/jobs/:id", page)
		e.GET("/assets/*", page)
		e.GET("/favicon.ico", page)
	}
	return s
}

// ServeHTTP makes Server an http.Handler.
// Protobuf requests (rpc.go) go to connect before echo's middleware, which
// answers in JSON that gRPC clients cannot read.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if isRPC(r.URL.Path) {
		s.rpc.ServeHTTP(w, r)
		return
	}
	s.echo.ServeHTTP(w, r)
}

// headKey marks a HEAD request that headAsGet routes as a GET.
const headKey = "fenceq.head"

// headAsGet answers HEAD wherever GET is answered (load balancers and
// monitors send HEAD): before routing, a HEAD request becomes a GET whose
// reply body is discarded, so the status and headers are GET's. A path
// without GET answers HEAD as it answers GET: 405. restoreHead, the first
// middleware after routing, gives the request its method back for logs,
// metrics and refusal counts.
func headAsGet(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		req := c.Request()
		if req.Method != http.MethodHead {
			return next(c)
		}
		req.Method = http.MethodGet
		c.Set(headKey, true)
		res := c.Response()
		res.Writer = bodyless{res.Writer}
		return next(c)
	}
}

func restoreHead(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		if head, _ := c.Get(headKey).(bool); head {
			c.Request().Method = http.MethodHead
		}
		return next(c)
	}
}

// bodyless is a reply writer that sends the headers and status and drops
// the body, as a reply to HEAD must.
type bodyless struct{ http.ResponseWriter }

func (b bodyless) Write(p []byte) (int, error) { return len(p), nil }

// Unwrap lets http.ResponseController reach the connection (deadlines).
func (b bodyless) Unwrap() http.ResponseWriter { return b.ResponseWriter }

// deadline bounds every request below the write timeout (Config.WriteTimeout),
// except the streamed downloads, which have a stall timeout instead
// (streamed).
func (s *Server) deadline(next echo.HandlerFunc) echo.HandlerFunc {
	if s.cfg.WriteTimeout <= 0 {
		return next
	}
	return func(c echo.Context) error {
		if streamed(c) {
			return next(c)
		}
		ctx, cancel := s.requestContext(c.Request().Context())
		defer cancel()
		c.SetRequest(c.Request().WithContext(ctx))
		return next(c)
	}
}

// requestContext is the deadline of every request of both front ends
// (JSON routes and protobuf RPCs): nine tenths of the write timeout, none
// without one.
func (s *Server) requestContext(ctx context.Context) (context.Context, context.CancelFunc) {
	if s.cfg.WriteTimeout <= 0 {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, s.cfg.WriteTimeout*9/10)
}

// streamed reports whether c is a streamed download: GET /v1/backup or GET
// /v1/audit/archive. They may last longer than the write timeout while
// the client keeps reading (backupWriter moves the write deadline by
// Config.StallTimeout before each write), and each store call of theirs is
// bounded on its own (stepContext).
func streamed(c echo.Context) bool {
	if c.Request().Method != http.MethodGet {
		return false
	}
	switch c.Path() {
	case "/v1/backup", "/v1/audit/archive":
		return true
	}
	return false
}

// stepContext bounds one store call of a streamed download as a request
// is bounded (nine tenths of the write timeout).
func (s *Server) stepContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return s.requestContext(ctx)
}

// limitBody caps every request body; reading past the cap fails the decode
// with resource_exhausted.
func (s *Server) limitBody(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		req := c.Request()
		if err := s.checkBodySize(req.ContentLength); err != nil {
			return err
		}
		req.Body = http.MaxBytesReader(c.Response(), req.Body, s.cfg.MaxBodyBytes)
		return next(c)
	}
}

// checkBodySize is the body limit (--max-body) of both front ends: a
// request, or a protobuf message, of n bytes is refused when n is over it.
func (s *Server) checkBodySize(n int64) *Error {
	if n > s.cfg.MaxBodyBytes {
		return &Error{http.StatusRequestEntityTooLarge, "resource_exhausted", "request body is larger than the server's limit"}
	}
	return nil
}

const principalKey = "fenceq.principal"

// LocalPrincipal is the principal of every request when no auth file is used.
const LocalPrincipal = "local"

// localPrincipal treats every request as principal "local" with all roles.
func (s *Server) localPrincipal(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		if c.Get(principalKey) == nil {
			c.Set(principalKey, LocalPrincipal)
		}
		return next(c)
	}
}

func principalOf(c echo.Context) string {
	p, _ := c.Get(principalKey).(string)
	return p
}

func (s *Server) healthz(c echo.Context) error {
	return c.JSON(http.StatusOK, map[string]string{"status": "ok"})
}

func (s *Server) readyz(c echo.Context) error {
	if err := s.store.Ping(c.Request().Context()); err != nil {
		return &Error{http.StatusServiceUnavailable, "unavailable", "store is not ready: " + err.Error()}
	}
	return c.JSON(http.StatusOK, map[string]string{"status": "ready"})
}
