package schedule

import (
	"strings"
	"testing"
	"time"
)

var created = time.Date(2026, 3, 4, 5, 6, 7, 890, time.UTC)

// TestNormalize_Refused: each bad spec is refused with a message naming
// the field, as a client sees it.
func TestNormalize_Refused(t *testing.T) {
	cases := []struct {
		name string
		spec Spec
		want string
	}{
		{"neither", Spec{}, "one of cron and every is required"},
		{"both", Spec{Cron: "* * * * *", Every: time.Minute}, "cron and every are exclusive: give one of them"},
		{"cron/invalid", Spec{Cron: "61 * * * *"}, `cron "61 * * * *": end of range (61) above maximum (59): 61`},
		{"cron/fields", Spec{Cron: "* * *"}, `cron "* * *": expected 5 to 6 fields, found 3: [* * *]`},
		{"cron/words", Spec{Cron: "every day"}, `cron "every day": expected 5 to 6 fields, found 2: [every day]`},
		{"cron/descriptor", Spec{Cron: "@fortnightly"}, `cron "@fortnightly": unrecognized descriptor: @fortnightly`},
		{"cron/TZ", Spec{Cron: "TZ=Europe/Berlin 0 3 * * *"}, `cron "TZ=Europe/Berlin 0 3 * * *": a TZ= or CRON_TZ= prefix is not accepted: give the zone in timezone`},
		{"cron/CRON_TZ", Spec{Cron: "CRON_TZ=UTC 0 3 * * *"}, `cron "CRON_TZ=UTC 0 3 * * *": a TZ= or CRON_TZ= prefix is not accepted: give the zone in timezone`},
		// robfig/cron v3.0.1 panics on a TZ= without a space (slice bounds)
		{"cron/TZ-no-space", Spec{Cron: "TZ=UTC"}, `cron "TZ=UTC": a TZ= or CRON_TZ= prefix is not accepted: give the zone in timezone`},
		{"cron/@every", Spec{Cron: "@every 1m"}, `cron "@every 1m": @every is not accepted: use every`},
		{"cron/@every-bare", Spec{Cron: "@every"}, `cron "@every": @every is not accepted: use every`},
		{"cron/30-february", Spec{Cron: "0 0 30 2 *"}, `cron "0 0 30 2 *": never fires (no such day in those months)`},
		{"cron/31-april-june", Spec{Cron: "0 0 31 4,6 *"}, `cron "0 0 31 4,6 *": never fires (no such day in those months)`},
		{"cron/long", Spec{Cron: strings.Repeat("1,", 150) + "1 * * * *"}, "cron: longer than 200 bytes"},
		{"cron/control", Spec{Cron: "0 0 * * *\n"}, `cron "0 0 * * *\n": control characters or invalid UTF-8`},
		{"cron/utf8", Spec{Cron: "0 0 * * \xff"}, `cron "0 0 * * \xff": control characters or invalid UTF-8`},
		{"cron/blank", Spec{Cron: "   "}, "cron: empty expression"},
		{"cron/start_at", Spec{Cron: "0 * * * *", StartAt: created}, "start_at: only an every schedule has one (a cron schedule starts at its first matching time)"},
		{"zone/unknown", Spec{Cron: "0 * * * *", Timezone: "Mars/Olympus_Mons"}, `timezone "Mars/Olympus_Mons": not a known IANA zone name (such as Europe/Berlin or UTC)`},
		{"zone/every-unknown", Spec{Every: time.Minute, Timezone: "Europe/Berln"}, `timezone "Europe/Berln": not a known IANA zone name (such as Europe/Berlin or UTC)`},
		{"zone/Local", Spec{Cron: "0 * * * *", Timezone: "Local"}, `timezone "Local": not a known IANA zone name (such as Europe/Berlin or UTC)`},
		{"zone/path", Spec{Cron: "0 * * * *", Timezone: "../../etc/passwd"}, `timezone "../../etc/passwd": not a known IANA zone name (such as Europe/Berlin or UTC)`},
		{"zone/absolute", Spec{Cron: "0 * * * *", Timezone: "/etc/localtime"}, `timezone "/etc/localtime": not a known IANA zone name (such as Europe/Berlin or UTC)`},
		{"zone/space", Spec{Cron: "0 * * * *", Timezone: "Europe/Berlin "}, `timezone "Europe/Berlin ": not a known IANA zone name (such as Europe/Berlin or UTC)`},
		{"zone/long", Spec{Cron: "0 * * * *", Timezone: strings.Repeat("A", 65)}, `timezone "` + strings.Repeat("A", 64) + `…": not a known IANA zone name (such as Europe/Berlin or UTC)`},
		{"every/small", Spec{Every: 999 * time.Millisecond}, "every 999ms: must be between 1s and 8784h0m0s"},
		{"every/negative", Spec{Every: -time.Minute}, "every -1m0s: must be between 1s and 8784h0m0s"},
		{"every/large", Spec{Every: MaxEvery + time.Second}, "every 8784h0m1s: must be between 1s and 8784h0m0s"},
		{"every/start_at-early", Spec{Every: time.Minute, StartAt: time.Date(1969, 12, 31, 0, 0, 0, 0, time.UTC)}, "start_at 1969-12-31T00:00:00Z: must be between 1970 and 2200"},
		{"every/start_at-late", Spec{Every: time.Minute, StartAt: time.Date(2200, 1, 1, 0, 0, 0, 0, time.UTC)}, "start_at 2200-01-01T00:00:00Z: must be between 1970 and 2200"},
		{"catchup", Spec{Every: time.Minute, Catchup: "some"}, `catchup "some": must be none, latest or all`},
		{"overlap", Spec{Every: time.Minute, Overlap: "queue"}, `overlap "queue": must be allow or skip`},
		{"catchup_window/negative", Spec{Every: time.Minute, Catchup: CatchupAll, CatchupWindow: -time.Second}, "catchup_window -1s: must be positive"},
		{"catchup_window/large", Spec{Every: time.Minute, Catchup: CatchupAll, CatchupWindow: MaxCatchupWindow + 1}, "catchup_window 168h0m0.000000001s: must be at most 168h0m0s"},
		{"catchup_window/latest", Spec{Every: time.Minute, CatchupWindow: time.Hour}, "catchup_window: only catchup all has a window (catchup is latest)"},
		{"catchup_window/none", Spec{Every: time.Minute, Catchup: CatchupNone, CatchupWindow: time.Hour}, "catchup_window: only catchup all has a window (catchup is none)"},
		{"jitter/negative", Spec{Every: time.Minute, Jitter: -1}, "jitter -1ns: must be between 0s and 1h0m0s"},
		{"jitter/large", Spec{Every: time.Minute, Jitter: MaxJitter + time.Second}, "jitter 1h0m1s: must be between 0s and 1h0m0s"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.spec.Normalize(created)
			if err == nil {
				t.Fatalf("Normalize() = %+v, want error %q", got, tc.want)
			}
			if err.Error() != tc.want {
				t.Errorf("Normalize() error = %q, want %q", err, tc.want)
			}
			if got != (Spec{}) {
				t.Errorf("Normalize() = %+v with its error, want the zero Spec", got)
			}
		})
	}
}

