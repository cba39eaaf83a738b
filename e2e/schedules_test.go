//go:build linux

package e2e

// Schedules (periodic jobs, docs/schedules.md) on the real binary: three
// PostgreSQL replicas racing one schedule while one of them is killed and
// restarted, a bbolt server stopped for more than ten ticks catching up as
// each policy says, and overlap skip holding a tick back while a job runs.

import (
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fenceq/fenceq/db/postgres/pgtest"
)

// tickJob is a schedule's job as GET /v1/jobs answers it.
type tickJob struct {
	ID           uint64    `json:"id"`
	State        string    `json:"state"`
	Schedule     string    `json:"schedule"`
	ScheduledFor time.Time `json:"scheduled_for"`
	Backfilled   bool      `json:"backfilled"`
	CreatedAt    time.Time `json:"created_at"`
	FencingToken uint64    `json:"fencing_token"`
}

// queueJobs is every job of queue, in id order.
func queueJobs(t *testing.T, base, queue string) []tickJob {
	t.Helper()
	var out []tickJob
	for after := uint64(0); ; {
		st, body := pgCall(t, "GET", fmt.Sprintf("%s/v1/jobs?queue=%s&limit=1000&after=%d", base, queue, after), nil)
		if st != http.StatusOK {
			t.Fatalf("GET /v1/jobs?queue=%s = %d %s", queue, st, body)
		}
		var page struct {
			Jobs []tickJob `json:"jobs"`
			Next uint64    `json:"next"`
		}
		if err := json.Unmarshal(body, &page); err != nil {
			t.Fatal(err)
		}
		out = append(out, page.Jobs...)
		if page.Next == 0 {
			return out
		}
		after = page.Next
	}
}

// scheduleReply is the part of a schedule the tests read.
type scheduleReply struct {
	Name         string `json:"name"`
	MissedTicks  uint64 `json:"missed_ticks"`
	SkippedTicks uint64 `json:"skipped_ticks"`
	Paused       bool   `json:"paused"`
}

func getSchedule(t *testing.T, base, name string) scheduleReply {
	t.Helper()
	st, body := pgCall(t, "GET", base+"/v1/schedules/"+name, nil)
	if st != http.StatusOK {
		t.Fatalf("GET /v1/schedules/%s = %d %s", name, st, body)
	}
	var s scheduleReply
	if err := json.Unmarshal(body, &s); err != nil {
		t.Fatal(err)
	}
	return s
}

func putSchedule(t *testing.T, base, name string, body map[string]any) {
	t.Helper()
	if st, b := pgCall(t, "PUT", base+"/v1/schedules/"+name, body); st != http.StatusCreated {
		t.Fatalf("PUT /v1/schedules/%s = %d %s", name, st, b)
	}
}

