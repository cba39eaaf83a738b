package schedule

import (
	"math/bits"
	"time"
)

// starBit is robfig/cron's marker for a field given as "*" or "?".
const starBit = 1 << 63

// fields are the bit sets of a parsed cron expression (robfig/cron's
// SpecSchedule layout): bit n set means value n matches.
type fields struct {
	second, minute, hour, dom, month, dow uint64
	// star: dom or dow was "*"/"?": a day must match both (cron's rule);
	// otherwise, both restricted, a day matches either.
	star bool
}

// allHours are the bits of hours 0..23.
const allHours = 1<<24 - 1

// everyHour reports whether the hour field matches every hour ("*",
// "*/1", "0-23", …): such schedules follow absolute time across a
// daylight-saving change.
func (f *fields) everyHour() bool { return f.hour&allHours == allHours }

// nextBit is the smallest n in [from, max] whose bit is set in b.
func nextBit(b uint64, from, max int) (int, bool) {
	if from > max {
		return 0, false
	}
	m := b &^ (1<<uint(from) - 1) & (1<<uint(max+1) - 1)
	if m == 0 {
		return 0, false
	}
	return bits.TrailingZeros64(m), true
}

var monthDays = [13]int{0, 31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31}

func daysIn(y, mo int) int {
	if mo == 2 && y%4 == 0 && (y%100 != 0 || y%400 == 0) {
		return 29
	}
	return monthDays[mo]
}

func (f *fields) dayMatches(d, wd int) bool {
	dom := f.dom&(1<<uint(d)) != 0
	dow := f.dow&(1<<uint(wd)) != 0
	if f.star {
		return dom && dow
	}
	return dom || dow
}

// nextWall is the first wall-clock time strictly after w (a naive
// calendar time carried in a UTC time.Time) whose fields match, skipping
// field by field as robfig/cron does; false when none is found up to
// the end of year maxYear.
func (f *fields) nextWall(w time.Time, maxYear int) (time.Time, bool) {
	t := w.Truncate(time.Second).Add(time.Second)
	y, mon, d := t.Date()
	mo := int(mon)
	h, mi, s := t.Clock()
	for {
		// carry overflowing fields upward
		if s > 59 {
			s, mi = 0, mi+1
		}
		if mi > 59 {
			mi, h = 0, h+1
		}
		if h > 23 {
			h, d = 0, d+1
		}
		if mo <= 12 && d > daysIn(y, mo) {
			d, mo = 1, mo+1
		}
		if mo > 12 {
			mo, y = 1, y+1
		}
		if y > maxYear {
			return time.Time{}, false
		}
		m, ok := nextBit(f.month, mo, 12)
		if !ok {
			mo, d, h, mi, s = 13, 1, 0, 0, 0
			continue
		}
		if m != mo {
			mo, d, h, mi, s = m, 1, 0, 0, 0
		}
		dim := daysIn(y, mo)
		wd := int(time.Date(y, time.Month(mo), d, 0, 0, 0, 0, time.UTC).Weekday())
		for d <= dim && !f.dayMatches(d, wd) {
			d, wd, h, mi, s = d+1, (wd+1)%7, 0, 0, 0
		}
		if d > dim {
			continue
		}
		hh, ok := nextBit(f.hour, h, 23)
		if !ok {
			h, mi, s = 24, 0, 0
			continue
		}
		if hh != h {
			h, mi, s = hh, 0, 0
		}
		mm, ok := nextBit(f.minute, mi, 59)
		if !ok {
			mi, s = 60, 0
			continue
		}
		if mm != mi {
			mi, s = mm, 0
		}
		ss, ok := nextBit(f.second, s, 59)
		if !ok {
			s = 60
			continue
		}
		return time.Date(y, time.Month(mo), d, h, mi, ss, 0, time.UTC), true
	}
}

