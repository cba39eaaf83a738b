package dbtest

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fenceq/fenceq/db"
	"github.com/fenceq/fenceq/internal/testclock"
	"github.com/fenceq/fenceq/schedule"
)

// The schedules (issue 28): definitions, their refusals, ticks decided at
// the store's clock, catch-up and overlap, pause, replace and trigger, the
// job's schedule fields, and FireSchedules racing itself. The timing rules
// themselves (DST, cron) are package schedule's tests; these show that an
// engine stores and applies them.

// ErrTooManySchedules is the refusal of a schedule beyond db.MaxSchedules.
var ErrTooManySchedules = &db.Error{Code: db.CodeTooLarge, Message: "too many schedules: "}

// setClock moves clk forward to at.
func setClock(clk *testclock.Clock, at time.Time) { clk.Advance(at.Sub(clk.Now())) }

func everySpec(d time.Duration) schedule.Spec { return schedule.Spec{Every: d} }

func putSchedule(tb testing.TB, s db.Store, name string, spec schedule.Spec) db.ScheduleResult {
	tb.Helper()
	res, err := s.PutSchedule(ctx, db.PutScheduleRequest{Principal: "ops", Name: name, Spec: spec,
		Job: db.ScheduleTemplate{Queue: "cron", Kind: "report", Payload: json.RawMessage(`{"n":1}`), Priority: 3, MaxAttempts: 4}})
	if err != nil {
		tb.Fatalf("PutSchedule(%q, %+v) error = %v", name, spec, err)
	}
	return res
}

func getSchedule(tb testing.TB, s db.Store, name string) db.Schedule {
	tb.Helper()
	sc, err := s.GetSchedule(ctx, name)
	if err != nil {
		tb.Fatalf("GetSchedule(%q) error = %v", name, err)
	}
	return sc
}

func fireSchedules(tb testing.TB, s db.Store, limit int) db.FireResult {
	tb.Helper()
	res, err := s.FireSchedules(ctx, limit)
	if err != nil {
		tb.Fatalf("FireSchedules(%d) error = %v", limit, err)
	}
	return res
}

// scheduleJobs lists every job of schedule name, in id order.
func scheduleJobs(tb testing.TB, s db.Store, name string) []db.Job {
	tb.Helper()
	var out []db.Job
	for after := uint64(0); ; {
		page, err := s.ListJobs(ctx, db.ListRequest{After: after, Limit: db.MaxListLimit})
		if err != nil {
			tb.Fatalf("ListJobs() error = %v", err)
		}
		for _, j := range page.Jobs {
			if j.Schedule == name {
				out = append(out, j)
			}
		}
		if page.Next == 0 {
			return out
		}
		after = page.Next
	}
}

func scheduledFors(jobs []db.Job) []string {
	var out []string
	for _, j := range jobs {
		b := ""
		if j.Backfilled {
			b = " backfilled"
		}
		out = append(out, j.ScheduledFor.UTC().Format("15:04:05")+b)
	}
	return out
}

// scheduleState is what a store shows of its schedules, with the audit
// head, as text: a refused schedule call must leave it as it was.
func scheduleState(tb testing.TB, s db.Store) string {
	tb.Helper()
	var b strings.Builder
	for after := ""; ; {
		page, err := s.ListSchedules(ctx, db.ListSchedulesRequest{After: after, Limit: db.MaxListLimit})
		if err != nil {
			tb.Fatalf("ListSchedules() error = %v", err)
		}
		for _, sc := range page.Schedules {
			fmt.Fprintf(&b, "%+v\n", sc)
		}
		if page.Next == "" {
			break
		}
		after = page.Next
	}
	b.Write(auditHead(tb, s))
	return b.String()
}

