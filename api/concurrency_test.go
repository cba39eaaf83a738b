package api_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/fenceq/fenceq/api"
	"github.com/fenceq/fenceq/db"
)

func TestConcurrentClaimsTakeEveryJobExactlyOnce(t *testing.T) {
	const jobs, workers = 1000, 16
	ts := newTestServer(t, db.Rules{}, api.Config{})
	ts.client.Transport.(*http.Transport).MaxIdleConnsPerHost = workers

	// One batch enqueue: a JSON list, one transaction.
	var batch strings.Builder
	batch.WriteByte('[')
	for i := range jobs {
		if i > 0 {
			batch.WriteByte(',')
		}
		fmt.Fprintf(&batch, `{"queue":"load","payload":{"n":%d}}`, i)
	}
	batch.WriteByte(']')
	r := ts.post("/v1/jobs", batch.String())
	if r.status != http.StatusCreated {
		t.Fatalf("batch enqueue: got %v, want 201", r)
	}
	var enqueued struct {
		Jobs []jobView `json:"jobs"`
	}
	if err := json.Unmarshal(r.body, &enqueued); err != nil || len(enqueued.Jobs) != jobs {
		t.Fatalf("batch enqueue returned %d jobs (%v), want %d", len(enqueued.Jobs), err, jobs)
	}
	want := make(map[uint64]bool, jobs)
	for _, j := range enqueued.Jobs {
		want[j.ID] = true
	}
	if len(want) != jobs {
		t.Fatalf("batch enqueue returned %d distinct ids, want %d", len(want), jobs)
	}

	// 16 workers claim until 204 and complete what they claimed. Lease long
	// enough that no claim expires during the test: any second claim of a
	// job would be a bug, not a reclaim.
	var (
		mu       sync.Mutex
		claimedN = make(map[uint64]int, jobs)
		byWorker = make([]int, workers)
		wg       sync.WaitGroup
		errs     = make(chan error, workers)
	)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			worker := fmt.Sprintf("w%d", w)
			for {
				resp, err := ts.client.Post(ts.URL+"/v1/claim", "application/json",
					strings.NewReader(`{"worker":"`+worker+`","queue":"load","lease_ms":600000}`))
				if err != nil {
					errs <- fmt.Errorf("%s claim: %v", worker, err)
					return
				}
				var j jobView
				status := resp.StatusCode
				err = json.NewDecoder(resp.Body).Decode(&j)
				resp.Body.Close()
				if status == http.StatusNoContent {
					return
				}
				if status != http.StatusOK || err != nil || j.FencingToken != 1 {
					errs <- fmt.Errorf("%s claim: status %d, token %d, decode %v; want 200 with token 1", worker, status, j.FencingToken, err)
					return
				}
				mu.Lock()
				claimedN[j.ID]++
				byWorker[w]++
				mu.Unlock()

				resp, err = ts.client.Post(fmt.Sprintf("%s/v1/jobs/%d/complete", ts.URL, j.ID), "application/json",
					strings.NewReader(fmt.Sprintf(`{"worker":%q,"fencing_token":%d,"result":{"by":%q}}`, worker, j.FencingToken, worker)))
				if err != nil {
					errs <- fmt.Errorf("%s complete %d: %v", worker, j.ID, err)
					return
				}
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					errs <- fmt.Errorf("%s complete %d: status %d, want 200", worker, j.ID, resp.StatusCode)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if t.Failed() {
		t.FailNow()
	}

	for id, n := range claimedN {
		if !want[id] {
			t.Errorf("job %d was claimed but never enqueued", id)
		}
		if n != 1 {
			t.Errorf("job %d was claimed %d times, want 1", id, n)
		}
	}
	for id := range want {
		if claimedN[id] == 0 {
			t.Errorf("job %d was never claimed (lost)", id)
		}
	}
	busy := 0
	for _, n := range byWorker {
		if n > 0 {
			busy++
		}
	}
	t.Logf("claims per worker: %v (%d of %d workers claimed)", byWorker, busy, workers)

	// Every job is completed with its attempts at 1, and the counts agree.
	var page struct {
		Jobs []jobView `json:"jobs"`
		Next uint64    `json:"next"`
	}
	completed := 0
	for after := uint64(0); ; after = page.Next {
		page.Jobs, page.Next = nil, 0
		r := ts.get(fmt.Sprintf("/v1/jobs?queue=load&limit=1000&after=%d", after))
		if r.status != http.StatusOK {
			t.Fatalf("list jobs: got %v", r)
		}
		if err := json.Unmarshal(r.body, &page); err != nil {
			t.Fatalf("list jobs: %v", err)
		}
		for _, j := range page.Jobs {
			if j.State != "completed" || j.Attempts != 1 || len(j.Result) == 0 {
				t.Errorf("job %d: state %s attempts %d result %s, want completed, 1, a result", j.ID, j.State, j.Attempts, j.Result)
			}
			completed++
		}
		if page.Next == 0 {
			break
		}
	}
	if completed != jobs {
		t.Errorf("listed %d completed jobs, want %d", completed, jobs)
	}
	r = ts.get("/v1/queues")
	var queues struct {
		Queues []struct {
			Queue  string            `json:"queue"`
			Counts map[string]uint64 `json:"counts"`
		} `json:"queues"`
	}
	if err := json.Unmarshal(r.body, &queues); err != nil || len(queues.Queues) != 1 {
		t.Fatalf("GET /v1/queues = %v (%v), want one queue", r, err)
	}
	q := queues.Queues[0]
	if q.Queue != "load" || q.Counts["completed"] != jobs {
		t.Errorf("queue counts = %s %v, want load with %d completed", q.Queue, q.Counts, jobs)
	}
	for state, n := range q.Counts {
		if state != "completed" && n != 0 {
			t.Errorf("queue counts: %d %s, want 0", n, state)
		}
	}
}
