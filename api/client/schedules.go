package client

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// Schedule catch-up and overlap policies (docs/schedules.md).
const (
	CatchupNone   = "none"
	CatchupLatest = "latest"
	CatchupAll    = "all"
	OverlapAllow  = "allow"
	OverlapSkip   = "skip"
)

// ScheduleJob is the job each tick of a schedule enqueues.
type ScheduleJob struct {
	Queue       string          `json:"queue,omitempty"`
	Kind        string          `json:"kind,omitempty"`
	Payload     json.RawMessage `json:"payload,omitempty"`
	Priority    int64           `json:"priority,omitempty"`
	MaxAttempts uint64          `json:"max_attempts,omitempty"`
}

// ScheduleLastJob is the last job a schedule enqueued; State is empty when
// the job no longer exists.
type ScheduleLastJob struct {
	ID           uint64    `json:"id"`
	ScheduledFor time.Time `json:"scheduled_for"`
	State        string    `json:"state,omitempty"`
}

// Schedule is a schedule as the server shows it. Durations are in
// milliseconds as on the wire; Every and the others convert them.
type Schedule struct {
	Name            string           `json:"name"`
	Cron            string           `json:"cron,omitempty"`
	EveryMs         int64            `json:"every_ms,omitempty"`
	StartAt         time.Time        `json:"start_at,omitzero"`
	Timezone        string           `json:"timezone"`
	Catchup         string           `json:"catchup"`
	CatchupWindowMs int64            `json:"catchup_window_ms,omitempty"`
	Overlap         string           `json:"overlap"`
	JitterMs        int64            `json:"jitter_ms,omitempty"`
	Job             ScheduleJob      `json:"job"`
	CreatedAt       time.Time        `json:"created_at"`
	UpdatedAt       time.Time        `json:"updated_at"`
	CreatedBy       string           `json:"created_by,omitempty"`
	Paused          bool             `json:"paused"`
	PausedAt        time.Time        `json:"paused_at,omitzero"`
	PausedBy        string           `json:"paused_by,omitempty"`
	NextFireAt      time.Time        `json:"next_fire_at,omitzero"`
	NextFires       []time.Time      `json:"next_fires"`
	LastJob         *ScheduleLastJob `json:"last_job,omitempty"`
	MissedTicks     uint64           `json:"missed_ticks"`
	SkippedTicks    uint64           `json:"skipped_ticks"`
}

// Every is the schedule's interval (0 for a cron schedule).
func (s Schedule) Every() time.Duration { return time.Duration(s.EveryMs) * time.Millisecond }

// NewSchedule is a schedule to create or replace: exactly one of Cron and
// Every; the rest is optional.
type NewSchedule struct {
	Cron          string        // five fields, six with seconds, or @hourly-style
	Every         time.Duration // at least 1s
	StartAt       time.Time     // Every only; zero: the creation time cut to the second
	Timezone      string        // IANA name; "": UTC
	Catchup       string        // CatchupNone, CatchupLatest (""), CatchupAll
	CatchupWindow time.Duration // CatchupAll only; 0: 1h
	Overlap       string        // OverlapAllow (""), OverlapSkip
	Jitter        time.Duration
	Queue         string // "": "default"
	Kind          string
	// Payload is marshalled to JSON; a json.RawMessage is sent as it is.
	Payload     any
	Priority    int64
	MaxAttempts uint64
}

type newScheduleBody struct {
	Cron            string      `json:"cron,omitempty"`
	EveryMs         int64       `json:"every_ms,omitempty"`
	StartAt         string      `json:"start_at,omitempty"`
	Timezone        string      `json:"timezone,omitempty"`
	Catchup         string      `json:"catchup,omitempty"`
	CatchupWindowMs int64       `json:"catchup_window_ms,omitempty"`
	Overlap         string      `json:"overlap,omitempty"`
	JitterMs        int64       `json:"jitter_ms,omitempty"`
	Job             ScheduleJob `json:"job"`
}

// schedulePath is /v1/schedules/{name}[/{action}] with the name
// percent-encoded as one path segment.
func schedulePath(name, action string) (string, error) {
	if name == "" {
		return "", errors.New("fenceq: schedule name is empty")
	}
	p := "/v1/schedules/" + url.PathEscape(name)
	if action != "" {
		p += "/" + action
	}
	return p, nil
}

