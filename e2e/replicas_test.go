//go:build linux

package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/fenceq/fenceq/db/postgres"
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

// TestReplicas_KillNineOneOfThreeUnderLoadLosesNothingAcknowledged: three
// replicas under load (producers and workers spread over them); one of
// them, in turn, is killed with SIGKILL and restarted, FENCEQ_CRASHES
// times (default 20, at least 10). Then: every acknowledged enqueue is
// there, no job was completed twice, none is claimed past its lease, the
// one audit chain verifies; the jobs left drain through one replica.
func TestReplicas_KillNineOneOfThreeUnderLoadLosesNothingAcknowledged(t *testing.T) {
	crashes := max(crashCount(t), 10)
	started := time.Now()
	dbURL := pgtest.NewSchema(t)
	run := randomHex(t, 4)
	queue := "crash-" + run
	var srvs []*crashServer
	for range 3 {
		s := &crashServer{t: t, path: dbURL, listen: "127.0.0.1:0", client: newCrashClient()}
		s.start()
		srvs = append(srvs, s)
	}
	acks := newCrashAcks()
	st := &crashStats{}
	clients := make([]*crashClient, len(srvs))
	for i, s := range srvs {
		clients[i] = s.client
	}
	stop := startCrashLoad(clients, acks, st, queue, run, 3, 6)
	rng := mrand.New(mrand.NewPCG(uint64(time.Now().UnixNano()), 3))
	for i := range crashes {
		time.Sleep(time.Duration(100+rng.IntN(300)) * time.Millisecond)
		victim := srvs[i%3]
		victim.kill()
		time.Sleep(time.Duration(rng.IntN(100)) * time.Millisecond)
		victim.start()
	}
	time.Sleep(time.Duration(50+rng.IntN(250)) * time.Millisecond)
	srvs[0].kill()
	stop()
	for _, s := range srvs[1:] {
		s.kill()
	}
	crashed := time.Now()
	time.Sleep(time.Until(crashed.Add(crashLease + 100*time.Millisecond)))

	store, err := postgres.Open(context.Background(), dbURL, postgres.Options{})
	if err != nil {
		t.Fatal(err)
	}
	before := checkStoreAcks(t, store, acks, "after the last SIGKILL")
	store.Close()

	srvs[1].start()
	drained := 0
	for {
		status, raw, err := srvs[1].client.do("POST", "/v1/claim", fmt.Sprintf(`{"worker":"drain","queues":[%q],"lease_ms":30000,"max":100}`, queue))
		if err != nil {
			t.Fatalf("drain claim: %v", err)
		}
		if status == http.StatusNoContent {
			break
		}
		var page struct{ Jobs []crashJob }
		if status != http.StatusOK || json.Unmarshal(raw, &page) != nil {
			t.Fatalf("drain claim: status %d %s", status, raw)
		}
		for _, j := range page.Jobs {
			status, raw, err := srvs[1].client.do("POST", fmt.Sprintf("/v1/jobs/%d/complete", j.ID),
				fmt.Sprintf(`{"worker":"drain","fencing_token":%d,"result":"drained"}`, j.FencingToken))
			if err != nil || status != http.StatusOK {
				t.Fatalf("drain complete of job %d: %d %s %v", j.ID, status, raw, err)
			}
			drained++
		}
	}
	srvs[1].kill()
	store, err = postgres.Open(context.Background(), dbURL, postgres.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	acks.checkDrained(t, checkStoreAcks(t, store, acks, "after the drain"))
	acks.mu.Lock()
	defer acks.mu.Unlock()
	t.Logf("replicas crash: %d SIGKILLs of one of three replicas under load in %v; %d enqueues acknowledged (%d calls), %d completions acknowledged, "+
		"%d claims, %d stale completions refused, %d fails, %d heartbeats, %d calls without an answer; "+
		"after the last kill %v; %d jobs drained; none lost, none completed twice",
		crashes, time.Since(started).Round(time.Millisecond), len(acks.enqueued), st.enqueueCalls.Load(), len(acks.completed),
		st.claims.Load(), st.stale.Load(), st.fails.Load(), st.heartbeats.Load(), st.noAnswer.Load(), before, drained)
}
