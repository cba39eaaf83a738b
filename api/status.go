package api

import (
	"context"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/fenceq/fenceq/db"
	"github.com/labstack/echo/v4"
)

// StatusStore is the read side the status page and the metrics need, on
// top of the operations of Store.
type StatusStore interface {
	ListJobsInState(ctx context.Context, req db.StateListRequest) ([]db.Job, error)
	ListAuditBySubject(ctx context.Context, req db.AuditSubjectRequest) (db.AuditPage, error)
	AuditHead(ctx context.Context) (db.AuditHead, error)
	AuditCounts(ctx context.Context) (db.AuditCounts, error)
}

// Throughput is kept in memory as counts per 10-second bucket over the
// last ten minutes.
const (
	throughputBucket  = 10 * time.Second
	throughputBuckets = 60
	// maxZombies is how many refused stale calls the status page keeps.
	maxZombies = 100
	// defaultStatusLimit bounds each list of GET /v1/status.
	defaultStatusLimit = 50
)

// observer records what the API did: claims, completions and failures that
// committed (for the throughput chart and the counters in /metrics) and
// fenced calls that were refused (the zombies). It sees the calls through
// observedStore (jobs.go), so the handlers need not know about it.
type observer struct {
	now func() time.Time

	mu          sync.Mutex
	ring        [throughputBuckets]throughputCounts
	zombies     []zombie // the newest maxZombies, oldest first
	claims      uint64
	completions uint64
	failures    map[string]uint64 // by outcome: "retry", "dead"
	refusals    map[string]uint64 // by operation: "heartbeat", "complete", "fail"
}

func newObserver(now func() time.Time) *observer {
	return &observer{now: now, failures: map[string]uint64{}, refusals: map[string]uint64{}}
}

// throughputCounts is one bucket of the throughput ring.
type throughputCounts struct {
	Start       time.Time `json:"start"`
	Claims      uint64    `json:"claims"`
	Completions uint64    `json:"completions"`
	Failures    uint64    `json:"failures"`
}

func bucketStart(t time.Time) time.Time { return t.Truncate(throughputBucket) }

func bucketIndex(start time.Time) int {
	return int((start.Unix() / int64(throughputBucket/time.Second)) % throughputBuckets)
}

// bucket returns the current bucket, emptied if it holds an older period.
// o.mu must be held.
func (o *observer) bucket() *throughputCounts {
	start := bucketStart(o.now())
	b := &o.ring[bucketIndex(start)]
	if !b.Start.Equal(start) {
		*b = throughputCounts{Start: start}
	}
	return b
}

func (o *observer) claimed(n int) {
	if n == 0 {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	o.claims += uint64(n)
	o.bucket().Claims += uint64(n)
}

func (o *observer) completed() {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.completions++
	o.bucket().Completions++
}

func (o *observer) failed(outcome db.State) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if outcome == db.StateDead {
		o.failures["dead"]++
	} else {
		o.failures["retry"]++
	}
	o.bucket().Failures++
}

// throughput returns the ring, oldest bucket first, the current one last;
// buckets nothing happened in are zeros.
func (o *observer) throughput() []throughputCounts {
	o.mu.Lock()
	defer o.mu.Unlock()
	cur := bucketStart(o.now())
	out := make([]throughputCounts, throughputBuckets)
	for i := range out {
		start := cur.Add(-time.Duration(throughputBuckets-1-i) * throughputBucket)
		if b := o.ring[bucketIndex(start)]; b.Start.Equal(start) {
			out[i] = b
		} else {
			out[i] = throughputCounts{Start: start}
		}
		out[i].Start = out[i].Start.UTC()
	}
	return out
}

