package api

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/fenceq/fenceq/db"
	"github.com/fenceq/fenceq/schedule"
	"github.com/labstack/echo/v4"
)

// Schedules (periodic jobs, docs/schedules.md): PUT /v1/schedules/{name}
// creates (201) or replaces (200) one; GET lists and reads; DELETE removes;
// POST …/pause, …/resume and …/trigger. Writes need admin (a schedule
// enqueues for ever on its own: configuration, as a queue pause is), reads
// producer. The rules (names, specs, limits) are db's and schedule's; this
// file only translates JSON.
//
// A name is one path segment, percent-decoded once: it may hold spaces or
// any UTF-8 text but not "/" (db refuses it), so it is read from the
// escaped path, as lease names are, and not from echo's parameter, which is
// decoded or not depending on how the client escaped the path.

// schedulePrefix is the path every schedule route starts with.
const schedulePrefix = "/v1/schedules/"

// scheduleName returns the percent-decoded schedule name of the request;
// action is the route's last segment ("" for /v1/schedules/{name}).
func scheduleName(c echo.Context, action string) (string, error) {
	rest, ok := strings.CutPrefix(c.Request().URL.EscapedPath(), schedulePrefix)
	if !ok {
		return "", &Error{http.StatusNotFound, "not_found", "no such endpoint"}
	}
	if action != "" {
		rest = strings.TrimSuffix(rest, "/"+action)
	}
	name, err := url.PathUnescape(rest)
	if err != nil {
		return "", invalidArgument("schedule name %q is not validly percent-encoded", rest)
	}
	if name == "" {
		return "", invalidArgument("schedule name is empty")
	}
	return name, nil
}

// scheduleJobBody is a schedule's job template in JSON.
type scheduleJobBody struct {
	Queue       string          `json:"queue"`
	Kind        string          `json:"kind,omitempty"`
	Payload     json.RawMessage `json:"payload"`
	Priority    int64           `json:"priority"`
	MaxAttempts uint64          `json:"max_attempts"`
}

// scheduleBody is the body of PUT /v1/schedules/{name}. Unknown fields are
// ignored, as in every other body (decodeJSON).
type scheduleBody struct {
	Cron            string           `json:"cron"`
	EveryMs         int64            `json:"every_ms"`
	StartAt         string           `json:"start_at"`
	Timezone        string           `json:"timezone"`
	Catchup         string           `json:"catchup"`
	CatchupWindowMs int64            `json:"catchup_window_ms"`
	Overlap         string           `json:"overlap"`
	JitterMs        int64            `json:"jitter_ms"`
	Job             *scheduleJobBody `json:"job"`
}

func (b scheduleBody) request(principal, name string) (db.PutScheduleRequest, error) {
	req := db.PutScheduleRequest{Principal: principal, Name: name, Spec: schedule.Spec{
		Cron: b.Cron, Timezone: b.Timezone, Catchup: schedule.Catchup(b.Catchup), Overlap: schedule.Overlap(b.Overlap)}}
	var err error
	if req.Spec.Every, err = msDuration("every_ms", b.EveryMs); err != nil {
		return req, err
	}
	if req.Spec.CatchupWindow, err = msDuration("catchup_window_ms", b.CatchupWindowMs); err != nil {
		return req, err
	}
	if req.Spec.Jitter, err = msDuration("jitter_ms", b.JitterMs); err != nil {
		return req, err
	}
	if b.StartAt != "" {
		t, err := time.Parse(time.RFC3339Nano, b.StartAt)
		if err != nil {
			return req, invalidArgument("start_at %q is not an RFC 3339 time", b.StartAt)
		}
		if t.Year() < 1970 {
			return req, invalidArgument("start_at %q is before 1970", b.StartAt)
		}
		req.Spec.StartAt = t
	}
	if b.Job == nil {
		return req, invalidArgument("job is required: the job template {\"queue\": …, \"payload\": …} each tick enqueues")
	}
	req.Job = db.ScheduleTemplate{Queue: b.Job.Queue, Kind: b.Job.Kind, Payload: b.Job.Payload,
		Priority: b.Job.Priority, MaxAttempts: b.Job.MaxAttempts}
	return req, nil
}

