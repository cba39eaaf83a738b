package schedule

import (
	"testing"
	"time"
)

func BenchmarkNext(b *testing.B) {
	for _, bc := range []struct {
		name string
		spec Spec
	}{
		{"every-minute/UTC", Spec{Cron: "* * * * *"}},
		{"every-15m/New_York", Spec{Cron: "*/15 * * * *", Timezone: "America/New_York"}},
		{"daily-02:30/Berlin", Spec{Cron: "30 2 * * *", Timezone: "Europe/Berlin"}},
		{"weekdays-09:00/Lord_Howe", Spec{Cron: "0 9 * * MON-FRI", Timezone: "Australia/Lord_Howe"}},
		{"leap-day", Spec{Cron: "0 0 29 2 *"}},
		{"every-15m", Spec{Every: 15 * time.Minute, StartAt: t0}},
	} {
		c := mustCompile(b, bc.spec)
		b.Run(bc.name, func(b *testing.B) {
			at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
			for b.Loop() {
				at = c.Next(at)
				if at.Year() > 2400 {
					at = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
				}
			}
		})
	}
}

func BenchmarkPlan(b *testing.B) {
	year := 365 * 24 * time.Hour
	for _, bc := range []struct {
		name     string
		spec     Spec
		downtime time.Duration
	}{
		{"on-time/cron", Spec{Cron: "*/5 * * * *", Timezone: "Europe/Berlin"}, 0},
		{"on-time/every", Spec{Every: time.Second, StartAt: t0}, 0},
		{"down-10-ticks/all", Spec{Every: time.Minute, StartAt: t0, Catchup: CatchupAll}, 10 * time.Minute},
		{"down-1y/every-1s/latest", Spec{Every: time.Second, StartAt: t0}, year},
		{"down-1y/every-1s/all-7d", Spec{Every: time.Second, StartAt: t0, Catchup: CatchupAll, CatchupWindow: MaxCatchupWindow}, year},
		{"down-1y/cron-1s/latest", Spec{Cron: "* * * * * *", Timezone: "America/New_York"}, year},
		{"down-1y/cron-1s/none", Spec{Cron: "* * * * * *", Catchup: CatchupNone}, year},
		{"down-1y/cron-1s/all-7d", Spec{Cron: "* * * * * *", Catchup: CatchupAll, CatchupWindow: MaxCatchupWindow}, year},
		{"down-1y/cron-daily/latest", Spec{Cron: "30 2 * * *", Timezone: "Europe/Berlin"}, year},
	} {
		c := mustCompile(b, bc.spec)
		next := c.Next(t0.Add(-time.Nanosecond))
		now := next.Add(bc.downtime)
		b.Run(bc.name, func(b *testing.B) {
			for b.Loop() {
				if p := c.Plan("bench", next, now, false); len(p.Fire) == 0 {
					b.Fatal("nothing fired")
				}
			}
		})
	}
}
