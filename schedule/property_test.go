package schedule

import (
	"errors"
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"
)

var propZones = []string{
	"UTC", "America/New_York", "Europe/Berlin", "Australia/Lord_Howe",
	"Pacific/Chatham", "America/St_Johns", "Europe/Dublin", "Asia/Kathmandu",
	"America/Sao_Paulo", "Antarctica/Troll", "Asia/Tehran", "America/Santiago",
}

// genCron draws a five-field expression (seconds 0: minute granularity).
func genCron(t *rapid.T) string {
	pick := func(label string, opts ...string) string { return rapid.SampledFrom(opts).Draw(t, label) }
	return strings.Join([]string{
		pick("minute", "0", "*/15", "30", "0,30", "45", "*/20", "5-10", "*"),
		pick("hour", "*", "2", "1", "*/2", "1-3", "0,12", "3", "*/1", "0-23"),
		pick("dom", "*", "*", "1", "15", "*/2", "?"),
		pick("month", "*", "*", "3,10", "11", "4", "3-4,9-11"),
		pick("dow", "*", "*", "0", "1-5", "?", "SAT"),
	}, " ")
}

// genAfter draws an instant, half of the time shortly before one of the
// zone's transitions.
func genAfter(t *rapid.T, loc *time.Location) time.Time {
	base := time.Date(2015, 1, 1, 0, 0, 0, 0, time.UTC)
	at := base.Add(time.Duration(rapid.Int64Range(0, 20*365*24*3600).Draw(t, "sec")) * time.Second)
	if rapid.Bool().Draw(t, "nearTransition") {
		if _, end := at.In(loc).ZoneBounds(); !end.IsZero() {
			// up to a day before (a daily tick's Next crosses it) or 2 h after
			at = end.UTC().Add(time.Duration(rapid.IntRange(-26*60, 2*60).Draw(t, "minutes")) * time.Minute)
		}
	}
	return at.Add(time.Duration(rapid.Int64Range(0, int64(time.Minute)-1).Draw(t, "nanos")))
}

// refMatches is cron's day and field rule, written again from robfig's
// bits for the reference walks below.
func refMatches(f fields, w time.Time) bool {
	bit := func(b uint64, n int) bool { return b&(1<<uint(n)) != 0 }
	if !bit(f.second, w.Second()) || !bit(f.minute, w.Minute()) || !bit(f.hour, w.Hour()) || !bit(f.month, int(w.Month())) {
		return false
	}
	dom, dow := bit(f.dom, w.Day()), bit(f.dow, int(w.Weekday()))
	if (f.dom|f.dow)&starBit != 0 {
		return dom && dow
	}
	return dom || dow
}

// naiveWall is u's local wall clock carried in a UTC time.
func naiveWall(u time.Time, loc *time.Location) time.Time {
	l := u.In(loc)
	return time.Date(l.Year(), l.Month(), l.Day(), l.Hour(), l.Minute(), l.Second(), 0, time.UTC)
}

const refSpan = 4 * 24 * time.Hour

// refNext walks every minute after after, converting instants to wall
// clocks with time.In only (never the other way), and applies the rule
// as documented: every-hour schedules fire at each matching instant;
// others at the first instant of each matching wall time, and once at
// the end of a gap that swallowed a matching wall time.
func refNext(f fields, loc *time.Location, after time.Time) (time.Time, bool) {
	first := after.Truncate(time.Minute).Add(time.Minute)
	if f.everyHour() {
		for u := first; u.Before(after.Add(refSpan)); u = u.Add(time.Minute) {
			if refMatches(f, naiveWall(u, loc)) {
				return u, true
			}
		}
		return time.Time{}, false
	}
	u := after.Truncate(time.Minute).Add(-30 * time.Hour)
	maxSeen := naiveWall(u, loc)
	for u = u.Add(time.Minute); u.Before(after.Add(refSpan)); u = u.Add(time.Minute) {
		w := naiveWall(u, loc)
		fire := false
		if w.After(maxSeen) {
			fire = refMatches(f, w)
			for g := maxSeen.Add(time.Minute); g.Before(w) && !fire; g = g.Add(time.Minute) {
				fire = refMatches(f, g) // a matching wall time skipped by a gap
			}
			maxSeen = w
		}
		if fire && u.After(after) {
			return u, true
		}
	}
	return time.Time{}, false
}

// TestNext_Property compares Next with the minute-walking reference and
// checks Next(Next(t)-1ns) == Next(t) and Next > t.
func TestNext_Property(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		expr := genCron(t)
		zone := rapid.SampledFrom(propZones).Draw(t, "zone")
		spec, err := Spec{Cron: expr, Timezone: zone}.Normalize(time.Now())
		if err != nil {
			t.Skip("refused:", err) // e.g. 31 in November only
		}
		c, err := Compile(spec)
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 5; i++ {
			after := genAfter(t, c.loc)
			got := c.Next(after)
			want, found := refNext(c.f, c.loc, after)
			switch {
			case found && !got.Equal(want):
				t.Fatalf("%q in %s: Next(%s) = %s, reference %s", expr, zone, after, got, want)
			case !found && !got.IsZero() && got.Before(after.Add(refSpan)):
				t.Fatalf("%q in %s: Next(%s) = %s, reference none within %s", expr, zone, after, got, refSpan)
			}
			if !got.IsZero() {
				if !got.After(after) {
					t.Fatalf("Next(%s) = %s, not after", after, got)
				}
				if again := c.Next(got.Add(-time.Nanosecond)); !again.Equal(got) {
					t.Fatalf("%q in %s: Next(Next(t)-1ns) = %s, want %s", expr, zone, again, got)
				}
			}
		}
	})
}

