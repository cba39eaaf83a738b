package api_test

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/fenceq/fenceq/api"
	"github.com/fenceq/fenceq/db"
)

// badInputFixture is a server with small limits and one job in each of the
// states the table needs.
type badInputFixture struct {
	ts                           *testServer
	available, claimed, complete uint64
}

const (
	fixtureMaxPayload = 64
	fixtureMaxBody    = 1024
)

func newBadInputFixture(t *testing.T) badInputFixture {
	ts := newTestServer(t, db.Rules{MaxPayloadBytes: fixtureMaxPayload}, api.Config{MaxBodyBytes: fixtureMaxBody})
	f := badInputFixture{ts: ts}
	f.complete = ts.enqueue(`{"queue":"q","priority":2}`).ID
	f.claimed = ts.enqueue(`{"queue":"q","priority":1}`).ID
	f.available = ts.enqueue(`{"queue":"q"}`).ID
	if c := ts.claim(`{"worker":"w1","queue":"q","lease_ms":60000}`); c.ID != f.complete {
		t.Fatalf("claimed job %d, want %d", c.ID, f.complete)
	}
	wantJob(t, "complete", ts.post(fmt.Sprintf("/v1/jobs/%d/complete", f.complete), `{"worker":"w1","fencing_token":1}`), http.StatusOK)
	if c := ts.claim(`{"worker":"w1","queue":"q","lease_ms":60000}`); c.ID != f.claimed {
		t.Fatalf("claimed job %d, want %d", c.ID, f.claimed)
	}
	return f
}

