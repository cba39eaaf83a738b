package tick_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fenceq/fenceq/db"
	"github.com/fenceq/fenceq/db/bolt"
	"github.com/fenceq/fenceq/db/tick"
	"github.com/fenceq/fenceq/internal/testclock"
	"github.com/fenceq/fenceq/schedule"
)

func openStore(t *testing.T, now func() time.Time) *bolt.Store {
	t.Helper()
	s, err := bolt.Open(filepath.Join(t.TempDir(), "fenceq.db"), bolt.Options{Rules: db.Rules{Now: now}})
	if err != nil {
		t.Fatalf("Open() error = %v", err)
	}
	t.Cleanup(func() {
		if err := s.Check(); err != nil {
			t.Errorf("Check() = %v", err)
		}
		s.Close()
	})
	return s
}

func put(t *testing.T, s db.Store, name string, spec schedule.Spec) db.Schedule {
	t.Helper()
	res, err := s.PutSchedule(context.Background(), db.PutScheduleRequest{Principal: "ops", Name: name, Spec: spec, Job: db.ScheduleTemplate{Queue: "q"}})
	if err != nil {
		t.Fatalf("PutSchedule(%s) error = %v", name, err)
	}
	return res.Schedule
}

func jobsOf(t *testing.T, s db.Store) []db.Job {
	t.Helper()
	page, err := s.ListJobs(context.Background(), db.ListRequest{Limit: db.MaxListLimit})
	if err != nil {
		t.Fatalf("ListJobs() error = %v", err)
	}
	return page.Jobs
}

// run starts Run and returns a function that stops it and fails the test
// unless Run returned nil within a second.
func run(t *testing.T, s tick.Firer, o tick.Options) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- tick.Run(ctx, s, o) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("Run() = %v, want nil when its context ends", err)
				}
			case <-time.After(time.Second):
				t.Errorf("Run() did not return within 1s of its context's end")
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// On real time, an every: 1s schedule gets one job per tick, each
// enqueued soon after its tick (the bound leaves room for a loaded
// machine: MaxSleep is 1 s, the loop sleeps until the next tick).
func TestRun_FiresAnEverySecondScheduleOnRealTime(t *testing.T) {
	s := openStore(t, time.Now)
	put(t, s, "every-second", schedule.Spec{Every: time.Second, Catchup: schedule.CatchupNone})
	stop := run(t, s, tick.Options{})
	time.Sleep(3500 * time.Millisecond)
	stop()
	jobs := jobsOf(t, s)
	if len(jobs) < 2 || len(jobs) > 4 {
		t.Fatalf("jobs after 3.5 s = %d, want 2 to 4 (one a second)", len(jobs))
	}
	for i, j := range jobs {
		if j.Schedule != "every-second" || j.ScheduledFor.Nanosecond() != 0 {
			t.Errorf("job %d = schedule %q, scheduled_for %v; want every-second on a whole second", j.ID, j.Schedule, j.ScheduledFor)
		}
		if late := j.CreatedAt.Sub(j.ScheduledFor); late < 0 || late > 2*time.Second {
			t.Errorf("job %d enqueued %v after its tick, want within 2 s", j.ID, late)
		}
		if i > 0 && !j.ScheduledFor.Equal(jobs[i-1].ScheduledFor.Add(time.Second)) {
			t.Errorf("job %d's tick %v does not follow %v by 1 s: a tick missing or twice", j.ID, j.ScheduledFor, jobs[i-1].ScheduledFor)
		}
	}
}