// zombie is a heartbeat, completion or failure that was refused because
// its caller no longer held the claim: a worker paused past its lease, or
// a restarted one acting on an old claim.
type zombie struct {
	At        time.Time `json:"at"`
	Principal string    `json:"principal"`
	Worker    string    `json:"worker"`
	Job       uint64    `json:"job"`
	Operation string    `json:"operation"`
	// TokenSent is the fencing token the call carried (0: none given).
	TokenSent uint64 `json:"token_sent"`
	// TokenCurrent, JobState and HeldBy are the job as it is now, read
	// when the status is served (withJobNow), not when the call was
	// refused: a job completed since reads "completed", not "claimed by"
	// the claim that refused the call. TokenCurrent is the job's attempts,
	// the token of its current (or last) claim; all three are empty when
	// the job is gone.
	TokenCurrent uint64 `json:"token_current"`
	JobState     string `json:"job_state,omitempty"`
	HeldBy       string `json:"held_by,omitempty"`
	Code         string `json:"code"`
	Message      string `json:"message"`
}

// withJobNow fills the current state of each zombie's job (one read per
// job); a job that is gone leaves the fields empty.
func (s *Server) withJobNow(ctx context.Context, zs []zombie) ([]zombie, error) {
	jobs := map[uint64]*db.Job{}
	for i := range zs {
		z := &zs[i]
		job, seen := jobs[z.Job]
		if !seen {
			j, err := s.store.GetJob(ctx, z.Job)
			switch {
			case err == nil:
				job = &j
			case db.ErrorCode(err) != db.CodeNotFound:
				return nil, err
			}
			jobs[z.Job] = job
		}
		z.TokenCurrent, z.JobState, z.HeldBy = 0, "", ""
		if job != nil {
			z.TokenCurrent, z.JobState, z.HeldBy = job.Attempts, string(job.State), job.ClaimedBy
		}
	}
	return zs, nil
}

func (o *observer) refused(z zombie) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.refusals[z.Operation]++
	if len(o.zombies) == maxZombies {
		o.zombies = append(o.zombies[:0], o.zombies[1:]...)
	}
	o.zombies = append(o.zombies, z)
}

// recentZombies returns up to limit zombies, newest first.
func (o *observer) recentZombies(limit int) []zombie {
	o.mu.Lock()
	defer o.mu.Unlock()
	out := make([]zombie, 0, min(limit, len(o.zombies)))
	for i := len(o.zombies) - 1; i >= 0 && len(out) < limit; i-- {
		out = append(out, o.zombies[i])
	}
	return out
}

// observedCounts is a copy of the observer's counters.
type observedCounts struct {
	claims, completions uint64
	failures, refusals  map[string]uint64
}

func (o *observer) counts() observedCounts {
	o.mu.Lock()
	defer o.mu.Unlock()
	c := observedCounts{claims: o.claims, completions: o.completions,
		failures: map[string]uint64{}, refusals: map[string]uint64{}}
	for k, v := range o.failures {
		c.failures[k] = v
	}
	for k, v := range o.refusals {
		c.refusals[k] = v
	}
	return c
}

// caller is the principal of the request with its roles: every role when
// the server runs without principals.
func (s *Server) caller(c echo.Context) Principal {
	if p, ok := c.Get(rolesKey).(Principal); ok {
		return p
	}
	return Principal{Name: principalOf(c), Roles: slices.Clone(allRoles)}
}

// may reports whether p passes the role check of route ("METHOD path"), by
// the same table the authentication middleware uses.
func (s *Server) may(p Principal, route string) bool {
	if s.cfg.Principals == nil {
		return true
	}
	need, ok := routeRoles[route]
	if !ok {
		need = RoleAdmin
	}
	return need == anyRole || p.Has(need)
}

// permissions says which parts of the page the caller may see and which
// buttons it may press.
type permissions struct {
	Jobs    bool `json:"jobs"`    // GET /v1/jobs and the job lists
	Enqueue bool `json:"enqueue"` // POST /v1/jobs
	Retry   bool `json:"retry"`
	Cancel  bool `json:"cancel"`
	Leases  bool `json:"leases"`
	Audit   bool `json:"audit"`
}

type whoamiResponse struct {
	Now       time.Time   `json:"now"` // the server's clock, for the page's countdowns
	Principal string      `json:"principal"`
	Roles     []Role      `json:"roles"`
	Auth      bool        `json:"auth"` // bearer tokens are required
	Can       permissions `json:"can"`
}