func TestBadInputIsRefusedWithItsCodeAndChangesNothing(t *testing.T) {
	f := newBadInputFixture(t)
	ts := f.ts
	job := func(id uint64, op string) string {
		if op == "" {
			return fmt.Sprintf("/v1/jobs/%d", id)
		}
		return fmt.Sprintf("/v1/jobs/%d/%s", id, op)
	}
	hb, cl := job(f.claimed, "heartbeat"), job(f.claimed, "complete")
	const bad, notFound, conflict, tooLarge = http.StatusBadRequest, http.StatusNotFound, http.StatusConflict, http.StatusRequestEntityTooLarge
	big := strings.Repeat("x", fixtureMaxPayload)

	tests := []struct {
		name     string
		method   string // default POST
		path     string
		body     any
		status   int
		code     string
		mentions []string
	}{
		// Malformed bodies.
		{"truncated JSON", "", "/v1/jobs", `{"queue":`, bad, "invalid_argument", []string{"malformed JSON"}},
		{"JSON syntax error", "", "/v1/claim", `{"worker" "w1"}`, bad, "invalid_argument", []string{"malformed JSON"}},
		{"not JSON at all", "", hb, `worker=w1`, bad, "invalid_argument", []string{"malformed JSON"}},
		{"trailing data", "", hb, `{"worker":"w1"} {"worker":"w2"}`, bad, "invalid_argument", []string{"after the JSON value"}},
		{"empty body on enqueue", "", "/v1/jobs", "", bad, "invalid_argument", []string{"empty"}},
		{"empty body on heartbeat", "", hb, "", bad, "invalid_argument", []string{"empty"}},
		{"whitespace body on claim", "", "/v1/claim", " \n", bad, "invalid_argument", []string{"empty"}},
		{"a list where an object belongs", "", hb, `[1,2]`, bad, "invalid_argument", []string{"JSON object"}},
		{"a number where an object belongs", "", "/v1/claim", `7`, bad, "invalid_argument", []string{"JSON object"}},
		{"empty batch", "", "/v1/jobs", `[]`, bad, "invalid_argument", []string{"empty"}},

		// Unknown jobs and ids that are not ids.
		{"get an unknown job", "GET", job(999999, ""), nil, notFound, "not_found", []string{"999999"}},
		{"heartbeat an unknown job", "", job(999999, "heartbeat"), `{"worker":"w1","fencing_token":1}`, notFound, "not_found", []string{"999999"}},
		{"complete an unknown job", "", job(999999, "complete"), `{"worker":"w1","fencing_token":1}`, notFound, "not_found", []string{"999999"}},
		{"fail an unknown job", "", job(999999, "fail"), `{"worker":"w1","fencing_token":1}`, notFound, "not_found", []string{"999999"}},
		{"cancel an unknown job", "", job(999999, "cancel"), nil, notFound, "not_found", []string{"999999"}},
		{"retry an unknown job", "", job(999999, "retry"), nil, notFound, "not_found", []string{"999999"}},
		{"non-numeric id", "GET", "/v1/jobs/abc", nil, bad, "invalid_argument", []string{`"abc"`, "job id"}},
		{"id zero", "GET", "/v1/jobs/0", nil, bad, "invalid_argument", []string{"job id"}},
		{"negative id", "GET", "/v1/jobs/-1", nil, bad, "invalid_argument", []string{"job id"}},
		{"id above u64", "GET", "/v1/jobs/18446744073709551616", nil, bad, "invalid_argument", []string{"job id"}},
		{"non-numeric id on heartbeat", "", "/v1/jobs/abc/heartbeat", `{"worker":"w1"}`, bad, "invalid_argument", []string{"job id"}},
		{"non-numeric id on cancel", "", "/v1/jobs/1.5/cancel", nil, bad, "invalid_argument", []string{"job id"}},

		// Wrong state.
		{"cancel a completed job", "", job(f.complete, "cancel"), nil, conflict, "failed_precondition", []string{"completed"}},
		{"retry an available job", "", job(f.available, "retry"), nil, conflict, "failed_precondition", []string{"available"}},
		{"retry a claimed job", "", job(f.claimed, "retry"), nil, conflict, "failed_precondition", []string{"claimed"}},
		{"retry a completed job", "", job(f.complete, "retry"), nil, conflict, "failed_precondition", []string{"completed"}},
		{"heartbeat an available job", "", job(f.available, "heartbeat"), `{"worker":"w1"}`, notFound, "not_found", []string{"available"}},
		{"complete an available job", "", job(f.available, "complete"), `{"worker":"w1"}`, conflict, "failed_precondition", []string{"available"}},
		{"fail an available job", "", job(f.available, "fail"), `{"worker":"w1"}`, notFound, "not_found", []string{"available"}},
		{"complete a completed job", "", job(f.complete, "complete"), `{"worker":"w1","fencing_token":1}`, conflict, "failed_precondition", []string{"completed"}},

		// Sizes.
		{"payload above the store limit", "", "/v1/jobs", `{"payload":"` + big + `"}`, tooLarge, "resource_exhausted", []string{"payload", fmt.Sprint(fixtureMaxPayload)}},
		{"payload above the limit in a batch", "", "/v1/jobs", `[{"payload":1},{"payload":"` + big + `"}]`, tooLarge, "resource_exhausted", []string{"jobs[1]", "payload"}},
		{"result above the store limit", "", cl, `{"worker":"w1","result":"` + big + `"}`, tooLarge, "resource_exhausted", []string{"result"}},
		{"body above the server limit", "", "/v1/jobs", `{"payload":"` + strings.Repeat("y", fixtureMaxBody) + `"}`, tooLarge, "resource_exhausted", []string{"limit"}},

		// Names.
		{"queue name with a space", "", "/v1/jobs", `{"queue":"no spaces"}`, bad, "invalid_argument", []string{"queue", "no spaces"}},
		{"queue name too long", "", "/v1/jobs", `{"queue":"` + strings.Repeat("q", 129) + `"}`, bad, "invalid_argument", []string{"queue"}},
		{"bad queue in a batch", "", "/v1/jobs", `[{"queue":"ok"},{"queue":"bad/q"}]`, bad, "invalid_argument", []string{"jobs[1]", "queue"}},
		{"bad queue on claim", "", "/v1/claim", `{"worker":"w1","queues":["q","bad q"]}`, bad, "invalid_argument", []string{"queue"}},
		{"bad queue on list", "GET", "/v1/jobs?queue=bad%20q", nil, bad, "invalid_argument", []string{"queue"}},
		{"bad state on list", "GET", "/v1/jobs?state=running", nil, bad, "invalid_argument", []string{"state", "running"}},
		{"bad limit on list", "GET", "/v1/jobs?limit=many", nil, bad, "invalid_argument", []string{"limit"}},
		{"claim without a worker", "", "/v1/claim", `{"queue":"q"}`, bad, "invalid_argument", []string{"worker"}},
		{"heartbeat without a worker", "", hb, `{"fencing_token":1}`, bad, "invalid_argument", []string{"worker"}},

		// Durations.
		{"negative lease_ms on claim", "", "/v1/claim", `{"worker":"w1","queue":"q","lease_ms":-1}`, bad, "invalid_argument", []string{"lease_ms", "negative"}},
		{"negative lease_ms on heartbeat", "", hb, `{"worker":"w1","fencing_token":1,"lease_ms":-5}`, bad, "invalid_argument", []string{"lease_ms", "negative"}},
		{"absurd lease_ms on claim", "", "/v1/claim", `{"worker":"w1","queue":"q","lease_ms":9223372036854775807}`, bad, "invalid_argument", []string{"lease_ms"}},
		{"absurd lease_ms on heartbeat", "", hb, `{"worker":"w1","lease_ms":9223372036854775807}`, bad, "invalid_argument", []string{"lease_ms"}},
		{"lease_ms above the max lease", "", "/v1/claim", `{"worker":"w1","queue":"q","lease_ms":7200000}`, bad, "invalid_argument", []string{"lease"}},
		{"lease_ms above int64", "", "/v1/claim", `{"worker":"w1","queue":"q","lease_ms":9223372036854775808}`, bad, "invalid_argument", []string{"lease_ms"}},
		{"negative retry_delay_ms", "", job(f.claimed, "fail"), `{"worker":"w1","fencing_token":1,"retry_delay_ms":-1}`, bad, "invalid_argument", []string{"retry_delay_ms", "negative"}},
		{"absurd retry_delay_ms", "", job(f.claimed, "fail"), `{"worker":"w1","fencing_token":1,"retry_delay_ms":9223372036854775807}`, bad, "invalid_argument", []string{"retry_delay_ms"}},
		{"negative delay_ms", "", "/v1/jobs", `{"delay_ms":-1000}`, bad, "invalid_argument", []string{"delay_ms"}},
		{"fractional lease_ms", "", "/v1/claim", `{"worker":"w1","lease_ms":1.5}`, bad, "invalid_argument", []string{"lease_ms"}},

		// Tokens.
		{"fencing_token above u32 max", "", hb, `{"worker":"w1","fencing_token":4294967296}`, bad, "invalid_argument", []string{"fencing_token", "4294967296"}},
		{"fencing_token u64 max", "", cl, `{"worker":"w1","fencing_token":18446744073709551615}`, bad, "invalid_argument", []string{"fencing_token"}},
		{"fencing_token above u64", "", cl, `{"worker":"w1","fencing_token":18446744073709551616}`, bad, "invalid_argument", []string{"fencing_token"}},
		{"negative fencing_token", "", hb, `{"worker":"w1","fencing_token":-1}`, bad, "invalid_argument", []string{"fencing_token"}},

		// Wrong types: the message names the field.
		{"fencing_token as a string", "", hb, `{"worker":"w1","fencing_token":"1"}`, bad, "invalid_argument", []string{"fencing_token", "string"}},
		{"priority as a string", "", "/v1/jobs", `{"priority":"high"}`, bad, "invalid_argument", []string{"priority", "string"}},
		{"priority as a string in a batch", "", "/v1/jobs", `[{"priority":1},{"priority":"high"}]`, bad, "invalid_argument", []string{"priority"}},
		{"max_attempts negative", "", "/v1/jobs", `{"max_attempts":-3}`, bad, "invalid_argument", []string{"max_attempts"}},
		{"lease_ms as a string", "", "/v1/claim", `{"worker":"w1","lease_ms":"100"}`, bad, "invalid_argument", []string{"lease_ms"}},
		{"queues as a string", "", "/v1/claim", `{"worker":"w1","queues":"q"}`, bad, "invalid_argument", []string{"queues"}},
		{"worker as a number", "", hb, `{"worker":7}`, bad, "invalid_argument", []string{"worker"}},
		{"final as a string", "", job(f.claimed, "fail"), `{"worker":"w1","final":"yes"}`, bad, "invalid_argument", []string{"final"}},
		{"retry_delay_ms as a string", "", job(f.claimed, "fail"), `{"worker":"w1","retry_delay_ms":"1s"}`, bad, "invalid_argument", []string{"retry_delay_ms"}},

		// Times.
		{"run_at not RFC 3339", "", "/v1/jobs", `{"run_at":"tomorrow"}`, bad, "invalid_argument", []string{"run_at", "RFC 3339"}},
		{"run_at without a time", "", "/v1/jobs", `{"run_at":"2030-01-02"}`, bad, "invalid_argument", []string{"run_at"}},
		{"run_at and delay_ms both", "", "/v1/jobs", `{"run_at":"2030-01-02T03:04:05Z","delay_ms":10}`, bad, "invalid_argument", []string{"run_at"}},
		{"run_at as a number", "", "/v1/jobs", `{"run_at":1700000000}`, bad, "invalid_argument", []string{"run_at"}},

		// Limits on claims.
		{"claim max 0", "", "/v1/claim", `{"worker":"w1","max":0}`, bad, "invalid_argument", []string{"max"}},
		{"claim max above the batch limit", "", "/v1/claim", `{"worker":"w1","max":1000000}`, bad, "invalid_argument", []string{"max"}},

		// Routes.
		{"unknown route", "GET", "/v1/nope", nil, notFound, "not_found", []string{"endpoint"}},
		{"unknown version", "POST", "/v2/jobs", `{}`, notFound, "not_found", []string{"endpoint"}},
		{"unknown job operation", "POST", job(f.claimed, "explode"), `{}`, notFound, "not_found", []string{"endpoint"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			method := tt.method
			if method == "" {
				method = http.MethodPost
			}
			var jobsBefore [][]byte
			for _, id := range []uint64{f.available, f.claimed, f.complete} {
				jobsBefore = append(jobsBefore, ts.jobRaw(id))
			}
			before := ts.snapshot()
			r := ts.do(method, tt.path, tt.body)
			msg := wantError(t, method+" "+tt.path, r, tt.status, tt.code, tt.mentions...)
			t.Logf("%d %s", r.status, msg)
			for i, id := range []uint64{f.available, f.claimed, f.complete} {
				if after := ts.jobRaw(id); string(after) != string(jobsBefore[i]) {
					t.Errorf("job %d changed:\nbefore %s\nafter  %s", id, jobsBefore[i], after)
				}
			}
			wantUnchanged(t, tt.name, before, ts.snapshot())
		})
	}
}

