//go:build linux

package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"syscall"
	"testing"
	"time"

	"github.com/fenceq/fenceq/db/postgres/pgtest"
)

// TestReplicas_TheStatusPageShowsTheSameRefusedCallsAndWorkersOnEveryReplica:
// three real servers over one PostgreSQL schema. A stale heartbeat refused
// by C and the workers that claimed through A and B are listed the same by
// every replica's GET /v1/status, and by a replica started after C was
// killed (SIGKILL: nothing is flushed on the way out), on the job's own
// list too. Before, each server kept its zombies in memory: A and B showed
// none, and C's were gone with it.
func TestReplicas_TheStatusPageShowsTheSameRefusedCallsAndWorkersOnEveryReplica(t *testing.T) {
	dbURL := pgtest.NewSchema(t)
	bases, procs := startReplicas(t, dbURL, 3)
	a, b, c := bases[0], bases[1], bases[2]
	st, body := pgCall(t, "POST", a+"/v1/jobs", map[string]any{"queue": "q"})
	job := decodeJob(t, st, body, http.StatusCreated)
	st, body = pgCall(t, "POST", a+"/v1/claim", map[string]any{"worker": "w1", "queues": []string{"q"}, "lease_ms": 300})
	decodeJob(t, st, body, http.StatusOK)
	time.Sleep(450 * time.Millisecond) // w1 is paused past its lease
	st, body = pgCall(t, "POST", b+"/v1/claim", map[string]any{"worker": "w2", "queues": []string{"q"}, "lease_ms": 60000})
	if second := decodeJob(t, st, body, http.StatusOK); second.ID != job.ID || second.FencingToken != 2 {
		t.Fatalf("claim through B = %+v, want job %d with token 2", second, job.ID)
	}
	if st, body := pgCall(t, "POST", fmt.Sprintf("%s/v1/jobs/%d/heartbeat", c, job.ID), map[string]any{"worker": "w1", "fencing_token": 1}); st != http.StatusNotFound {
		t.Fatalf("stale heartbeat through C = %d %s, want 404", st, body)
	}

	type view struct {
		Zombies []struct {
			Seq          uint64 `json:"seq"`
			Worker       string `json:"worker"`
			Job          uint64 `json:"job"`
			Operation    string `json:"operation"`
			TokenCurrent uint64 `json:"token_current"`
		} `json:"zombies"`
		Workers []struct {
			Worker string `json:"worker"`
			Claims uint64 `json:"claims"`
		} `json:"workers"`
	}
	look := func(base string) (view, string) {
		t.Helper()
		st, body := pgCall(t, "GET", base+"/v1/status", nil)
		var v view
		if st != http.StatusOK || json.Unmarshal(body, &v) != nil {
			t.Fatalf("GET %s/v1/status = %d %s", base, st, body)
		}
		claims := map[string]uint64{}
		for _, w := range v.Workers {
			claims[w.Worker] = w.Claims
		}
		return v, fmt.Sprint(v.Zombies, claims)
	}
	want := ""
	for i, base := range []string{a, b, c} {
		v, got := look(base)
		if len(v.Zombies) != 1 || v.Zombies[0].Job != job.ID || v.Zombies[0].Operation != "heartbeat" || v.Zombies[0].TokenCurrent != 2 {
			t.Errorf("replica %d: zombies = %+v, want the stale heartbeat against job %d", i, v.Zombies, job.ID)
		}
		if i == 0 {
			want = got
			if got != fmt.Sprint(v.Zombies, map[string]uint64{"w1": 1, "w2": 1}) {
				t.Errorf("replica %d: workers = %+v, want w1 and w2 with a claim each", i, v.Workers)
			}
		} else if got != want {
			t.Errorf("replica %d shows %s, replica 0 %s", i, got, want)
		}
	}

	if err := procs[2].cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	procs[2].exit(t, 10*time.Second)
	d, _ := startReplicas(t, dbURL, 1)
	if _, got := look(d[0]); got != want {
		t.Errorf("a replica started after C was killed shows %s, want %s", got, want)
	}
	st, body = pgCall(t, "GET", fmt.Sprintf("%s/v1/jobs/%d/refusals", d[0], job.ID), nil)
	var list struct {
		Refusals []struct {
			Operation string `json:"operation"`
		} `json:"refusals"`
	}
	if st != http.StatusOK || json.Unmarshal(body, &list) != nil || len(list.Refusals) != 1 || list.Refusals[0].Operation != "heartbeat" {
		t.Errorf("GET /v1/jobs/%d/refusals on the new replica = %d %s, want the stale heartbeat", job.ID, st, body)
	}
}