// TestSchedules_ThreeReplicasRacingOneScheduleFireEachTickOnce: three
// replicas on one PostgreSQL schema all run the tick loop on one "every
// 1s" schedule for 60 s while, every 10 s, one of them is SIGKILLed and
// started again. The jobs' scheduled_for are consecutive seconds, none
// missing and none twice, and each job was created at most 2 s after its
// tick (created_at and scheduled_for, both by the database's clock).
func TestSchedules_ThreeReplicasRacingOneScheduleFireEachTickOnce(t *testing.T) {
	dbURL := pgtest.NewSchema(t)
	bases, procs := startReplicas(t, dbURL, 3)
	putSchedule(t, bases[0], "race", map[string]any{"every_ms": 1000, "job": map[string]any{"queue": "race", "payload": map[string]int{"n": 1}}})

	const run, killEvery = 60 * time.Second, 10 * time.Second
	started := time.Now()
	kills := 0
	for time.Since(started) < run {
		time.Sleep(min(killEvery, run-time.Since(started)))
		if time.Since(started) >= run {
			break
		}
		i := kills % len(procs)
		_ = procs[i].cmd.Process.Signal(syscall.SIGKILL)
		<-procs[i].done
		procs[i] = start(t, nil, "serve", "--db", dbURL, "--listen", "127.0.0.1:0")
		bases[i] = procs[i].addr(t)
		kills++
	}
	// Stop the ticks through a replica that was never killed last.
	if st, b := pgCall(t, "POST", bases[(kills+1)%3]+"/v1/schedules/race/pause", nil); st != http.StatusOK {
		t.Fatalf("pause = %d %s", st, b)
	}
	jobs := queueJobs(t, bases[(kills+1)%3], "race")
	slices.SortFunc(jobs, func(a, b tickJob) int { return a.ScheduledFor.Compare(b.ScheduledFor) })
	if len(jobs) < int(run/time.Second)-2 {
		t.Fatalf("%d jobs in %v of one tick a second", len(jobs), run)
	}
	var worst time.Duration
	for i, j := range jobs {
		if j.Schedule != "race" || j.Backfilled {
			t.Errorf("job %d: schedule %q backfilled %v, want race, not backfilled (no replica ran late by a minute)", j.ID, j.Schedule, j.Backfilled)
		}
		if i > 0 {
			if gap := j.ScheduledFor.Sub(jobs[i-1].ScheduledFor); gap != time.Second {
				t.Errorf("jobs %d and %d: ticks %v and %v are %v apart, want 1s (a tick missing or twice)",
					jobs[i-1].ID, j.ID, jobs[i-1].ScheduledFor, j.ScheduledFor, gap)
			}
		}
		late := j.CreatedAt.Sub(j.ScheduledFor)
		worst = max(worst, late)
		if late > 2*time.Second || late < 0 {
			t.Errorf("job %d for tick %v was created at %v: %v late, want within 2s", j.ID, j.ScheduledFor, j.CreatedAt, late)
		}
	}
	t.Logf("%d ticks in %v through %d SIGKILLs and restarts: none missing, none twice; every job created at most %v after its tick",
		len(jobs), time.Since(started).Round(time.Second), kills, worst.Round(time.Millisecond))
}