// TestNextEvery_Property: every ticks are StartAt + k·Every, strictly
// after, in any zone.
func TestNextEvery_Property(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		every := time.Duration(rapid.Int64Range(int64(MinEvery), int64(MaxEvery)).Draw(t, "every"))
		start := time.Unix(rapid.Int64Range(0, 4e9).Draw(t, "start"), 0).UTC()
		zone := rapid.SampledFrom(propZones).Draw(t, "zone")
		c := mustCompile(t, Spec{Every: every, StartAt: start, Timezone: zone})
		after := time.Unix(rapid.Int64Range(0, 5e9).Draw(t, "after"), rapid.Int64Range(0, 1e9-1).Draw(t, "ns")).UTC()
		got := c.Next(after)
		if !got.After(after) || (got.Sub(start))%every != 0 || got.Before(start) {
			t.Fatalf("Next(%s) = %s: not StartAt %s + k·%s after it", after, got, start, every)
		}
		if prev := got.Add(-every); !got.Equal(start) && prev.After(after) {
			t.Fatalf("Next(%s) = %s skips %s", after, got, prev)
		}
		if again := c.Next(got.Add(-time.Nanosecond)); !again.Equal(got) {
			t.Fatalf("Next(Next(t)-1ns) = %s, want %s", again, got)
		}
	})
}

// TestPlan_Property: over random passes, each tick the plan decides is
// decided once: fired, missed or skipped, never twice; fired ticks are
// in order, and Next is after now unless the pass was cut.
func TestPlan_Property(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		spec := Spec{
			Catchup: rapid.SampledFrom([]Catchup{CatchupNone, CatchupLatest, CatchupAll}).Draw(t, "catchup"),
			Overlap: rapid.SampledFrom([]Overlap{OverlapAllow, OverlapSkip}).Draw(t, "overlap"),
		}
		if rapid.Bool().Draw(t, "cron") {
			spec.Cron = rapid.SampledFrom([]string{"* * * * * *", "*/7 * * * * *", "0 * * * *", "*/5 * * * *", "30 2 * * *"}).Draw(t, "expr")
			spec.Timezone = rapid.SampledFrom(propZones).Draw(t, "zone")
		} else {
			spec.Every = time.Duration(rapid.Int64Range(1, 3600).Draw(t, "every")) * time.Second
			spec.StartAt = t0
		}
		c := mustCompile(t, spec)
		next := c.Next(t0)
		now := next
		var last time.Time
		for pass := 0; pass < 20; pass++ {
			now = now.Add(time.Duration(rapid.Int64Range(0, int64(3*time.Hour)).Draw(t, "gap")))
			busy := rapid.Bool().Draw(t, "busy")
			due, _ := c.ticksIn(next, next, now, 1<<20)
			if len(due) == 1<<20 {
				t.Skip("too many ticks for the reference count")
			}
			p := c.Plan("p", next, now, busy)
			for _, tk := range p.Fire {
				if !tk.At.After(last) && !last.IsZero() || tk.At.After(now) {
					t.Fatalf("pass %d fired %s after %s (now %s)", pass, tk.At, last, now)
				}
				last = tk.At
			}
			n := len(p.Fire) + p.Missed + p.Skipped
			cut := spec.Catchup == CatchupAll && !p.Next.After(now)
			if !cut && len(due) > 0 && n != len(due) && len(due) <= MaxPlanWalk {
				t.Fatalf("pass %d: %d due ticks, %d fired + %d missed + %d skipped", pass, len(due), len(p.Fire), p.Missed, p.Skipped)
			}
			if !cut && len(due) > 0 && !p.Next.After(now) {
				t.Fatalf("pass %d: Next %s not after now %s", pass, p.Next, now)
			}
			next = p.Next
		}
	})
}

// TestParse_RecoversPanic: a panic inside robfig/cron's parser is an
// error, not a crash.
func TestParse_RecoversPanic(t *testing.T) {
	orig := parse
	t.Cleanup(func() { parse = orig })
	parse = func(string) (cronSchedule, error) { panic("index out of range") }
	_, err := Spec{Cron: "0 * * * *"}.Normalize(created)
	if err == nil || err.Error() != `cron "0 * * * *": not a valid expression` {
		t.Fatalf("Normalize() error = %v, want the parse refusal", err)
	}
	parse = func(string) (cronSchedule, error) { return nil, errors.New("x") }
	if _, err := (Spec{Cron: "0 * * * *"}).Normalize(created); err == nil {
		t.Fatal("Normalize() error = nil")
	}
}
