package schedule

import (
	"testing"
	"time"
)

// FuzzCompile: any cron expression and zone either compiles or is
// refused with an error — never a panic — and when it compiles, Next is
// strictly increasing from a few starting points, and asking again from
// just before a tick finds that tick.
func FuzzCompile(f *testing.F) {
	for _, s := range [][2]string{
		{"0 * * * *", "America/New_York"},
		{"30 2 * * *", "Europe/Berlin"},
		{"*/15 * * * *", "Australia/Lord_Howe"},
		{"0 0 29 2 *", "UTC"},
		{"0 0 13 * 5", "Pacific/Chatham"},
		{"0 */2 * * *", "America/St_Johns"},
		{"0 0-30/7 1-3 * * MON-FRI", "Europe/Dublin"},
		{"@weekly", "Asia/Kathmandu"},
		{"TZ=UTC", "UTC"},
		{"CRON_TZ=Europe/Berlin 0 3 * * *", ""},
		{"@every 1s", ""},
		{"* * * * * * *", ""},
		{"0 0 30 2 *", ""},
		{"1-0 * * * *", ""},
		{"*/0 * * * *", ""},
		{"0 0 ? * ?", ""},
		{"59 59 23 31 12 6", "Antarctica/Troll"},
	} {
		f.Add(s[0], s[1])
	}
	starts := []time.Time{
		time.Date(2026, 3, 8, 6, 59, 0, 0, time.UTC),
		time.Date(2026, 11, 1, 5, 30, 0, 0, time.UTC),
		time.Date(1999, 12, 31, 23, 59, 59, 999999999, time.UTC),
		time.Date(2100, 2, 28, 12, 0, 0, 0, time.UTC),
	}
	f.Fuzz(func(t *testing.T, expr, zone string) {
		spec, err := Spec{Cron: expr, Timezone: zone}.Normalize(starts[0])
		if err != nil {
			return
		}
		c, err := Compile(spec)
		if err != nil {
			t.Fatalf("Compile(%+v) error = %v after Normalize accepted it", spec, err)
		}
		for _, after := range starts {
			for i := 0; i < 4; i++ {
				n := c.Next(after)
				if n.IsZero() {
					break
				}
				if !n.After(after) {
					t.Fatalf("%q in %s: Next(%s) = %s, not after", expr, zone, after, n)
				}
				if again := c.Next(n.Add(-time.Nanosecond)); !again.Equal(n) {
					t.Fatalf("%q in %s: Next(%s) = %s, but Next(that - 1ns) = %s", expr, zone, after, n, again)
				}
				after = n
			}
		}
	})
}

// FuzzPlan: any compiled schedule, stored next and pass time give a plan
// within bounds: at most MaxTicksPerPlan jobs, in order, each due and not
// before next, and a Next that moves forward.
func FuzzPlan(f *testing.F) {
	f.Add("*/5 * * * *", "Europe/Berlin", int64(0), int64(3600), uint8(2), true)
	f.Add("30 2 * * *", "America/New_York", int64(0), int64(400*86400), uint8(1), false)
	f.Add("", "UTC", int64(7), int64(1e6), uint8(0), true)
	f.Add("* * * * * *", "Australia/Lord_Howe", int64(-5), int64(86400*7+1), uint8(2), false)
	f.Fuzz(func(t *testing.T, expr, zone string, nextSec, downSec int64, policy uint8, skip bool) {
		spec := Spec{Cron: expr, Timezone: zone, Catchup: []Catchup{CatchupNone, CatchupLatest, CatchupAll}[policy%3]}
		if expr == "" {
			spec.Every, spec.StartAt = time.Duration(1+nextSec%3600)*time.Second, t0
		}
		if skip {
			spec.Overlap = OverlapSkip
		}
		n, err := spec.Normalize(t0)
		if err != nil {
			return
		}
		c, err := Compile(n)
		if err != nil {
			t.Fatal(err)
		}
		next := c.Next(t0.Add(time.Duration(nextSec%(1<<31)) * time.Second))
		if next.IsZero() {
			return
		}
		now := next.Add(time.Duration(downSec%(20*366*86400)) * time.Second)
		p := c.Plan("f", next, now, skip && downSec%2 == 0)
		if len(p.Fire) > MaxTicksPerPlan || p.Missed < 0 || p.Skipped < 0 {
			t.Fatalf("Plan() fires %d, missed %d, skipped %d", len(p.Fire), p.Missed, p.Skipped)
		}
		prev := next.Add(-time.Nanosecond)
		for _, tk := range p.Fire {
			if !tk.At.After(prev) || tk.At.After(now) {
				t.Fatalf("Plan(next %s, now %s) fires %s after %s", next, now, tk.At, prev)
			}
			prev = tk.At
		}
		if !now.Before(next) && !p.Next.IsZero() && !p.Next.After(next) {
			t.Fatalf("Plan(next %s, now %s).Next = %s: does not move forward", next, now, p.Next)
		}
	})
}