// TestSchedules_ABboltServerStoppedForTenTicksCatchesUpAsEachPolicySays:
// three "every 1s" schedules on one bbolt server — catchup none, latest
// and all — and the server stopped (SIGTERM) for 12 s, then started. On
// the ticks of the downtime, as docs/schedules.md says: none enqueues only
// the current tick and counts the others missed; latest enqueues the most
// recent missed tick (backfilled) and the current one; all enqueues every
// missed tick, oldest first, backfilled, and the current one, so its ticks
// have no gap.
func TestSchedules_ABboltServerStoppedForTenTicksCatchesUpAsEachPolicySays(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ticks.db")
	p, base := startServing(t, nil, "--db", path, "--listen", "127.0.0.1:0")
	start := time.Now().Truncate(time.Second).Add(time.Second).UTC()
	for _, policy := range []string{"none", "latest", "all"} {
		putSchedule(t, base, policy, map[string]any{"every_ms": 1000, "catchup": policy, "start_at": start.Format(time.RFC3339),
			"job": map[string]any{"queue": "q-" + policy}})
	}
	time.Sleep(3 * time.Second)
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	if code := p.exit(t, 30*time.Second); code != 0 {
		t.Fatalf("fenceq serve exited %d after SIGTERM; stderr:\n%s", code, p.stderr)
	}
	stopped := time.Now()
	time.Sleep(12 * time.Second)
	p, base = startServing(t, nil, "--db", path, "--listen", "127.0.0.1:0")
	restarted := time.Now()
	time.Sleep(3 * time.Second)
	for _, policy := range []string{"none", "latest", "all"} {
		if st, b := pgCall(t, "POST", base+"/v1/schedules/"+policy+"/pause", nil); st != http.StatusOK {
			t.Fatalf("pause %s = %d %s", policy, st, b)
		}
	}
	_ = p

	for _, policy := range []string{"none", "latest", "all"} {
		jobs := queueJobs(t, base, "q-"+policy) // id order: the order they were enqueued
		var ticks []string
		for _, j := range jobs {
			tag := j.ScheduledFor.Sub(start).String()
			if j.Backfilled {
				tag += "(b)"
			}
			ticks = append(ticks, tag)
		}
		t.Logf("%s: ticks after start_at (b: backfilled), in enqueue order: %s", policy, strings.Join(ticks, " "))
		for i := 1; i < len(jobs); i++ {
			if !jobs[i].ScheduledFor.After(jobs[i-1].ScheduledFor) {
				t.Errorf("%s: job %d (tick %v) was enqueued after job %d (tick %v): not oldest first, or a tick twice",
					policy, jobs[i].ID, jobs[i].ScheduledFor, jobs[i-1].ID, jobs[i-1].ScheduledFor)
			}
		}
		// The downtime: the last tick before the stop (L) and the first
		// current tick after the restart (C, the first job after L that is
		// not backfilled).
		li := -1
		for i, j := range jobs {
			if j.ScheduledFor.Before(stopped) && !j.Backfilled {
				li = i
			}
		}
		if li < 0 || li+1 >= len(jobs) {
			t.Fatalf("%s: no job before the stop and after it: %v", policy, ticks)
		}
		ci := -1
		for i := li + 1; i < len(jobs); i++ {
			if !jobs[i].Backfilled {
				ci = i
				break
			}
		}
		if ci < 0 {
			t.Fatalf("%s: no current tick after the restart: %v", policy, ticks)
		}
		L, C := jobs[li].ScheduledFor, jobs[ci].ScheduledFor
		missed := int(C.Sub(L)/time.Second) - 1 // the ticks strictly between
		if missed < 10 {
			t.Fatalf("%s: only %d ticks between %v and %v: the server was not down for 10 ticks", policy, missed, L, C)
		}
		if C.Before(restarted.Add(-time.Second)) || C.After(restarted.Add(2*time.Second)) {
			t.Errorf("%s: the current tick %v is not the restart's (%v)", policy, C, restarted)
		}
		backfilled := jobs[li+1 : ci]
		s := getSchedule(t, base, policy)
		switch policy {
		case "none":
			if len(backfilled) != 0 || s.MissedTicks != uint64(missed) {
				t.Errorf("none: %d backfilled jobs and missed_ticks %d; want none, and %d missed", len(backfilled), s.MissedTicks, missed)
			}
		case "latest":
			if len(backfilled) != 1 || !backfilled[0].ScheduledFor.Equal(C.Add(-time.Second)) || s.MissedTicks != uint64(missed-1) {
				t.Errorf("latest: backfilled %v, missed_ticks %d; want one job for %v, and %d missed", backfilled, s.MissedTicks, C.Add(-time.Second), missed-1)
			}
		case "all":
			if len(backfilled) != missed || s.MissedTicks != 0 {
				t.Errorf("all: %d backfilled jobs, missed_ticks %d; want %d (every tick of the downtime) and 0 missed", len(backfilled), s.MissedTicks, missed)
			}
		}
		// After the current tick, one job a second again, none backfilled.
		for i := ci + 1; i < len(jobs); i++ {
			if jobs[i].Backfilled || jobs[i].ScheduledFor.Sub(jobs[i-1].ScheduledFor) != time.Second {
				t.Errorf("%s: after the restart job %d (tick %v, backfilled %v) does not follow %v by 1s", policy, jobs[i].ID, jobs[i].ScheduledFor, jobs[i].Backfilled, jobs[i-1].ScheduledFor)
			}
		}
		// Before the stop, likewise.
		for i := 1; i <= li; i++ {
			if jobs[i].ScheduledFor.Sub(jobs[i-1].ScheduledFor) != time.Second {
				t.Errorf("%s: before the stop job %d (tick %v) does not follow %v by 1s", policy, jobs[i].ID, jobs[i].ScheduledFor, jobs[i-1].ScheduledFor)
			}
		}
	}
}

