package api

// The ScheduleService RPCs (proto/fenceq/v1/schedules.proto): each builds
// the JSON route's body (scheduleBody) and store request with the same
// checks and messages, and answers the JSON reply's fields as messages.

import (
	"context"
	"time"

	"connectrpc.com/connect"
	"github.com/fenceq/fenceq/api/fenceqv1"
	"github.com/fenceq/fenceq/db"
)

type scheduleRPC struct{ s *Server }

// pbSchedule is the Schedule message of sc (toScheduleResponse).
func pbSchedule(sc db.Schedule) *fenceqv1.Schedule {
	r := toScheduleResponse(sc)
	out := &fenceqv1.Schedule{Name: r.Name,
		Spec: &fenceqv1.ScheduleSpec{Cron: r.Cron, EveryMs: r.EveryMs, Timezone: r.Timezone, Catchup: r.Catchup,
			CatchupWindowMs: r.CatchupWindowMs, Overlap: r.Overlap, JitterMs: r.JitterMs},
		Job: &fenceqv1.ScheduleJob{Queue: r.Job.Queue, Kind: r.Job.Kind, Payload: r.Job.Payload,
			Priority: r.Job.Priority, MaxAttempts: r.Job.MaxAttempts},
		CreatedAt: pbTime(r.CreatedAt), UpdatedAt: pbTime(r.UpdatedAt), CreatedBy: r.CreatedBy,
		Paused: r.Paused, PausedBy: r.PausedBy, MissedTicks: r.MissedTicks, SkippedTicks: r.SkippedTicks}
	if r.StartAt != nil {
		out.Spec.StartAt = pbTime(*r.StartAt)
	}
	if r.PausedAt != nil {
		out.PausedAt = pbTime(*r.PausedAt)
	}
	if r.NextFireAt != nil {
		out.NextFireAt = pbTime(*r.NextFireAt)
	}
	for _, t := range r.NextFires {
		out.NextFires = append(out.NextFires, pbTime(t))
	}
	if r.LastJob != nil {
		out.LastJob = &fenceqv1.ScheduleLastJob{Id: r.LastJob.ID, ScheduledFor: pbTime(r.LastJob.ScheduledFor), State: string(r.LastJob.State)}
	}
	if string(out.Job.Payload) == "null" && sc.Job.Payload == nil {
		out.Job.Payload = nil // empty bytes: null, as on the way in
	}
	return out
}

func checkScheduleName(name string) error {
	if name == "" {
		return invalidArgument("schedule name is empty")
	}
	return nil
}

func (h scheduleRPC) PutSchedule(ctx context.Context, req *connect.Request[fenceqv1.PutScheduleRequest]) (*connect.Response[fenceqv1.PutScheduleResponse], error) {
	m := req.Msg
	if err := checkScheduleName(m.GetName()); err != nil {
		return nil, err
	}
	sp := m.GetSpec()
	b := scheduleBody{Cron: sp.GetCron(), EveryMs: sp.GetEveryMs(), Timezone: sp.GetTimezone(), Catchup: sp.GetCatchup(),
		CatchupWindowMs: sp.GetCatchupWindowMs(), Overlap: sp.GetOverlap(), JitterMs: sp.GetJitterMs()}
	if sp.GetStartAt() != nil {
		if err := sp.GetStartAt().CheckValid(); err != nil {
			return nil, invalidArgument("start_at is not a valid time: %v", err)
		}
		b.StartAt = sp.GetStartAt().AsTime().Format(time.RFC3339Nano)
	}
	if j := m.GetJob(); j != nil {
		b.Job = &scheduleJobBody{Queue: j.GetQueue(), Kind: j.GetKind(), Payload: rawJSON(j.GetPayload()),
			Priority: j.GetPriority(), MaxAttempts: j.GetMaxAttempts()}
	}
	r, err := b.request(principalIn(ctx), m.GetName())
	if err != nil {
		return nil, err
	}
	res, err := h.s.store.PutSchedule(ctx, r)
	if err != nil {
		return nil, err
	}
	h.s.wakeTicks()
	return connect.NewResponse(&fenceqv1.PutScheduleResponse{Schedule: pbSchedule(res.Schedule), Created: res.Created}), nil
}

