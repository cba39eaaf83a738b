// Package schedule computes when a periodic job fires: it parses a cron
// expression or an interval in an IANA zone, computes fire instants under
// fenceq's daylight-saving rule, and plans one pass of a schedule — which
// ticks are due, which were missed, what the catch-up and overlap policies
// enqueue — as pure functions of the stored spec and the time. It reaches
// no store; package db calls it inside an engine's transaction.
//
// SCAFFOLD (branch sched-base): the API below is fixed; the bodies are a
// first cut that the "sched-cron" branch replaces (DST rule, robfig parser
// hardening, fuzzing, tables). Do not rely on anything but the doc comments.
package schedule

import (
	"errors"
	"fmt"
	"hash/fnv"
	"strings"
	"time"
	_ "time/tzdata" // edge boxes without zoneinfo still know every zone

	"github.com/robfig/cron/v3"
)

// Catchup is what a pass does with missed ticks.
type Catchup string

// Catch-up policies.
const (
	CatchupNone   Catchup = "none"   // missed ticks are dropped
	CatchupLatest Catchup = "latest" // the most recent missed tick fires, backfilled (the default)
	CatchupAll    Catchup = "all"    // every missed tick inside CatchupWindow fires, oldest first, backfilled
)

// Overlap is what a pass does with a tick while the schedule's previous job
// is unfinished.
type Overlap string

// Overlap policies.
const (
	OverlapAllow Overlap = "allow" // fire anyway (the default)
	OverlapSkip  Overlap = "skip"  // drop the tick and count it
)

// Limits.
const (
	MinEvery             = time.Second
	MaxEvery             = 366 * 24 * time.Hour
	MaxLateness          = time.Minute // a due tick later than this is missed
	DefaultCatchupWindow = time.Hour
	MaxCatchupWindow     = 7 * 24 * time.Hour
	MaxJitter            = time.Hour
	// MaxTicksPerPlan bounds the jobs one pass of one schedule enqueues;
	// catch-up beyond it continues in the next pass.
	MaxTicksPerPlan = 100
	// Horizon: a spec that does not fire within it is refused.
	Horizon = 5 * 366 * 24 * time.Hour
)

// Spec is a schedule's timing as stored and as clients give it.
type Spec struct {
	Cron          string        // five fields, six with seconds, or an @descriptor; exclusive with Every
	Every         time.Duration // at least MinEvery; exclusive with Cron
	StartAt       time.Time     // Every only: ticks are StartAt + k·Every (zero: the creation time cut to the second)
	Timezone      string        // IANA name; "" is UTC
	Catchup       Catchup       // "" is CatchupLatest
	CatchupWindow time.Duration // CatchupAll only; 0 is DefaultCatchupWindow
	Overlap       Overlap       // "" is OverlapAllow
	Jitter        time.Duration // each job's run_at is its tick plus a deterministic offset in [0, Jitter)
}

// Normalize validates s and fills its defaults; created is the creation
// (or replacement) time. Its errors say which field is wrong and why, for
// the client as they are.
func (s Spec) Normalize(created time.Time) (Spec, error) {
	if (s.Cron == "") == (s.Every == 0) {
		return Spec{}, errors.New("exactly one of cron and every is required")
	}
	if s.Timezone == "" {
		s.Timezone = "UTC"
	}
	if _, err := time.LoadLocation(s.Timezone); err != nil || strings.ContainsAny(s.Timezone, " \t") {
		return Spec{}, fmt.Errorf("timezone %q is not a known IANA zone", s.Timezone)
	}
	if s.Every != 0 {
		if s.Every < MinEvery || s.Every > MaxEvery {
			return Spec{}, fmt.Errorf("every must be between %s and %s", MinEvery, MaxEvery)
		}
		if s.StartAt.IsZero() {
			s.StartAt = created.Truncate(time.Second)
		}
	}
	if s.Catchup == "" {
		s.Catchup = CatchupLatest
	}
	if s.Overlap == "" {
		s.Overlap = OverlapAllow
	}
	if s.Catchup == CatchupAll && s.CatchupWindow == 0 {
		s.CatchupWindow = DefaultCatchupWindow
	}
	if _, err := Compile(s); err != nil {
		return Spec{}, err
	}
	return s, nil
}

// Schedule is a normalized spec compiled for computing times.
type Schedule struct {
	spec  Spec
	loc   *time.Location
	sched cron.Schedule
}

// Compile compiles a normalized spec.
func Compile(s Spec) (*Schedule, error) {
	loc, err := time.LoadLocation(s.Timezone)
	if err != nil {
		return nil, fmt.Errorf("timezone %q is not a known IANA zone", s.Timezone)
	}
	c := &Schedule{spec: s, loc: loc}
	if s.Cron != "" {
		p := cron.NewParser(cron.SecondOptional | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)
		sc, err := p.Parse(s.Cron)
		if err != nil {
			return nil, fmt.Errorf("cron %q: %v", s.Cron, err)
		}
		c.sched = sc
	}
	return c, nil
}

// Spec is the spec it was compiled from.
func (c *Schedule) Spec() Spec { return c.spec }

// Next is the first fire instant strictly after after (UTC), or the zero
// time when there is none within Horizon.
func (c *Schedule) Next(after time.Time) time.Time {
	if c.spec.Every != 0 {
		if after.Before(c.spec.StartAt) {
			return c.spec.StartAt.UTC()
		}
		k := after.Sub(c.spec.StartAt)/c.spec.Every + 1
		return c.spec.StartAt.Add(k * c.spec.Every).UTC()
	}
	return c.sched.Next(after.In(c.loc)).UTC()
}

// NextN is the first n fire instants after after.
func (c *Schedule) NextN(after time.Time, n int) []time.Time {
	var out []time.Time
	for len(out) < n {
		t := c.Next(after)
		if t.IsZero() {
			break
		}
		out = append(out, t)
		after = t
	}
	return out
}

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
func (c *Schedule) Plan(name string, next, now time.Time, busy bool) Plan {
	var due []time.Time
	for t := next; !t.IsZero() && !t.After(now); t = c.Next(t) {
		due = append(due, t)
		if len(due) > 100000 {
			break
		}
	}
	p := Plan{Next: c.Next(now)}
	if len(due) == 0 {
		p.Next = next
		return p
	}
	last := due[len(due)-1]
	for _, t := range due {
		if t.Equal(last) && now.Sub(t) <= MaxLateness {
			p.Fire = append(p.Fire, c.tick(name, t, false))
		} else {
			p.Fire = append(p.Fire, c.tick(name, t, true))
		}
	}
	return p
}

func (c *Schedule) tick(name string, t time.Time, backfilled bool) Tick {
	run := t
	if c.spec.Jitter > 0 {
		h := fnv.New64a()
		fmt.Fprintf(h, "%s\x00%d", name, t.UnixNano())
		run = t.Add(time.Duration(h.Sum64() % uint64(c.spec.Jitter)))
	}
	return Tick{At: t.UTC(), RunAt: run.UTC(), Backfilled: backfilled}
}