// TestABodyAboveTheLimitIsRefusedWithoutAContentLength covers a chunked
// request, which the Content-Length check cannot see: the limit must hold
// while the body is read.
func TestABodyAboveTheLimitIsRefusedWithoutAContentLength(t *testing.T) {
	f := newBadInputFixture(t)
	ts := f.ts
	before := ts.snapshot()
	body := `{"payload":"` + strings.Repeat("z", 4*fixtureMaxBody) + `"}`
	req := ts.newRequest(http.MethodPost, "/v1/jobs", io.MultiReader(strings.NewReader(body))) // not a *strings.Reader: no length
	if req.ContentLength != 0 {
		t.Fatalf("request ContentLength = %d, want 0 (unknown, chunked)", req.ContentLength)
	}
	r := ts.doRequest(req)
	wantError(t, "chunked body above the limit", r, http.StatusRequestEntityTooLarge, "resource_exhausted", "limit", fmt.Sprint(fixtureMaxBody))
	wantUnchanged(t, "chunked body above the limit", before, ts.snapshot())
}

func TestUnknownFieldsAreIgnored(t *testing.T) {
	ts := newTestServer(t, db.Rules{}, api.Config{})
	j := ts.enqueue(`{"queue":"q","payload":{"a":1},"colour":"blue","nested":{"x":[1,2]},"priority":3}`)
	if j.Queue != "q" || j.Priority != 3 || string(j.Payload) != `{"a":1}` {
		t.Fatalf("enqueue with unknown fields = queue %q priority %d payload %s, want q, 3, {\"a\":1}", j.Queue, j.Priority, j.Payload)
	}
	c := ts.claim(`{"worker":"w1","queue":"q","lease_ms":60000,"shiny_new_option":true}`)
	path := fmt.Sprintf("/v1/jobs/%d/", c.ID)
	wantJob(t, "heartbeat with unknown fields", ts.post(path+"heartbeat", `{"worker":"w1","fencing_token":1,"hint":"x"}`), http.StatusOK)
	done := wantJob(t, "complete with unknown fields", ts.post(path+"complete", `{"worker":"w1","fencing_token":1,"result":2,"metrics":{"ms":5}}`), http.StatusOK)
	if done.State != "completed" {
		t.Fatalf("complete with unknown fields: state %s, want completed", done.State)
	}
}

