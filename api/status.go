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
	QueueWaiting(ctx context.Context) ([]db.QueueWaiting, error)
	RecordRefusedCalls(ctx context.Context, calls []db.RefusedCall) error
	ListRefusedCalls(ctx context.Context, req db.RefusedCallsRequest) ([]db.RefusedCall, error)
	RecordWorkers(ctx context.Context, sightings []db.WorkerSighting) error
	ListWorkers(ctx context.Context, req db.WorkersRequest) ([]db.Worker, error)
	ListAuditBySubject(ctx context.Context, req db.AuditSubjectRequest) (db.AuditPage, error)
	AuditHead(ctx context.Context) (db.AuditHead, error)
	AuditCounts(ctx context.Context) (db.AuditCounts, error)
}

// Throughput is kept in memory as counts per 10-second bucket over the
// last ten minutes.
const (
	throughputBucket  = 10 * time.Second
	throughputBuckets = 60
	// workerWriteInterval is how often, at most, a server writes what it
	// heard from one worker (claims, heartbeats) to the store: a worker's
	// first call is written at once, later ones at most this often, so a
	// worker heartbeating many jobs costs no write per heartbeat.
	workerWriteInterval = 10 * time.Second
	// maxWorkersTracked bounds the workers a server remembers between
	// writes; one more writes them all and starts afresh.
	maxWorkersTracked = db.MaxObservationBatch
	// defaultStatusLimit bounds each list of GET /v1/status.
	defaultStatusLimit = 50
)

// observer records what the API did: claims, completions and failures that
// committed (for the throughput chart and the counters in /metrics), the
// refusals of fenced calls by operation, and the workers heard from since
// they were last written to the store. It sees the calls through
// observedStore (jobs.go), so the handlers need not know about it. The
// refused calls themselves and the workers are kept in the store, which
// every replica shares.
type observer struct {
	now func() time.Time

	mu          sync.Mutex
	ring        [throughputBuckets]throughputCounts
	workers     map[[2]string]*workerSeen // by principal, worker
	claims      uint64
	completions uint64
	failures    map[string]uint64 // by outcome: "retry", "dead"
	refusals    map[string]uint64 // by operation: "heartbeat", "complete", "fail"
}

func newObserver(now func() time.Time) *observer {
	return &observer{now: now, failures: map[string]uint64{}, refusals: map[string]uint64{},
		workers: map[[2]string]*workerSeen{}}
}

// workerSeen is one worker as this server heard from it: what it has not
// written yet, and when it last wrote.
type workerSeen struct {
	pending db.WorkerSighting // Claims and times since written
	dirty   bool
	written time.Time
}

// sighted notes a claim call (claim true: n jobs claimed) or an accepted
// heartbeat of principal's worker, and returns the sightings to write now:
// this worker's when it was not written for workerWriteInterval (or
// never), or every pending one when the server remembers too many.
func (o *observer) sighted(principal, worker string, claim bool, n int) []db.WorkerSighting {
	if worker == "" {
		return nil
	}
	now := o.now().UTC()
	o.mu.Lock()
	defer o.mu.Unlock()
	k := [2]string{principal, worker}
	w := o.workers[k]
	if w == nil {
		if len(o.workers) >= maxWorkersTracked {
			out := o.takePending()
			clear(o.workers)
			o.workers[k] = &workerSeen{written: now}
			return append(out, sighting(principal, worker, claim, n, now))
		}
		w = &workerSeen{}
		o.workers[k] = w
	}
	if !w.dirty {
		w.pending = db.WorkerSighting{Principal: principal, Worker: worker}
	}
	w.dirty = true
	w.pending.Claims += uint64(n)
	if claim {
		w.pending.LastClaim = now
	} else {
		w.pending.LastHeartbeat = now
	}
	if !w.written.IsZero() && now.Sub(w.written) < workerWriteInterval {
		return nil
	}
	w.written, w.dirty = now, false
	return []db.WorkerSighting{w.pending}
}