// TestSchedules_OverlapSkipHoldsTheNextTickWhileAJobRuns: an "every 1s"
// schedule with overlap skip, made with "fenceq schedule put"; its first
// job is claimed and heartbeaten (2 s lease) for 4 s, four periods: no
// second job is enqueued meanwhile and the dropped ticks are counted; once
// it is completed, the next tick enqueues again.
func TestSchedules_OverlapSkipHoldsTheNextTickWhileAJobRuns(t *testing.T) {
	_, base := startServing(t, nil, "--db", filepath.Join(t.TempDir(), "skip.db"), "--listen", "127.0.0.1:0")
	code, out, stderr := runFenceq(t, nil, "schedule", "put", "one-at-a-time", "--every", "1s", "--overlap", "skip",
		"--queue", "slow", "--payload", `{"work":"long"}`, "--server", base)
	if code != 0 || !strings.HasPrefix(out, "schedule one-at-a-time created") {
		t.Fatalf("fenceq schedule put = exit %d, %q %q", code, out, stderr)
	}
	var first tickJob
	deadline := time.Now().Add(5 * time.Second)
	for {
		st, body := pgCall(t, "POST", base+"/v1/claim", map[string]any{"worker": "w1", "queues": []string{"slow"}, "lease_ms": 2000, "wait_ms": 1000})
		if st == http.StatusOK {
			if err := json.Unmarshal(body, &first); err != nil {
				t.Fatal(err)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no job from the schedule within 5s: %d %s", st, body)
		}
	}
	claimed := time.Now()
	for time.Since(claimed) < 4*time.Second {
		time.Sleep(500 * time.Millisecond)
		st, body := pgCall(t, "POST", fmt.Sprintf("%s/v1/jobs/%d/heartbeat", base, first.ID), map[string]any{"worker": "w1", "fencing_token": first.FencingToken, "lease_ms": 2000})
		if st != http.StatusOK {
			t.Fatalf("heartbeat = %d %s", st, body)
		}
		if jobs := queueJobs(t, base, "slow"); len(jobs) != 1 {
			t.Fatalf("%v after the claim, %d jobs on the queue, want only the running one: %+v", time.Since(claimed).Round(time.Millisecond), len(jobs), jobs)
		}
	}
	var s scheduleReply
	code, out, stderr = runFenceq(t, nil, "schedule", "get", "one-at-a-time", "--json", "--server", base)
	if err := json.Unmarshal([]byte(out), &s); code != 0 || err != nil {
		t.Fatalf("fenceq schedule get --json = exit %d, %q %q (%v)", code, out, stderr, err)
	}
	if s.SkippedTicks < 3 {
		t.Errorf("skipped_ticks = %d after 4 periods with the job running, want at least 3", s.SkippedTicks)
	}
	st, body := pgCall(t, "POST", fmt.Sprintf("%s/v1/jobs/%d/complete", base, first.ID), map[string]any{"worker": "w1", "fencing_token": first.FencingToken})
	if st != http.StatusOK {
		t.Fatalf("complete = %d %s", st, body)
	}
	completed := time.Now()
	var jobs []tickJob
	for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if jobs = queueJobs(t, base, "slow"); len(jobs) >= 2 {
			break
		}
	}
	if len(jobs) != 2 || !jobs[1].ScheduledFor.After(completed.Add(-time.Second)) {
		t.Fatalf("after the completion jobs = %+v, want one more, for a tick after the completion", jobs)
	}
	t.Logf("the job ran %v; %d ticks were skipped; the next job came for tick %v, %v after the completion",
		completed.Sub(claimed).Round(time.Millisecond), s.SkippedTicks, jobs[1].ScheduledFor, jobs[1].CreatedAt.Sub(completed).Round(time.Millisecond))
}
