package api_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/fenceq/fenceq/api"
	"github.com/fenceq/fenceq/db"
)

// Issue 18, items 7 and 8: exact at the edges.

// A failure's error longer than the 4,096-byte limit is cut on a rune
// boundary: the stored last_error and the audit record's error stay valid
// UTF-8.
func TestALongFailureErrorIsCutOnARuneBoundary(t *testing.T) {
	ts := newTestServer(t, db.Rules{}, api.Config{})
	job := ts.enqueue(`{"queue":"q"}`)
	claimed := ts.claim(`{"worker":"w1","queue":"q"}`)
	msg := strings.Repeat("a", 4095) + "é and more" // é straddles byte 4096
	body, _ := json.Marshal(map[string]any{"worker": "w1", "fencing_token": claimed.FencingToken, "error": msg})
	if r := ts.post(fmt.Sprintf("/v1/jobs/%d/fail", job.ID), string(body)); r.status != http.StatusOK {
		t.Fatalf("fail = %v, want 200", r)
	}
	var got struct {
		LastError string `json:"last_error"`
	}
	if err := json.Unmarshal(ts.jobRaw(job.ID), &got); err != nil {
		t.Fatal(err)
	}
	if !utf8.ValidString(got.LastError) || got.LastError != strings.Repeat("a", 4095) {
		t.Errorf("last_error is %d bytes, valid UTF-8 %v; want the 4095 bytes before the cut character", len(got.LastError), utf8.ValidString(got.LastError))
	}
	recs, err := ts.store.ListAudit(t.Context(), 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, rec := range recs {
		if e, ok := rec.Details["error"]; ok && rec.Action == "fail" {
			found = true
			if !utf8.ValidString(e) || e != got.LastError {
				t.Errorf("audit record's error is %d bytes, valid UTF-8 %v; want the stored last_error", len(e), utf8.ValidString(e))
			}
		}
	}
	if !found {
		t.Errorf("no fail audit record with an error among %d records", len(recs))
	}
}

// A run_at at or before now means now: the job is available at once and
// reads back with its enqueue time. Times before 1970 are refused with
// nothing written (year 1 is not silently "now").
func TestARunAtInThePastMeansNowAndBefore1970IsRefused(t *testing.T) {
	ts := newTestServer(t, db.Rules{}, api.Config{})
	for _, at := range []string{"1970-01-01T00:00:00Z", "2001-02-03T04:05:06Z"} {
		r := ts.post("/v1/jobs", fmt.Sprintf(`{"queue":"q","run_at":%q}`, at))
		var j struct {
			State     string `json:"state"`
			RunAt     string `json:"run_at"`
			CreatedAt string `json:"created_at"`
		}
		if err := json.Unmarshal(r.body, &j); r.status != http.StatusCreated || err != nil {
			t.Fatalf("enqueue with run_at %s = %v, want 201", at, r)
		}
		if j.State != "available" || j.RunAt != j.CreatedAt {
			t.Errorf("enqueue with run_at %s: state %s, run_at %s, created_at %s; want available with run_at = created_at", at, j.State, j.RunAt, j.CreatedAt)
		}
	}
	before := ts.snapshot()
	for _, at := range []string{"0001-01-01T00:00:00Z", "1969-12-31T23:59:59Z"} {
		wantError(t, "enqueue with run_at "+at, ts.post("/v1/jobs", fmt.Sprintf(`{"queue":"q","run_at":%q}`, at)),
			http.StatusBadRequest, "invalid_argument", "run_at", "1970")
	}
	wantUnchanged(t, "refused run_at", before, ts.snapshot())
}