func testSchedulesArePutReadListedAndDeleted(t *testing.T, newStore Factory) {
	clk := newFakeClock()
	s := newStore(t, testRules(clk))
	now := clk.Now().UTC()
	res := putSchedule(t, s, "b-hourly", schedule.Spec{Cron: "0 * * * *", Timezone: "Europe/Berlin"})
	if !res.Created {
		t.Errorf("PutSchedule(new) Created = false, want true")
	}
	sc := res.Schedule
	wantSpec := schedule.Spec{Cron: "0 * * * *", Timezone: "Europe/Berlin", Catchup: schedule.CatchupLatest, Overlap: schedule.OverlapAllow}
	if sc.Name != "b-hourly" || sc.Spec != wantSpec || sc.CreatedBy != "ops" || !sc.CreatedAt.Equal(now) || !sc.UpdatedAt.Equal(now) || sc.Paused {
		t.Errorf("PutSchedule() = %+v, want spec %+v created by ops at %v", sc, wantSpec, now)
	}
	if want := (db.ScheduleTemplate{Queue: "cron", Kind: "report", Payload: json.RawMessage(`{"n":1}`), Priority: 3, MaxAttempts: 4}); !reflect.DeepEqual(sc.Job, want) {
		t.Errorf("PutSchedule() template = %+v, want %+v", sc.Job, want)
	}
	if next := time.Date(2031, 3, 14, 16, 0, 0, 0, time.UTC); !sc.NextFire.Equal(next) || len(sc.NextFires) != db.NextFireCount || !sc.NextFires[0].Equal(next) || !sc.NextFires[1].Equal(next.Add(time.Hour)) {
		t.Errorf("PutSchedule() next = %v, next fires %v; want %v and hourly after", sc.NextFire, sc.NextFires, next)
	}
	if a := lastAudit(t, s); a.Action != "schedule_put" || a.Subject != db.ScheduleSubject("b-hourly") || a.Principal != "ops" {
		t.Errorf("audit record of the put = %+v, want schedule_put of schedule:b-hourly by ops", a)
	}
	if got := getSchedule(t, s, "b-hourly"); !reflect.DeepEqual(got, sc) {
		t.Errorf("GetSchedule() = %+v, want what PutSchedule answered, %+v", got, sc)
	}
	putSchedule(t, s, "a-minutely", everySpec(time.Minute))
	putSchedule(t, s, "c-daily", schedule.Spec{Cron: "30 2 * * *", Timezone: "America/New_York", Catchup: schedule.CatchupNone, Overlap: schedule.OverlapSkip})

	// Pages in name order.
	page, err := s.ListSchedules(ctx, db.ListSchedulesRequest{Limit: 2})
	if err != nil || len(page.Schedules) != 2 || page.Schedules[0].Name != "a-minutely" || page.Schedules[1].Name != "b-hourly" || page.Next != "b-hourly" {
		t.Fatalf("ListSchedules(limit 2) = %+v, %v; want a-minutely, b-hourly, next b-hourly", page, err)
	}
	page, err = s.ListSchedules(ctx, db.ListSchedulesRequest{After: page.Next, Limit: 2})
	if err != nil || len(page.Schedules) != 1 || page.Schedules[0].Name != "c-daily" || page.Next != "" {
		t.Fatalf("ListSchedules(after b-hourly) = %+v, %v; want c-daily and the end", page, err)
	}
	if !reflect.DeepEqual(page.Schedules[0], getSchedule(t, s, "c-daily")) {
		t.Errorf("ListSchedules() and GetSchedule() disagree on c-daily")
	}
	if _, err := s.ListSchedules(ctx, db.ListSchedulesRequest{Limit: db.MaxListLimit + 1}); db.ErrorCode(err) != db.CodeInvalid {
		t.Errorf("ListSchedules(limit %d) error = %v, want invalid_argument", db.MaxListLimit+1, err)
	}

	// Replace: Created false, the creation kept.
	clk.Advance(time.Minute)
	res = putSchedule(t, s, "b-hourly", everySpec(time.Hour))
	if res.Created || !res.Schedule.CreatedAt.Equal(now) || !res.Schedule.UpdatedAt.Equal(clk.Now().UTC()) || res.Schedule.Spec.Every != time.Hour || res.Schedule.Spec.Cron != "" {
		t.Errorf("PutSchedule(replace) = %+v, want Created false, created at %v, every 1h", res, now)
	}

	// Delete: answers the schedule as it was; then it is gone.
	del, err := s.DeleteSchedule(ctx, db.ScheduleRequest{Principal: "ops", Name: "b-hourly"})
	if err != nil || !reflect.DeepEqual(del, res.Schedule) {
		t.Fatalf("DeleteSchedule() = %+v, %v; want %+v", del, err, res.Schedule)
	}
	if a := lastAudit(t, s); a.Action != "schedule_delete" || a.Subject != db.ScheduleSubject("b-hourly") {
		t.Errorf("audit record of the delete = %+v, want schedule_delete", a)
	}
	if _, err := s.GetSchedule(ctx, "b-hourly"); db.ErrorCode(err) != db.CodeNotFound {
		t.Errorf("GetSchedule(deleted) error = %v, want not_found", err)
	}
	before := scheduleState(t, s)
	snap := takeSnapshot(t, s)
	for what, err := range map[string]error{
		"DeleteSchedule(deleted)": func() error { _, err := s.DeleteSchedule(ctx, db.ScheduleRequest{Name: "b-hourly"}); return err }(),
		"SetSchedulePaused(deleted)": func() error {
			_, err := s.SetSchedulePaused(ctx, db.SchedulePauseRequest{Name: "b-hourly", Paused: true})
			return err
		}(),
		"TriggerSchedule(deleted)": func() error { _, err := s.TriggerSchedule(ctx, db.ScheduleRequest{Name: "b-hourly"}); return err }(),
	} {
		if db.ErrorCode(err) != db.CodeNotFound {
			t.Errorf("%s error = %v, want not_found", what, err)
		}
	}
	if after := scheduleState(t, s); after != before {
		t.Errorf("refused calls on a deleted schedule changed the schedules or the audit head:\n%s\nwant\n%s", after, before)
	}
	assertUnchanged(t, s, snap, "refused calls on a deleted schedule")
}

