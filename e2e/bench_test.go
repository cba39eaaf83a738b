package e2e

import (
	"encoding/json"
	"path/filepath"
	"testing"
	"time"

	"github.com/fenceq/fenceq/internal/bench"
)

// runBench runs "fenceq bench --json" (the real binary) against base and
// decodes its report.
func runBench(t testing.TB, base string, args ...string) bench.Report {
	t.Helper()
	p := start(t, nil, append([]string{"bench", "--server", base, "--json"}, args...)...)
	if code := p.exit(t, 2*time.Minute); code != 0 {
		t.Fatalf("fenceq bench %v exit code = %d, want 0; stderr:\n%s", args, code, p.stderr)
	}
	var rep bench.Report
	if err := json.Unmarshal([]byte(p.stdout.String()), &rep); err != nil {
		t.Fatalf("fenceq bench --json output does not decode: %v\n%s", err, p.stdout)
	}
	return rep
}

func TestBenchCommandDrivesARealServer(t *testing.T) {
	_, base := startServing(t, nil, "--db", filepath.Join(t.TempDir(), "bench.db"), "--listen", "127.0.0.1:0")

	for _, tc := range []struct {
		name string
		args []string
	}{
		{"separate calls", nil},
		{"batches and claim_next", []string{"--enqueue-batch", "16", "--claim-max", "4", "--claim-next"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"--jobs", "200", "--producers", "4", "--workers", "4"}, tc.args...)
			rep := runBench(t, base, args...)
			if rep.Mode != "throughput" || rep.Enqueued != 200 || rep.Completed != 200 {
				t.Fatalf("report mode %q, enqueued %d, completed %d; want throughput, 200, 200", rep.Mode, rep.Enqueued, rep.Completed)
			}
			if len(rep.Phases) != 2 || rep.Phases[0].Name != "enqueue" || rep.Phases[1].Name != "drain" {
				t.Fatalf("phases = %+v, want enqueue then drain", rep.Phases)
			}
			for _, p := range rep.Phases {
				if p.Jobs != 200 || p.JobsPerSec <= 0 {
					t.Errorf("%s: jobs %d, jobs/s %v; want 200 and > 0", p.Name, p.Jobs, p.JobsPerSec)
				}
				if p.Commits == nil || *p.Commits == 0 || p.JobsPerCommit <= 0 {
					t.Errorf("%s: commits %v, jobs/commit %v; want both > 0", p.Name, p.Commits, p.JobsPerCommit)
				}
			}
			if n := rep.Phases[0].Requests["enqueue"].Count; n != 200/rep.Config.EnqueueBatch+min(200%rep.Config.EnqueueBatch, 1) {
				t.Errorf("enqueue requests = %d for batches of %d", n, rep.Config.EnqueueBatch)
			}
			if c := rep.Phases[1].Requests["complete"]; c.Count != 200 || c.P50 <= 0 || c.P99 < c.P50 || c.Max < c.P99 {
				t.Errorf("complete latency = %+v, want 200 requests and 0 < p50 <= p99 <= max", c)
			}
			// A batch enqueue of 16 commits at most once per request.
			if tc.args != nil && *rep.Phases[0].Commits > 13 {
				t.Errorf("enqueue in batches of 16 took %d commits, want at most 13", *rep.Phases[0].Commits)
			}
		})
	}

	// The protobuf API of the real binary: gRPC over h2c, Connect over
	// HTTP/1.1 (internal/bench's tests check what each call was).
	for _, protocol := range []string{"grpc", "connect"} {
		t.Run("--protocol "+protocol, func(t *testing.T) {
			rep := runBench(t, base, "--protocol", protocol, "--jobs", "200", "--producers", "4", "--workers", "4", "--claim-next")
			if rep.Config.Protocol != protocol || rep.Enqueued != 200 || rep.Completed != 200 {
				t.Fatalf("report protocol %q, enqueued %d, completed %d; want %s, 200, 200", rep.Config.Protocol, rep.Enqueued, rep.Completed, protocol)
			}
			if c := rep.Phases[1].Requests["complete"]; c.Count != 200 || c.P50 <= 0 {
				t.Errorf("complete latency = %+v, want 200 requests and p50 > 0", c)
			}
		})
	}

	t.Run("through client.Worker", func(t *testing.T) {
		rep := runBench(t, base, "--jobs", "300", "--producers", "4", "--worker", "--concurrency", "8")
		if !rep.Config.Worker || rep.Config.Workers != 1 || rep.Config.Concurrency != 8 || rep.Completed < 300 {
			t.Fatalf("report config %+v, completed %d; want one Worker of 8 handlers, 300 completed", rep.Config, rep.Completed)
		}
		drain := rep.Phases[1]
		// Batched completions with claims in their transactions: fewer
		// commits than jobs (separate calls take about one per job).
		if drain.Commits == nil || *drain.Commits >= 300 {
			t.Errorf("drain through the Worker took %v commits for 300 jobs, want fewer than one per job", drain.Commits)
		}
	})

	t.Run("through client.Worker with prefetch", func(t *testing.T) {
		rep := runBench(t, base, "--jobs", "300", "--producers", "4", "--worker", "--concurrency", "4", "--prefetch", "4")
		if rep.Config.Prefetch != 4 || rep.Config.Concurrency != 4 || rep.Completed < 300 {
			t.Fatalf("report config %+v, completed %d; want one Worker of 4 handlers and prefetch 4, 300 completed", rep.Config, rep.Completed)
		}
	})

	t.Run("latency mode", func(t *testing.T) {
		rep := runBench(t, base, "--rate", "200", "--duration", "1s", "--workers", "2", "--claim-next")
		if rep.Mode != "latency" || rep.Enqueued != 200 || rep.Completed != 200 {
			t.Fatalf("report mode %q, enqueued %d, completed %d; want latency, 200, 200", rep.Mode, rep.Enqueued, rep.Completed)
		}
		e2c := rep.EnqueueToClaim
		if e2c == nil || e2c.Count != 200 || e2c.P50 <= 0 || e2c.Max < e2c.P50 {
			t.Fatalf("enqueue_to_claim = %+v, want 200 samples, 0 < p50 <= max", e2c)
		}
		if rep.SentRate < 150 || rep.SentRate > 250 {
			t.Errorf("sent_rate = %v, want about 200", rep.SentRate)
		}
	})
}

// A server that closes idle connections sooner than the latency mode sends
// (a send every 200 ms, idle timeout 50 ms) loses no request.
func TestBenchCommandSurvivesIdleTimeouts(t *testing.T) {
	_, base := startServing(t, nil, "--db", filepath.Join(t.TempDir(), "bench.db"), "--listen", "127.0.0.1:0", "--idle-timeout", "50ms")
	rep := runBench(t, base, "--rate", "5", "--duration", "1s", "--workers", "2", "--wait-ms", "100")
	if rep.Enqueued != 5 || rep.Completed != 5 {
		t.Fatalf("enqueued %d, completed %d; want 5, 5", rep.Enqueued, rep.Completed)
	}
}
