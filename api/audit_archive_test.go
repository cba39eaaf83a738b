package api_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/fenceq/fenceq/api"
	"github.com/fenceq/fenceq/db"
)

// TestAuditArchive: GET /v1/audit/archive hands out the records older
// than the retention as an archive that verifies, and removes nothing;
// POST /v1/audit/archive/remove removes them only through a record whose
// hash the caller names and only while older than the retention — a
// refused removal changes nothing —, and the status page's verification
// goes on from the checkpoint. A job's history says that older records
// were archived only when its own first records are gone.
func TestAuditArchive(t *testing.T) {
	clk := newStatusClock()
	ts := newTestServer(t, db.Rules{Now: clk.Now}, api.Config{Now: clk.Now, AuditRetention: time.Hour})
	for range 3 {
		ts.enqueue(map[string]any{"queue": "q"}) // records 1-3
	}
	if v := ts.status("").Audit.Verified; v == nil || v.VerifiedSeq != 3 {
		t.Fatalf("status before the archive: verified %+v, want through 3", v)
	}
	clk.Advance(2 * time.Hour)
	ts.enqueue(map[string]any{"queue": "q"}) // record 4, inside the retention

	r := ts.get("/v1/audit/archive")
	if r.status != http.StatusOK || r.header.Get("Content-Type") != "application/x-ndjson" {
		t.Fatalf("GET /v1/audit/archive = %v (%s), want 200 application/x-ndjson", r, r.header.Get("Content-Type"))
	}
	rep, err := db.VerifyArchive(bytes.NewReader(r.body))
	if err != nil || !rep.OK || rep.Records != 3 || rep.HeadSeq != 3 {
		t.Fatalf("the archive = %+v, %v; want records 1-3 that verify", rep, err)
	}
	if r := ts.get("/v1/audit/archive?limit=2"); r.status != http.StatusOK || strings.Count(string(r.body), `{"record":`) != 2 {
		t.Errorf("GET /v1/audit/archive?limit=2 = %v, want two records", r)
	}
	recs, err := ts.store.ListAudit(context.Background(), 0, 100)
	if err != nil || len(recs) != 4 {
		t.Fatalf("records after GET /v1/audit/archive = %d, %v; want all 4 (it removes nothing)", len(recs), err)
	}

	unchanged := func(what string) {
		t.Helper()
		now, err := ts.store.ListAudit(context.Background(), 0, 100)
		if err != nil || fmt.Sprint(now) != fmt.Sprint(recs) {
			t.Errorf("%s changed the audit log: %d records, %v", what, len(now), err)
		}
	}
	for _, tc := range []struct {
		what   string
		body   string
		status int
		code   string
	}{
		{"another record's hash", fmt.Sprintf(`{"through_seq":3,"through_hash":%q}`, recs[1].Hash), http.StatusConflict, "failed_precondition"},
		{"a record inside the retention", fmt.Sprintf(`{"through_seq":4,"through_hash":%q}`, recs[3].Hash), http.StatusConflict, "failed_precondition"},
		{"no hash", `{"through_seq":3}`, http.StatusBadRequest, "invalid_argument"},
		{"a hash that is not hex", `{"through_seq":3,"through_hash":"xyz"}`, http.StatusBadRequest, "invalid_argument"},
		{"no sequence", fmt.Sprintf(`{"through_hash":%q}`, recs[2].Hash), http.StatusBadRequest, "invalid_argument"},
	} {
		wantError(t, "remove through "+tc.what, ts.post("/v1/audit/archive/remove", tc.body), tc.status, tc.code)
		unchanged("a removal through " + tc.what)
	}

	r = ts.post("/v1/audit/archive/remove", fmt.Sprintf(`{"through_seq":3,"through_hash":%q}`, rep.HeadHash))
	if r.status != http.StatusOK || !strings.Contains(string(r.body), `"done":true`) || !strings.Contains(string(r.body), `"seq":3`) {
		t.Fatalf("POST /v1/audit/archive/remove through 3 = %v, want done with the checkpoint at 3", r)
	}
	left, err := ts.store.ListAudit(context.Background(), 0, 100)
	if err != nil || len(left) != 2 || left[0].Seq != 4 || left[1].Action != "archive" {
		t.Fatalf("records after the removal = %+v, %v; want 4 and the archive record", left, err)
	}
	for id, archived := range map[uint64]bool{1: true, 4: false} {
		r := ts.get(fmt.Sprintf("/v1/jobs/%d/history", id))
		if r.status != http.StatusOK || strings.Contains(string(r.body), `"archived":{"seq":3`) != archived {
			t.Errorf("history of job %d after the removal = %v; want archived through 3 shown: %v", id, r, archived)
		}
	}
	clk.Advance(time.Minute)
	if v := ts.status("").Audit.Verified; v == nil || !v.OK || v.VerifiedSeq != 5 {
		t.Errorf("status after the removal: verified %+v, want OK through 5 (from the checkpoint)", v)
	}
	if r := ts.get("/v1/audit/archive"); r.status != http.StatusOK || !strings.Contains(string(r.body), `"start_seq":3`) ||
		strings.Contains(string(r.body), `{"record":`) {
		t.Errorf("GET /v1/audit/archive after the removal = %v, want an empty archive after the checkpoint 3", r)
	}
}