// lastJobResponse is the last job a schedule enqueued.
type lastJobResponse struct {
	ID           uint64    `json:"id"`
	ScheduledFor time.Time `json:"scheduled_for"`
	// State is the job's state at the read; absent when the job is gone
	// (deleted after --retention).
	State db.State `json:"state,omitempty"`
}

// scheduleResponse is a schedule in JSON.
type scheduleResponse struct {
	Name            string          `json:"name"`
	Cron            string          `json:"cron,omitempty"`
	EveryMs         int64           `json:"every_ms,omitempty"`
	StartAt         *time.Time      `json:"start_at,omitempty"`
	Timezone        string          `json:"timezone"`
	Catchup         string          `json:"catchup"`
	CatchupWindowMs int64           `json:"catchup_window_ms,omitempty"`
	Overlap         string          `json:"overlap"`
	JitterMs        int64           `json:"jitter_ms,omitempty"`
	Job             scheduleJobBody `json:"job"`

	CreatedAt    time.Time        `json:"created_at"`
	UpdatedAt    time.Time        `json:"updated_at"`
	CreatedBy    string           `json:"created_by,omitempty"`
	Paused       bool             `json:"paused"`
	PausedAt     *time.Time       `json:"paused_at,omitempty"`
	PausedBy     string           `json:"paused_by,omitempty"`
	NextFireAt   *time.Time       `json:"next_fire_at,omitempty"`
	NextFires    []time.Time      `json:"next_fires"`
	LastJob      *lastJobResponse `json:"last_job,omitempty"`
	MissedTicks  uint64           `json:"missed_ticks"`
	SkippedTicks uint64           `json:"skipped_ticks"`
}

func toScheduleResponse(s db.Schedule) scheduleResponse {
	r := scheduleResponse{
		Name: s.Name, Cron: s.Spec.Cron, EveryMs: s.Spec.Every.Milliseconds(), Timezone: s.Spec.Timezone,
		Catchup: string(s.Spec.Catchup), CatchupWindowMs: s.Spec.CatchupWindow.Milliseconds(),
		Overlap: string(s.Spec.Overlap), JitterMs: s.Spec.Jitter.Milliseconds(),
		Job: scheduleJobBody{Queue: s.Job.Queue, Kind: s.Job.Kind, Payload: s.Job.Payload,
			Priority: s.Job.Priority, MaxAttempts: s.Job.MaxAttempts},
		CreatedAt: s.CreatedAt, UpdatedAt: s.UpdatedAt, CreatedBy: s.CreatedBy,
		Paused: s.Paused, PausedAt: optTime(s.PausedAt), PausedBy: s.PausedBy,
		NextFireAt: optTime(s.NextFire), NextFires: make([]time.Time, 0, len(s.NextFires)),
		MissedTicks: s.MissedTicks, SkippedTicks: s.SkippedTicks,
	}
	if s.Spec.Every != 0 {
		r.StartAt = optTime(s.Spec.StartAt)
	}
	if r.Job.Payload == nil {
		r.Job.Payload = json.RawMessage("null")
	}
	if s.Paused {
		// A paused schedule has no next tick: whatever the store computed
		// for a read is not when it fires.
		r.NextFireAt = nil
	} else {
		r.NextFires = append(r.NextFires, s.NextFires...)
	}
	if s.LastJob != 0 {
		r.LastJob = &lastJobResponse{ID: s.LastJob, ScheduledFor: s.LastScheduledFor, State: s.LastJobState}
	}
	return r
}

type schedulesResponse struct {
	Schedules []scheduleResponse `json:"schedules"`
	Next      string             `json:"next,omitempty"`
}

