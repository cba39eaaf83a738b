// Package schedule computes when a periodic job fires: it parses a cron
// expression or an interval in an IANA zone, computes fire instants under
// fenceq's daylight-saving rule, and plans one pass of a schedule — which
// ticks are due, which were missed, what the catch-up and overlap policies
// enqueue — as pure functions of the stored spec and the time. It reaches
// no store; package db calls it inside an engine's transaction.
//
// The rules are written for users in docs/schedules.md. In short: a cron
// schedule whose hour field names specific hours follows the wall clock
// (a time skipped by a daylight-saving change fires once, at the end of
// the gap; a time that happens twice fires once, at its first
// occurrence); a cron schedule whose hour field is every hour, and an
// every schedule, fire at every instant whose wall clock matches.
//
// Cron expressions are parsed by robfig/cron v3's parser only; fenceq
// refuses what that parser mishandles (TZ=/CRON_TZ= prefixes, @every),
// recovers from its panics, and does its own time arithmetic on the bit
// sets it returns.
package schedule

import (
	"errors"
	"fmt"
	"strings"
	"time"
	_ "time/tzdata" // edge boxes without zoneinfo still know every zone
	"unicode/utf8"

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

// More limits (added by the sched-cron branch).
const (
	// MaxCronBytes bounds a cron expression.
	MaxCronBytes = 200
	// MaxTimezoneBytes bounds a zone name (the longest IANA name is
	// about 30 bytes).
	MaxTimezoneBytes = 64
	// MaxPlanWalk bounds the cron ticks one pass walks to count missed
	// ticks: a cron schedule down for long reports at most this many
	// missed ticks per pass (every schedules count exactly, by
	// arithmetic). Finding the ticks a pass fires never walks the
	// downtime.
	MaxPlanWalk = 1000
)

// StartAt bounds for every schedules.
var (
	minStartAt = time.Date(1970, 1, 1, 0, 0, 0, 0, time.UTC)
	maxStartAt = time.Date(2200, 1, 1, 0, 0, 0, 0, time.UTC)
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
	switch {
	case s.Cron != "" && s.Every != 0:
		return Spec{}, errors.New("cron and every are exclusive: give one of them")
	case s.Cron == "" && s.Every == 0:
		return Spec{}, errors.New("one of cron and every is required")
	}
	if strings.Trim(s.Cron, " \t") == "" && s.Cron != "" {
		return Spec{}, errors.New("cron: empty expression")
	}
	s.Cron = strings.Trim(s.Cron, " \t")
	if s.Timezone == "" {
		s.Timezone = "UTC"
	}
	if s.Every != 0 {
		if s.Every < MinEvery || s.Every > MaxEvery {
			return Spec{}, fmt.Errorf("every %s: must be between %s and %s", s.Every, MinEvery, MaxEvery)
		}
		if s.StartAt.IsZero() {
			s.StartAt = created.Truncate(time.Second)
		}
		if s.StartAt.Before(minStartAt) || !s.StartAt.Before(maxStartAt) {
			return Spec{}, fmt.Errorf("start_at %s: must be between %d and %d", s.StartAt.UTC().Format(time.RFC3339), minStartAt.Year(), maxStartAt.Year())
		}
		s.StartAt = s.StartAt.UTC()
	} else if !s.StartAt.IsZero() {
		return Spec{}, errors.New("start_at: only an every schedule has one (a cron schedule starts at its first matching time)")
	}
	if s.Catchup == "" {
		s.Catchup = CatchupLatest
	}
	switch s.Catchup {
	case CatchupNone, CatchupLatest, CatchupAll:
	default:
		return Spec{}, fmt.Errorf("catchup %q: must be none, latest or all", truncate(string(s.Catchup)))
	}
	if s.Overlap == "" {
		s.Overlap = OverlapAllow
	}
	switch s.Overlap {
	case OverlapAllow, OverlapSkip:
	default:
		return Spec{}, fmt.Errorf("overlap %q: must be allow or skip", truncate(string(s.Overlap)))
	}
	switch {
	case s.CatchupWindow < 0:
		return Spec{}, fmt.Errorf("catchup_window %s: must be positive", s.CatchupWindow)
	case s.CatchupWindow > MaxCatchupWindow:
		return Spec{}, fmt.Errorf("catchup_window %s: must be at most %s", s.CatchupWindow, MaxCatchupWindow)
	case s.CatchupWindow != 0 && s.Catchup != CatchupAll:
		return Spec{}, fmt.Errorf("catchup_window: only catchup all has a window (catchup is %s)", s.Catchup)
	case s.Catchup == CatchupAll && s.CatchupWindow == 0:
		s.CatchupWindow = DefaultCatchupWindow
	}
	if s.Jitter < 0 || s.Jitter > MaxJitter {
		return Spec{}, fmt.Errorf("jitter %s: must be between 0s and %s", s.Jitter, MaxJitter)
	}
	if _, err := Compile(s); err != nil {
		return Spec{}, err
	}
	return s, nil
}

// truncate bounds user text quoted back in a message.
func truncate(s string) string {
	if len(s) <= 64 {
		return s
	}
	for i := 64; i > 0; i-- {
		if utf8.RuneStart(s[i]) {
			return s[:i] + "…"
		}
	}
	return ""
}

// Schedule is a normalized spec compiled for computing times.
type Schedule struct {
	spec Spec
	loc  *time.Location
	f    fields // cron only
	// wall: the hour field names specific hours (wall-clock rule);
	// otherwise ticks are every instant whose wall clock matches.
	wall bool
}

// loadZone loads an IANA zone by name, refusing the machine-dependent
// "Local" and names no zone database could hold.
func loadZone(name string) (*time.Location, error) {
	if name == "" {
		name = "UTC"
	}
	bad := func() error {
		return fmt.Errorf("timezone %q: not a known IANA zone name (such as Europe/Berlin or UTC)", truncate(name))
	}
	if len(name) > MaxTimezoneBytes || name == "Local" || strings.ContainsFunc(name, func(r rune) bool {
		return r <= ' ' || r == 0x7f || r == '\\' || r == utf8.RuneError
	}) {
		return nil, bad()
	}
	loc, err := time.LoadLocation(name)
	if err != nil {
		return nil, bad()
	}
	return loc, nil
}

var parser = cron.NewParser(cron.SecondOptional | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// parse is robfig/cron's Parse; a variable so that a test can make it panic.
var parse = parser.Parse

type cronSchedule = cron.Schedule

// parseCron parses expr with robfig/cron's parser, after refusing what it
// mishandles, and keeps its bit sets.
func parseCron(expr string) (f fields, err error) {
	q := truncate(expr)
	if len(expr) > MaxCronBytes {
		return f, fmt.Errorf("cron: longer than %d bytes", MaxCronBytes)
	}
	if !utf8.ValidString(expr) || strings.ContainsFunc(expr, func(r rune) bool { return r < ' ' && r != '\t' || r == 0x7f }) {
		return f, fmt.Errorf("cron %q: control characters or invalid UTF-8", q)
	}
	trimmed := strings.Trim(expr, " \t")
	if trimmed == "" {
		return f, errors.New("cron: empty expression")
	}
	if strings.Contains(trimmed, "=") {
		return f, fmt.Errorf("cron %q: a TZ= or CRON_TZ= prefix is not accepted: give the zone in timezone", q)
	}
	if strings.HasPrefix(strings.ToLower(trimmed), "@every") {
		return f, fmt.Errorf("cron %q: @every is not accepted: use every", q)
	}
	defer func() {
		if r := recover(); r != nil {
			f, err = fields{}, fmt.Errorf("cron %q: not a valid expression", q)
		}
	}()
	sc, err := parse(trimmed)
	if err != nil {
		return f, fmt.Errorf("cron %q: %v", q, err)
	}
	spec, ok := sc.(*cron.SpecSchedule)
	if !ok {
		return f, fmt.Errorf("cron %q: not a valid expression", q)
	}
	f = fields{
		second: spec.Second, minute: spec.Minute, hour: spec.Hour,
		dom: spec.Dom, month: spec.Month, dow: spec.Dow,
		star: (spec.Dom|spec.Dow)&starBit != 0,
	}
	// Never firing (30 February, 31 April) is refused: some month in the
	// set must have a day in the set (dow, when restricted too, always
	// matches some day of any month).
	if f.star && f.dow&0x7f == 0x7f {
		fires := false
		for mo := 1; mo <= 12 && !fires; mo++ {
			if f.month&(1<<uint(mo)) != 0 {
				_, fires = nextBit(f.dom, 1, daysIn(2000, mo))
			}
		}
		if !fires {
			return f, fmt.Errorf("cron %q: never fires (no such day in those months)", q)
		}
	}
	return f, nil
}

// Compile compiles a normalized spec.
func Compile(s Spec) (*Schedule, error) {
	loc, err := loadZone(s.Timezone)
	if err != nil {
		return nil, err
	}
	c := &Schedule{spec: s, loc: loc}
	switch {
	case s.Cron != "" && s.Every != 0:
		return nil, errors.New("cron and every are exclusive: give one of them")
	case s.Cron != "":
		if c.f, err = parseCron(s.Cron); err != nil {
			return nil, err
		}
		c.wall = !c.f.everyHour()
		// Within Horizon of any time: checked from a fixed instant so
		// that compiling is a function of the spec alone.
		ref := time.Date(2001, 1, 1, 0, 0, 0, 0, time.UTC)
		if c.Next(ref).IsZero() {
			return nil, fmt.Errorf("cron %q: never fires within %d years", truncate(s.Cron), Horizon/(366*24*time.Hour))
		}
	case s.Every < MinEvery || s.Every > MaxEvery:
		return nil, fmt.Errorf("every %s: must be between %s and %s", s.Every, MinEvery, MaxEvery)
	}
	return c, nil
}

// Spec is the spec it was compiled from.
func (c *Schedule) Spec() Spec { return c.spec }

// Next is the first fire instant strictly after after (UTC), or the zero
// time when there is none within Horizon.
func (c *Schedule) Next(after time.Time) time.Time {
	if y := after.Year(); y < 1 || y > 9000 {
		return time.Time{}
	}
	after = after.UTC()
	if c.spec.Every != 0 {
		return c.nextEvery(after)
	}
	limit := after.Add(Horizon)
	if c.wall {
		return c.nextWallClock(after, limit)
	}
	return c.nextEveryInstant(after, limit)
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