func testBadSchedulesAreRefusedAndWriteNothing(t *testing.T, newStore Factory) {
	clk := newFakeClock()
	s := newStore(t, testRules(clk))
	putSchedule(t, s, "existing", everySpec(time.Minute))
	good := db.ScheduleTemplate{Kind: "k"}
	for _, tt := range []struct {
		what string
		req  db.PutScheduleRequest
		code db.Code
	}{
		{"an invalid cron", db.PutScheduleRequest{Name: "x", Spec: schedule.Spec{Cron: "61 * * * *"}, Job: good}, db.CodeInvalid},
		{"a cron of three fields", db.PutScheduleRequest{Name: "x", Spec: schedule.Spec{Cron: "* * *"}, Job: good}, db.CodeInvalid},
		{"an unknown zone", db.PutScheduleRequest{Name: "x", Spec: schedule.Spec{Cron: "0 * * * *", Timezone: "Mars/Olympus_Mons"}, Job: good}, db.CodeInvalid},
		{"every below 1s", db.PutScheduleRequest{Name: "x", Spec: everySpec(999 * time.Millisecond), Job: good}, db.CodeInvalid},
		{"both cron and every", db.PutScheduleRequest{Name: "x", Spec: schedule.Spec{Cron: "0 * * * *", Every: time.Minute}, Job: good}, db.CodeInvalid},
		{"neither cron nor every", db.PutScheduleRequest{Name: "x", Job: good}, db.CodeInvalid},
		{"a TZ= prefix", db.PutScheduleRequest{Name: "x", Spec: schedule.Spec{Cron: "TZ=Europe/Berlin 0 * * * *"}, Job: good}, db.CodeInvalid},
		{"a CRON_TZ= prefix", db.PutScheduleRequest{Name: "x", Spec: schedule.Spec{Cron: "CRON_TZ=UTC 0 * * * *"}, Job: good}, db.CodeInvalid},
		{"@every", db.PutScheduleRequest{Name: "x", Spec: schedule.Spec{Cron: "@every 1m"}, Job: good}, db.CodeInvalid},
		{"a name with a newline", db.PutScheduleRequest{Name: "a\nb", Spec: everySpec(time.Minute), Job: good}, db.CodeInvalid},
		{"a name with NUL", db.PutScheduleRequest{Name: "a\x00b", Spec: everySpec(time.Minute), Job: good}, db.CodeInvalid},
		{"a name with /", db.PutScheduleRequest{Name: "a/b", Spec: everySpec(time.Minute), Job: good}, db.CodeInvalid},
		{"an empty name", db.PutScheduleRequest{Name: "", Spec: everySpec(time.Minute), Job: good}, db.CodeInvalid},
		{"a name too long", db.PutScheduleRequest{Name: strings.Repeat("n", db.MaxScheduleNameBytes+1), Spec: everySpec(time.Minute), Job: good}, db.CodeInvalid},
		{"a bad queue", db.PutScheduleRequest{Name: "x", Spec: everySpec(time.Minute), Job: db.ScheduleTemplate{Queue: "no spaces"}}, db.CodeInvalid},
		{"a payload that is not JSON", db.PutScheduleRequest{Name: "x", Spec: everySpec(time.Minute), Job: db.ScheduleTemplate{Payload: json.RawMessage("{")}}, db.CodeInvalid},
		{"max_attempts too high", db.PutScheduleRequest{Name: "x", Spec: everySpec(time.Minute), Job: db.ScheduleTemplate{MaxAttempts: db.MaxMaxAttempts + 1}}, db.CodeInvalid},
		{"a payload too large", db.PutScheduleRequest{Name: "x", Spec: everySpec(time.Minute), Job: db.ScheduleTemplate{Payload: json.RawMessage(`"` + strings.Repeat("x", 1<<20) + `"`)}}, db.CodeTooLarge},
		{"a replace with an invalid cron", db.PutScheduleRequest{Name: "existing", Spec: schedule.Spec{Cron: "nope"}, Job: good}, db.CodeInvalid},
	} {
		before := scheduleState(t, s)
		snap := takeSnapshot(t, s)
		tt.req.Principal = "ops"
		_, err := s.PutSchedule(ctx, tt.req)
		if db.ErrorCode(err) != tt.code {
			t.Errorf("PutSchedule(%s) error = %v, want %s", tt.what, err, tt.code)
			continue
		}
		if after := scheduleState(t, s); after != before {
			t.Errorf("PutSchedule(%s) was refused but changed the schedules or the audit head", tt.what)
		}
		assertUnchanged(t, s, snap, "PutSchedule("+tt.what+")")
	}
	// Reads and the other calls refuse a bad name too.
	for what, err := range map[string]error{
		"GetSchedule":       func() error { _, err := s.GetSchedule(ctx, "a\nb"); return err }(),
		"DeleteSchedule":    func() error { _, err := s.DeleteSchedule(ctx, db.ScheduleRequest{Name: "a/b"}); return err }(),
		"SetSchedulePaused": func() error { _, err := s.SetSchedulePaused(ctx, db.SchedulePauseRequest{Name: ""}); return err }(),
		"TriggerSchedule":   func() error { _, err := s.TriggerSchedule(ctx, db.ScheduleRequest{Name: "a\x7fb"}); return err }(),
	} {
		if db.ErrorCode(err) != db.CodeInvalid {
			t.Errorf("%s(bad name) error = %v, want invalid_argument", what, err)
		}
	}
}

func testSchedulesBeyondTheLimitAreRefused(t *testing.T, newStore Factory) {
	clk := newFakeClock()
	s := newStore(t, testRules(clk))
	for i := range db.MaxSchedules {
		if _, err := s.PutSchedule(ctx, db.PutScheduleRequest{Principal: "ops", Name: fmt.Sprintf("s%04d", i), Spec: everySpec(time.Hour)}); err != nil {
			t.Fatalf("PutSchedule(schedule %d of %d) error = %v", i+1, db.MaxSchedules, err)
		}
	}
	before := scheduleState(t, s)
	snap := takeSnapshot(t, s)
	_, err := s.PutSchedule(ctx, db.PutScheduleRequest{Principal: "ops", Name: "one-more", Spec: everySpec(time.Hour)})
	if !errors.Is(err, ErrTooManySchedules) {
		t.Fatalf("PutSchedule(one more than %d) error = %v, want %v", db.MaxSchedules, err, ErrTooManySchedules)
	}
	if scheduleState(t, s) != before {
		t.Errorf("the refused schedule changed the schedules or the audit head")
	}
	assertUnchanged(t, s, snap, "a schedule past the limit")
	// A replace at the limit is no new schedule; after a delete there is room.
	if res := putSchedule(t, s, "s0000", everySpec(time.Minute)); res.Created {
		t.Errorf("PutSchedule(replace at the limit) Created = true")
	}
	if _, err := s.DeleteSchedule(ctx, db.ScheduleRequest{Principal: "ops", Name: "s0001"}); err != nil {
		t.Fatalf("DeleteSchedule() error = %v", err)
	}
	putSchedule(t, s, "one-more", everySpec(time.Hour))
}