func TestClaimAnswers204WhenNothingIsEligible(t *testing.T) {
	ts := newTestServer(t, db.Rules{}, api.Config{})
	check := func(what, body string) {
		t.Helper()
		before := ts.snapshot()
		r := ts.post("/v1/claim", body)
		if r.status != http.StatusNoContent || len(r.body) != 0 {
			t.Fatalf("%s: got %v, want 204 with no body", what, r)
		}
		wantUnchanged(t, what, before, ts.snapshot())
	}
	check("claim from an empty store", `{"worker":"w1"}`)
	ts.enqueue(`{"queue":"other"}`)
	ts.enqueue(`{"queue":"q","run_at":"2100-01-01T00:00:00Z"}`)
	check("claim from a queue with nothing in it", `{"worker":"w1","queues":["q","empty"]}`)
	check("claim of a delayed job before run_at", `{"worker":"w1","queue":"q"}`)
	if r := ts.post("/v1/claim", `{"worker":"w1","queue":"other","max":5}`); r.status != http.StatusOK || !strings.Contains(string(r.body), `"jobs":[`) {
		t.Fatalf("claim with max: got %v, want 200 with a list of jobs", r)
	}
	check("claim with max when the queue is drained", `{"worker":"w1","queue":"other","max":5}`)
}
