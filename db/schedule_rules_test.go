package db

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/fenceq/fenceq/schedule"
)

var schedNow = time.Date(2031, 3, 14, 15, 9, 26, 500, time.UTC)

func TestValidateScheduleName(t *testing.T) {
	for _, tt := range []struct {
		name string
		ok   bool
	}{
		{"nightly-report", true},
		{"über täglich", true},
		{strings.Repeat("x", MaxScheduleNameBytes), true},
		{"", false},
		{strings.Repeat("x", MaxScheduleNameBytes+1), false},
		{"a\nb", false},
		{"a\x00b", false},
		{"a\u0085b", false}, // C1 control
		{"a/b", false},
		{"\xff", false},
	} {
		err := ValidateScheduleName(tt.name)
		if (err == nil) != tt.ok || (err != nil && ErrorCode(err) != CodeInvalid) {
			t.Errorf("ValidateScheduleName(%q) = %v, want ok %v (else invalid_argument)", tt.name, err, tt.ok)
		}
	}
}

func putReq(spec schedule.Spec) PutScheduleRequest {
	return PutScheduleRequest{Principal: "ops", Name: "s", Spec: spec, Job: ScheduleTemplate{Kind: "k", Payload: json.RawMessage(`{"a":1}`)}}
}

func TestPutSchedule_RefusesBadInputWithInvalid(t *testing.T) {
	r := &Rules{}
	r.SetDefaults()
	for _, tt := range []struct {
		what string
		req  PutScheduleRequest
		code Code
	}{
		{"invalid cron", putReq(schedule.Spec{Cron: "61 * * * *"}), CodeInvalid},
		{"unknown zone", putReq(schedule.Spec{Cron: "0 * * * *", Timezone: "Mars/Olympus"}), CodeInvalid},
		{"every below 1s", putReq(schedule.Spec{Every: 500 * time.Millisecond}), CodeInvalid},
		{"both", putReq(schedule.Spec{Cron: "0 * * * *", Every: time.Minute}), CodeInvalid},
		{"neither", putReq(schedule.Spec{}), CodeInvalid},
		{"bad queue", func() PutScheduleRequest {
			q := putReq(schedule.Spec{Every: time.Minute})
			q.Job.Queue = "a b"
			return q
		}(), CodeInvalid},
		{"bad payload", func() PutScheduleRequest {
			q := putReq(schedule.Spec{Every: time.Minute})
			q.Job.Payload = json.RawMessage(`{`)
			return q
		}(), CodeInvalid},
		{"payload too large", func() PutScheduleRequest {
			q := putReq(schedule.Spec{Every: time.Minute})
			q.Job.Payload = json.RawMessage(`"` + strings.Repeat("x", 1<<20) + `"`)
			return q
		}(), CodeTooLarge},
		{"bad name", func() PutScheduleRequest { q := putReq(schedule.Spec{Every: time.Minute}); q.Name = "a/b"; return q }(), CodeInvalid},
	} {
		_, _, _, err := r.PutSchedule(nil, 0, tt.req, schedNow)
		if ErrorCode(err) != tt.code {
			t.Errorf("PutSchedule(%s) error = %v, want %s", tt.what, err, tt.code)
		}
	}
	_, _, _, err := r.PutSchedule(nil, MaxSchedules, putReq(schedule.Spec{Every: time.Minute}), schedNow)
	if !errors.Is(err, &Error{Code: CodeTooLarge, Message: "too many schedules"}) {
		t.Errorf("PutSchedule(past MaxSchedules) error = %v, want too many schedules", err)
	}
}

