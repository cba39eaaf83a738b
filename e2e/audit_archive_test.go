package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestCLI_AuditArchiveMovesOldRecordsToAFileThatVerifiesOffline runs the
// real binary: "fenceq audit archive" writes the records older than
// --audit-retention to a file, the server then removes them leaving a
// checkpoint, the rest of its chain verifies from it, "audit verify --db"
// checks the file offline (and finds an altered copy broken), a job's
// history says its older records were archived, an archive is never
// overwritten, and when the file cannot be written nothing is removed. A
// server without --audit-retention refuses to archive.
func TestCLI_AuditArchiveMovesOldRecordsToAFileThatVerifiesOffline(t *testing.T) {
	dir := t.TempDir()
	const retention = 2 * time.Second
	_, base := startServing(t, nil, "--db", filepath.Join(dir, "q.db"), "--listen", "127.0.0.1:0", "--audit-retention", retention.String())
	env := []string{"FENCEQ_SERVER=" + base}
	for i := range 3 {
		mustRun(t, env, 0, "enqueue", "--payload", fmt.Sprintf(`{"n":%d}`, i))
	}
	time.Sleep(retention + 200*time.Millisecond)
	mustRun(t, env, 0, "enqueue", "--payload", `{"n":3}`) // record 4: newer than the cut

	// The file cannot be written: nothing is removed.
	_, stderr := mustRun(t, env, 1, "audit", "archive", "--out", filepath.Join(dir, "missing", "a.jsonl"))
	mustContain(t, "archive to a missing directory (stderr)", stderr, "no such file")
	out, _ := mustRun(t, env, 0, "audit", "verify", "--json")
	var rep map[string]any
	if err := json.Unmarshal([]byte(out), &rep); err != nil || rep["records"] != float64(4) || rep["start_seq"] != nil {
		t.Fatalf("audit verify after a failed archive = %s (%v), want 4 records from the start", out, err)
	}

	archive := filepath.Join(dir, "audit-1.jsonl")
	out, _ = mustRun(t, env, 0, "audit", "archive", "--out", archive, "--json")
	var res struct {
		File       string `json:"file"`
		Records    uint64 `json:"records"`
		ThroughSeq uint64 `json:"through_seq"`
		Checkpoint struct {
			Seq uint64 `json:"seq"`
		} `json:"checkpoint"`
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil || res.File != archive || res.Records != 3 || res.ThroughSeq != 3 || res.Checkpoint.Seq != 3 {
		t.Fatalf("audit archive = %s (%v), want records 1-3 in %s and the checkpoint at 3", out, err, archive)
	}
	if _, err := os.Stat(archive + ".partial"); !os.IsNotExist(err) {
		t.Errorf("audit archive left %s.partial behind (stat: %v)", archive, err)
	}
	out, _ = mustRun(t, nil, 0, "audit", "verify", "--db", archive)
	mustContain(t, "audit verify --db ARCHIVE", out, "ok: archive of 3 records, 1-3")
	out, _ = mustRun(t, env, 0, "audit", "verify")
	mustContain(t, "audit verify (server) after the archive", out, "ok: 2 records after the checkpoint 3", "head 5")

	st, hist := call(t, "GET", base+"/v1/jobs/1/history", "")
	wantStatus(t, "history of job 1", st, hist, http.StatusOK)
	if recs, _ := hist["records"].([]any); len(recs) != 0 || hist["archived"] == nil || hist["archived"].(map[string]any)["seq"] != float64(3) {
		t.Errorf("history of job 1 after the archive = %v, want no records and archived through 3", hist)
	}

	raw, err := os.ReadFile(archive)
	if err != nil {
		t.Fatal(err)
	}
	altered := filepath.Join(dir, "altered.jsonl")
	if err := os.WriteFile(altered, []byte(strings.Replace(string(raw), `"action":"enqueue"`, `"action":"cancel"`, 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	out, _ = mustRun(t, nil, 1, "audit", "verify", "--db", altered)
	mustContain(t, "audit verify --db of an altered archive", out, "BROKEN at sequence 1")

	_, stderr = mustRun(t, env, 2, "audit", "archive", "--out", archive)
	mustContain(t, "archive over an existing file (stderr)", stderr, "never overwritten")
	if now, _ := os.ReadFile(archive); string(now) != string(raw) {
		t.Errorf("a second archive to %s changed the file", archive)
	}

	_, plain := startServing(t, nil, "--db", filepath.Join(dir, "keep.db"), "--listen", "127.0.0.1:0")
	_, stderr = mustRun(t, []string{"FENCEQ_SERVER=" + plain}, 1, "audit", "archive", "--out", filepath.Join(dir, "none.jsonl"))
	mustContain(t, "archive from a server that keeps every record (stderr)", stderr, "audit retention is off")
}