func testATickFiresOnceAtItsTimeWithTheJobsScheduleFields(t *testing.T, newStore Factory) {
	clk := newFakeClock()
	s := newStore(t, testRules(clk))
	sc := putSchedule(t, s, "minutely", everySpec(time.Minute)).Schedule
	tick := clk.Now().UTC().Truncate(time.Second).Add(time.Minute)
	if !sc.NextFire.Equal(tick) {
		t.Fatalf("NextFire = %v, want %v (the creation cut to the second, plus every)", sc.NextFire, tick)
	}
	setClock(clk, tick.Add(-time.Nanosecond))
	before := takeSnapshot(t, s)
	if res := fireSchedules(t, s, 10); res.Jobs != 0 || res.Schedules != 0 || !res.Next.Equal(tick) {
		t.Errorf("FireSchedules() before the tick = %+v, want nothing and Next %v", res, tick)
	}
	assertUnchanged(t, s, before, "FireSchedules before the tick")

	setClock(clk, tick)
	seq := auditSeq(t, s)
	res := fireSchedules(t, s, 10)
	if res.Jobs != 1 || res.Schedules != 1 || res.Dropped != 0 || !res.Next.Equal(tick.Add(time.Minute)) {
		t.Errorf("FireSchedules() at the tick = %+v, want 1 job of 1 schedule, Next %v", res, tick.Add(time.Minute))
	}
	jobs := scheduleJobs(t, s, "minutely")
	if len(jobs) != 1 {
		t.Fatalf("jobs of the schedule = %d, want 1", len(jobs))
	}
	j := jobs[0]
	if j.Queue != "cron" || j.Kind != "report" || string(j.Payload) != `{"n":1}` || j.Priority != 3 || j.MaxAttempts != 4 ||
		j.State != db.StateAvailable || !j.ScheduledFor.Equal(tick) || j.Backfilled || !j.RunAt.Equal(tick) {
		t.Errorf("the tick's job = %+v, want the template's, available, scheduled_for %v, not backfilled", j, tick)
	}
	// One enqueue link for the job, one schedule_fire link for the tick.
	recs, err := s.ListAudit(ctx, seq, 10)
	if err != nil || len(recs) != 2 || recs[0].Action != "enqueue" || recs[0].Subject != db.JobSubject(j.ID) ||
		recs[1].Action != "schedule_fire" || recs[1].Subject != db.ScheduleSubject("minutely") || recs[1].Principal != "system" {
		t.Errorf("audit of the tick = %+v, %v; want enqueue of job %d, then schedule_fire", recs, err, j.ID)
	}
	got := getSchedule(t, s, "minutely")
	if got.LastJob != j.ID || !got.LastScheduledFor.Equal(tick) || got.LastJobState != db.StateAvailable || !got.NextFire.Equal(tick.Add(time.Minute)) {
		t.Errorf("GetSchedule() after the tick = %+v, want last job %d available, next %v", got, j.ID, tick.Add(time.Minute))
	}

	// Fired once: a second pass at the same time decides nothing.
	before = takeSnapshot(t, s)
	if res := fireSchedules(t, s, 10); res.Jobs != 0 || res.Schedules != 0 {
		t.Errorf("FireSchedules() again at the tick = %+v, want nothing", res)
	}
	assertUnchanged(t, s, before, "a second FireSchedules at the same time")

	// The fields round-trip through every read: GetJob, a claim, ListJobs.
	if g, err := s.GetJob(ctx, j.ID); err != nil || g.Schedule != "minutely" || !g.ScheduledFor.Equal(tick) || g.Backfilled {
		t.Errorf("GetJob() = %+v, %v; want schedule minutely, scheduled_for %v", g, err, tick)
	}
	c := mustClaim(t, s, "w", time.Minute, "cron")
	if c.ID != j.ID || c.Schedule != "minutely" || !c.ScheduledFor.Equal(tick) {
		t.Errorf("ClaimJobs() = %+v, want job %d with its schedule fields", c, j.ID)
	}
	if got := getSchedule(t, s, "minutely"); got.LastJobState != db.StateClaimed {
		t.Errorf("GetSchedule() LastJobState = %q, want claimed", got.LastJobState)
	}
	// A jittered schedule: run_at is later than the tick, scheduled_for is the tick.
	putSchedule(t, s, "jittered", schedule.Spec{Every: time.Hour, Jitter: 30 * time.Minute})
	jt := getSchedule(t, s, "jittered").NextFire
	setClock(clk, jt)
	fireSchedules(t, s, 10)
	jj := scheduleJobs(t, s, "jittered")
	if len(jj) != 1 || !jj[0].ScheduledFor.Equal(jt) || jj[0].RunAt.Before(jt) || !jj[0].RunAt.Before(jt.Add(30*time.Minute)) ||
		(jj[0].RunAt.After(jt) && jj[0].State != db.StateScheduled) {
		t.Errorf("jittered job = %+v, want scheduled_for %v, run_at within 30m after it (scheduled when later)", jj, jt)
	}
}

func testCatchupAfterTenMissedTicks(t *testing.T, newStore Factory) {
	for _, tt := range []struct {
		catchup schedule.Catchup
		window  time.Duration
		want    []string
		missed  uint64
	}{
		// Ticks at hh:mm:26 every minute; the clock jumps 10 minutes and
		// 30 seconds past the first: ticks 0..9 are missed, 10 is current
		// (30 s late).
		{schedule.CatchupNone, 0, []string{"15:20:26"}, 10},
		{schedule.CatchupLatest, 0, []string{"15:19:26 backfilled", "15:20:26"}, 9},
		{schedule.CatchupAll, 0, []string{"15:10:26 backfilled", "15:11:26 backfilled", "15:12:26 backfilled", "15:13:26 backfilled",
			"15:14:26 backfilled", "15:15:26 backfilled", "15:16:26 backfilled", "15:17:26 backfilled", "15:18:26 backfilled",
			"15:19:26 backfilled", "15:20:26"}, 0},
		// A window of 5 minutes: the missed ticks of the last 5 minutes only.
		{schedule.CatchupAll, 5 * time.Minute, []string{"15:16:26 backfilled", "15:17:26 backfilled", "15:18:26 backfilled",
			"15:19:26 backfilled", "15:20:26"}, 6},
	} {
		t.Run(fmt.Sprintf("%s_%v", tt.catchup, tt.window), func(t *testing.T) {
			clk := newFakeClock()
			s := newStore(t, testRules(clk))
			sc := putSchedule(t, s, "m", schedule.Spec{Every: time.Minute, Catchup: tt.catchup, CatchupWindow: tt.window}).Schedule
			first := sc.NextFire
			setClock(clk, first.Add(10*time.Minute+30*time.Second))
			res := fireSchedules(t, s, 10)
			if got := scheduledFors(scheduleJobs(t, s, "m")); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("jobs after 10 missed ticks = %v, want %v", got, tt.want)
			}
			got := getSchedule(t, s, "m")
			if got.MissedTicks != tt.missed || !got.NextFire.Equal(first.Add(11*time.Minute)) || res.Jobs != len(tt.want) || res.Dropped != int(tt.missed) {
				t.Errorf("after the pass: missed %d, next %v, FireResult %+v; want missed %d, next %v, %d jobs", got.MissedTicks, got.NextFire, res, tt.missed, first.Add(11*time.Minute), len(tt.want))
			}
			if res := fireSchedules(t, s, 10); res.Jobs != 0 {
				t.Errorf("a second pass fired %d jobs, want none", res.Jobs)
			}
		})
	}
}