func sighting(principal, worker string, claim bool, n int, now time.Time) db.WorkerSighting {
	s := db.WorkerSighting{Principal: principal, Worker: worker, Claims: uint64(n)}
	if claim {
		s.LastClaim = now
	} else {
		s.LastHeartbeat = now
	}
	return s
}

// takePending returns every sighting not written yet and marks them
// written. o.mu must be held.
func (o *observer) takePending() []db.WorkerSighting {
	var out []db.WorkerSighting
	now := o.now()
	for _, w := range o.workers {
		if w.dirty {
			out = append(out, w.pending)
			w.dirty, w.written = false, now
		}
	}
	return out
}

// pendingWorkers returns the sightings this server has not written yet,
// which the status page adds to what the store lists.
func (o *observer) pendingWorkers() []db.WorkerSighting {
	o.mu.Lock()
	defer o.mu.Unlock()
	var out []db.WorkerSighting
	for _, w := range o.workers {
		if w.dirty {
			out = append(out, w.pending)
		}
	}
	return out
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
// a restarted one acting on an old claim. They are kept in the store
// (db.RefusedCall), the newest db.MaxRefusedCalls, so every replica shows
// the same ones and they outlive a restart.
type zombie struct {
	Seq       uint64    `json:"seq"`
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

func toZombies(calls []db.RefusedCall) []zombie {
	out := make([]zombie, 0, len(calls))
	for _, c := range calls {
		out = append(out, zombie{Seq: c.Seq, At: c.At.UTC(), Principal: c.Principal, Worker: c.Worker, Job: c.Job,
			Operation: c.Operation, TokenSent: c.TokenSent, Code: c.Code, Message: c.Message})
	}
	return out
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

// zombies reads the newest refused calls (of job, or of every job when
// it is 0) from the store, with their jobs as they are now.
func (s *Server) zombies(ctx context.Context, job uint64, limit int) ([]zombie, error) {
	calls, err := s.store.ListRefusedCalls(ctx, db.RefusedCallsRequest{Job: job, Limit: limit})
	if err != nil {
		return nil, err
	}
	return s.withJobNow(ctx, toZombies(calls))
}

func (o *observer) refused(ops ...string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, op := range ops {
		o.refusals[op]++
	}
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
	Pause   bool `json:"pause"` // POST /v1/queues/{queue}/pause and /resume
	// Schedules: GET /v1/schedules (the status page's schedules table).
	Schedules bool `json:"schedules"`
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
		Pause:   s.may(p, "POST /v1/queues/:queue/pause"),

		Schedules: s.may(p, "GET /v1/schedules"),
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
	// Verified is the incremental verification of the chain (see
	// auditCheck); nil until its first step finished.
	Verified *auditVerifiedResponse `json:"verified"`
}

type auditVerifiedResponse struct {
	auditReportResponse
	CheckedAt time.Time `json:"checked_at"`
	// CatchingUp: a background walk is verifying the records between
	// verified_seq and the head.
	CatchingUp bool `json:"catching_up,omitempty"`
}

type statusResponse struct {
	whoamiResponse
	// A part the caller may not see is left out; one it may see but
	// that is empty is an empty list (omitzero, not omitempty).
	Queues     []queueResponse    `json:"queues,omitzero"`
	Throughput []throughputCounts `json:"throughput,omitzero"`
	// BucketSeconds is the width of a throughput bucket.
	BucketSeconds int              `json:"bucket_seconds"`
	Claimed       *jobListResponse `json:"claimed,omitempty"`
	// Scheduled lists the scheduled jobs not yet attempted, Retrying those
	// waiting for a retry (they failed before: last_error, and run_at is
	// the next attempt). Both carry the total of every scheduled job.
	Scheduled *jobListResponse     `json:"scheduled,omitempty"`
	Retrying  *jobListResponse     `json:"retrying,omitempty"`
	Dead      *jobListResponse     `json:"dead,omitempty"`
	Zombies   []zombie             `json:"zombies,omitzero"`
	Workers   []workerResponse     `json:"workers,omitzero"`
	Leases    []leaseResponse      `json:"leases,omitzero"`
	Audit     *auditStatusResponse `json:"audit,omitempty"`
	// Schedules in name order (at most limit), for GET /v1/schedules'
	// role.
	Schedules []scheduleResponse `json:"schedules,omitzero"`
}

// workerResponse is a worker heard from: its claim calls and accepted
// heartbeats, through every server of the store.
type workerResponse struct {
	Principal       string     `json:"principal"`
	Worker          string     `json:"worker"`
	Claims          uint64     `json:"claims"`
	FirstSeen       time.Time  `json:"first_seen"`
	LastSeen        time.Time  `json:"last_seen"`
	LastClaimAt     *time.Time `json:"last_claim_at,omitempty"`
	LastHeartbeatAt *time.Time `json:"last_heartbeat_at,omitempty"`
}

// workers lists the workers heard from most recently, up to limit: those
// the store holds, with what this server heard since it last wrote them.
func (s *Server) workers(ctx context.Context, limit int) ([]workerResponse, error) {
	stored, err := s.store.ListWorkers(ctx, db.WorkersRequest{Limit: limit})
	if err != nil {
		return nil, err
	}
	byKey := map[[2]string]int{}
	for i, w := range stored {
		byKey[[2]string{w.Principal, w.Worker}] = i
	}
	for _, p := range s.obs.pendingWorkers() {
		if i, ok := byKey[[2]string{p.Principal, p.Worker}]; ok {
			stored[i] = db.MergeWorker(&stored[i], p)
		} else {
			byKey[[2]string{p.Principal, p.Worker}] = len(stored)
			stored = append(stored, db.MergeWorker(nil, p))
		}
	}
	slices.SortStableFunc(stored, func(a, b db.Worker) int { return b.LastSeen.Compare(a.LastSeen) })
	out := make([]workerResponse, 0, min(limit, len(stored)))
	for _, w := range stored[:min(limit, len(stored))] {
		out = append(out, workerResponse{Principal: w.Principal, Worker: w.Worker, Claims: w.Claims,
			FirstSeen: w.FirstSeen.UTC(), LastSeen: w.LastSeen.UTC(),
			LastClaimAt: optTime(w.LastClaim.UTC()), LastHeartbeatAt: optTime(w.LastHeartbeat.UTC())})
	}
	return out, nil
}

// statusLimit reads ?limit= (default 50, at most db.MaxListLimit).
func statusLimit(c echo.Context) (int, error) {
	limit := defaultStatusLimit
	if v := c.QueryParam("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > db.MaxListLimit {
			return 0, invalidArgument("limit %q must be an integer between 1 and %d", v, db.MaxListLimit)
		}
		limit = n
	}
	return limit, nil
}

// status: GET /v1/status?limit= → everything the status page shows, in one
// reply the page polls. Each part is there only when the caller's roles
// allow the endpoint that serves it (queues, jobs, refused calls and
// workers: GET /v1/jobs; leases: GET /v1/leases; schedules: GET
// /v1/schedules; the audit head: GET /v1/audit/verify), so the page never shows more than the caller could
// fetch itself. Each list holds at most limit entries (default 50, at
// most db.MaxListLimit). The parts are read in separate read
// transactions, so a list may differ by a job or two from the counts read
// a moment earlier.
func (s *Server) status(c echo.Context) error {
	limit, err := statusLimit(c)
	if err != nil {
		return err
	}
	ctx := c.Request().Context()
	out := statusResponse{whoamiResponse: s.whoamiOf(c),
		BucketSeconds: int(throughputBucket / time.Second)}
	if out.Can.Jobs {
		queues, err := s.queueList(ctx)
		if err != nil {
			return err
		}
		if queues, err = s.withLatency(ctx, queues); err != nil {
			return err
		}
		totals := map[db.State]uint64{}
		for _, q := range queues {
			for st, n := range q.Counts {
				totals[st] += n
			}
		}
		out.Queues = queues
		out.Throughput = s.obs.throughput()
		lists := []struct {
			dst   **jobListResponse
			state db.State
			retry db.RetryFilter
		}{
			{&out.Claimed, db.StateClaimed, db.RetryAny},
			{&out.Scheduled, db.StateScheduled, db.RetryNone},
			{&out.Retrying, db.StateScheduled, db.RetryOnly},
			{&out.Dead, db.StateDead, db.RetryAny},
		}
		for _, l := range lists {
			jobs, err := s.store.ListJobsInState(ctx, db.StateListRequest{State: l.state, Limit: limit, Retry: l.retry})
			if err != nil {
				return err
			}
			*l.dst = &jobListResponse{Jobs: toJobsResponse(jobs).Jobs, Total: totals[l.state]}
		}
		if out.Zombies, err = s.zombies(ctx, 0, limit); err != nil {
			return err
		}
		if out.Workers, err = s.workers(ctx, limit); err != nil {
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
	if out.Can.Schedules {
		page, err := s.store.ListSchedules(ctx, db.ListSchedulesRequest{Limit: limit})
		if err != nil {
			return err
		}
		out.Schedules = make([]scheduleResponse, 0, len(page.Schedules))
		for _, sc := range page.Schedules {
			out.Schedules = append(out.Schedules, toScheduleResponse(sc))
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

// jobRefusals: GET /v1/jobs/{id}/refusals?limit= → the refused fenced
// calls made against the job that the store still keeps (the newest
// db.MaxRefusedCalls of every job), newest first, each with the job as it
// is now. A job without any, or one that never existed, has an empty list.
func (s *Server) jobRefusals(c echo.Context) error {
	id, err := pathID(c)
	if err != nil {
		return err
	}
	limit, err := statusLimit(c)
	if err != nil {
		return err
	}
	zs, err := s.zombies(c.Request().Context(), id, limit)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, struct {
		Refusals []zombie `json:"refusals"`
	}{zs})
}

// auditCheck is the status page's verification of the audit chain. It is
// incremental: it remembers the last link it verified (mark) and walks
// only the records appended since, so a poll of the page costs what was
// appended since the last one, not the whole log (the whole walk is GET
// /v1/audit/verify and "fenceq audit verify"). No request waits for more
// than one bounded step (auditRequestStep records); the rest of a long
// walk — the first one after a start, over a large log — runs in the
// background, one store step (db.DefaultVerifyStep records, one read
// transaction) at a time.
type auditCheck struct {
	run sync.Mutex // held by whoever walks: one request's step, or the background walk

	mu      sync.Mutex
	mark    db.AuditMark   // the last link verified
	rep     db.AuditReport // the last step's report; OK false once a break was found
	records uint64         // records verified since the server started
	at      time.Time      // when the last step ended; zero until one did
	behind  bool           // the background walk is running
}

// auditRequestStep is the most records a status request verifies itself
// before it answers; a longer walk continues in the background.
const auditRequestStep = 1000

// auditVerified returns the verification as of now, first verifying up to
// auditRequestStep appended records when none was made yet, or the last
// is older than cfg.AuditVerifyInterval and the chain has grown since. If
// more remain, a background walk verifies them and later polls show it.
// A break, once found, is shown until the server restarts.
func (s *Server) auditVerified(ctx context.Context, head db.AuditHead) *auditVerifiedResponse {
	ac := &s.audit
	ac.mu.Lock()
	rep, at, behind := ac.rep, ac.at, ac.behind
	ac.mu.Unlock()
	due := at.IsZero() || (s.cfg.Now().Sub(at) >= s.cfg.AuditVerifyInterval && head.Seq != rep.VerifiedSeq)
	if !due || behind || (!at.IsZero() && !rep.OK) || !ac.run.TryLock() {
		return s.auditVerifiedNow()
	}
	more, err := s.auditStep(ctx, auditRequestStep)
	if err != nil {
		s.log.Warn("audit verification for the status page failed", "err", err)
	}
	if !more {
		ac.run.Unlock()
		return s.auditVerifiedNow()
	}
	ac.mu.Lock()
	ac.behind = true
	ac.mu.Unlock()
	out := s.auditVerifiedNow() // this request's step, whatever the walk does next
	go func() {
		defer ac.run.Unlock()
		if err := s.auditCatchUp(context.Background()); err != nil {
			s.log.Warn("audit verification for the status page failed", "err", err)
		}
	}()
	return out
}

// auditVerifiedNow is the status page's view of the last step.
func (s *Server) auditVerifiedNow() *auditVerifiedResponse {
	ac := &s.audit
	ac.mu.Lock()
	defer ac.mu.Unlock()
	if ac.at.IsZero() {
		return nil
	}
	out := &auditVerifiedResponse{auditReportResponse: auditReportJSON(ac.rep), CheckedAt: ac.at.UTC(), CatchingUp: ac.behind}
	out.Records = ac.records
	return out
}

// auditStep verifies up to limit records after the last verified link and
// records the result. It reports whether more records were there to
// verify. The caller holds ac.run.
func (s *Server) auditStep(ctx context.Context, limit int) (more bool, err error) {
	ac := &s.audit
	ac.mu.Lock()
	from := ac.mark
	ac.mu.Unlock()
	rep, err := s.store.VerifyAuditFrom(ctx, db.AuditVerifyRequest{From: from, Limit: limit})
	if err != nil {
		return false, err
	}
	ac.mu.Lock()
	defer ac.mu.Unlock()
	if rep.StartSeq != from.Seq && from.Seq != 0 {
		s.log.Info("audit records were archived since the last verification; continuing from the checkpoint",
			"verified_seq", from.Seq, "checkpoint_seq", rep.StartSeq)
	}
	ac.rep, ac.at = rep, s.cfg.Now()
	ac.records += rep.Records
	if !rep.OK {
		s.log.Error("audit chain does not verify", "first_broken", rep.FirstBroken, "reason", rep.Reason)
		return false, nil
	}
	ac.mark = rep.VerifiedMark()
	return rep.VerifiedSeq < rep.HeadSeq, nil
}

// auditCatchUp verifies in steps until the walk reached the head (or found
// a break); the background half of auditVerified, which tests call
// directly. The caller holds ac.run.
func (s *Server) auditCatchUp(ctx context.Context) error {
	ac := &s.audit
	defer func() {
		ac.mu.Lock()
		ac.behind = false
		ac.mu.Unlock()
	}()
	for {
		more, err := s.auditStep(ctx, db.DefaultVerifyStep)
		if err != nil || !more {
			return err
		}
	}
}

// jobHistory: GET /v1/jobs/{id}/history?before=&limit= → the job's audit
// records, newest first, and "next" (the "before" of the next page). It
// answers for a job that was swept too: its records outlive it, until
// they are archived ("archived" on the last page says when that was).
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
		// Archived, on the last page of a history whose first records are
		// gone, says that the records through archived.seq (none newer
		// than archived.time) were archived and removed at
		// archived.archived_at: the older history is in the archive files.
		Archived *auditCheckpointResponse `json:"archived,omitempty"`
	}{Records: make([]auditRecordResponse, 0, len(page.Records)), Next: page.Next}
	for _, r := range page.Records {
		out.Records = append(out.Records, auditRecordResponse(r))
	}
	// A job's first record is its enqueue: a last page that does not end
	// with it lost its older records to an archive.
	if n := len(page.Records); page.Next == 0 && (n == 0 || page.Records[n-1].Action != "enqueue") {
		head, err := s.store.AuditHead(c.Request().Context())
		if err != nil {
			return err
		}
		if head.Checkpoint.Seq > 0 {
			cp := checkpointJSON(head.Checkpoint)
			out.Archived = &cp
		}
	}
	return c.JSON(http.StatusOK, out)
}
