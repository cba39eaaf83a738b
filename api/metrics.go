package api

import (
	"cmp"
	"context"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/fenceq/fenceq/db"
	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Metrics are served at GET /metrics in the Prometheus text format, without
// authentication (like /healthz): they hold counts, queue names and route
// templates, never payloads, job ids or tokens. Each Server has its own
// registry, so several servers in one process (tests) do not share counts.

// httpBuckets are the latency buckets in seconds; the top ones are for
// long-poll claims and waiting acquires (wait_ms up to 60 s).
var httpBuckets = []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60}

type metrics struct {
	registry *prometheus.Registry
	duration *prometheus.HistogramVec
	handler  http.Handler
}

func (s *Server) initMetrics() {
	m := &metrics{registry: prometheus.NewRegistry()}
	m.duration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "fenceq_http_request_duration_seconds",
		Help:    "Time from the first middleware to the reply, by method, route template and status code.",
		Buckets: httpBuckets,
	}, []string{"method", "route", "code"})
	m.registry.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		m.duration,
		&storeCollector{s: s},
	)
	if c, ok := s.engine.(prometheus.Collector); ok {
		m.registry.MustRegister(c) // the engine's own figures (fenceq_bolt_*, commits)
	}
	m.handler = promhttp.HandlerFor(m.registry, promhttp.HandlerOpts{
		ErrorLog:      promLogger{s},
		ErrorHandling: promhttp.ContinueOnError, // one failed read must not hide the rest
	})
	s.metrics = m
}

type promLogger struct{ s *Server }

func (l promLogger) Println(v ...any) { l.s.log.Warn("metrics", "err", v) }

// serveMetrics: GET /metrics.
func (s *Server) serveMetrics(c echo.Context) error {
	s.metrics.handler.ServeHTTP(c.Response(), c.Request())
	return nil
}

// knownMethods bounds the method label: any other method is "other".
var knownMethods = map[string]bool{http.MethodGet: true, http.MethodHead: true, http.MethodPost: true,
	http.MethodPut: true, http.MethodPatch: true, http.MethodDelete: true, http.MethodOptions: true}

// routeLabels names a request by values the server chose, never the caller:
// the method if it is a known one ("other" if not) and echo's route template
// ("unmatched" when no route matched). Every count kept per request — the
// latency histogram, the refusal counts — is keyed by these, so a caller
// inventing methods or paths cannot grow the server's memory.
func routeLabels(c echo.Context) (method, route string) {
	method = c.Request().Method
	if !knownMethods[method] {
		method = "other"
	}
	route = c.Path()
	if route == "" {
		route = "unmatched"
	}
	return method, route
}

// instrument times every request. The route label is echo's route template
// (c.Path(), "/v1/jobs/:id"), never the raw URL, so job ids and lease names
// do not become label values; a request no route matched is "unmatched".
// It writes the error reply itself (c.Error) so that the status code of a
// refused request is known when it is observed.
func (s *Server) instrument(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		start := time.Now()
		if err := next(c); err != nil {
			c.Error(err)
		}
		method, route := routeLabels(c)
		s.observe(method, route, c.Response().Status, start)
		return nil
	}
}

// observe is the latency measure of both front ends: a JSON request by its
// route template, a protobuf RPC by its procedure (route
// "/fenceq.v1.JobService/ClaimJob", method "POST") and the HTTP status the
// JSON API answers its outcome with (errorCodes).
func (s *Server) observe(method, route string, status int, start time.Time) {
	s.metrics.duration.WithLabelValues(method, route, strconv.Itoa(status)).Observe(time.Since(start).Seconds())
}

// otherQueues is the queue label of the queues past Config.MetricsMaxQueues.
// Parentheses are not allowed in queue names, so no queue is called this.
const otherQueues = "(other)"

// largestQueues keeps the n queues with the most jobs (ties by name) and
// sums the rest into one otherQueues entry, so that a caller who enqueues
// into thousands of queue names cannot make every scrape as large.
func largestQueues(stats []db.QueueStats, n int) []db.QueueStats {
	if len(stats) <= n {
		return stats
	}
	total := func(q db.QueueStats) (t uint64) {
		for _, c := range q.Counts {
			t += c
		}
		return t
	}
	sorted := slices.Clone(stats)
	slices.SortFunc(sorted, func(a, b db.QueueStats) int {
		return cmp.Or(cmp.Compare(total(b), total(a)), cmp.Compare(a.Queue, b.Queue))
	})
	other := db.QueueStats{Queue: otherQueues, Counts: map[db.State]uint64{}}
	for _, q := range sorted[n:] {
		for st, c := range q.Counts {
			other.Counts[st] += c
		}
	}
	return append(sorted[:n:n], other)
}

