package cli

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/fenceq/fenceq/api"
	"github.com/fenceq/fenceq/db"
	"github.com/fenceq/fenceq/internal/apitest"
)

// TestScheduleCommands_PutListGetPauseResumeTriggerDelete walks a schedule
// through every "fenceq schedule" action against a real server; usage
// mistakes are exit 2 and the server's refusals exit 1, writing nothing.
func TestScheduleCommands_PutListGetPauseResumeTriggerDelete(t *testing.T) {
	s := apitest.Start(t, db.Rules{}, api.Config{})
	list := func() []db.Schedule {
		t.Helper()
		page, err := s.Store.ListSchedules(context.Background(), db.ListSchedulesRequest{})
		if err != nil {
			t.Fatal(err)
		}
		return page.Schedules
	}
	for _, args := range [][]string{
		{"schedule", "put", "x", "--queue", "q"},                                       // neither
		{"schedule", "put", "x", "--queue", "q", "--cron", "@hourly", "--every", "1h"}, // both
		{"schedule", "put", "x", "--cron", "@hourly"},                                  // no queue
		{"schedule", "put", "x", "--every", "1h", "--queue", "q", "--payload", "{"},
		{"schedule", "put", "x", "--every", "1h", "--queue", "q", "--start-at", "soon"},
		{"schedule", "put", "--every", "1h", "--queue", "q"}, // no name
	} {
		if _, _, err := runCLI(t, s.URL, args...); ExitCode(err) != 2 {
			t.Errorf("fenceq %s: %v (exit %d), want a usage error, exit 2", strings.Join(args, " "), err, ExitCode(err))
		}
	}
	out, _, err := runCLI(t, s.URL, "schedule", "put", "x", "--cron", "TZ=UTC 0 * * * *", "--queue", "q")
	if ExitCode(err) != 1 || !strings.Contains(err.Error(), "invalid_argument, HTTP 400") || out != "" {
		t.Errorf("schedule put with TZ= = %q, %v; want exit 1 with invalid_argument", out, err)
	}
	if got := list(); len(got) != 0 {
		t.Fatalf("refused puts wrote %v", got)
	}

	out, _, err = runCLI(t, s.URL, "schedule", "put", "nightly report", "--cron", "30 2 * * *", "--timezone", "Europe/Berlin",
		"--queue", "reports", "--payload", `{"r":1}`, "--priority", "3", "--overlap", "skip")
	if err != nil || !strings.HasPrefix(out, "schedule nightly report created\n") || !strings.Contains(out, "30 2 * * * (Europe/Berlin)") {
		t.Fatalf("schedule put = %q, %v", out, err)
	}
	out, _, err = runCLI(t, s.URL, "schedule", "put", "nightly report", "--every", "15m", "--queue", "reports")
	if err != nil || !strings.HasPrefix(out, "schedule nightly report replaced\n") {
		t.Fatalf("schedule put again = %q, %v", out, err)
	}
	out, _, err = runCLI(t, s.URL, "schedule", "list")
	if err != nil || !strings.Contains(out, "nightly report") || !strings.Contains(out, "every 15m0s") {
		t.Fatalf("schedule list = %q, %v", out, err)
	}
	out, _, err = runCLI(t, s.URL, "schedule", "get", "nightly report", "--json")
	var got struct {
		Name      string   `json:"name"`
		EveryMs   int64    `json:"every_ms"`
		NextFires []string `json:"next_fires"`
	}
	if err != nil || json.Unmarshal([]byte(out), &got) != nil || got.EveryMs != 900000 || len(got.NextFires) != db.NextFireCount {
		t.Fatalf("schedule get --json = %q, %v", out, err)
	}
	if out, _, err = runCLI(t, s.URL, "schedule", "pause", "nightly report"); err != nil || !strings.Contains(out, "paused") {
		t.Fatalf("schedule pause = %q, %v", out, err)
	}
	if sc := list(); len(sc) != 1 || !sc[0].Paused {
		t.Fatalf("after pause: %+v", sc)
	}
	if out, _, err = runCLI(t, s.URL, "schedule", "resume", "nightly report"); err != nil || !strings.HasPrefix(out, "schedule nightly report resumed") {
		t.Fatalf("schedule resume = %q, %v", out, err)
	}
	out, _, err = runCLI(t, s.URL, "schedule", "trigger", "nightly report", "-q")
	if err != nil {
		t.Fatalf("schedule trigger = %q, %v", out, err)
	}
	if page, err := s.Store.ListJobs(context.Background(), db.ListRequest{Queue: "reports"}); err != nil || len(page.Jobs) != 1 || page.Jobs[0].Schedule != "nightly report" {
		t.Fatalf("after trigger jobs = %+v, %v; want one of the schedule", page.Jobs, err)
	}
	if out, _, err = runCLI(t, s.URL, "schedule", "delete", "nightly report"); err != nil || out != "schedule nightly report deleted\n" {
		t.Fatalf("schedule delete = %q, %v", out, err)
	}
	if _, _, err = runCLI(t, s.URL, "schedule", "get", "nightly report"); ExitCode(err) != 1 || !strings.Contains(err.Error(), "not_found") {
		t.Fatalf("schedule get after delete: %v, want exit 1 not_found", err)
	}
}