func (c *Client) scheduleCall(ctx context.Context, method, name, action string, body, out any) (int, error) {
	p, err := schedulePath(name, action)
	if err != nil {
		return 0, err
	}
	return c.do(ctx, request{method: method, escapedPath: p, body: body}, out)
}

// PutSchedule creates the schedule name (created true) or replaces it
// (admin). A replaced schedule's next tick is computed from now; a pause
// stays. Errors: CodeInvalidArgument (name, cron, zone, interval, policy),
// CodeResourceExhausted (too many schedules, payload too large).
func (c *Client) PutSchedule(ctx context.Context, name string, s NewSchedule) (sc Schedule, created bool, err error) {
	p, err := jsonValue("payload", s.Payload)
	if err != nil {
		return Schedule{}, false, err
	}
	body := newScheduleBody{Cron: s.Cron, EveryMs: millis(s.Every), Timezone: s.Timezone, Catchup: s.Catchup,
		CatchupWindowMs: millis(s.CatchupWindow), Overlap: s.Overlap, JitterMs: millis(s.Jitter),
		Job: ScheduleJob{Queue: s.Queue, Kind: s.Kind, Payload: p, Priority: s.Priority, MaxAttempts: s.MaxAttempts}}
	if !s.StartAt.IsZero() {
		body.StartAt = s.StartAt.Format(time.RFC3339Nano)
	}
	status, err := c.scheduleCall(ctx, http.MethodPut, name, "", body, &sc)
	return sc, status == http.StatusCreated, err
}

// GetSchedule reads a schedule (producer). Errors: CodeNotFound.
func (c *Client) GetSchedule(ctx context.Context, name string) (Schedule, error) {
	var sc Schedule
	_, err := c.scheduleCall(ctx, http.MethodGet, name, "", nil, &sc)
	return sc, err
}

// DeleteSchedule deletes a schedule (admin) and returns it as it was; its
// jobs stay. Errors: CodeNotFound.
func (c *Client) DeleteSchedule(ctx context.Context, name string) (Schedule, error) {
	var sc Schedule
	_, err := c.scheduleCall(ctx, http.MethodDelete, name, "", nil, &sc)
	return sc, err
}

// PauseSchedule pauses a schedule (admin): its ticks are dropped until
// ResumeSchedule. Errors: CodeNotFound.
func (c *Client) PauseSchedule(ctx context.Context, name string) (Schedule, error) {
	var sc Schedule
	_, err := c.scheduleCall(ctx, http.MethodPost, name, "pause", nil, &sc)
	return sc, err
}

// ResumeSchedule resumes a schedule (admin); its next tick is computed
// from now, without catching up the pause. Errors: CodeNotFound.
func (c *Client) ResumeSchedule(ctx context.Context, name string) (Schedule, error) {
	var sc Schedule
	_, err := c.scheduleCall(ctx, http.MethodPost, name, "resume", nil, &sc)
	return sc, err
}

// TriggerSchedule enqueues the schedule's job now (admin) and returns it;
// the next tick does not move. Errors: CodeNotFound.
func (c *Client) TriggerSchedule(ctx context.Context, name string) (Job, error) {
	var j Job
	_, err := c.scheduleCall(ctx, http.MethodPost, name, "trigger", nil, &j)
	return j, err
}

// ListSchedulesParams pages through schedules in name order.
type ListSchedulesParams struct {
	After string
	Limit int // 0: the server's default (100)
}

// SchedulePage is one page of schedules; Next is the After of the next
// page ("" at the end).
type SchedulePage struct {
	Schedules []Schedule `json:"schedules"`
	Next      string     `json:"next,omitempty"`
}

// ListSchedules returns schedules in name order (GET /v1/schedules).
func (c *Client) ListSchedules(ctx context.Context, p ListSchedulesParams) (SchedulePage, error) {
	q := url.Values{}
	if p.After != "" {
		q.Set("after", p.After)
	}
	if p.Limit != 0 {
		q.Set("limit", strconv.Itoa(p.Limit))
	}
	var page SchedulePage
	_, err := c.do(ctx, request{method: http.MethodGet, escapedPath: "/v1/schedules", query: q}, &page)
	return page, err
}
