package postgres

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fenceq/fenceq/db"
	"github.com/fenceq/fenceq/internal/testclock"
	"github.com/fenceq/fenceq/schedule"
	"github.com/jackc/pgx/v5"
)

// schedStart is the test clock's start: a time with nanoseconds, so that
// "the creation cut to the second" shows.
var schedStart = time.Date(2031, 3, 14, 15, 9, 26, 123456789, time.UTC)

func putEvery(tb testing.TB, s *Store, name string, every time.Duration) db.Schedule {
	tb.Helper()
	res, err := s.PutSchedule(bg, db.PutScheduleRequest{Principal: "ops", Name: name, Spec: schedule.Spec{Every: every},
		Job: db.ScheduleTemplate{Queue: "cron", Kind: "tick"}})
	if err != nil {
		tb.Fatalf("PutSchedule(%q) error = %v", name, err)
	}
	return res.Schedule
}

// jobsOf lists the jobs of schedule name, in id order, through s.
func jobsOf(tb testing.TB, s *Store, name string) []db.Job {
	tb.Helper()
	var out []db.Job
	for after := uint64(0); ; {
		page, err := s.ListJobs(bg, db.ListRequest{After: after, Limit: db.MaxListLimit})
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

// TestSchedules_ThreeReplicasFiringAnEverySecondScheduleEnqueueOneJobPerTick:
// three stores over one database (three replicas), one schedule ticking
// every second, the test clock moved one tick at a time; at each tick
// every replica calls FireSchedules from two goroutines at once. Each tick
// makes exactly one job, on time (not backfilled), whichever replica won.
func TestSchedules_ThreeReplicasFiringAnEverySecondScheduleEnqueueOneJobPerTick(t *testing.T) {
	testURL(t)
	clk := testclock.New(schedStart)
	u := newTestDB(t)
	var r []*Store
	for range 3 {
		r = append(r, mustOpen(t, u, Options{Rules: db.Rules{Now: clk.Now}}))
	}
	first := putEvery(t, r[0], "every-second", time.Second).NextFire
	if want := schedStart.Truncate(time.Second).Add(time.Second); !first.Equal(want) {
		t.Fatalf("NextFire = %v, want %v", first, want)
	}
	const ticks = 30
	won := make([]int, len(r))
	for k := range ticks {
		clk.Advance(first.Add(time.Duration(k) * time.Second).Sub(clk.Now()))
		var wg sync.WaitGroup
		var mu sync.Mutex
		total := 0
		for g := range 2 * len(r) {
			wg.Add(1)
			go func() {
				defer wg.Done()
				res, err := r[g%len(r)].FireSchedules(bg, 10)
				if err != nil {
					t.Errorf("tick %d: FireSchedules() through replica %d error = %v", k, g%len(r), err)
					return
				}
				mu.Lock()
				total += res.Jobs
				won[g%len(r)] += res.Jobs
				mu.Unlock()
			}()
		}
		wg.Wait()
		if total != 1 {
			t.Errorf("tick %d: the replicas' FireSchedules calls enqueued %d jobs, want 1", k, total)
		}
	}
	jobs := jobsOf(t, r[1], "every-second")
	if len(jobs) != ticks {
		t.Fatalf("jobs of the schedule = %d, want %d (one per tick)", len(jobs), ticks)
	}
	for k, j := range jobs {
		if want := first.Add(time.Duration(k) * time.Second); !j.ScheduledFor.Equal(want) || j.Backfilled || !j.RunAt.Equal(want) {
			t.Errorf("job %d: scheduled_for %v, run_at %v, backfilled %v; want %v on time", k, j.ScheduledFor, j.RunAt, j.Backfilled, want)
		}
	}
	var n int
	if err := r[2].pool.QueryRow(bg, `SELECT count(*) FROM fenceq_schedule_ticks WHERE schedule = 'every-second'`).Scan(&n); err != nil || n != ticks {
		t.Errorf("tick records = %d, %v; want %d", n, err, ticks)
	}
	t.Logf("jobs enqueued per replica: %v", won)
}

// TestSchedules_AFirePassSkipsAScheduleAnotherReplicaHoldsWithoutWaiting:
// while another transaction holds schedule a's lock (a replica deciding
// or changing it), a pass fires b and leaves a due, without waiting for
// that transaction; once it ends, the next pass fires a.
func TestSchedules_AFirePassSkipsAScheduleAnotherReplicaHoldsWithoutWaiting(t *testing.T) {
	testURL(t)
	clk := testclock.New(schedStart)
	s := mustOpenStore(t, db.Rules{Now: clk.Now})
	first := putEvery(t, s, "a", time.Minute).NextFire
	putEvery(t, s, "b", time.Minute)
	clk.Advance(first.Sub(clk.Now()))

	other, err := s.pool.Begin(bg)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Rollback(bg)
	if _, err := other.Exec(bg, `SELECT pg_advisory_xact_lock($1)`, lockKey(scheduleKey("a"))); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(bg, 5*time.Second)
	defer cancel()
	start := time.Now()
	res, err := s.FireSchedules(ctx, 10)
	if err != nil || res.Schedules != 1 || res.Jobs != 1 || !res.Next.Equal(first) {
		t.Fatalf("FireSchedules() while a is held = %+v, %v (after %v); want b decided alone, Next %v (a still due)", res, err, time.Since(start), first)
	}
	if n := len(jobsOf(t, s, "a")); n != 0 {
		t.Errorf("jobs of the held schedule = %d, want 0", n)
	}
	if err := other.Rollback(bg); err != nil {
		t.Fatal(err)
	}
	if res, err := s.FireSchedules(bg, 10); err != nil || res.Schedules != 1 || res.Jobs != 1 {
		t.Fatalf("FireSchedules() after the holder ended = %+v, %v; want a decided", res, err)
	}
	if jobs := jobsOf(t, s, "a"); len(jobs) != 1 || !jobs[0].ScheduledFor.Equal(first) {
		t.Errorf("jobs of a = %+v, want one for %v", jobs, first)
	}
}

// TestSchedules_ATickWhoseRecordExistsMakesNoJob: a tick whose record is
// in fenceq_schedule_ticks already (decided by a replica whose commit the
// pass's rows did not show) enqueues nothing; the schedule still moves
// past it and the next tick fires.
func TestSchedules_ATickWhoseRecordExistsMakesNoJob(t *testing.T) {
	testURL(t)
	clk := testclock.New(schedStart)
	s := mustOpenStore(t, db.Rules{Now: clk.Now})
	first := putEvery(t, s, "t", time.Minute).NextFire
	if _, err := s.pool.Exec(bg, `INSERT INTO fenceq_schedule_ticks (schedule, scheduled_for, job_id) VALUES ('t', $1, 999)`, first.UnixNano()); err != nil {
		t.Fatal(err)
	}
	clk.Advance(first.Sub(clk.Now()))
	res, err := s.FireSchedules(bg, 10)
	if err != nil || res.Schedules != 1 || res.Jobs != 0 || !res.Next.Equal(first.Add(time.Minute)) {
		t.Fatalf("FireSchedules() at a tick decided before = %+v, %v; want the schedule moved on, no job", res, err)
	}
	if n := len(jobsOf(t, s, "t")); n != 0 {
		t.Errorf("jobs = %d, want 0", n)
	}
	if sc, err := s.GetSchedule(bg, "t"); err != nil || sc.LastJob != 0 || !sc.NextFire.Equal(first.Add(time.Minute)) {
		t.Errorf("GetSchedule() = %+v, %v; want no last job, next %v", sc, err, first.Add(time.Minute))
	}
	clk.Advance(time.Minute)
	if res, err := s.FireSchedules(bg, 10); err != nil || res.Jobs != 1 {
		t.Errorf("FireSchedules() at the next tick = %+v, %v; want 1 job", res, err)
	}
}

// TestSchedules_TickRecordsArePrunedToTheNewestKept: after more ticks than
// db.ScheduleTicksKept, the schedule keeps the newest ones; a delete
// removes them all.
func TestSchedules_TickRecordsArePrunedToTheNewestKept(t *testing.T) {
	testURL(t)
	clk := testclock.New(schedStart)
	s := mustOpenStore(t, db.Rules{Now: clk.Now})
	first := putEvery(t, s, "p", time.Second).NextFire
	total := db.ScheduleTicksKept + 15
	for k := range total {
		clk.Advance(first.Add(time.Duration(k) * time.Second).Sub(clk.Now()))
		if res, err := s.FireSchedules(bg, 10); err != nil || res.Jobs != 1 {
			t.Fatalf("tick %d: FireSchedules() = %+v, %v; want 1 job", k, res, err)
		}
	}
	var n int
	var oldest int64
	if err := s.pool.QueryRow(bg, `SELECT count(*), min(scheduled_for) FROM fenceq_schedule_ticks WHERE schedule = 'p'`).Scan(&n, &oldest); err != nil {
		t.Fatal(err)
	}
	if want := first.Add(time.Duration(total-db.ScheduleTicksKept) * time.Second); n != db.ScheduleTicksKept || oldest != want.UnixNano() {
		t.Errorf("tick records = %d from %v, want %d from %v", n, db.FromUnixNano(oldest), db.ScheduleTicksKept, want)
	}
	if _, err := s.DeleteSchedule(bg, db.ScheduleRequest{Principal: "ops", Name: "p"}); err != nil {
		t.Fatal(err)
	}
	if err := s.pool.QueryRow(bg, `SELECT count(*) FROM fenceq_schedule_ticks`).Scan(&n); err != nil || n != 0 {
		t.Errorf("tick records after the delete = %d, %v; want 0", n, err)
	}
	if n := len(jobsOf(t, s, "p")); n != total {
		t.Errorf("jobs after the delete = %d, want the %d made", n, total)
	}
}

// TestSchedules_APassReadsOnlyTheDueSchedules: the query of a pass's due
// schedules uses the partial index of next fire times, so its cost does
// not grow with the schedules that are not due (or paused).
func TestSchedules_APassReadsOnlyTheDueSchedules(t *testing.T) {
	testURL(t)
	clk := testclock.New(schedStart)
	s := mustOpenStore(t, db.Rules{Now: clk.Now})
	for i := range 300 {
		putEvery(t, s, fmt.Sprintf("s%03d", i), time.Hour)
	}
	if _, err := s.pool.Exec(bg, `ANALYZE fenceq_schedules`); err != nil {
		t.Fatal(err)
	}
	var plan string
	err := pgx.BeginFunc(bg, s.pool, func(tx pgx.Tx) error {
		rows, err := tx.Query(bg, `EXPLAIN (ANALYZE, BUFFERS) SELECT name FROM fenceq_schedules WHERE next_fire <= $1 ORDER BY next_fire, name LIMIT 20`, clk.Now().UnixNano())
		if err != nil {
			return err
		}
		lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
		for _, l := range lines {
			plan += l + "\n"
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("plan:\n%s", plan)
	if !strings.Contains(plan, "fenceq_schedules_due") || strings.Contains(plan, "Removed by Filter") {
		t.Errorf("the due schedules' query does not read only the due rows from fenceq_schedules_due:\n%s", plan)
	}
}

// TestCheck_FindsATickRecordOfNoSchedule: Check (run at the end of every
// test) holds the schedules' tables to what their transactions keep.
func TestCheck_FindsATickRecordOfNoSchedule(t *testing.T) {
	testURL(t)
	s := mustOpenStore(t, db.Rules{})
	if err := s.Check(); err != nil {
		t.Fatalf("Check() of a new store = %v", err)
	}
	if _, err := s.pool.Exec(bg, `INSERT INTO fenceq_schedule_ticks (schedule, scheduled_for, job_id) VALUES ('ghost', 1, 1)`); err != nil {
		t.Fatal(err)
	}
	if err := s.Check(); err == nil || !strings.Contains(err.Error(), `"ghost", which is no schedule`) {
		t.Errorf("Check() with a tick record of no schedule = %v, want it named", err)
	}
	if _, err := s.pool.Exec(bg, `DELETE FROM fenceq_schedule_ticks`); err != nil {
		t.Fatal(err)
	}
}

// TestSchedules_ACallEnqueuesAtMostMaxFireJobs: twenty schedules catching
// up 100 ticks each take several calls, none above db.MaxFireJobs jobs,
// and in the end every tick is fired once (as on bbolt).
func TestSchedules_ACallEnqueuesAtMostMaxFireJobs(t *testing.T) {
	testURL(t)
	clk := testclock.New(schedStart)
	s := mustOpenStore(t, db.Rules{Now: clk.Now})
	var first time.Time
	for i := range 20 {
		res, err := s.PutSchedule(bg, db.PutScheduleRequest{Principal: "ops", Name: fmt.Sprint("s", i),
			Spec: schedule.Spec{Every: time.Second, Catchup: schedule.CatchupAll}})
		if err != nil {
			t.Fatal(err)
		}
		first = res.Schedule.NextFire
	}
	clk.Advance(first.Sub(clk.Now()) + 99*time.Second) // 100 ticks due each
	total, calls := 0, 0
	for {
		res, err := s.FireSchedules(bg, 20)
		if err != nil {
			t.Fatal(err)
		}
		if res.Jobs > db.MaxFireJobs {
			t.Errorf("FireSchedules() enqueued %d jobs in one call, above %d", res.Jobs, db.MaxFireJobs)
		}
		if res.Schedules == 0 {
			break
		}
		total += res.Jobs
		calls++
	}
	if total != 20*100 || calls < 2 {
		t.Errorf("FireSchedules() enqueued %d jobs in %d calls, want 2000 in 2 or more", total, calls)
	}
}

// TestSchedules_AListCursorThatIsNoNamePagesBytewise: ListSchedules's
// After is any string a client sends; one that PostgreSQL's text cannot
// carry (invalid UTF-8, a NUL) pages on in bytewise order, as bbolt's
// keys do, instead of failing the statement.
func TestSchedules_AListCursorThatIsNoNamePagesBytewise(t *testing.T) {
	testURL(t)
	s := mustOpenStore(t, db.Rules{Now: testclock.New(schedStart).Now})
	for _, n := range []string{"a", "b", "ba", "c", "é"} {
		putEvery(t, s, n, time.Hour)
	}
	for _, tt := range []struct {
		after string
		want  []string
	}{
		{"", []string{"a", "b", "ba", "c", "é"}},
		{"b", []string{"ba", "c", "é"}},
		{"b\x00", []string{"ba", "c", "é"}},
		{"b\xff", []string{"c", "é"}},
		{"\xc3", []string{"é"}},
		{"\xff", nil},
	} {
		page, err := s.ListSchedules(bg, db.ListSchedulesRequest{After: tt.after})
		if err != nil {
			t.Errorf("ListSchedules(after %q) error = %v", tt.after, err)
			continue
		}
		var got []string
		for _, sc := range page.Schedules {
			got = append(got, sc.Name)
		}
		if fmt.Sprint(got) != fmt.Sprint(tt.want) || page.Next != "" {
			t.Errorf("ListSchedules(after %q) = %q, next %q; want %q", tt.after, got, page.Next, tt.want)
		}
	}
}

// TestSchedules_AFireThroughOneReplicaWakesALongPollOnAnother: the jobs a
// pass enqueues go through the enqueue's path, so a claim long-polling on
// another replica is woken by the NOTIFY of the pass's commit and gets
// the tick's job, long before its wait ends.
func TestSchedules_AFireThroughOneReplicaWakesALongPollOnAnother(t *testing.T) {
	testURL(t)
	clk := testclock.New(schedStart)
	u := newTestDB(t)
	a := mustOpen(t, u, Options{Rules: db.Rules{Now: clk.Now}})
	b := mustOpen(t, u, Options{Rules: db.Rules{Now: clk.Now}})
	first := putEvery(t, a, "wake", time.Minute).NextFire
	type claimed struct {
		jobs []db.Job
		err  error
		took time.Duration
	}
	done := make(chan claimed, 1)
	go func() {
		start := time.Now()
		jobs, err := b.ClaimJobs(bg, db.ClaimRequest{Principal: "p", Worker: "w", Queues: []string{"cron"}, Lease: time.Minute, Wait: 20 * time.Second})
		done <- claimed{jobs, err, time.Since(start)}
	}()
	for deadline := time.Now().Add(10 * time.Second); b.WaitingClaims("cron") == 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the claim on replica b never waited")
		}
	}
	clk.Advance(first.Sub(clk.Now()))
	if res, err := a.FireSchedules(bg, 10); err != nil || res.Jobs != 1 {
		t.Fatalf("FireSchedules() through replica a = %+v, %v", res, err)
	}
	select {
	case c := <-done:
		if c.err != nil || len(c.jobs) != 1 || c.jobs[0].Schedule != "wake" || !c.jobs[0].ScheduledFor.Equal(first) {
			t.Fatalf("the long-poll on replica b = %+v, %v; want the tick's job", c.jobs, c.err)
		}
		if c.took > 10*time.Second {
			t.Errorf("the long-poll took %v, want it woken by the fire, not its wait's end", c.took)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the long-poll on replica b was not woken by the fire through replica a")
	}
}

// TestSchedules_APassesRoundTripsDoNotGrowWithItsSchedules: a pass that
// decides twenty schedules costs its batch as many round trips as one
// that decides one (docs/postgres.md: four of its own).
func TestSchedules_APassesRoundTripsDoNotGrowWithItsSchedules(t *testing.T) {
	testURL(t)
	trips := map[int]uint64{}
	for _, n := range []int{1, 20} {
		clk := testclock.New(schedStart)
		s := mustOpenStore(t, db.Rules{Now: clk.Now})
		var first time.Time
		for i := range n {
			first = putEvery(t, s, fmt.Sprint("s", i), time.Minute).NextFire
		}
		clk.Advance(first.Sub(clk.Now()))
		before := s.trips.Load()
		if res, err := s.FireSchedules(bg, 100); err != nil || res.Schedules != n || res.Jobs != n {
			t.Fatalf("FireSchedules() of %d due = %+v, %v", n, res, err)
		}
		trips[n] = s.trips.Load() - before
	}
	if trips[1] != trips[20] || trips[1] > 7 {
		t.Errorf("a pass's batch took %d round trips for 1 schedule, %d for 20; want the same, at most 7 (3 of the batch, 4 of the pass)", trips[1], trips[20])
	}
	t.Logf("round trips of a pass's batch: %v", trips)
}

// BenchmarkFireSchedules: a pass with one schedule due among 10 or 1000
// costs the same on PostgreSQL (the partial index of next fire times
// holds the running ones in order); none_due is a pass that finds
// nothing: one read outside the commit stream.
func BenchmarkFireSchedules(b *testing.B) {
	testURL(b)
	for _, n := range []int{10, 1000} {
		b.Run(fmt.Sprint(n, "_schedules"), func(b *testing.B) {
			clk := testclock.New(schedStart)
			s := mustOpenStore(b, db.Rules{Now: clk.Now})
			for i := range n - 1 {
				if _, err := s.PutSchedule(bg, db.PutScheduleRequest{Principal: "ops", Name: fmt.Sprintf("idle-%04d", i), Spec: schedule.Spec{Every: 24 * time.Hour}}); err != nil {
					b.Fatal(err)
				}
			}
			if _, err := s.PutSchedule(bg, db.PutScheduleRequest{Principal: "ops", Name: "due", Spec: schedule.Spec{Every: time.Second, Catchup: schedule.CatchupNone}}); err != nil {
				b.Fatal(err)
			}
			if _, err := s.pool.Exec(bg, `ANALYZE fenceq_schedules`); err != nil {
				b.Fatal(err)
			}
			b.Run("none_due", func(b *testing.B) {
				for range b.N {
					res, err := s.FireSchedules(bg, 100)
					if err != nil || res.Schedules != 0 {
						b.Fatalf("FireSchedules() = %+v, %v; want nothing due", res, err)
					}
				}
			})
			b.Run("one_due", func(b *testing.B) {
				for range b.N {
					clk.Advance(time.Second)
					res, err := s.FireSchedules(bg, 100)
					if err != nil || res.Jobs != 1 || res.Schedules != 1 {
						b.Fatalf("FireSchedules() = %+v, %v; want the one due schedule", res, err)
					}
				}
			})
		})
	}
}