// zoneAt is the UTC offset in force at t and the bounds of the period of
// that offset (zero when unbounded).
func (c *Schedule) zoneAt(t time.Time) (off time.Duration, start, end time.Time) {
	lt := t.In(c.loc)
	_, sec := lt.Zone()
	start, end = lt.ZoneBounds()
	if !start.IsZero() {
		start = start.UTC()
	}
	if !end.IsZero() {
		end = end.UTC()
	}
	return time.Duration(sec) * time.Second, start, end
}

// resolve maps a wall-clock time to an instant by fenceq's rule for
// schedules naming hours: a time that exists twice is its first
// occurrence; a time that does not exist (a gap) is the instant the gap
// ends. Zone transitions are found with ZoneBounds rather than trusting
// time.Date's normalization, which leaves the gap case unspecified.
func (c *Schedule) resolve(w time.Time) time.Time {
	// Every solution t = w - offset lies after w - 27 h (no offset
	// exceeds ±16 h): walk the zone periods forward from there.
	p := w.Add(-27 * time.Hour)
	for {
		off, start, end := c.zoneAt(p)
		t := w.Add(-off)
		if !start.IsZero() && t.Before(start) {
			return start
		}
		if end.IsZero() || t.Before(end) {
			return t
		}
		p = end
	}
}

// nextEveryInstant is Next for schedules whose hour field is every hour:
// the first instant after after whose local wall clock matches.
func (c *Schedule) nextEveryInstant(after, limit time.Time) time.Time {
	from := after
	for !from.After(limit) {
		off, _, end := c.zoneAt(from.Add(time.Nanosecond))
		w, ok := c.f.nextWall(from.Add(off), limit.Add(off).Year())
		if !ok {
			return time.Time{}
		}
		t := w.Add(-off)
		if end.IsZero() || t.Before(end) {
			if t.After(limit) {
				return time.Time{}
			}
			return t
		}
		from = end.Add(-time.Nanosecond)
	}
	return time.Time{}
}

// nextWallClock is Next for schedules naming hours: wall-clock
// candidates in order, each resolved to an instant (see resolve).
func (c *Schedule) nextWallClock(after, limit time.Time) time.Time {
	off, start, _ := c.zoneAt(after)
	w := after.Add(off)
	if !start.IsZero() {
		// after in the second pass of a repeated hour: those wall times
		// already fired at their first occurrence.
		if prev, _, _ := c.zoneAt(start.Add(-time.Nanosecond)); prev > off && w.Before(start.Add(prev)) {
			w = start.Add(prev - time.Nanosecond)
		}
	}
	maxYear := limit.Add(16 * time.Hour).Year()
	for {
		var ok bool
		if w, ok = c.f.nextWall(w, maxYear); !ok {
			return time.Time{}
		}
		t := c.resolve(w)
		if t.After(limit) {
			return time.Time{}
		}
		if t.After(after) {
			return t
		}
	}
}

// nextEvery is Next for an every schedule: StartAt + k·Every.
func (c *Schedule) nextEvery(after time.Time) time.Time {
	start, every := c.spec.StartAt, c.spec.Every
	if after.Before(start) {
		return start.UTC()
	}
	d := after.Sub(start)
	if d > maxSpan {
		return time.Time{}
	}
	return start.Add((d/every + 1) * every).UTC()
}

// maxSpan keeps StartAt + k·Every arithmetic far from overflow.
const maxSpan = 200 * 366 * 24 * time.Hour

// countEvery is how many k >= 0 have StartAt + k·Every at or before t.
func (c *Schedule) countEvery(t time.Time) int64 {
	if t.Before(c.spec.StartAt) {
		return 0
	}
	d := t.Sub(c.spec.StartAt)
	if d > maxSpan {
		d = maxSpan
	}
	return int64(d/c.spec.Every) + 1
}

// prevEvery is the last StartAt + k·Every at or before t (zero if none).
func (c *Schedule) prevEvery(t time.Time) time.Time {
	n := c.countEvery(t)
	if n == 0 {
		return time.Time{}
	}
	return c.spec.StartAt.Add(time.Duration(n-1) * c.spec.Every).UTC()
}
