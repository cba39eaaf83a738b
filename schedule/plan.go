package schedule

import (
	"fmt"
	"hash/fnv"
	"time"
)

// Tick is one job a pass enqueues.
type Tick struct {
	At         time.Time // the tick's instant: the job's scheduled_for
	RunAt      time.Time // At plus the jitter offset
	Backfilled bool      // a missed tick fired by the catch-up policy
}

// Plan is what one pass of a schedule does.
type Plan struct {
	Fire    []Tick    // oldest first
	Missed  int       // due ticks the catch-up policy dropped
	Skipped int       // due ticks the overlap policy dropped
	Next    time.Time // the schedule's next fire time after the pass
}

// Plan decides one pass at now for the schedule name whose stored next
// fire time is next; busy says whether its previous job is unfinished
// (neither completed, dead nor cancelled). A tick is due when it is at or
// before now; the most recent due tick is current when it is at most
// MaxLateness late, and every other due tick is missed.
//
// The due ticks are next and the fire times after it up to now. With
// nothing due (next after now, or next zero: nothing stored), the plan is
// empty and Next is next. Otherwise Next is the first tick after now —
// except when MaxTicksPerPlan cut a catch-up all, where it is the first
// tick not yet decided, so the next pass continues. Missed counts a cron
// schedule's ticks up to MaxPlanWalk per pass. Plan's cost does not grow
// with the downtime.
func (c *Schedule) Plan(name string, next, now time.Time, busy bool) Plan {
	if next.IsZero() || next.After(now) {
		return Plan{Next: next}
	}
	next, now = next.UTC(), now.UTC()
	last := c.lastTicks(next, now, 2)
	L := last[len(last)-1]
	current := now.Sub(L) <= MaxLateness
	var p Plan
	p.Next = c.Next(now)
	switch c.spec.Catchup {
	case CatchupNone, CatchupLatest:
		if c.spec.Catchup == CatchupLatest {
			if !current {
				p.Fire = append(p.Fire, c.tick(name, L, true))
			} else if len(last) == 2 {
				p.Fire = append(p.Fire, c.tick(name, last[0], true))
			}
		}
		if current {
			p.Fire = append(p.Fire, c.tick(name, L, false))
		}
		p.Missed = c.countTicks(next, now) - len(p.Fire)
	default: // CatchupAll
		lo := now.Add(-c.spec.CatchupWindow)
		if lo.Before(next) {
			lo = next
		}
		if current && L.Before(lo) {
			lo = L
		}
		ts, complete := c.ticksIn(next, lo, now, MaxTicksPerPlan)
		for _, t := range ts {
			p.Fire = append(p.Fire, c.tick(name, t, !(current && t.Equal(L))))
		}
		if !complete {
			p.Next = c.Next(ts[len(ts)-1])
		}
		if lo.After(next) {
			p.Missed = c.countTicks(next, lo.Add(-time.Nanosecond))
		}
	}
	if p.Missed < 0 { // a capped count
		p.Missed = 0
	}
	if c.spec.Overlap == OverlapSkip && len(p.Fire) > 0 {
		keep := 1
		if busy {
			keep = 0
		}
		p.Skipped = len(p.Fire) - keep
		p.Fire = p.Fire[:keep]
	}
	if len(p.Fire) == 0 {
		p.Fire = nil
	}
	return p
}

// firstAtOrAfter is the first tick of the sequence starting at next that
// is at or after lo.
func (c *Schedule) firstAtOrAfter(next, lo time.Time) time.Time {
	if !lo.After(next) {
		return next
	}
	return c.Next(lo.Add(-time.Nanosecond))
}

// ticksIn is the ticks of the sequence starting at next in [lo, hi],
// oldest first, at most max of them; complete is false when more follow
// up to hi.
func (c *Schedule) ticksIn(next, lo, hi time.Time, max int) (ts []time.Time, complete bool) {
	for t := c.firstAtOrAfter(next, lo); !t.IsZero() && !t.After(hi); t = c.Next(t) {
		if len(ts) == max {
			return ts, false
		}
		ts = append(ts, t)
	}
	return ts, true
}

// lastTicks is the (at most k) latest ticks of the sequence starting at
// next that are at or before now, oldest first; next <= now, so there is
// at least one. Every schedules use arithmetic. Cron schedules look back
// from now over a span growing eightfold until it holds k ticks, and
// halve a span too dense to walk: the cost does not grow with the
// downtime (at most a few hundred Next calls for any expression).
func (c *Schedule) lastTicks(next, now time.Time, k int) []time.Time {
	if c.spec.Every != 0 {
		var out []time.Time
		for t := c.prevEvery(now); len(out) < k && !t.IsZero() && t.After(next); {
			out = append([]time.Time{t}, out...)
			t = t.Add(-c.spec.Every)
			if t.Before(c.spec.StartAt) {
				break
			}
		}
		if len(out) < k {
			out = append([]time.Time{next}, out...)
		}
		return out
	}
	for span := time.Minute; ; span *= 8 {
		lo := now.Add(-span)
		if span >= now.Sub(next) || span > maxSpan || !lo.After(next) {
			lo = next
		}
		ts, complete := c.ticksIn(next, lo, now, walkChunk)
		if !complete {
			return c.lastTicksIn(next, lo, now, k)
		}
		if len(ts) >= k || lo.Equal(next) {
			if len(ts) > k {
				ts = ts[len(ts)-k:]
			}
			return ts
		}
	}
}

// walkChunk is how many ticks lastTicks walks before halving a span.
const walkChunk = 64

// lastTicksIn is lastTicks within [lo, hi], halving the span while it
// holds more than walkChunk ticks.
func (c *Schedule) lastTicksIn(next, lo, hi time.Time, k int) []time.Time {
	ts, complete := c.ticksIn(next, lo, hi, walkChunk)
	if complete || hi.Sub(lo) < 2*time.Second {
		if len(ts) > k {
			ts = ts[len(ts)-k:]
		}
		return ts
	}
	mid := lo.Add(hi.Sub(lo) / 2)
	out := c.lastTicksIn(next, mid, hi, k)
	if len(out) < k {
		out = append(c.lastTicksIn(next, lo, mid.Add(-time.Nanosecond), k-len(out)), out...)
	}
	return out
}

// countTicks is how many ticks of the sequence starting at next are in
// [next, hi]: exact for every schedules, at most MaxPlanWalk for cron.
func (c *Schedule) countTicks(next, hi time.Time) int {
	if hi.Before(next) {
		return 0
	}
	if c.spec.Every != 0 {
		n := c.countEvery(hi) - c.countEvery(next) + 1
		if max := int64(^uint(0) >> 1); n > max {
			return int(max)
		}
		return int(n)
	}
	ts, _ := c.ticksIn(next, next, hi, MaxPlanWalk)
	return len(ts)
}

// tick is the job for tick t: its run_at is t plus a deterministic
// offset in [0, Jitter) drawn from the name and the tick (FNV-1a), so
// every replica and every retry of a pass computes the same.
func (c *Schedule) tick(name string, t time.Time, backfilled bool) Tick {
	run := t
	if c.spec.Jitter > 0 {
		h := fnv.New64a()
		fmt.Fprintf(h, "%s\x00%d", name, t.UnixNano())
		run = t.Add(time.Duration(h.Sum64() % uint64(c.spec.Jitter)))
	}
	return Tick{At: t.UTC(), RunAt: run.UTC(), Backfilled: backfilled}
}