func testOverlapSkipDropsTicksWhileTheLastJobRuns(t *testing.T, newStore Factory) {
	clk := newFakeClock()
	s := newStore(t, testRules(clk))
	first := putSchedule(t, s, "skip", schedule.Spec{Every: time.Minute, Overlap: schedule.OverlapSkip}).Schedule.NextFire
	setClock(clk, first)
	if res := fireSchedules(t, s, 10); res.Jobs != 1 {
		t.Fatalf("FireSchedules() at the first tick = %+v, want 1 job", res)
	}
	j := mustClaim(t, s, "w", time.Hour, "cron")
	for i := 1; i <= 2; i++ {
		setClock(clk, first.Add(time.Duration(i)*time.Minute))
		if res := fireSchedules(t, s, 10); res.Jobs != 0 || res.Dropped != 1 {
			t.Errorf("FireSchedules() at tick %d while the job is claimed = %+v, want 0 jobs, 1 dropped", i, res)
		}
	}
	if got := getSchedule(t, s, "skip"); got.SkippedTicks != 2 || got.LastJob != j.ID || !got.NextFire.Equal(first.Add(3*time.Minute)) {
		t.Errorf("GetSchedule() = %+v, want 2 skipped, last job %d, next %v", got, j.ID, first.Add(3*time.Minute))
	}
	if _, err := s.CompleteJob(ctx, db.CompleteRequest{Fenced: fenced(j.ID, "w", j.FencingToken())}); err != nil {
		t.Fatalf("CompleteJob() error = %v", err)
	}
	setClock(clk, first.Add(3*time.Minute))
	if res := fireSchedules(t, s, 10); res.Jobs != 1 {
		t.Errorf("FireSchedules() after the job completed = %+v, want 1 job", res)
	}
	if got := scheduledFors(scheduleJobs(t, s, "skip")); !reflect.DeepEqual(got, []string{first.Format("15:04:05"), first.Add(3 * time.Minute).Format("15:04:05")}) {
		t.Errorf("jobs = %v, want the first and the fourth tick", got)
	}
	// Under allow, the same running job does not hold a tick back.
	putSchedule(t, s, "allow", everySpec(time.Minute))
	a := getSchedule(t, s, "allow").NextFire
	setClock(clk, a)
	fireSchedules(t, s, 10)
	mustClaim(t, s, "w2", time.Hour, "cron") // the skip schedule's job or this one: either way one is running
	setClock(clk, a.Add(time.Minute))
	fireSchedules(t, s, 10)
	if n := len(scheduleJobs(t, s, "allow")); n != 2 {
		t.Errorf("overlap allow: %d jobs after two ticks, want 2", n)
	}
}

func testAPausedScheduleDropsTicksAndItsResumeDoesNotCatchUp(t *testing.T, newStore Factory) {
	clk := newFakeClock()
	s := newStore(t, testRules(clk))
	first := putSchedule(t, s, "p", schedule.Spec{Every: time.Minute, Catchup: schedule.CatchupAll}).Schedule.NextFire
	got, err := s.SetSchedulePaused(ctx, db.SchedulePauseRequest{Principal: "ops", Name: "p", Paused: true})
	if err != nil || !got.Paused || got.PausedBy != "ops" || !got.PausedAt.Equal(clk.Now().UTC()) || !got.NextFire.IsZero() || len(got.NextFires) != 0 {
		t.Fatalf("SetSchedulePaused(pause) = %+v, %v; want paused by ops, no next fire", got, err)
	}
	if a := lastAudit(t, s); a.Action != "schedule_pause" || a.Subject != db.ScheduleSubject("p") {
		t.Errorf("audit of the pause = %+v", a)
	}
	// Pausing again changes nothing.
	snap := takeSnapshot(t, s)
	if again, err := s.SetSchedulePaused(ctx, db.SchedulePauseRequest{Principal: "ops", Name: "p", Paused: true}); err != nil || !reflect.DeepEqual(again, got) {
		t.Errorf("SetSchedulePaused(pause again) = %+v, %v; want %+v", again, err, got)
	}
	assertUnchanged(t, s, snap, "a second pause")

	setClock(clk, first.Add(5*time.Minute+10*time.Second))
	if res := fireSchedules(t, s, 10); res.Jobs != 0 || res.Schedules != 0 || !res.Next.IsZero() {
		t.Errorf("FireSchedules() while paused = %+v, want nothing and no next", res)
	}
	got, err = s.SetSchedulePaused(ctx, db.SchedulePauseRequest{Principal: "ops", Name: "p"})
	next := first.Add(6 * time.Minute)
	if err != nil || got.Paused || !got.NextFire.Equal(next) {
		t.Fatalf("SetSchedulePaused(resume) = %+v, %v; want next %v (from now, no catch-up)", got, err, next)
	}
	if a := lastAudit(t, s); a.Action != "schedule_resume" {
		t.Errorf("audit of the resume = %+v", a)
	}
	if res := fireSchedules(t, s, 10); res.Jobs != 0 {
		t.Errorf("FireSchedules() right after the resume fired %d jobs, want none (no catch-up)", res.Jobs)
	}
	setClock(clk, next)
	fireSchedules(t, s, 10)
	if got := scheduledFors(scheduleJobs(t, s, "p")); !reflect.DeepEqual(got, []string{next.Format("15:04:05")}) {
		t.Errorf("jobs after the resume = %v, want only the tick after it", got)
	}
	// A trigger works while paused.
	if _, err := s.SetSchedulePaused(ctx, db.SchedulePauseRequest{Principal: "ops", Name: "p", Paused: true}); err != nil {
		t.Fatal(err)
	}
	if j, err := s.TriggerSchedule(ctx, db.ScheduleRequest{Principal: "ops", Name: "p"}); err != nil || j.Schedule != "p" {
		t.Errorf("TriggerSchedule(paused) = %+v, %v; want a job", j, err)
	}
}

