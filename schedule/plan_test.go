package schedule

import (
	"testing"
	"time"
)

var t0 = time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)

func min(n int) time.Duration { return time.Duration(n) * time.Minute }

type wantTick struct {
	at         time.Duration // after t0
	backfilled bool
}

func checkPlan(t *testing.T, p Plan, fire []wantTick, missed, skipped int, next time.Time) {
	t.Helper()
	if len(p.Fire) != len(fire) {
		t.Fatalf("Plan().Fire = %v, want %d ticks %v", p.Fire, len(fire), fire)
	}
	for i, w := range fire {
		if got := p.Fire[i]; !got.At.Equal(t0.Add(w.at)) || got.Backfilled != w.backfilled {
			t.Errorf("Plan().Fire[%d] = %s backfilled %v, want %s backfilled %v", i, got.At, got.Backfilled, t0.Add(w.at), w.backfilled)
		}
	}
	if p.Missed != missed || p.Skipped != skipped {
		t.Errorf("Plan() missed, skipped = %d, %d, want %d, %d", p.Missed, p.Skipped, missed, skipped)
	}
	if !p.Next.Equal(next) {
		t.Errorf("Plan().Next = %s, want %s", p.Next, next)
	}
}

// TestPlan_Downtime: every minute, down for ten ticks; the eleventh
// (12:10) is 5 s late, so current.
func TestPlan_Downtime(t *testing.T) {
	now := t0.Add(min(10) + 5*time.Second)
	spec := func(c Catchup, window time.Duration) Spec {
		return Spec{Every: time.Minute, StartAt: t0, Catchup: c, CatchupWindow: window}
	}
	var all []wantTick
	for i := 0; i < 10; i++ {
		all = append(all, wantTick{min(i), true})
	}
	all = append(all, wantTick{min(10), false})
	cases := []struct {
		name           string
		spec           Spec
		fire           []wantTick
		missed, skiped int
	}{
		{"none", spec(CatchupNone, 0), []wantTick{{min(10), false}}, 10, 0},
		{"latest", spec(CatchupLatest, 0), []wantTick{{min(9), true}, {min(10), false}}, 9, 0},
		{"all", spec(CatchupAll, 0), all, 0, 0},
		// window 5m: 12:05:05 and later; 12:00..12:05 are dropped
		{"all/window", spec(CatchupAll, 5*time.Minute), all[6:], 6, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := mustCompile(t, tc.spec).Plan("s", t0, now, false)
			checkPlan(t, p, tc.fire, tc.missed, tc.skiped, t0.Add(min(11)))
		})
	}
}

// TestPlan_DowntimeNoCurrent: the most recent due tick is itself more
// than MaxLateness late: nothing is current.
func TestPlan_DowntimeNoCurrent(t *testing.T) {
	now := t0.Add(min(50) + 90*time.Second) // ticks every 5 min, 12:00..12:50 due
	spec := func(c Catchup) Spec { return Spec{Every: 5 * time.Minute, StartAt: t0, Catchup: c} }
	var all []wantTick
	for i := 0; i <= 10; i++ {
		all = append(all, wantTick{min(5 * i), true})
	}
	checkPlan(t, mustCompile(t, spec(CatchupNone)).Plan("s", t0, now, false), nil, 11, 0, t0.Add(min(55)))
	checkPlan(t, mustCompile(t, spec(CatchupLatest)).Plan("s", t0, now, false), []wantTick{{min(50), true}}, 10, 0, t0.Add(min(55)))
	checkPlan(t, mustCompile(t, spec(CatchupAll)).Plan("s", t0, now, false), all, 0, 0, t0.Add(min(55)))
}

