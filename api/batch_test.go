package api_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/fenceq/fenceq/api"
	"github.com/fenceq/fenceq/db"
)

type batchReply struct {
	Results []struct {
		ID    uint64   `json:"id"`
		Job   *jobView `json:"job"`
		Error *struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	} `json:"results"`
	NextJobs []jobView `json:"next_jobs"`
}

func wantBatch(tb testing.TB, what string, r response) batchReply {
	tb.Helper()
	if r.status != http.StatusOK {
		tb.Fatalf("%s: got %v, want 200 with per-item outcomes", what, r)
	}
	var b batchReply
	if err := json.Unmarshal(r.body, &b); err != nil {
		tb.Fatalf("%s: body %s: %v", what, r.body, err)
	}
	return b
}

// Each refused item answers exactly what the single call answers (code
// and message), and changes nothing; a batch of refusals only is still 200.
func TestBatchItemsAnswerAsTheSingleCall(t *testing.T) {
	ts := newTestServer(t, db.Rules{}, api.Config{})
	for range 3 {
		ts.enqueue(`{"queue":"q"}`)
	}
	a := ts.claim(`{"worker":"w1","queue":"q","lease_ms":60000}`)
	b := ts.claim(`{"worker":"w1","queue":"q","lease_ms":60000}`)
	other := ts.claim(`{"worker":"w2","queue":"q","lease_ms":60000}`)

	type item struct {
		single string // the single call's path
		body   string // the single call's body; the item is it plus "id"
	}
	for _, op := range []string{"heartbeat", "complete", "fail"} {
		refused := []item{
			{fmt.Sprintf("/v1/jobs/%d/%s", a.ID, op), `{"worker":"w1","fencing_token":7}`},
			{fmt.Sprintf("/v1/jobs/%d/%s", other.ID, op), `{"worker":"w1","fencing_token":1}`},
			{fmt.Sprintf("/v1/jobs/%d/%s", 999999, op), `{"worker":"w1","fencing_token":1}`},
			{fmt.Sprintf("/v1/jobs/%d/%s", b.ID, op), `{"worker":"w1","fencing_token":4294967296}`},
		}
		var items []string
		for _, it := range refused {
			var id uint64
			fmt.Sscanf(it.single, "/v1/jobs/%d/", &id)
			items = append(items, fmt.Sprintf(`{"id":%d,%s`, id, strings.TrimPrefix(it.body, "{")))
		}
		before := ts.snapshot()
		got := wantBatch(t, op, ts.post("/v1/jobs/"+op, `{"jobs":[`+strings.Join(items, ",")+`]}`))
		wantUnchanged(t, "a batch of refused "+op+"s", before, ts.snapshot())
		if len(got.Results) != len(refused) {
			t.Fatalf("%s: %d results, want %d", op, len(got.Results), len(refused))
		}
		for i, it := range refused {
			single := ts.post(it.single, it.body)
			var want struct {
				Error struct{ Code, Message string } `json:"error"`
			}
			if err := json.Unmarshal(single.body, &want); err != nil || single.status < 400 {
				t.Fatalf("single %s: %v", it.single, single)
			}
			r := got.Results[i]
			if r.Error == nil || r.Job != nil || r.Error.Code != want.Error.Code || r.Error.Message != want.Error.Message {
				t.Errorf("%s item %d = %+v, want the single call's %s %q", op, i, r.Error, want.Error.Code, want.Error.Message)
			}
		}
	}

	// Current tokens are applied; the claim follows in the same call.
	ts.enqueue(`{"queue":"q"}`)
	got := wantBatch(t, "complete", ts.post("/v1/jobs/complete", fmt.Sprintf(
		`{"worker":"w1","jobs":[{"id":%d,"fencing_token":1,"result":"a"},{"id":%d,"fencing_token":9}],"claim_next":{"queues":["q"],"max":3}}`, a.ID, b.ID)))
	if got.Results[0].Job == nil || got.Results[0].Job.State != "completed" || got.Results[1].Error == nil || got.Results[1].Error.Code != "failed_precondition" {
		t.Fatalf("complete batch = %+v", got.Results)
	}
	if len(got.NextJobs) != 1 || got.NextJobs[0].ClaimedBy != "local|w1" {
		t.Fatalf("complete batch next_jobs = %+v, want the one available job claimed by local|w1", got.NextJobs)
	}
	hb := wantBatch(t, "heartbeat", ts.post("/v1/jobs/heartbeat", fmt.Sprintf(`{"worker":"w1","jobs":[{"id":%d,"fencing_token":1,"lease_ms":120000}]}`, b.ID)))
	if hb.Results[0].Job == nil || hb.Results[0].Job.LeaseExpiresAt == nil {
		t.Fatalf("heartbeat batch = %+v", hb.Results)
	}
	fl := wantBatch(t, "fail", ts.post("/v1/jobs/fail", fmt.Sprintf(`{"worker":"w2","jobs":[{"id":%d,"fencing_token":1,"error":"boom","final":true}]}`, other.ID)))
	if fl.Results[0].Job == nil || fl.Results[0].Job.State != "dead" {
		t.Fatalf("fail batch = %+v", fl.Results)
	}
}

