package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/fenceq/fenceq/api"
	"github.com/fenceq/fenceq/db"
	"github.com/fenceq/fenceq/internal/apitest"
)

// runCLI runs one command in-process against base and returns its output.
func runCLI(t *testing.T, base string, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	var out, errOut bytes.Buffer
	e := Env{Stdin: strings.NewReader(""), Stdout: &out, Stderr: &errOut}
	err = Run(context.Background(), args[0], append(args[1:], "--server", base), e)
	return out.String(), errOut.String(), err
}

// The shared call shape: -q prints one value, --json the server's JSON,
// people get a sentence, and a refusal is exit status 1 with the API code.
func TestCall_PrintsForPeopleScriptsAndRefusals(t *testing.T) {
	s := apitest.Start(t, db.Rules{}, api.Config{})

	out, _, err := runCLI(t, s.URL, "enqueue", "--queue", "mail", "--payload", `{"to":"ada"}`, "-q")
	if err != nil {
		t.Fatalf("enqueue -q = %v", err)
	}
	id, err := strconv.ParseUint(strings.TrimSpace(out), 10, 64)
	if err != nil || id == 0 {
		t.Fatalf("enqueue -q printed %q, want a job id alone", out)
	}

	out, _, err = runCLI(t, s.URL, "get", strconv.FormatUint(id, 10), "--json")
	var j struct {
		ID      uint64          `json:"id"`
		Queue   string          `json:"queue"`
		Payload json.RawMessage `json:"payload"`
	}
	var payload bytes.Buffer
	if err != nil || json.Unmarshal([]byte(out), &j) != nil || json.Compact(&payload, j.Payload) != nil ||
		j.ID != id || j.Queue != "mail" || payload.String() != `{"to":"ada"}` {
		t.Fatalf("get --json = %q, %v; want job %d on mail with its payload", out, err, id)
	}

	out, _, err = runCLI(t, s.URL, "retry", strconv.FormatUint(id, 10))
	if ExitCode(err) != 1 || !strings.Contains(err.Error(), "failed_precondition, HTTP 409") || out != "" {
		t.Fatalf("retry of an available job = %q, %v (exit %d); want exit 1 naming failed_precondition and 409, nothing printed", out, err, ExitCode(err))
	}
	after, err := s.Store.GetJob(context.Background(), id)
	if err != nil || after.State != db.StateAvailable || after.MaxAttempts != db.DefaultMaxAttempts {
		t.Fatalf("job after a refused retry = %+v, %v; want it available with its budget unchanged", after, err)
	}

	out, _, err = runCLI(t, s.URL, "cancel", strconv.FormatUint(id, 10))
	if err != nil || out != "job "+strconv.FormatUint(id, 10)+" cancelled\n" {
		t.Fatalf("cancel = %q, %v; want the sentence for people", out, err)
	}
}

func TestRun_UsageMistakesAreExitStatus2AndCallNothing(t *testing.T) {
	s := apitest.Start(t, db.Rules{}, api.Config{})
	for _, args := range [][]string{
		{"get", "abc"},                // not an id
		{"get"},                       // no id
		{"get", "1", "2"},             // one too many
		{"enqueue", "--payload", "{"}, // not JSON
		{"lease", "steal", "x"},       // no such action
		{"lease", "acquire", "x"},     // no --holder
		{"backup", "--out", "-", "--json"},
		{"frobnicate"},
	} {
		_, _, err := runCLI(t, s.URL, args...)
		var ue UsageError
		if !errors.As(err, &ue) || ExitCode(err) != 2 {
			t.Errorf("fenceq %v = %v, want a usage error (exit 2)", args, err)
		}
	}
	page, err := s.Store.ListJobs(context.Background(), db.ListRequest{})
	if err != nil || len(page.Jobs) != 0 {
		t.Fatalf("jobs after usage mistakes = %d, %v; want none", len(page.Jobs), err)
	}
}

// fenceq job check: exit 0 and nothing on stdout while the claim in the
// environment is current, exit 1 once another claim took the job.
func TestJobCheck_CurrentThenTakenOver(t *testing.T) {
	s := apitest.Start(t, db.Rules{}, api.Config{})
	ctx := context.Background()
	res, err := s.Store.EnqueueJobs(ctx, []db.EnqueueRequest{{Queue: "q"}})
	if err != nil {
		t.Fatal(err)
	}
	id := strconv.FormatUint(res[0].Job.ID, 10)
	if _, err := s.Store.ClaimJobs(ctx, db.ClaimRequest{Principal: "local", Worker: "w1", Queues: []string{"q"}}); err != nil {
		t.Fatal(err)
	}
	t.Setenv("FENCEQ_JOB_ID", id)
	t.Setenv("FENCEQ_WORKER", "w1")
	t.Setenv("FENCEQ_FENCING_TOKEN", "1")
	if out, errOut, err := runCLI(t, s.URL, "job", "check"); err != nil || out != "" || errOut != "" {
		t.Fatalf("job check of the current claim = %v, stdout %q, stderr %q; want nil and nothing printed", err, out, errOut)
	}
	if _, err := s.Store.CancelJob(ctx, db.JobRequest{Principal: "local", ID: res[0].Job.ID}); err != nil {
		t.Fatal(err)
	}
	_, _, err = runCLI(t, s.URL, "job", "check")
	if ExitCode(err) != 1 || !strings.Contains(err.Error(), "w1") || !strings.Contains(err.Error(), "not current") {
		t.Fatalf("job check after a cancel = %v (exit %d); want exit 1 naming w1 and 'not current'", err, ExitCode(err))
	}
	if _, _, err := runCLI(t, s.URL, "job", "check", id); ExitCode(err) != 2 {
		t.Fatalf("job check ID without TOKEN = %v, want a usage error", err)
	}
}

func TestClientFlags_ServerWithoutSchemeIsAUsageError(t *testing.T) {
	_, _, err := runCLI(t, "127.0.0.1:7420", "stats")
	if ExitCode(err) != 2 || !strings.Contains(err.Error(), "http://127.0.0.1:7420") {
		t.Fatalf("stats --server 127.0.0.1:7420 = %v (exit %d); want exit 2 naming http://127.0.0.1:7420", err, ExitCode(err))
	}
}