func (s *Server) whoamiOf(c echo.Context) whoamiResponse {
	p := s.caller(c)
	return whoamiResponse{Now: s.cfg.Now().UTC(), Principal: p.Name, Roles: p.Roles, Auth: s.cfg.Principals != nil, Can: permissions{
		Jobs:    s.may(p, "GET /v1/jobs"),
		Enqueue: s.may(p, "POST /v1/jobs"),
		Retry:   s.may(p, "POST /v1/jobs/:id/retry"),
		Cancel:  s.may(p, "POST /v1/jobs/:id/cancel"),
		Leases:  s.may(p, "GET /v1/leases"),
		Audit:   s.may(p, "GET /v1/audit/verify"),
	}}
}

// whoami: GET /v1/whoami → the caller's principal, roles and permissions.
func (s *Server) whoami(c echo.Context) error {
	return c.JSON(http.StatusOK, s.whoamiOf(c))
}

type jobListResponse struct {
	Jobs []jobResponse `json:"jobs"`
	// Total is how many jobs are in the state, from the counters; Jobs
	// holds at most the request's limit of them.
	Total uint64 `json:"total"`
}

type auditStatusResponse struct {
	HeadSeq  uint64 `json:"head_seq"`
	HeadHash string `json:"head_hash"`
	// Verified is the last walk of the whole chain; nil until one finished.
	Verified *auditVerifiedResponse `json:"verified"`
}

type auditVerifiedResponse struct {
	auditReportResponse
	CheckedAt time.Time `json:"checked_at"`
}

type statusResponse struct {
	whoamiResponse
	// A part the caller may not see is left out; one it may see but
	// that is empty is an empty list (omitzero, not omitempty).
	Queues     []queueResponse    `json:"queues,omitzero"`
	Throughput []throughputCounts `json:"throughput,omitzero"`
	// BucketSeconds is the width of a throughput bucket.
	BucketSeconds int                  `json:"bucket_seconds"`
	Claimed       *jobListResponse     `json:"claimed,omitempty"`
	Scheduled     *jobListResponse     `json:"scheduled,omitempty"`
	Dead          *jobListResponse     `json:"dead,omitempty"`
	Zombies       []zombie             `json:"zombies,omitzero"`
	Leases        []leaseResponse      `json:"leases,omitzero"`
	Audit         *auditStatusResponse `json:"audit,omitempty"`
}

// status: GET /v1/status?limit= → everything the status page shows, in one
// reply the page polls. Each part is there only when the caller's roles
// allow the endpoint that serves it (queues and jobs: GET /v1/jobs; leases:
// GET /v1/leases; the audit head: GET /v1/audit/verify), so the page never
// shows more than the caller could fetch itself. Each list holds at most
// limit entries (default 50, at most db.MaxListLimit). The parts are read
// in separate read transactions, so a list may differ by a job or two from
// the counts read a moment earlier.
func (s *Server) status(c echo.Context) error {
	limit := defaultStatusLimit
	if v := c.QueryParam("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > db.MaxListLimit {
			return invalidArgument("limit %q must be an integer between 1 and %d", v, db.MaxListLimit)
		}
		limit = n
	}
	ctx := c.Request().Context()
	out := statusResponse{whoamiResponse: s.whoamiOf(c),
		BucketSeconds: int(throughputBucket / time.Second)}
	if out.Can.Jobs {
		stats, err := s.store.Stats(ctx)
		if err != nil {
			return err
		}
		totals := map[db.State]uint64{}
		out.Queues = []queueResponse{}
		for _, q := range stats {
			counts := map[db.State]uint64{}
			for _, st := range db.States {
				counts[st] = q.Counts[st]
				totals[st] += q.Counts[st]
			}
			out.Queues = append(out.Queues, queueResponse{Queue: q.Queue, Counts: counts})
		}
		out.Throughput = s.obs.throughput()
		lists := []struct {
			dst   **jobListResponse
			state db.State
		}{
			{&out.Claimed, db.StateClaimed},
			{&out.Scheduled, db.StateScheduled},
			{&out.Dead, db.StateDead},
		}
		for _, l := range lists {
			jobs, err := s.store.ListJobsInState(ctx, db.StateListRequest{State: l.state, Limit: limit})
			if err != nil {
				return err
			}
			*l.dst = &jobListResponse{Jobs: toJobsResponse(jobs).Jobs, Total: totals[l.state]}
		}
		if out.Zombies, err = s.withJobNow(ctx, s.obs.recentZombies(limit)); err != nil {
			return err
		}
	}
	if out.Can.Leases {
		page, err := s.store.ListLeases(ctx, db.ListLeasesRequest{Limit: limit})
		if err != nil {
			return err
		}
		out.Leases = make([]leaseResponse, 0, len(page.Leases))
		for _, l := range page.Leases {
			out.Leases = append(out.Leases, toLeaseResponse(l))
		}
	}
	if out.Can.Audit {
		head, err := s.store.AuditHead(ctx)
		if err != nil {
			return err
		}
		out.Audit = &auditStatusResponse{HeadSeq: head.Seq, HeadHash: head.Hash, Verified: s.auditVerified(ctx, head)}
	}
	return c.JSON(http.StatusOK, out)
}