// With the test clock and a long MaxSleep, the loop sleeps until woken;
// woken after the clock passed a tick, it fires it.
func TestRun_AWakeEndsTheSleepAndTheDueTickFires(t *testing.T) {
	clk := testclock.New(time.Date(2031, 3, 14, 15, 9, 26, 0, time.UTC))
	s := openStore(t, clk.Now)
	sc := put(t, s, "m", schedule.Spec{Every: time.Minute})
	wake := make(chan struct{})
	run(t, s, tick.Options{MaxSleep: time.Hour, Now: clk.Now, Wake: wake})
	time.Sleep(50 * time.Millisecond)
	if n := len(jobsOf(t, s)); n != 0 {
		t.Fatalf("jobs before the tick = %d, want 0", n)
	}
	clk.Advance(sc.NextFire.Sub(clk.Now()))
	select {
	case wake <- struct{}{}:
	case <-time.After(5 * time.Second):
		t.Fatal("the loop did not take the wake signal within 5 s")
	}
	deadline := time.Now().Add(5 * time.Second)
	for len(jobsOf(t, s)) == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	jobs := jobsOf(t, s)
	if len(jobs) != 1 || !jobs[0].ScheduledFor.Equal(sc.NextFire) {
		t.Fatalf("jobs after the wake = %+v, want one for %v", jobs, sc.NextFire)
	}
}

// A failing store is logged and retried with a growing backoff; the loop
// goes on until its context ends.
func TestRun_LogsFailuresAndRetries(t *testing.T) {
	s, err := bolt.Open(filepath.Join(t.TempDir(), "fenceq.db"), bolt.Options{})
	if err != nil {
		t.Fatal(err)
	}
	put(t, s, "m", schedule.Spec{Every: time.Second})
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var buf bytes.Buffer
	logger := slog.New(slog.NewTextHandler(writerFunc(func(p []byte) (int, error) {
		mu.Lock()
		defer mu.Unlock()
		return buf.Write(p)
	}), nil))
	stop := run(t, s, tick.Options{Backoff: 10 * time.Millisecond, MaxBackoff: 40 * time.Millisecond, Logger: logger})
	time.Sleep(300 * time.Millisecond)
	stop()
	mu.Lock()
	out := buf.String()
	mu.Unlock()
	if n := strings.Count(out, "schedules: fire"); n < 3 || !strings.Contains(out, "store is closed") {
		t.Errorf("log = %q; want at least 3 failures logged, naming the closed store", out)
	}
}

type writerFunc func(p []byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// A round calls FireSchedules again while a call decides Limit schedules.
func TestRound_DecidesEveryDueScheduleInPassesOfLimit(t *testing.T) {
	clk := testclock.New(time.Date(2031, 3, 14, 15, 9, 26, 0, time.UTC))
	s := openStore(t, clk.Now)
	var next time.Time
	for i := range 5 {
		next = put(t, s, fmt.Sprint("s", i), schedule.Spec{Every: time.Minute}).NextFire
	}
	clk.Advance(next.Sub(clk.Now()))
	res, decided, err := tick.Round(context.Background(), s, tick.Options{Limit: 2})
	if err != nil || decided != 5 || res.Schedules != 1 || !res.Next.Equal(next.Add(time.Minute)) {
		t.Fatalf("Round(limit 2) = %+v, %d, %v; want 5 decided, the last call 1, next %v", res, decided, err, next.Add(time.Minute))
	}
	if n := len(jobsOf(t, s)); n != 5 {
		t.Errorf("jobs = %d, want 5", n)
	}
}

func TestSleepFor(t *testing.T) {
	now := time.Date(2031, 3, 14, 15, 9, 26, 0, time.UTC)
	for _, tt := range []struct {
		next    time.Time
		decided int
		want    time.Duration
	}{
		{time.Time{}, 0, time.Second}, // no schedule: MaxSleep
		{now.Add(300 * time.Millisecond), 1, 300 * time.Millisecond},
		{now.Add(time.Hour), 0, time.Second},      // capped: another replica may add one
		{now.Add(-time.Second), 3, 0},             // due again (a catch-up continues): at once
		{now.Add(-time.Second), 0, tick.MinSleep}, // due by our clock, not the store's: no spin
	} {
		if got := tick.SleepFor(db.FireResult{Next: tt.next}, tt.decided, now, time.Second); got != tt.want {
			t.Errorf("SleepFor(next %v, decided %d) = %v, want %v", tt.next, tt.decided, got, tt.want)
		}
	}
}
