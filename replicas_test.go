package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/fenceq/fenceq/db/postgres/pgtest"
)

// Tests of several real fenceq processes (replicas) over one PostgreSQL
// schema of FENCEQ_TEST_POSTGRES_URL's server.

// startReplicas starts n servers on dbURL and returns their base URLs.
func startReplicas(t *testing.T, dbURL string, n int, args ...string) ([]string, []*proc) {
	t.Helper()
	var bases []string
	var procs []*proc
	for range n {
		p := start(t, nil, append([]string{"serve", "--db", dbURL, "--listen", "127.0.0.1:0"}, args...)...)
		procs = append(procs, p)
		bases = append(bases, p.addr(t))
	}
	return bases, procs
}

// pgCall sends a JSON request and returns the status and body.
func pgCall(t *testing.T, method, url string, body any) (int, []byte) {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			t.Fatal(err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, b
}

type jobReply struct {
	ID           uint64 `json:"id"`
	State        string `json:"state"`
	FencingToken uint64 `json:"fencing_token"`
	ClaimedBy    string `json:"claimed_by"`
}

func decodeJob(t *testing.T, status int, body []byte, want int) jobReply {
	t.Helper()
	if status != want {
		t.Fatalf("status %d %s, want %d", status, body, want)
	}
	var j jobReply
	if err := json.Unmarshal(body, &j); err != nil {
		t.Fatalf("decode %s: %v", body, err)
	}
	return j
}

// TestReplicas_AStaleTokenThroughAThirdReplicaIsRefusedAndChangesNothing:
// w1 claims through A with a short lease, is paused past it and claims
// again through B; its first token's heartbeat, fail and complete through
// C are 404, 404, 409 and change nothing; the current token completes.
func TestReplicas_AStaleTokenThroughAThirdReplicaIsRefusedAndChangesNothing(t *testing.T) {
	bases, _ := startReplicas(t, pgtest.NewSchema(t), 3)
	a, b, c := bases[0], bases[1], bases[2]
	st, body := pgCall(t, "POST", a+"/v1/jobs", map[string]any{"queue": "q", "payload": map[string]int{"n": 1}})
	job := decodeJob(t, st, body, http.StatusCreated)

	st, body = pgCall(t, "POST", a+"/v1/claim", map[string]any{"worker": "w1", "queues": []string{"q"}, "lease_ms": 300})
	first := decodeJob(t, st, body, http.StatusOK)
	if first.ID != job.ID || first.FencingToken != 1 {
		t.Fatalf("claim through A = %+v, want job %d with token 1", first, job.ID)
	}
	time.Sleep(450 * time.Millisecond) // w1 is paused past its lease
	st, body = pgCall(t, "POST", b+"/v1/claim", map[string]any{"worker": "w1", "queues": []string{"q"}, "lease_ms": 60000})
	second := decodeJob(t, st, body, http.StatusOK)
	if second.ID != job.ID || second.FencingToken != 2 {
		t.Fatalf("claim through B = %+v, want job %d with token 2", second, job.ID)
	}

	snapshot := func() string {
		_, j := pgCall(t, "GET", fmt.Sprintf("%s/v1/jobs/%d", c, job.ID), nil)
		_, h := pgCall(t, "GET", fmt.Sprintf("%s/v1/jobs/%d/history", c, job.ID), nil)
		_, v := pgCall(t, "GET", c+"/v1/audit/verify", nil)
		return string(j) + "\n" + string(h) + "\n" + string(v)
	}
	before := snapshot()
	stale := map[string]any{"worker": "w1", "fencing_token": 1}
	for _, tc := range []struct {
		op   string
		body map[string]any
		want int
		code string
	}{
		{"heartbeat", stale, http.StatusNotFound, "not_found"},
		{"fail", map[string]any{"worker": "w1", "fencing_token": 1, "error": "late"}, http.StatusNotFound, "not_found"},
		{"complete", map[string]any{"worker": "w1", "fencing_token": 1, "result": map[string]string{"by": "stale"}}, http.StatusConflict, "failed_precondition"},
	} {
		st, body := pgCall(t, "POST", fmt.Sprintf("%s/v1/jobs/%d/%s", c, job.ID, tc.op), tc.body)
		if st != tc.want || !strings.Contains(string(body), `"code":"`+tc.code+`"`) {
			t.Errorf("stale %s through C = %d %s, want %d %s", tc.op, st, body, tc.want, tc.code)
		}
	}
	if after := snapshot(); after != before {
		t.Fatalf("the refused calls changed the job, its history or the chain:\nbefore %s\nafter  %s", before, after)
	}
	st, body = pgCall(t, "POST", fmt.Sprintf("%s/v1/jobs/%d/complete", c, job.ID), map[string]any{"worker": "w1", "fencing_token": 2, "result": map[string]string{"by": "current"}})
	done := decodeJob(t, st, body, http.StatusOK)
	if done.State != "completed" {
		t.Fatalf("complete with the current token = %+v, want completed", done)
	}
}