// auditCheck caches the last walk of the whole audit chain: the walk is
// O(records), too much for every poll of the page.
type auditCheck struct {
	run sync.Mutex // held by the one request that walks the chain

	mu  sync.Mutex
	rep db.AuditReport
	at  time.Time // zero until a walk finished
}

// auditVerified returns the last verification, first walking the chain
// again when none was made yet, or the last is older than
// cfg.AuditVerifyInterval and the chain has grown since, or it is older
// than ten intervals. One request walks; the others meanwhile get the last
// result (nil before the first).
func (s *Server) auditVerified(ctx context.Context, head db.AuditHead) *auditVerifiedResponse {
	ac := &s.audit
	ac.mu.Lock()
	rep, at := ac.rep, ac.at
	ac.mu.Unlock()
	age := s.cfg.Now().Sub(at)
	stale := at.IsZero() || (age >= s.cfg.AuditVerifyInterval && head.Seq != rep.HeadSeq) ||
		age >= 10*s.cfg.AuditVerifyInterval
	if stale && ac.run.TryLock() {
		fresh, err := s.store.VerifyAudit(ctx)
		if err == nil {
			rep, at = fresh, s.cfg.Now()
			ac.mu.Lock()
			ac.rep, ac.at = rep, at
			ac.mu.Unlock()
		} else {
			s.log.Warn("audit verification for the status page failed", "err", err)
		}
		ac.run.Unlock()
	}
	if at.IsZero() {
		return nil
	}
	if !rep.OK {
		s.log.Error("audit chain does not verify", "first_broken", rep.FirstBroken, "reason", rep.Reason)
	}
	return &auditVerifiedResponse{auditReportResponse: auditReportJSON(rep), CheckedAt: at.UTC()}
}

// jobHistory: GET /v1/jobs/{id}/history?before=&limit= → the job's audit
// records, newest first, and "next" (the "before" of the next page). It
// answers for a job that was swept too: its records outlive it.
func (s *Server) jobHistory(c echo.Context) error {
	id, err := pathID(c)
	if err != nil {
		return err
	}
	req := db.AuditSubjectRequest{Subject: db.JobSubject(id)}
	if err := queryUint(c, "before", &req.Before); err != nil {
		return err
	}
	if err := queryInt(c, "limit", &req.Limit); err != nil {
		return err
	}
	page, err := s.store.ListAuditBySubject(c.Request().Context(), req)
	if err != nil {
		return err
	}
	out := struct {
		Records []auditRecordResponse `json:"records"`
		Next    uint64                `json:"next,omitempty"`
	}{Records: make([]auditRecordResponse, 0, len(page.Records)), Next: page.Next}
	for _, r := range page.Records {
		out.Records = append(out.Records, auditRecordResponse(r))
	}
	return c.JSON(http.StatusOK, out)
}