func (h scheduleRPC) GetSchedule(ctx context.Context, req *connect.Request[fenceqv1.GetScheduleRequest]) (*connect.Response[fenceqv1.GetScheduleResponse], error) {
	if err := checkScheduleName(req.Msg.GetName()); err != nil {
		return nil, err
	}
	sc, err := h.s.store.GetSchedule(ctx, req.Msg.GetName())
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&fenceqv1.GetScheduleResponse{Schedule: pbSchedule(sc)}), nil
}

func (h scheduleRPC) ListSchedules(ctx context.Context, req *connect.Request[fenceqv1.ListSchedulesRequest]) (*connect.Response[fenceqv1.ListSchedulesResponse], error) {
	page, err := h.s.store.ListSchedules(ctx, db.ListSchedulesRequest{After: req.Msg.GetAfter(), Limit: int(req.Msg.GetLimit())})
	if err != nil {
		return nil, err
	}
	out := &fenceqv1.ListSchedulesResponse{Next: page.Next}
	for _, sc := range page.Schedules {
		out.Schedules = append(out.Schedules, pbSchedule(sc))
	}
	return connect.NewResponse(out), nil
}

func (h scheduleRPC) DeleteSchedule(ctx context.Context, req *connect.Request[fenceqv1.DeleteScheduleRequest]) (*connect.Response[fenceqv1.DeleteScheduleResponse], error) {
	if err := checkScheduleName(req.Msg.GetName()); err != nil {
		return nil, err
	}
	sc, err := h.s.store.DeleteSchedule(ctx, db.ScheduleRequest{Principal: principalIn(ctx), Name: req.Msg.GetName()})
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&fenceqv1.DeleteScheduleResponse{Schedule: pbSchedule(sc)}), nil
}

func (h scheduleRPC) setPaused(ctx context.Context, name string, paused bool) (*fenceqv1.Schedule, error) {
	if err := checkScheduleName(name); err != nil {
		return nil, err
	}
	sc, err := h.s.store.SetSchedulePaused(ctx, db.SchedulePauseRequest{Principal: principalIn(ctx), Name: name, Paused: paused})
	if err != nil {
		return nil, err
	}
	if !paused {
		h.s.wakeTicks()
	}
	return pbSchedule(sc), nil
}

func (h scheduleRPC) PauseSchedule(ctx context.Context, req *connect.Request[fenceqv1.PauseScheduleRequest]) (*connect.Response[fenceqv1.PauseScheduleResponse], error) {
	sc, err := h.setPaused(ctx, req.Msg.GetName(), true)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&fenceqv1.PauseScheduleResponse{Schedule: sc}), nil
}

func (h scheduleRPC) ResumeSchedule(ctx context.Context, req *connect.Request[fenceqv1.ResumeScheduleRequest]) (*connect.Response[fenceqv1.ResumeScheduleResponse], error) {
	sc, err := h.setPaused(ctx, req.Msg.GetName(), false)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&fenceqv1.ResumeScheduleResponse{Schedule: sc}), nil
}

func (h scheduleRPC) TriggerSchedule(ctx context.Context, req *connect.Request[fenceqv1.TriggerScheduleRequest]) (*connect.Response[fenceqv1.TriggerScheduleResponse], error) {
	if err := checkScheduleName(req.Msg.GetName()); err != nil {
		return nil, err
	}
	job, err := h.s.store.TriggerSchedule(ctx, db.ScheduleRequest{Principal: principalIn(ctx), Name: req.Msg.GetName()})
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&fenceqv1.TriggerScheduleResponse{Job: pbJob(job)}), nil
}