// TestNormalize_Defaults: what a minimal spec becomes.
func TestNormalize_Defaults(t *testing.T) {
	got, err := Spec{Every: time.Minute}.Normalize(created)
	if err != nil {
		t.Fatal(err)
	}
	want := Spec{Every: time.Minute, StartAt: time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC), Timezone: "UTC", Catchup: CatchupLatest, Overlap: OverlapAllow}
	if got != want {
		t.Errorf("Normalize() = %+v, want %+v", got, want)
	}
	got, err = Spec{Cron: " 0 3 * * * ", Catchup: CatchupAll, Timezone: "Europe/Berlin"}.Normalize(created)
	if err != nil {
		t.Fatal(err)
	}
	want = Spec{Cron: "0 3 * * *", Timezone: "Europe/Berlin", Catchup: CatchupAll, CatchupWindow: DefaultCatchupWindow, Overlap: OverlapAllow}
	if got != want {
		t.Errorf("Normalize() = %+v, want %+v", got, want)
	}
	// accepted edge values
	for _, s := range []Spec{
		{Cron: "0 0 29 2 *"},
		{Cron: "0 0 30 2 1"}, // both restricted: every Monday of February too
		{Cron: "@annually"}, {Cron: "@midnight"},
		{Cron: "0 0 0 1 1 ?"},
		{Every: MinEvery}, {Every: MaxEvery},
		{Every: time.Minute, Catchup: CatchupAll, CatchupWindow: MaxCatchupWindow, Jitter: MaxJitter},
		{Cron: "0 * * * *", Timezone: "Australia/Lord_Howe"},
	} {
		if _, err := s.Normalize(created); err != nil {
			t.Errorf("Normalize(%+v) error = %v", s, err)
		}
	}
}