func testAReplacedScheduleComputesItsNextTickFromNow(t *testing.T, newStore Factory) {
	clk := newFakeClock()
	s := newStore(t, testRules(clk))
	first := putSchedule(t, s, "r", schedule.Spec{Every: time.Minute, Catchup: schedule.CatchupAll}).Schedule.NextFire
	// Ten ticks pass unfired; the replace does not catch them up.
	setClock(clk, first.Add(10*time.Minute+20*time.Second))
	now := clk.Now().UTC()
	got := putSchedule(t, s, "r", schedule.Spec{Every: time.Minute, Catchup: schedule.CatchupAll}).Schedule
	if want := now.Truncate(time.Second).Add(time.Minute); !got.NextFire.Equal(want) {
		t.Errorf("replaced NextFire = %v, want %v", got.NextFire, want)
	}
	if res := fireSchedules(t, s, 10); res.Jobs != 0 {
		t.Errorf("FireSchedules() after the replace fired %d jobs, want none", res.Jobs)
	}
	// A replace with a cron: next from now in its zone.
	got = putSchedule(t, s, "r", schedule.Spec{Cron: "0 3 * * *", Timezone: "Asia/Tokyo"}).Schedule
	if want := time.Date(2031, 3, 14, 18, 0, 0, 0, time.UTC); !got.NextFire.Equal(want) {
		t.Errorf("replaced with 0 3 * * * Asia/Tokyo: NextFire = %v, want %v", got.NextFire, want)
	}
}

func testATriggerEnqueuesOneJobNowAndLeavesTheNextTick(t *testing.T, newStore Factory) {
	clk := newFakeClock()
	s := newStore(t, testRules(clk))
	sc := putSchedule(t, s, "t", schedule.Spec{Every: time.Hour, Overlap: schedule.OverlapSkip}).Schedule
	clk.Advance(7 * time.Second)
	now := clk.Now().UTC()
	j, err := s.TriggerSchedule(ctx, db.ScheduleRequest{Principal: "ops", Name: "t"})
	if err != nil || j.Schedule != "t" || !j.ScheduledFor.Equal(now) || j.Backfilled || j.State != db.StateAvailable || j.Queue != "cron" || j.Kind != "report" {
		t.Fatalf("TriggerSchedule() = %+v, %v; want an available job of schedule t scheduled for %v", j, err, now)
	}
	if a := lastAudit(t, s); a.Action != "schedule_trigger" || a.Subject != db.ScheduleSubject("t") || a.Principal != "ops" {
		t.Errorf("audit of the trigger = %+v", a)
	}
	got := getSchedule(t, s, "t")
	if !got.NextFire.Equal(sc.NextFire) || got.LastJob != j.ID {
		t.Errorf("after the trigger: next %v, last job %d; want next unchanged %v, last job %d", got.NextFire, got.LastJob, sc.NextFire, j.ID)
	}
	// Not subject to overlap: a second trigger while the first job waits.
	if j2, err := s.TriggerSchedule(ctx, db.ScheduleRequest{Principal: "ops", Name: "t"}); err != nil || j2.ID == j.ID {
		t.Errorf("a second trigger = %+v, %v; want a second job", j2, err)
	}
}

func testConcurrentFireSchedulesFireEachTickOnce(t *testing.T, newStore Factory) {
	clk := newFakeClock()
	s := newStore(t, testRules(clk))
	fireConcurrently(t, []db.Store{s}, clk)
}

// fireConcurrently puts 5 schedules through stores[0], moves the clock
// over three ticks one at a time, and at each has 8 goroutines (spread
// over stores) call FireSchedules: every tick makes one job.
func fireConcurrently(t *testing.T, stores []db.Store, clk *testclock.Clock) {
	const schedules, goroutines, ticks = 5, 8, 3
	var first time.Time
	for i := range schedules {
		first = putSchedule(t, stores[0], fmt.Sprint("c", i), everySpec(time.Minute)).Schedule.NextFire
	}
	for k := range ticks {
		setClock(clk, first.Add(time.Duration(k)*time.Minute))
		var wg sync.WaitGroup
		var mu sync.Mutex
		total := 0
		for g := range goroutines {
			wg.Add(1)
			go func() {
				defer wg.Done()
				res, err := stores[g%len(stores)].FireSchedules(ctx, 2)
				if err != nil {
					t.Errorf("FireSchedules() error = %v", err)
				}
				mu.Lock()
				total += res.Jobs
				mu.Unlock()
			}()
		}
		wg.Wait()
		// The limit of 2 may have left schedules to a later pass.
		for {
			res := fireSchedules(t, stores[0], 2)
			total += res.Jobs
			if res.Schedules == 0 {
				break
			}
		}
		if total != schedules {
			t.Errorf("tick %d: the FireSchedules calls answered %d jobs in all, want %d", k, total, schedules)
		}
	}
	for i := range schedules {
		name := fmt.Sprint("c", i)
		var want []string
		for k := range ticks {
			want = append(want, first.Add(time.Duration(k)*time.Minute).Format("15:04:05"))
		}
		if got := scheduledFors(scheduleJobs(t, stores[0], name)); !reflect.DeepEqual(got, want) {
			t.Errorf("jobs of %s = %v, want one per tick %v", name, got, want)
		}
	}
}