// wakeTicks, when set (Server.SetScheduleWaker), is called after a
// schedule was created, replaced or resumed on this replica, so that the
// tick loop recomputes how long to sleep.
func (s *Server) wakeTicks() {
	if f := s.scheduleWake.Load(); f != nil {
		(*f)()
	}
}

// SetScheduleWaker sets the function called after a schedule was
// created, replaced or resumed through this server (the tick loop's wake).
func (s *Server) SetScheduleWaker(wake func()) { s.scheduleWake.Store(&wake) }

func (s *Server) putSchedule(c echo.Context) error {
	name, err := scheduleName(c, "")
	if err != nil {
		return err
	}
	var b scheduleBody
	if err := bindJSON(c, &b); err != nil {
		return err
	}
	req, err := b.request(principalOf(c), name)
	if err != nil {
		return err
	}
	r, err := s.store.PutSchedule(c.Request().Context(), req)
	if err != nil {
		return err
	}
	s.wakeTicks()
	status := http.StatusOK
	if r.Created {
		status = http.StatusCreated
	}
	return c.JSON(status, toScheduleResponse(r.Schedule))
}

func (s *Server) getSchedule(c echo.Context) error {
	name, err := scheduleName(c, "")
	if err != nil {
		return err
	}
	sc, err := s.store.GetSchedule(c.Request().Context(), name)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, toScheduleResponse(sc))
}

func (s *Server) listSchedules(c echo.Context) error {
	req := db.ListSchedulesRequest{After: c.QueryParam("after")}
	if err := queryInt(c, "limit", &req.Limit); err != nil {
		return err
	}
	page, err := s.store.ListSchedules(c.Request().Context(), req)
	if err != nil {
		return err
	}
	out := schedulesResponse{Schedules: make([]scheduleResponse, 0, len(page.Schedules)), Next: page.Next}
	for _, sc := range page.Schedules {
		out.Schedules = append(out.Schedules, toScheduleResponse(sc))
	}
	return c.JSON(http.StatusOK, out)
}

func (s *Server) deleteSchedule(c echo.Context) error {
	name, err := scheduleName(c, "")
	if err != nil {
		return err
	}
	sc, err := s.store.DeleteSchedule(c.Request().Context(), db.ScheduleRequest{Principal: principalOf(c), Name: name})
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, toScheduleResponse(sc))
}

func (s *Server) pauseSchedule(c echo.Context) error  { return s.setSchedulePaused(c, "pause", true) }
func (s *Server) resumeSchedule(c echo.Context) error { return s.setSchedulePaused(c, "resume", false) }

func (s *Server) setSchedulePaused(c echo.Context, action string, paused bool) error {
	name, err := scheduleName(c, action)
	if err != nil {
		return err
	}
	sc, err := s.store.SetSchedulePaused(c.Request().Context(),
		db.SchedulePauseRequest{Principal: principalOf(c), Name: name, Paused: paused})
	if err != nil {
		return err
	}
	if !paused {
		s.wakeTicks()
	}
	return c.JSON(http.StatusOK, toScheduleResponse(sc))
}

func (s *Server) triggerSchedule(c echo.Context) error {
	name, err := scheduleName(c, "trigger")
	if err != nil {
		return err
	}
	job, err := s.store.TriggerSchedule(c.Request().Context(), db.ScheduleRequest{Principal: principalOf(c), Name: name})
	if err != nil {
		return err
	}
	return c.JSON(http.StatusCreated, toJobResponse(job))
}

// scheduleList reads up to limit schedules in name order (the status
// page, /metrics).
func (s *Server) scheduleList(ctx context.Context, limit int) ([]db.Schedule, error) {
	var out []db.Schedule
	after := ""
	for len(out) < limit {
		page, err := s.store.ListSchedules(ctx, db.ListSchedulesRequest{After: after, Limit: min(limit-len(out), db.MaxListLimit)})
		if err != nil {
			return nil, err
		}
		out = append(out, page.Schedules...)
		if page.Next == "" || len(page.Schedules) == 0 {
			break
		}
		after = page.Next
	}
	return out, nil
}