// metricQueues are the queues /metrics reports: the largest n of those
// that run (largestQueues, the rest summed as otherQueues) and every
// paused one, whatever its size — a paused queue is what an operator
// alerts on, and there are at most db.MaxPausedQueues of them.
func metricQueues(ctx context.Context, st Store, n int) ([]db.QueueStats, map[string]bool, error) {
	stats, err := st.Stats(ctx)
	if err != nil {
		return nil, nil, err
	}
	pauses, err := st.PausedQueues(ctx)
	if err != nil {
		return nil, nil, err
	}
	paused := make(map[string]bool, len(pauses))
	for _, p := range pauses {
		paused[p.Queue] = true
	}
	var running, held []db.QueueStats
	for _, q := range stats {
		if paused[q.Queue] {
			held = append(held, q)
			delete(paused, q.Queue)
		} else {
			running = append(running, q)
		}
	}
	for q := range paused { // paused, no jobs
		held = append(held, db.QueueStats{Queue: q, Counts: map[db.State]uint64{}})
	}
	for _, q := range held {
		paused[q.Queue] = true
	}
	return append(largestQueues(running, n), held...), paused, nil
}

// queueLatencies is the latency of each queue /metrics reports: the
// oldest available job's wait, 0 without one; a queue past the bound counts
// towards otherQueues, which reports the longest wait among them. So the
// label values are those of fenceq_jobs, bounded the same way.
func queueLatencies(reported []db.QueueStats, waiting []db.QueueWaiting, now time.Time) map[string]time.Duration {
	out := make(map[string]time.Duration, len(reported))
	for _, q := range reported {
		out[q.Queue] = 0
	}
	_, other := out[otherQueues]
	for _, w := range waiting {
		q := w.Queue
		if _, ok := out[q]; !ok {
			if !other {
				continue // no queue is summed: every queue is reported
			}
			q = otherQueues
		}
		out[q] = max(out[q], latency(now, w.Since))
	}
	return out
}

// storeCollector reads the store's figures at scrape time.
type storeCollector struct{ s *Server }

func desc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc(name, help, labels, nil)
}

var (
	descJobs = desc("fenceq_jobs",
		"Jobs by queue and state, from the store's counters.", "queue", "state")
	descClaims = desc("fenceq_claims_total",
		"Jobs claimed through this server since it started (claim and complete's claim_next).")
	descCompletions = desc("fenceq_completions_total",
		"Jobs completed through this server since it started.")
	descFailures = desc("fenceq_failures_total",
		"Failed attempts reported through this server since it started, by outcome: retry (scheduled again) or dead.", "outcome")
	descRefusals = desc("fenceq_fencing_refusals_total",
		"Heartbeats, completions and failures refused because the caller no longer held the claim (not_found or failed_precondition), by operation.", "operation")
	descExpiries = desc("fenceq_lease_expiries_total",
		"Job leases that expired and were acted on, by outcome: reclaimed by a new claim, or dead (no attempts left). Kept in the file: counts since it was created.", "outcome")
	descAuditRecords = desc("fenceq_audit_records_total",
		"Audit log records by action. Kept in the file: counts since it was created.", "action")
	descAuditHead = desc("fenceq_audit_head_sequence",
		"Sequence number of the newest audit record.")
	descQueueLatency = desc("fenceq_queue_latency_seconds",
		"How long the oldest available job of the queue has waited for a claim (0 when none is available): the queues of fenceq_jobs, the rest as the largest of them under queue \"(other)\".", "queue")
	descQueuePaused = desc("fenceq_queue_paused",
		"1 while the queue is paused (it takes enqueues but gives no claims), 0 while it runs. Every paused queue is reported, also beyond the per-queue bound.", "queue")
)

var (
	descScheduleLag = desc("fenceq_schedule_lag_seconds",
		"How late the schedule's oldest due tick that no server has enqueued yet is (0 when none is due, and while paused): the first schedules in name order up to the per-queue bound, the rest as the largest of them under schedule \"(other)\".", "schedule")
	descScheduleDropped = desc("fenceq_schedule_ticks_dropped_total",
		"Ticks the schedule dropped, by reason: missed (the catch-up policy, after downtime) or skipped (overlap skip, the last job unfinished). Kept in the store; the schedules past the per-queue bound are summed under schedule \"(other)\".", "schedule", "reason")
)

