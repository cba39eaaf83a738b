package cli

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/fenceq/fenceq/api"
	"github.com/fenceq/fenceq/db"
	"github.com/fenceq/fenceq/internal/apitest"
)

func TestQueueCommands_PauseListResume(t *testing.T) {
	s := apitest.Start(t, db.Rules{}, api.Config{})
	if _, _, err := runCLI(t, s.URL, "enqueue", "--queue", "mail"); err != nil {
		t.Fatal(err)
	}
	out, _, err := runCLI(t, s.URL, "queue", "pause", "mail")
	if err != nil || !strings.HasPrefix(out, "queue mail paused (by local, ") {
		t.Fatalf("queue pause mail = %q, %v; want \"queue mail paused (by local, …\"", out, err)
	}
	out, _, err = runCLI(t, s.URL, "queue", "pause", "mail")
	if err != nil || !strings.HasPrefix(out, "queue mail was already paused") {
		t.Fatalf("queue pause mail again = %q, %v; want it said that it was already paused, exit 0", out, err)
	}
	out, _, err = runCLI(t, s.URL, "queue", "list")
	if err != nil || !strings.Contains(out, "PAUSED") || !strings.Contains(out, "mail") || !strings.Contains(out, "since ") {
		t.Fatalf("queue list = %q, %v; want mail shown paused", out, err)
	}
	out, _, err = runCLI(t, s.URL, "queue", "list", "--json")
	var list struct {
		Queues []struct {
			Queue  string            `json:"queue"`
			Paused bool              `json:"paused"`
			Counts map[string]uint64 `json:"counts"`
		} `json:"queues"`
	}
	if err != nil || json.Unmarshal([]byte(out), &list) != nil || len(list.Queues) != 1 || !list.Queues[0].Paused || list.Queues[0].Counts["available"] != 1 {
		t.Fatalf("queue list --json = %q, %v; want mail paused with 1 available", out, err)
	}
	if jobs, err := s.Store.ClaimJobs(context.Background(), db.ClaimRequest{Principal: "local", Worker: "w", Queues: []string{"mail"}}); err != nil || len(jobs) != 0 {
		t.Fatalf("claim of the paused queue = %v, %v; want none", jobs, err)
	}
	out, _, err = runCLI(t, s.URL, "queue", "resume", "mail")
	if err != nil || out != "queue mail resumed\n" {
		t.Fatalf("queue resume mail = %q, %v", out, err)
	}
	out, _, err = runCLI(t, s.URL, "queue", "resume", "mail")
	if err != nil || out != "queue mail was not paused\n" {
		t.Fatalf("queue resume mail again = %q, %v", out, err)
	}
	// A bad name is the server's refusal (exit 1) and pauses nothing.
	out, _, err = runCLI(t, s.URL, "queue", "pause", "no/slash")
	if ExitCode(err) != 1 || !strings.Contains(err.Error(), "invalid_argument, HTTP 400") || out != "" {
		t.Fatalf("queue pause no/slash = %q, %v; want exit 1 with invalid_argument", out, err)
	}
	if ps, err := s.Store.PausedQueues(context.Background()); err != nil || len(ps) != 0 {
		t.Fatalf("paused queues = %v, %v; want none", ps, err)
	}
	// Usage mistakes: no action, an unknown one, no queue.
	for _, args := range [][]string{{"queue"}, {"queue", "freeze", "mail"}, {"queue", "pause"}, {"queue", "list", "extra"}} {
		_, _, err := runCLI(t, s.URL, args...)
		var ue UsageError
		if !errors.As(err, &ue) || ExitCode(err) != 2 {
			t.Errorf("fenceq %v = %v, want a usage error (exit 2)", args, err)
		}
	}
}
