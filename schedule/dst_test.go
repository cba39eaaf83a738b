package schedule

import (
	"testing"
	"time"
)

// utc parses "2006-01-02 15:04" as UTC.
func utc(tb testing.TB, s string) time.Time {
	tb.Helper()
	t, err := time.Parse("2006-01-02 15:04", s)
	if err != nil {
		tb.Fatal(err)
	}
	return t
}

// fataler is what mustCompile needs of a *testing.T or a *rapid.T.
type fataler interface {
	Helper()
	Fatalf(format string, args ...any)
}

func mustCompile(tb fataler, s Spec) *Schedule {
	tb.Helper()
	n, err := s.Normalize(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	if err != nil {
		tb.Fatalf("Normalize(%+v) error = %v", s, err)
	}
	c, err := Compile(n)
	if err != nil {
		tb.Fatalf("Compile(%+v) error = %v", n, err)
	}
	return c
}

// TestNext_DST pins the exact UTC instants fired around both
// daylight-saving transitions of 2026 in three zones. The expected
// instants are worked out by hand from the zone rules, in the comments:
//
//	America/New_York: 2026-03-08 02:00 EST (-5) -> 03:00 EDT (-4) at 07:00Z;
//	                  2026-11-01 02:00 EDT (-4) -> 01:00 EST (-5) at 06:00Z.
//	Europe/Berlin:    2026-03-29 02:00 CET (+1) -> 03:00 CEST (+2) at 01:00Z;
//	                  2026-10-25 03:00 CEST (+2) -> 02:00 CET (+1) at 01:00Z.
//	Australia/Lord_Howe (30-minute shift):
//	                  2026-04-05 02:00 LHDT (+11) -> 01:30 LHST (+10:30) at 04-04 15:00Z;
//	                  2026-10-04 02:00 LHST (+10:30) -> 02:30 LHDT (+11) at 10-03 15:30Z.
func TestNext_DST(t *testing.T) {
	every15 := func(zone string) Spec {
		return Spec{Every: 15 * time.Minute, StartAt: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), Timezone: zone}
	}
	cron := func(expr, zone string) Spec { return Spec{Cron: expr, Timezone: zone} }
	cases := []struct {
		name  string
		spec  Spec
		after string
		want  []string
	}{
		// New York, spring forward: 02:xx local does not exist.
		{"NY/spring/hourly", cron("0 * * * *", "America/New_York"), "2026-03-08 04:30",
			// 00:00 EST, 01:00 EST, 03:00 EDT, 04:00 EDT: the skipped hour does not fire
			[]string{"2026-03-08 05:00", "2026-03-08 06:00", "2026-03-08 07:00", "2026-03-08 08:00"}},
		{"NY/spring/02:30", cron("30 2 * * *", "America/New_York"), "2026-03-07 00:00",
			// 03-07 02:30 EST; 03-08 02:30 is in the gap: once, at its end (03:00 EDT); 03-09 02:30 EDT
			[]string{"2026-03-07 07:30", "2026-03-08 07:00", "2026-03-09 06:30"}},
		{"NY/spring/*/15", cron("*/15 * * * *", "America/New_York"), "2026-03-08 06:30",
			// 01:45 EST, 03:00 EDT, 03:15 EDT, 03:30 EDT
			[]string{"2026-03-08 06:45", "2026-03-08 07:00", "2026-03-08 07:15", "2026-03-08 07:30"}},
		{"NY/spring/every15m", every15("America/New_York"), "2026-03-08 06:30",
			[]string{"2026-03-08 06:45", "2026-03-08 07:00", "2026-03-08 07:15", "2026-03-08 07:30"}},
		// New York, fall back: 01:xx local happens twice.
		{"NY/fall/hourly", cron("0 * * * *", "America/New_York"), "2026-11-01 03:30",
			// 00:00 EDT, 01:00 EDT, 01:00 EST (the repeated hour fires twice), 02:00 EST, 03:00 EST
			[]string{"2026-11-01 04:00", "2026-11-01 05:00", "2026-11-01 06:00", "2026-11-01 07:00", "2026-11-01 08:00"}},
		{"NY/fall/02:30", cron("30 2 * * *", "America/New_York"), "2026-10-31 00:00",
			// 10-31 02:30 EDT; 11-01 02:30 EST (02:30 exists once); 11-02 02:30 EST
			[]string{"2026-10-31 06:30", "2026-11-01 07:30", "2026-11-02 07:30"}},
		{"NY/fall/01:30", cron("30 1 * * *", "America/New_York"), "2026-10-31 00:00",
			// 10-31 01:30 EDT; 11-01 01:30 twice: only the first (EDT); 11-02 01:30 EST
			[]string{"2026-10-31 05:30", "2026-11-01 05:30", "2026-11-02 06:30"}},
		{"NY/fall/*/15", cron("*/15 * * * *", "America/New_York"), "2026-11-01 05:30",
			// 01:45 EDT, 01:00 EST, 01:15 EST, 01:30 EST, 01:45 EST, 02:00 EST
			[]string{"2026-11-01 05:45", "2026-11-01 06:00", "2026-11-01 06:15", "2026-11-01 06:30", "2026-11-01 06:45", "2026-11-01 07:00"}},
		{"NY/fall/every15m", every15("America/New_York"), "2026-11-01 05:30",
			[]string{"2026-11-01 05:45", "2026-11-01 06:00", "2026-11-01 06:15", "2026-11-01 06:30", "2026-11-01 06:45", "2026-11-01 07:00"}},

		// Berlin, spring forward.
		{"Berlin/spring/hourly", cron("0 * * * *", "Europe/Berlin"), "2026-03-28 22:30",
			// 00:00 CET, 01:00 CET, 03:00 CEST, 04:00 CEST
			[]string{"2026-03-28 23:00", "2026-03-29 00:00", "2026-03-29 01:00", "2026-03-29 02:00"}},
		{"Berlin/spring/02:30", cron("30 2 * * *", "Europe/Berlin"), "2026-03-27 12:00",
			// 03-28 02:30 CET; 03-29 gap: 03:00 CEST; 03-30 02:30 CEST
			[]string{"2026-03-28 01:30", "2026-03-29 01:00", "2026-03-30 00:30"}},
		{"Berlin/spring/*/15", cron("*/15 * * * *", "Europe/Berlin"), "2026-03-29 00:30",
			// 01:45 CET, 03:00 CEST, 03:15 CEST
			[]string{"2026-03-29 00:45", "2026-03-29 01:00", "2026-03-29 01:15"}},
		{"Berlin/spring/every15m", every15("Europe/Berlin"), "2026-03-29 00:30",
			[]string{"2026-03-29 00:45", "2026-03-29 01:00", "2026-03-29 01:15"}},
		// Berlin, fall back: 02:xx happens twice.
		{"Berlin/fall/hourly", cron("0 * * * *", "Europe/Berlin"), "2026-10-24 21:30",
			// 00:00 CEST, 01:00 CEST, 02:00 CEST, 02:00 CET, 03:00 CET
			[]string{"2026-10-24 22:00", "2026-10-24 23:00", "2026-10-25 00:00", "2026-10-25 01:00", "2026-10-25 02:00"}},
		{"Berlin/fall/02:30", cron("30 2 * * *", "Europe/Berlin"), "2026-10-24 12:00",
			// 10-25 02:30 twice: the first (CEST); 10-26 02:30 CET
			[]string{"2026-10-25 00:30", "2026-10-26 01:30"}},
		{"Berlin/fall/*/15", cron("*/15 * * * *", "Europe/Berlin"), "2026-10-25 00:30",
			// 02:45 CEST, 02:00 CET, 02:15 CET
			[]string{"2026-10-25 00:45", "2026-10-25 01:00", "2026-10-25 01:15"}},
		{"Berlin/fall/every15m", every15("Europe/Berlin"), "2026-10-25 00:30",
			[]string{"2026-10-25 00:45", "2026-10-25 01:00", "2026-10-25 01:15"}},

		// Lord Howe, April: back by 30 minutes, 01:30-02:00 happens twice.
		{"LordHowe/april/hourly", cron("0 * * * *", "Australia/Lord_Howe"), "2026-04-04 12:30",
			// 00:00 LHDT, 01:00 LHDT, 02:00 LHST, 03:00 LHST (90 minutes between the middle two)
			[]string{"2026-04-04 13:00", "2026-04-04 14:00", "2026-04-04 15:30", "2026-04-04 16:30"}},
		{"LordHowe/april/02:30", cron("30 2 * * *", "Australia/Lord_Howe"), "2026-04-03 12:00",
			// 04-04 02:30 LHDT; 04-05 02:30 LHST; 04-06 02:30 LHST
			[]string{"2026-04-03 15:30", "2026-04-04 16:00", "2026-04-05 16:00"}},
		{"LordHowe/april/01:45", cron("45 1 * * *", "Australia/Lord_Howe"), "2026-04-04 12:00",
			// 04-05 01:45 twice: the first (LHDT); 04-06 01:45 LHST
			[]string{"2026-04-04 14:45", "2026-04-05 15:15"}},
		{"LordHowe/april/*/15", cron("*/15 * * * *", "Australia/Lord_Howe"), "2026-04-04 14:30",
			// 01:45 LHDT, 01:30 LHST, 01:45 LHST, 02:00 LHST
			[]string{"2026-04-04 14:45", "2026-04-04 15:00", "2026-04-04 15:15", "2026-04-04 15:30"}},
		{"LordHowe/april/every15m", every15("Australia/Lord_Howe"), "2026-04-04 14:30",
			[]string{"2026-04-04 14:45", "2026-04-04 15:00", "2026-04-04 15:15", "2026-04-04 15:30"}},
		// Lord Howe, October: forward by 30 minutes, 02:00-02:30 does not exist.
		{"LordHowe/october/hourly", cron("0 * * * *", "Australia/Lord_Howe"), "2026-10-03 13:00",
			// 00:00 LHST, 01:00 LHST, (02:00 skipped), 03:00 LHDT
			[]string{"2026-10-03 13:30", "2026-10-03 14:30", "2026-10-03 16:00"}},
		{"LordHowe/october/02:30", cron("30 2 * * *", "Australia/Lord_Howe"), "2026-10-02 12:00",
			// 10-03 02:30 LHST; 10-04 02:30 LHDT exists (the gap's end); 10-05 02:30 LHDT
			[]string{"2026-10-02 16:00", "2026-10-03 15:30", "2026-10-04 15:30"}},
		{"LordHowe/october/02:00", cron("0 2 * * *", "Australia/Lord_Howe"), "2026-10-02 12:00",
			// 10-03 02:00 LHST; 10-04 02:00 in the gap: its end, 02:30 LHDT; 10-05 02:00 LHDT
			[]string{"2026-10-02 15:30", "2026-10-03 15:30", "2026-10-04 15:00"}},
		{"LordHowe/october/*/15", cron("*/15 * * * *", "Australia/Lord_Howe"), "2026-10-03 15:00",
			// 01:45 LHST, 02:30 LHDT, 02:45 LHDT
			[]string{"2026-10-03 15:15", "2026-10-03 15:30", "2026-10-03 15:45"}},
		{"LordHowe/october/every15m", every15("Australia/Lord_Howe"), "2026-10-03 15:00",
			[]string{"2026-10-03 15:15", "2026-10-03 15:30", "2026-10-03 15:45"}},

		// Several wall times in one gap fire once, at its end.
		{"NY/spring/gap-collapses", cron("0,20,40 2,3 * * *", "America/New_York"), "2026-03-08 06:00",
			// 02:00, 02:20, 02:40 EST do not exist, 03:00 EDT is the gap's end too: one tick; then 03:20, 03:40 EDT
			[]string{"2026-03-08 07:00", "2026-03-08 07:20", "2026-03-08 07:40", "2026-03-09 06:00"}},
		// Hours given by a step name specific hours: wall-clock rule.
		{"NY/fall/every-2h", cron("0 */2 * * *", "America/New_York"), "2026-11-01 03:30",
			// 00:00 EDT, 02:00 EST, 04:00 EST
			[]string{"2026-11-01 04:00", "2026-11-01 07:00", "2026-11-01 09:00"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := mustCompile(t, tc.spec)
			got := c.NextN(utc(t, tc.after), len(tc.want))
			if len(got) != len(tc.want) {
				t.Fatalf("NextN() = %v, want %v", got, tc.want)
			}
			for i, w := range tc.want {
				if !got[i].Equal(utc(t, w)) || got[i].Location() != time.UTC {
					t.Errorf("NextN()[%d] = %s, want %s UTC", i, got[i], w)
				}
			}
		})
	}
}

