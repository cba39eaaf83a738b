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