var storeDescs = []*prometheus.Desc{descJobs, descClaims, descCompletions, descFailures, descRefusals,
	descExpiries, descAuditRecords, descAuditHead, descQueuePaused, descQueueLatency, descScheduleLag, descScheduleDropped}

// otherSchedules is the schedule label of the schedules past
// Config.MetricsMaxQueues. A schedule may be named "(other)" itself: its
// figures then merge with those past the bound, which adds no series.
const otherSchedules = "(other)"

// scheduleSeries is one schedule's figures on /metrics.
type scheduleSeries struct {
	lag             time.Duration
	missed, skipped uint64
}

// scheduleMetrics are the series /metrics reports for schedules: the
// first n in name order (a stable set of label values, as schedules are
// few and rarely renamed), the rest folded into otherSchedules (the
// largest lag, the summed counters). At most db.MaxSchedules exist, so
// reading them all is bounded.
func scheduleMetrics(schedules []db.Schedule, n int, now time.Time) map[string]scheduleSeries {
	out := make(map[string]scheduleSeries, min(len(schedules), n+1))
	for i, sc := range schedules {
		name := sc.Name
		if i >= n {
			name = otherSchedules
		}
		cur := out[name]
		var lag time.Duration
		if !sc.Paused && !sc.NextFire.IsZero() && !sc.NextFire.After(now) {
			lag = now.Sub(sc.NextFire)
		}
		out[name] = scheduleSeries{lag: max(cur.lag, lag), missed: cur.missed + sc.MissedTicks, skipped: cur.skipped + sc.SkippedTicks}
	}
	return out
}

func (sc *storeCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range storeDescs {
		ch <- d
	}
}

func (sc *storeCollector) Collect(ch chan<- prometheus.Metric) {
	s := sc.s
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	counter := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, labels...)
	}

	if queues, paused, err := metricQueues(ctx, s.store, s.cfg.MetricsMaxQueues); err != nil {
		ch <- prometheus.NewInvalidMetric(descJobs, err)
		ch <- prometheus.NewInvalidMetric(descQueuePaused, err)
	} else {
		for _, q := range queues {
			for _, st := range db.States {
				gauge(descJobs, float64(q.Counts[st]), q.Queue, string(st))
			}
			v := 0.0
			if paused[q.Queue] {
				v = 1
			}
			gauge(descQueuePaused, v, q.Queue)
		}
		if waiting, err := s.store.QueueWaiting(ctx); err != nil {
			ch <- prometheus.NewInvalidMetric(descQueueLatency, err)
		} else {
			for q, d := range queueLatencies(queues, waiting, s.cfg.Now()) {
				gauge(descQueueLatency, d.Seconds(), q)
			}
		}
	}

	if schedules, err := s.scheduleList(ctx, db.MaxSchedules); err != nil {
		ch <- prometheus.NewInvalidMetric(descScheduleLag, err)
	} else {
		for name, m := range scheduleMetrics(schedules, s.cfg.MetricsMaxQueues, s.cfg.Now()) {
			gauge(descScheduleLag, m.lag.Seconds(), name)
			counter(descScheduleDropped, float64(m.missed), name, "missed")
			counter(descScheduleDropped, float64(m.skipped), name, "skipped")
		}
	}

	oc := s.obs.counts()
	counter(descClaims, float64(oc.claims))
	counter(descCompletions, float64(oc.completions))
	for _, outcome := range []string{"retry", "dead"} {
		counter(descFailures, float64(oc.failures[outcome]), outcome)
	}
	for _, op := range []string{"heartbeat", "complete", "fail"} {
		counter(descRefusals, float64(oc.refusals[op]), op)
	}

	if ac, err := s.store.AuditCounts(ctx); err != nil {
		ch <- prometheus.NewInvalidMetric(descExpiries, err)
	} else {
		counter(descExpiries, float64(ac.Reclaimed), "reclaimed")
		counter(descExpiries, float64(ac.ExpiredDead), "dead")
		for action, n := range ac.Actions {
			counter(descAuditRecords, float64(n), action)
		}
	}
	if head, err := s.store.AuditHead(ctx); err != nil {
		ch <- prometheus.NewInvalidMetric(descAuditHead, err)
	} else {
		gauge(descAuditHead, float64(head.Seq))
	}
}