func TestPutSchedule_CreatesAndReplacesFromNow(t *testing.T) {
	r := &Rules{}
	r.SetDefaults()
	rec, created, ev, err := r.PutSchedule(nil, 0, putReq(schedule.Spec{Every: time.Minute}), schedNow)
	if err != nil || !created {
		t.Fatalf("PutSchedule() = %v, %v; want created", created, err)
	}
	start := schedNow.Truncate(time.Second)
	if rec.StartAt != start.UnixNano() || rec.Next != start.Add(time.Minute).UnixNano() || rec.Queue != DefaultQueue || rec.MaxAttempts != DefaultMaxAttempts {
		t.Errorf("PutSchedule() record = %+v, want start %v, next a minute later, queue default", rec, start)
	}
	if ev.Action != "schedule_put" || ev.Subject != "schedule:s" || ev.Principal != "ops" {
		t.Errorf("PutSchedule() event = %+v", ev)
	}
	// Replace a paused schedule later: the pause and the creation stay,
	// no next tick.
	paused, changed, _, err := SetSchedulePaused(&rec, SchedulePauseRequest{Principal: "ops", Name: "s", Paused: true}, schedNow)
	if err != nil || !changed || paused.Next != 0 || !paused.Paused() {
		t.Fatalf("SetSchedulePaused(pause) = %+v, %v, %v", paused, changed, err)
	}
	later := schedNow.Add(time.Hour)
	again, created, _, err := r.PutSchedule(&paused, 1, putReq(schedule.Spec{Cron: "*/5 * * * *"}), later)
	if err != nil || created || !again.Paused() || again.Next != 0 || again.CreatedAt != rec.CreatedAt {
		t.Errorf("PutSchedule(replace paused) = %+v, created %v, %v; want paused, no next, the first creation time", again, created, err)
	}
	// Resume: next from now, no catch-up.
	resumed, changed, ev, err := SetSchedulePaused(&again, SchedulePauseRequest{Principal: "ops", Name: "s"}, later)
	if err != nil || !changed || resumed.Next != time.Date(2031, 3, 14, 16, 10, 0, 0, time.UTC).UnixNano() || ev.Action != "schedule_resume" {
		t.Errorf("SetSchedulePaused(resume) = next %v, %v, %+v, %v; want 16:10", FromUnixNano(resumed.Next), changed, ev, err)
	}
	if _, changed, _, _ := SetSchedulePaused(&resumed, SchedulePauseRequest{Name: "s"}, later); changed {
		t.Errorf("SetSchedulePaused(resume a running schedule) changed = true, want false")
	}
	if _, _, _, err := SetSchedulePaused(nil, SchedulePauseRequest{Name: "s"}, later); ErrorCode(err) != CodeNotFound {
		t.Errorf("SetSchedulePaused(none) error = %v, want not_found", err)
	}
}

func TestFireSchedule_FiresTheDueTickAndMovesNext(t *testing.T) {
	r := &Rules{}
	r.SetDefaults()
	rec, _, _, err := r.PutSchedule(nil, 0, putReq(schedule.Spec{Every: time.Minute}), schedNow)
	if err != nil {
		t.Fatal(err)
	}
	tick := FromUnixNano(rec.Next)
	p, err := FireSchedule("s", &rec, false, tick.Add(-time.Nanosecond))
	if err != nil || len(p.Jobs) != 0 || p.Changed() {
		t.Fatalf("FireSchedule(before the tick) = %+v, %v; want nothing", p, err)
	}
	p, err = FireSchedule("s", &rec, false, tick)
	if err != nil || len(p.Jobs) != 1 || !p.Jobs[0].ScheduledFor.Equal(tick) || p.Jobs[0].Backfilled || p.Jobs[0].Request.Kind != "k" {
		t.Fatalf("FireSchedule(at the tick) = %+v, %v; want one job for %v", p, err, tick)
	}
	job, ev := EnqueueScheduled(7, "s", p.Jobs[0], tick)
	if job.Schedule != "s" || job.ScheduledFor != tick.UnixNano() || job.State != StateAvailable || ev.Details["schedule"] != "s" {
		t.Errorf("EnqueueScheduled() = %+v, %+v", job, ev)
	}
	next, ev := p.Done([]uint64{7}, p.Jobs)
	if next.Next != tick.Add(time.Minute).UnixNano() || next.LastJob != 7 || next.LastScheduledFor != tick.UnixNano() || ev.Action != "schedule_fire" {
		t.Errorf("Done() = %+v, %+v", next, ev)
	}
	if rec.Next != tick.UnixNano() || rec.LastJob != 0 {
		t.Errorf("FireSchedule changed the record it was given: %+v", rec)
	}
}

func TestScheduleBusy(t *testing.T) {
	for s, want := range map[State]bool{"": false, StateCompleted: false, StateDead: false, StateCancelled: false,
		StateAvailable: true, StateScheduled: true, StateClaimed: true} {
		if got := ScheduleBusy(s); got != want {
			t.Errorf("ScheduleBusy(%q) = %v, want %v", s, got, want)
		}
	}
}