// TestNext_AfterFallBackSecondPass: asked from inside the second pass of
// the repeated hour, a daily schedule at a repeated time does not fire
// again that day.
func TestNext_AfterFallBackSecondPass(t *testing.T) {
	c := mustCompile(t, Spec{Cron: "30 1 * * *", Timezone: "America/New_York"})
	// 06:10Z is 01:10 EST, the second 01:10 of 2026-11-01; 01:30 fired at 05:30Z.
	if got, want := c.Next(utc(t, "2026-11-01 06:10")), utc(t, "2026-11-02 06:30"); !got.Equal(want) {
		t.Errorf("Next() = %s, want %s", got, want)
	}
	// From the first pass, the first 01:30 is still ahead.
	if got, want := c.Next(utc(t, "2026-11-01 05:10")), utc(t, "2026-11-01 05:30"); !got.Equal(want) {
		t.Errorf("Next() = %s, want %s", got, want)
	}
}

// TestNext_Fields: cron field semantics as robfig/cron's bits give them.
func TestNext_Fields(t *testing.T) {
	cases := []struct {
		expr, after string
		want        []string
	}{
		// dom and dow both restricted: either matches (13th or a Friday)
		{"0 0 13 * 5", "2026-02-01 00:00", []string{"2026-02-06 00:00", "2026-02-13 00:00", "2026-02-20 00:00", "2026-02-27 00:00", "2026-03-06 00:00"}},
		// dom restricted, dow *: dom only
		{"0 0 13 * *", "2026-02-01 00:00", []string{"2026-02-13 00:00", "2026-03-13 00:00"}},
		// dom ?, dow restricted: dow only
		{"0 0 ? * MON", "2026-02-01 00:00", []string{"2026-02-02 00:00", "2026-02-09 00:00"}},
		// leap day
		{"0 12 29 2 *", "2026-01-01 00:00", []string{"2028-02-29 12:00", "2032-02-29 12:00"}},
		// descriptors
		{"@yearly", "2026-06-01 00:00", []string{"2027-01-01 00:00", "2028-01-01 00:00"}},
		{"@monthly", "2026-01-31 00:00", []string{"2026-02-01 00:00", "2026-03-01 00:00"}},
		{"@weekly", "2026-01-01 00:00", []string{"2026-01-04 00:00", "2026-01-11 00:00"}},
		{"@daily", "2026-12-31 23:59", []string{"2027-01-01 00:00"}},
		{"@hourly", "2026-12-31 23:59", []string{"2027-01-01 00:00", "2027-01-01 01:00"}},
		// 31st only in long months
		{"0 0 31 * *", "2026-01-31 00:00", []string{"2026-03-31 00:00", "2026-05-31 00:00"}},
		// six fields: seconds
		{"30 59 23 31 12 *", "2026-01-01 00:00", []string{"2026-12-31 23:59", "2027-12-31 23:59"}},
	}
	for _, tc := range cases {
		t.Run(tc.expr, func(t *testing.T) {
			c := mustCompile(t, Spec{Cron: tc.expr})
			got := c.NextN(utc(t, tc.after), len(tc.want))
			for i, w := range tc.want {
				want := utc(t, w)
				if tc.expr == "30 59 23 31 12 *" {
					want = want.Add(30 * time.Second)
				}
				if i >= len(got) || !got[i].Equal(want) {
					t.Fatalf("NextN() = %v, want %v", got, tc.want)
				}
			}
		})
	}
}

// TestNext_Every: StartAt + k·Every in absolute time, strictly after.
func TestNext_Every(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	c := mustCompile(t, Spec{Every: 90 * time.Second, StartAt: start, Timezone: "Europe/Berlin"})
	for _, tc := range []struct{ after, want time.Time }{
		{start.Add(-time.Hour), start},
		{start.Add(-time.Nanosecond), start},
		{start, start.Add(90 * time.Second)},
		{start.Add(90*time.Second - 1), start.Add(90 * time.Second)},
		{start.Add(90 * time.Second), start.Add(180 * time.Second)},
		{start.Add(365*24*time.Hour + time.Minute), start.Add(365*24*time.Hour + 90*time.Second)},
	} {
		if got := c.Next(tc.after); !got.Equal(tc.want) {
			t.Errorf("Next(%s) = %s, want %s", tc.after, got, tc.want)
		}
	}
}