func testFireSchedulesDecidesAtMostLimitSchedulesAPass(t *testing.T, newStore Factory) {
	clk := newFakeClock()
	s := newStore(t, testRules(clk))
	var first time.Time
	for _, name := range []string{"x", "y", "z"} {
		first = putSchedule(t, s, name, everySpec(time.Minute)).Schedule.NextFire
	}
	putSchedule(t, s, "later", everySpec(time.Hour))
	setClock(clk, first)
	if res := fireSchedules(t, s, 2); res.Schedules != 2 || res.Jobs != 2 {
		t.Errorf("FireSchedules(2) = %+v, want 2 schedules decided", res)
	}
	res := fireSchedules(t, s, 2)
	if res.Schedules != 1 || res.Jobs != 1 || !res.Next.Equal(first.Add(time.Minute)) {
		t.Errorf("FireSchedules(2) again = %+v, want the third, Next %v", res, first.Add(time.Minute))
	}
	if _, err := s.FireSchedules(ctx, 0); db.ErrorCode(err) != db.CodeInvalid {
		t.Errorf("FireSchedules(0) error = %v, want invalid_argument", err)
	}
}

func testScheduleChangesAreAuditedAndTheChainVerifies(t *testing.T, newStore Factory) {
	clk := newFakeClock()
	s := newStore(t, testRules(clk))
	first := putSchedule(t, s, "a", everySpec(time.Minute)).Schedule.NextFire
	setClock(clk, first)
	fireSchedules(t, s, 10)
	if _, err := s.SetSchedulePaused(ctx, db.SchedulePauseRequest{Principal: "ops", Name: "a", Paused: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.SetSchedulePaused(ctx, db.SchedulePauseRequest{Principal: "ops", Name: "a"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.TriggerSchedule(ctx, db.ScheduleRequest{Principal: "ops", Name: "a"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.DeleteSchedule(ctx, db.ScheduleRequest{Principal: "ops", Name: "a"}); err != nil {
		t.Fatal(err)
	}
	page, err := s.ListAuditBySubject(ctx, db.AuditSubjectRequest{Subject: db.ScheduleSubject("a")})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range page.Records {
		got = append([]string{r.Action}, got...)
	}
	if want := []string{"schedule_put", "schedule_fire", "schedule_pause", "schedule_resume", "schedule_trigger", "schedule_delete"}; !reflect.DeepEqual(got, want) {
		t.Errorf("audit records of schedule:a = %v, want %v", got, want)
	}
	if rep, err := s.VerifyAudit(ctx); err != nil || !rep.OK {
		t.Errorf("VerifyAudit() = %+v, %v; want OK", rep, err)
	}
}

func testASchedulesJobsOutliveItsDeleteAndARecreateStartsFresh(t *testing.T, newStore Factory) {
	clk := newFakeClock()
	s := newStore(t, testRules(clk))
	first := putSchedule(t, s, "d", everySpec(time.Minute)).Schedule.NextFire
	setClock(clk, first)
	fireSchedules(t, s, 10)
	if _, err := s.DeleteSchedule(ctx, db.ScheduleRequest{Principal: "ops", Name: "d"}); err != nil {
		t.Fatal(err)
	}
	setClock(clk, first.Add(5*time.Minute))
	if res := fireSchedules(t, s, 10); res.Jobs != 0 {
		t.Errorf("FireSchedules() after the delete fired %d jobs", res.Jobs)
	}
	if n := len(scheduleJobs(t, s, "d")); n != 1 {
		t.Errorf("jobs of the deleted schedule = %d, want the 1 it made", n)
	}
	got := putSchedule(t, s, "d", everySpec(time.Minute))
	if !got.Created || got.Schedule.LastJob != 0 || got.Schedule.MissedTicks != 0 {
		t.Errorf("PutSchedule(recreate) = %+v, want a new schedule without history", got)
	}
}

func testSchedulesOutliveReopeningTheStore(t *testing.T, newStore Factory) {
	clk := newFakeClock()
	s := newStore(t, testRules(clk))
	first := putSchedule(t, s, "kept", everySpec(time.Minute)).Schedule.NextFire
	setClock(clk, first)
	fireSchedules(t, s, 10)
	want := getSchedule(t, s, "kept")
	s2 := reopen(t, s)
	if got := getSchedule(t, s2, "kept"); !reflect.DeepEqual(got, want) {
		t.Errorf("after reopening: %+v, want %+v", got, want)
	}
	setClock(clk, first.Add(time.Minute))
	if res := fireSchedules(t, s2, 10); res.Jobs != 1 {
		t.Errorf("FireSchedules() after reopening = %+v, want the next tick", res)
	}
}

// Through several replicas at once, FireSchedules fires each tick once.
func testFireSchedulesRacingThroughEveryReplicaFireEachTickOnce(t *testing.T, open ReplicaFactory) {
	clk := newFakeClock()
	r := open(t, testRules(clk), 3)
	fireConcurrently(t, r, clk)
}

// ScheduleSpecSetter is a store whose tests can overwrite a schedule's
// stored time zone behind the rules' back, leaving a spec this build
// cannot compile — as a zone removed from the zone database, or a record a
// newer build wrote, would. The engines implement it in their _test.go
// files only.
type ScheduleSpecSetter interface {
	SetStoredScheduleTimezone(name, tz string) error
}

// A due schedule whose stored spec no longer compiles is skipped and
// reported; nothing of it is written, and every other due schedule fires
// — also when the broken ones come first and fill the limit.
func testABrokenScheduleIsSkippedAndTheOthersFire(t *testing.T, newStore Factory) {
	clk := newFakeClock()
	s := newStore(t, testRules(clk))
	setter, ok := s.(ScheduleSpecSetter)
	if !ok {
		t.Skipf("%T cannot overwrite a stored spec (dbtest.ScheduleSpecSetter)", s)
	}
	broken := []string{"a-broken", "b-broken"} // before "healthy" at the same next fire time
	var first time.Time
	for _, name := range append(broken, "healthy") {
		first = putSchedule(t, s, name, everySpec(time.Minute)).Schedule.NextFire
	}
	setClock(clk, first)
	if res := fireSchedules(t, s, 10); res.Schedules != 3 || len(res.Broken) != 0 {
		t.Fatalf("FireSchedules(10) while every spec compiles = %+v, want 3 schedules decided", res)
	}
	before := map[string]db.Schedule{}
	for _, name := range broken {
		if err := setter.SetStoredScheduleTimezone(name, "Nowhere/Invalid"); err != nil {
			t.Fatalf("SetStoredScheduleTimezone(%q) error = %v", name, err)
		}
		sc := getSchedule(t, s, name) // still answers
		if !sc.NextFire.Equal(first.Add(time.Minute)) || len(sc.NextFires) != 0 {
			t.Errorf("GetSchedule(%q) = NextFire %v, NextFires %v; want %v and none computed", name, sc.NextFire, sc.NextFires, first.Add(time.Minute))
		}
		before[name] = sc
	}
	auditOf := func(name string) int {
		page, err := s.ListAuditBySubject(ctx, db.AuditSubjectRequest{Subject: db.ScheduleSubject(name)})
		if err != nil {
			t.Fatalf("ListAuditBySubject(%q) error = %v", name, err)
		}
		return len(page.Records)
	}
	wantBroken := func(what string, res db.FireResult) {
		t.Helper()
		var names []string
		for _, b := range res.Broken {
			names = append(names, b.Name)
			if !errors.Is(b.Err, db.ErrScheduleSpec) {
				t.Errorf("%s: Broken %q error = %v, want db.ErrScheduleSpec", what, b.Name, b.Err)
			}
		}
		if !reflect.DeepEqual(names, broken) {
			t.Errorf("%s: Broken = %v, want %v", what, names, broken)
		}
		if want := first.Add(2 * time.Minute); !res.Next.Equal(want) {
			t.Errorf("%s: Next = %v, want healthy's %v (not the broken ones' past ones)", what, res.Next, want)
		}
	}

	// Limit 1 with both broken schedules first: the pass still reaches
	// the healthy one.
	setClock(clk, first.Add(time.Minute))
	res, err := s.FireSchedules(ctx, 1)
	if err != nil {
		t.Fatalf("FireSchedules(1) with broken specs error = %v, want the others fired", err)
	}
	if res.Schedules != 1 || res.Jobs != 1 {
		t.Errorf("FireSchedules(1) = %+v, want the healthy schedule decided", res)
	}
	wantBroken("FireSchedules(1)", res)
	if got, want := scheduledFors(scheduleJobs(t, s, "healthy")), []string{first.Format("15:04:05"), first.Add(time.Minute).Format("15:04:05")}; !reflect.DeepEqual(got, want) {
		t.Errorf("jobs of healthy = %v, want %v", got, want)
	}
	for _, name := range broken {
		if got := getSchedule(t, s, name); !reflect.DeepEqual(got, before[name]) {
			t.Errorf("GetSchedule(%q) after the pass = %+v, want unchanged %+v", name, got, before[name])
		}
		if n := len(scheduleJobs(t, s, name)); n != 1 {
			t.Errorf("jobs of %s = %d, want the 1 it made before its spec broke", name, n)
		}
		if n := auditOf(name); n != 2 {
			t.Errorf("audit records of %s = %d, want 2 (put, first fire)", name, n)
		}
	}

	// Only the broken ones due: the pass writes nothing at all.
	snap := takeSnapshot(t, s)
	res = fireSchedules(t, s, 1)
	if res.Schedules != 0 || res.Jobs != 0 {
		t.Errorf("FireSchedules(1) with only broken schedules due = %+v, want nothing decided", res)
	}
	wantBroken("FireSchedules(1) again", res)
	assertUnchanged(t, s, snap, "a pass over broken schedules only")
	if rep, err := s.VerifyAudit(ctx); err != nil || !rep.OK {
		t.Errorf("VerifyAudit() = %+v, %v; want OK", rep, err)
	}
}

// Resuming a paused schedule whose stored spec no longer compiles is a
// refusal (failed_precondition, naming the schedule and the way out), not
// a fault: the schedule stays paused as it was, with no audit link.
func testResumingABrokenScheduleIsRefusedAndChangesNothing(t *testing.T, newStore Factory) {
	clk := newFakeClock()
	s := newStore(t, testRules(clk))
	setter, ok := s.(ScheduleSpecSetter)
	if !ok {
		t.Skipf("%T cannot overwrite a stored spec (dbtest.ScheduleSpecSetter)", s)
	}
	putSchedule(t, s, "broken", everySpec(time.Minute))
	if _, err := s.SetSchedulePaused(ctx, db.SchedulePauseRequest{Principal: "admin", Name: "broken", Paused: true}); err != nil {
		t.Fatalf("pause error = %v", err)
	}
	if err := setter.SetStoredScheduleTimezone("broken", "Nowhere/Invalid"); err != nil {
		t.Fatalf("SetStoredScheduleTimezone error = %v", err)
	}
	before := getSchedule(t, s, "broken")
	links := func() int {
		page, err := s.ListAuditBySubject(ctx, db.AuditSubjectRequest{Subject: db.ScheduleSubject("broken")})
		if err != nil {
			t.Fatalf("ListAuditBySubject error = %v", err)
		}
		return len(page.Records)
	}
	linksBefore := links()
	_, err := s.SetSchedulePaused(ctx, db.SchedulePauseRequest{Principal: "admin", Name: "broken", Paused: false})
	if db.ErrorCode(err) != db.CodeConflict || !strings.Contains(err.Error(), `"broken"`) {
		t.Fatalf("resume of a schedule whose spec does not compile: error = %v (code %q), want failed_precondition naming it", err, db.ErrorCode(err))
	}
	if after := getSchedule(t, s, "broken"); !after.Paused || !reflect.DeepEqual(after, before) {
		t.Errorf("schedule after the refused resume = %+v, want it unchanged %+v", after, before)
	}
	if n := links(); n != linksBefore {
		t.Errorf("audit links of the schedule = %d after the refused resume, want %d", n, linksBefore)
	}
}
