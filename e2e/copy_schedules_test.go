//go:build linux

package e2e

import (
	"context"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/fenceq/fenceq/db"
	"github.com/fenceq/fenceq/db/bolt"
	"github.com/fenceq/fenceq/db/postgres"
	"github.com/fenceq/fenceq/db/postgres/pgtest"
	"github.com/fenceq/fenceq/internal/testclock"
	"github.com/fenceq/fenceq/schedule"
	"github.com/jackc/pgx/v5"
)

// TestCopy_SchedulesAndTheirTicksMoveToPostgreSQL: "fenceq copy" carries
// the schedules (db.StoredSchedules) — spec, template, pause, next fire
// time, last job, counters — and their tick records; the jobs a schedule
// made keep their schedule fields. On the target the schedules read as
// they did on the file, and the next tick fires there once, with a job id
// past the file's.
func TestCopy_SchedulesAndTheirTicksMoveToPostgreSQL(t *testing.T) {
	ctx := context.Background()
	clk := testclock.New(time.Date(2031, 3, 14, 15, 9, 26, 0, time.UTC))
	path := filepath.Join(t.TempDir(), "fenceq.db")
	src, err := bolt.Open(path, bolt.Options{Rules: db.Rules{Now: clk.Now}})
	if err != nil {
		t.Fatal(err)
	}
	tmpl := db.ScheduleTemplate{Queue: "reports", Kind: "daily", Payload: []byte(`{"x":1}`), Priority: 2, MaxAttempts: 3}
	for name, spec := range map[string]schedule.Spec{
		"minutely": {Every: time.Minute},
		"nightly":  {Cron: "0 3 * * *", Timezone: "Europe/Berlin", Catchup: schedule.CatchupAll, CatchupWindow: 2 * time.Hour, Overlap: schedule.OverlapSkip},
		"held":     {Every: time.Hour, Jitter: 30 * time.Second},
	} {
		if _, err := src.PutSchedule(ctx, db.PutScheduleRequest{Principal: "ops", Name: name, Spec: spec, Job: tmpl}); err != nil {
			t.Fatalf("PutSchedule(%s) error = %v", name, err)
		}
	}
	if _, err := src.SetSchedulePaused(ctx, db.SchedulePauseRequest{Principal: "ops", Name: "held", Paused: true}); err != nil {
		t.Fatal(err)
	}
	clk.Advance(time.Minute)
	fired, err := src.FireSchedules(ctx, 10)
	if err != nil || fired.Jobs != 1 {
		t.Fatalf("FireSchedules() on the file = %+v, %v; want the minutely tick", fired, err)
	}
	trig, err := src.TriggerSchedule(ctx, db.ScheduleRequest{Principal: "ops", Name: "nightly"})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]db.Schedule{}
	for _, name := range []string{"minutely", "nightly", "held"} {
		if want[name], err = src.GetSchedule(ctx, name); err != nil {
			t.Fatal(err)
		}
	}
	tickJob, err := src.GetJob(ctx, want["minutely"].LastJob)
	if err != nil || tickJob.Schedule != "minutely" || tickJob.ScheduledFor.IsZero() {
		t.Fatalf("the tick's job on the file = %+v, %v", tickJob, err)
	}
	src.Close()

	target := pgtest.NewSchema(t)
	code, stdout, stderr := runFenceq(t, nil, "copy", "--from", path, "--to", target)
	if code != 0 || !strings.Contains(stdout, "3 schedules (1 tick records)") {
		t.Fatalf("fenceq copy = %d\n%s%s", code, stdout, stderr)
	}
	dst, err := postgres.Open(ctx, target, postgres.Options{Rules: db.Rules{Now: clk.Now}})
	if err != nil {
		t.Fatal(err)
	}
	defer dst.Close()
	for name, w := range want {
		if got, err := dst.GetSchedule(ctx, name); err != nil || !reflect.DeepEqual(got, w) {
			t.Errorf("GetSchedule(%s) on the target = %+v, %v\nwant %+v", name, got, err, w)
		}
	}
	for _, j := range []db.Job{tickJob, trig} {
		got, err := dst.GetJob(ctx, j.ID)
		if err != nil || got.Schedule != j.Schedule || !got.ScheduledFor.Equal(j.ScheduledFor) || got.Backfilled != j.Backfilled {
			t.Errorf("job %d on the target = %+v, %v; want schedule %q for %v", j.ID, got, err, j.Schedule, j.ScheduledFor)
		}
	}
	conn, err := pgx.Connect(ctx, target)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var tick, job int64
	if err := conn.QueryRow(ctx, `SELECT scheduled_for, job_id FROM fenceq_schedule_ticks`).Scan(&tick, &job); err != nil ||
		tick != tickJob.ScheduledFor.UnixNano() || uint64(job) != tickJob.ID {
		t.Errorf("tick records on the target: %d → %d, %v; want %d → %d", tick, job, err, tickJob.ScheduledFor.UnixNano(), tickJob.ID)
	}
	// The next tick fires on the target, once.
	if res, err := dst.FireSchedules(ctx, 10); err != nil || res.Jobs != 0 {
		t.Errorf("FireSchedules() on the target at the copied tick = %+v, %v; want nothing (decided on the file)", res, err)
	}
	clk.Advance(time.Minute)
	res, err := dst.FireSchedules(ctx, 10)
	if err != nil || res.Jobs != 1 {
		t.Fatalf("FireSchedules() on the target at the next tick = %+v, %v; want 1 job", res, err)
	}
	got, err := dst.GetSchedule(ctx, "minutely")
	if err != nil || got.LastJob <= trig.ID || !got.LastScheduledFor.Equal(tickJob.ScheduledFor.Add(time.Minute)) {
		t.Errorf("minutely after the target's tick = %+v, %v; want a job after %d for %v", got, err, trig.ID, tickJob.ScheduledFor.Add(time.Minute))
	}
}
