package e2e

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os/exec"
	"strconv"
	"strings"
	"testing"
)

// TestOldClient_ThePreviousReleasesClientFencesAgainstTodaysServer: the
// api/client of the release before (docs/releases.tsv, built from this
// repository's history with a go.mod replace) runs a fencing scenario
// against today's binary: a worker paused past its lease is refused
// (heartbeat not_found, complete failed_precondition) once another claimed
// the job, the current token completes; a named lease's stale token is not
// current and cannot release; stats and the audit chain read. It runs
// twice: straight to the server, and through a proxy that adds a field no
// release knows to every JSON object the server answers (a newer server's
// additions): the old client ignores it.
func TestOldClient_ThePreviousReleasesClientFencesAgainstTodaysServer(t *testing.T) {
	version, commit := previousRelease(t)
	old := buildOldClient(t, version, commit)
	_, base := startServing(t, nil, "--db", t.TempDir()+"/f.db", "--listen", "127.0.0.1:0")
	target, _ := url.Parse(base)
	added := 0
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		req, _ := http.NewRequest(r.Method, target.String()+r.URL.RequestURI(), r.Body)
		req.Header = r.Header.Clone()
		res, err := http.DefaultTransport.RoundTrip(req)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer res.Body.Close()
		body, _ := io.ReadAll(res.Body)
		if t := bytes.TrimSpace(body); len(t) > 1 && t[0] == '{' && strings.HasPrefix(res.Header.Get("Content-Type"), "application/json") {
			if t[1] == '}' {
				body = []byte(`{"added_by_a_newer_server":{"x":[1,2]}}`)
			} else {
				body = append([]byte(`{"added_by_a_newer_server":{"x":[1,2]},`), t[1:]...)
			}
			added++
		}
		for k, v := range res.Header {
			if k != "Content-Length" {
				w.Header()[k] = v
			}
		}
		w.WriteHeader(res.StatusCode)
		w.Write(body)
	}))
	defer proxy.Close()
	for _, tc := range []struct{ name, url string }{{"direct", base}, {"with fields it does not know", proxy.URL}} {
		cmd := exec.Command(old)
		cmd.Env = cleanEnv("FENCEQ_URL="+tc.url, "FENCEQ_QUEUE=old-"+strings.ReplaceAll(tc.name, " ", "-"))
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "fencing held") {
			t.Errorf("%s: %s's client against today's server: %v\n%s", tc.name, version, err, out)
		}
	}
	if added < 8 {
		t.Errorf("the proxy added its field to %d answers, want every JSON object answered (8 or more)", added)
	}
}

// TestOldClient_TodaysServerIgnoresRequestFieldsItDoesNotKnow: a request of
// a newer client, with fields this server does not know, is answered as if
// they were absent (the field is not refused, nothing else changes): an
// enqueue, a claim, a heartbeat, a complete and a lease acquire.
func TestOldClient_TodaysServerIgnoresRequestFieldsItDoesNotKnow(t *testing.T) {
	_, base := startServing(t, nil, "--db", t.TempDir()+"/f.db", "--listen", "127.0.0.1:0")
	const extra = `"from_a_newer_client":{"x":[1,2]},`
	post := func(path, body string, want int) map[string]any {
		t.Helper()
		st, out := call(t, "POST", base+path, "{"+extra+body+"}")
		wantStatus(t, "POST "+path, st, out, want)
		return out
	}
	job := post("/v1/jobs", `"queue":"q","payload":{"n":1}`, http.StatusCreated)
	id := int(job["id"].(float64))
	claimed := post("/v1/claim", `"worker":"w","queues":["q"],"lease_ms":60000`, http.StatusOK)
	if int(claimed["id"].(float64)) != id || claimed["fencing_token"].(float64) != 1 {
		t.Fatalf("claim = %v, want job %d with token 1", claimed, id)
	}
	jp := "/v1/jobs/" + strconv.Itoa(id)
	post(jp+"/heartbeat", `"worker":"w","fencing_token":1`, http.StatusOK)
	done := post(jp+"/complete", `"worker":"w","fencing_token":1,"result":{"ok":true}`, http.StatusOK)
	if done["state"] != "completed" {
		t.Fatalf("complete = %v", done)
	}
	l := post("/v1/leases/a/acquire", `"holder":"h","ttl_ms":60000`, http.StatusOK)
	if l["fencing_token"].(float64) != 1 {
		t.Fatalf("acquire = %v", l)
	}
	st, got := call(t, "GET", base+jp, "")
	raw, _ := json.Marshal(got)
	if st != http.StatusOK || strings.Contains(string(raw), "from_a_newer_client") {
		t.Fatalf("GET %s = %d %s: the unknown field must not be stored", jp, st, raw)
	}
}