// TestPlan_OnTime: a pass exactly at the tick, and one before it.
func TestPlan_OnTime(t *testing.T) {
	c := mustCompile(t, Spec{Cron: "*/10 * * * *"})
	checkPlan(t, c.Plan("s", t0, t0, false), []wantTick{{0, false}}, 0, 0, t0.Add(min(10)))
	checkPlan(t, c.Plan("s", t0, t0.Add(MaxLateness), false), []wantTick{{0, false}}, 0, 0, t0.Add(min(10)))
	// one nanosecond beyond MaxLateness: missed, fired backfilled by latest
	checkPlan(t, c.Plan("s", t0, t0.Add(MaxLateness+1), false), []wantTick{{0, true}}, 0, 0, t0.Add(min(10)))
	// not due: nothing, next unchanged
	checkPlan(t, c.Plan("s", t0, t0.Add(-1), false), nil, 0, 0, t0)
	// nothing stored (paused is the caller's business): nothing
	checkPlan(t, c.Plan("s", time.Time{}, t0, false), nil, 0, 0, time.Time{})
}

// TestPlan_MaxTicksPerPlanContinues: catch-up all of 1001 ticks is cut at
// MaxTicksPerPlan per pass; each pass continues where the last stopped,
// every tick fires exactly once, in order.
func TestPlan_MaxTicksPerPlanContinues(t *testing.T) {
	for _, spec := range []Spec{
		{Every: time.Second, StartAt: t0, Catchup: CatchupAll},
		{Cron: "* * * * * *", Catchup: CatchupAll},
	} {
		c := mustCompile(t, spec)
		now := t0.Add(1000 * time.Second)
		next, passes := t0, 0
		var fired []Tick
		for !next.After(now) {
			p := c.Plan("s", next, now, false)
			if len(p.Fire) > MaxTicksPerPlan || len(p.Fire) == 0 {
				t.Fatalf("pass %d fires %d ticks, want 1..%d", passes, len(p.Fire), MaxTicksPerPlan)
			}
			if p.Missed != 0 || p.Skipped != 0 {
				t.Fatalf("pass %d missed, skipped = %d, %d, want 0, 0", passes, p.Missed, p.Skipped)
			}
			fired = append(fired, p.Fire...)
			next = p.Next
			passes++
		}
		if passes != 11 || len(fired) != 1001 {
			t.Fatalf("%s: %d passes fired %d ticks, want 11 passes, 1001 ticks", spec.Cron, passes, len(fired))
		}
		for i, tk := range fired {
			if want := t0.Add(time.Duration(i) * time.Second); !tk.At.Equal(want) || tk.Backfilled != (i < 1000) {
				t.Fatalf("tick %d = %s backfilled %v, want %s backfilled %v", i, tk.At, tk.Backfilled, want, i < 1000)
			}
		}
		if want := now.Add(time.Second); !next.Equal(want) {
			t.Errorf("Next after the catch-up = %s, want %s", next, want)
		}
	}
}

// TestPlan_OverlapSkip: busy drops every tick; not busy fires only the
// first of the pass.
func TestPlan_OverlapSkip(t *testing.T) {
	now := t0.Add(min(10) + 5*time.Second)
	for _, tc := range []struct {
		catchup Catchup
		busy    bool
		fire    []wantTick
		missed  int
		skipped int
	}{
		{CatchupNone, true, nil, 10, 1},
		{CatchupNone, false, []wantTick{{min(10), false}}, 10, 0},
		{CatchupLatest, true, nil, 9, 2},
		{CatchupLatest, false, []wantTick{{min(9), true}}, 9, 1},
		{CatchupAll, true, nil, 0, 11},
		{CatchupAll, false, []wantTick{{0, true}}, 0, 10},
	} {
		c := mustCompile(t, Spec{Every: time.Minute, StartAt: t0, Catchup: tc.catchup, Overlap: OverlapSkip})
		t.Run(string(tc.catchup), func(t *testing.T) {
			checkPlan(t, c.Plan("s", t0, now, tc.busy), tc.fire, tc.missed, tc.skipped, t0.Add(min(11)))
		})
	}
	// allow ignores busy
	c := mustCompile(t, Spec{Every: time.Minute, StartAt: t0})
	checkPlan(t, c.Plan("s", t0, now, true), []wantTick{{min(9), true}, {min(10), false}}, 9, 0, t0.Add(min(11)))
}