// A malformed batch is a 400 naming the item, and nothing of it is applied.
func TestMalformedBatchIsRefusedWholeAndChangesNothing(t *testing.T) {
	ts := newTestServer(t, db.Rules{}, api.Config{})
	ts.enqueue(`{"queue":"q"}`)
	ts.enqueue(`{"queue":"q"}`)
	a := ts.claim(`{"worker":"w1","queue":"q","lease_ms":60000}`)
	b := ts.claim(`{"worker":"w1","queue":"q","lease_ms":60000}`)
	good := fmt.Sprintf(`{"id":%d,"fencing_token":1}`, a.ID)
	over := make([]string, db.MaxFencedBatch+1)
	for i := range over {
		over[i] = fmt.Sprintf(`{"id":%d}`, i+1)
	}
	tests := []struct {
		name, path, body string
		mentions         []string
	}{
		{"empty", "/v1/jobs/complete", `{"worker":"w1","jobs":[]}`, []string{"empty"}},
		{"no jobs field", "/v1/jobs/heartbeat", `{"worker":"w1"}`, []string{"jobs"}},
		{"over the limit", "/v1/jobs/heartbeat", `{"worker":"w1","jobs":[` + strings.Join(over, ",") + `]}`, []string{"1001", "1000"}},
		{"a job twice", "/v1/jobs/complete", fmt.Sprintf(`{"worker":"w1","jobs":[%s,{"id":%d,"fencing_token":1},%s]}`, good, b.ID, good), []string{"jobs[2]", fmt.Sprint(a.ID), "jobs[0]"}},
		{"an item not an object", "/v1/jobs/fail", fmt.Sprintf(`{"worker":"w1","jobs":[%s,7]}`, good), []string{"jobs[1]", "object"}},
		{"an item field of the wrong type", "/v1/jobs/complete", fmt.Sprintf(`{"worker":"w1","jobs":[%s,{"id":%d,"fencing_token":"one"}]}`, good, b.ID), []string{"jobs[1]", "fencing_token"}},
		{"an item without id", "/v1/jobs/heartbeat", fmt.Sprintf(`{"worker":"w1","jobs":[%s,{"fencing_token":1}]}`, good), []string{"jobs[1]", "id"}},
		{"a negative duration", "/v1/jobs/fail", fmt.Sprintf(`{"worker":"w1","jobs":[%s,{"id":%d,"retry_delay_ms":-1}]}`, good, b.ID), []string{"jobs[1]", "retry_delay_ms"}},
		{"jobs not a list", "/v1/jobs/fail", `{"worker":"w1","jobs":{"id":1}}`, []string{"jobs"}},
		{"a claim that waits", "/v1/jobs/complete", fmt.Sprintf(`{"worker":"w1","jobs":[%s],"claim_next":{"max":-1}}`, good), []string{"claim_next.max"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := ts.snapshot()
			wantError(t, tc.name, ts.post(tc.path, tc.body), http.StatusBadRequest, "invalid_argument", tc.mentions...)
			wantUnchanged(t, tc.name, before, ts.snapshot())
		})
	}
}