// TestPlan_Jitter: run_at in [tick, tick+jitter), the same for the same
// name and tick, and spread.
func TestPlan_Jitter(t *testing.T) {
	c := mustCompile(t, Spec{Every: time.Minute, StartAt: t0, Catchup: CatchupAll, Jitter: 30 * time.Second})
	now := t0.Add(min(30))
	a, b, other := c.Plan("a", t0, now, false), c.Plan("a", t0, now, false), c.Plan("b", t0, now, false)
	if len(a.Fire) != 31 {
		t.Fatalf("Plan() fires %d, want 31", len(a.Fire))
	}
	distinct, differ := map[time.Duration]bool{}, 0
	for i, tk := range a.Fire {
		off := tk.RunAt.Sub(tk.At)
		if off < 0 || off >= 30*time.Second {
			t.Errorf("tick %s run_at offset %s, want in [0, 30s)", tk.At, off)
		}
		if !b.Fire[i].RunAt.Equal(tk.RunAt) {
			t.Errorf("tick %s run_at %s then %s: not deterministic", tk.At, tk.RunAt, b.Fire[i].RunAt)
		}
		if !other.Fire[i].RunAt.Equal(tk.RunAt) {
			differ++
		}
		distinct[off] = true
	}
	if len(distinct) < 20 || differ < 20 {
		t.Errorf("offsets: %d distinct of 31, %d differ across names: not spread", len(distinct), differ)
	}
	// without jitter run_at is the tick
	p := mustCompile(t, Spec{Every: time.Minute, StartAt: t0}).Plan("a", t0, t0, false)
	if !p.Fire[0].RunAt.Equal(t0) {
		t.Errorf("run_at without jitter = %s, want %s", p.Fire[0].RunAt, t0)
	}
}

// TestPlan_LongDowntime: a year down. every counts exactly; cron finds
// the latest ticks without walking the year and caps its count.
func TestPlan_LongDowntime(t *testing.T) {
	year := 365 * 24 * time.Hour
	now := t0.Add(year + 500*time.Millisecond)
	p := mustCompile(t, Spec{Every: time.Second, StartAt: t0}).Plan("s", t0, now, false)
	last := t0.Add(year)
	if len(p.Fire) != 2 || !p.Fire[0].At.Equal(last.Add(-time.Second)) || !p.Fire[1].At.Equal(last) {
		t.Fatalf("every 1s latest: Fire = %v, want the last two ticks before %s", p.Fire, last)
	}
	if want := int(year/time.Second) - 1; p.Missed != want {
		t.Errorf("every 1s latest: Missed = %d, want %d", p.Missed, want)
	}
	p = mustCompile(t, Spec{Every: time.Second, StartAt: t0, Catchup: CatchupAll, CatchupWindow: MaxCatchupWindow}).Plan("s", t0, now, false)
	if len(p.Fire) != MaxTicksPerPlan || !p.Fire[0].At.Equal(now.Add(-MaxCatchupWindow).Truncate(time.Second).Add(time.Second)) {
		t.Fatalf("every 1s all: Fire = %d ticks from %s", len(p.Fire), p.Fire[0].At)
	}
	c := mustCompile(t, Spec{Cron: "* * * * * *"})
	p = c.Plan("s", t0, now, false)
	if len(p.Fire) != 2 || !p.Fire[0].At.Equal(last.Add(-time.Second)) || !p.Fire[1].At.Equal(last) || p.Fire[1].Backfilled {
		t.Fatalf("cron 1s latest: Fire = %v", p.Fire)
	}
	if p.Missed != MaxPlanWalk-2 {
		t.Errorf("cron 1s latest: Missed = %d, want the capped %d", p.Missed, MaxPlanWalk-2)
	}
	// a sparse cron: the last 29 February before now
	c = mustCompile(t, Spec{Cron: "0 0 29 2 *", Catchup: CatchupNone})
	p = c.Plan("s", time.Date(2028, 2, 29, 0, 0, 0, 0, time.UTC), time.Date(2032, 2, 29, 0, 0, 30, 0, time.UTC), false)
	if len(p.Fire) != 1 || !p.Fire[0].At.Equal(time.Date(2032, 2, 29, 0, 0, 0, 0, time.UTC)) || p.Missed != 1 {
		t.Errorf("leap day none: %+v", p)
	}
}
