package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/fenceq/fenceq/api"
	"github.com/fenceq/fenceq/db"
	"github.com/fenceq/fenceq/db/bolt"
	"github.com/fenceq/fenceq/web"
	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"
)

// The OpenAPI document (api/openapi.json) is held to the server three
// ways, all with kin-openapi rather than a validator of our own:
//
//   - TestOpenAPIDocument: it loads and validates as an OpenAPI 3.1
//     document, and its fencing_token fields say what docs/design.md says.
//   - TestOpenAPIRoutes: every echo route is documented and every
//     documented path and method reaches the route it describes.
//   - TestOpenAPIResponses: a workload against a real server (bbolt file
//     in t.TempDir(), bearer tokens) whose every request and reply is
//     validated with openapi3filter.ValidateRequest and ValidateResponse;
//     every documented operation is exercised. TestOpenAPIRoles checks the
//     documented role of every operation against the server's answers.

// loadOpenAPI parses and validates the embedded document.
func loadOpenAPI(t *testing.T) *openapi3.T {
	t.Helper()
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromData(api.OpenAPIDocument())
	if err != nil {
		t.Fatalf("loading api/openapi.json: %v", err)
	}
	if err := doc.Validate(loader.Context); err != nil {
		t.Fatalf("api/openapi.json does not validate as an OpenAPI document: %v", err)
	}
	return doc
}

// operations returns the document's operations keyed "METHOD /path".
func operations(doc *openapi3.T) map[string]*openapi3.Operation {
	out := map[string]*openapi3.Operation{}
	for path, item := range doc.Paths.Map() {
		for method, op := range item.Operations() {
			out[method+" "+path] = op
		}
	}
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func bound(b *float64) string {
	if b == nil {
		return "none"
	}
	return fmt.Sprint(*b)
}

func role(op *openapi3.Operation) string {
	r, _ := op.Extensions["x-fenceq-role"].(string)
	return r
}

func TestOpenAPIDocument(t *testing.T) {
	doc := loadOpenAPI(t)
	if doc.OpenAPI != "3.1.0" || !doc.IsOpenAPI31OrLater() {
		t.Errorf("openapi = %q, want 3.1.0", doc.OpenAPI)
	}

	// Authentication: /v1 operations name a role and use the document's
	// security, which lists both modes: a bearer token (--auth-file) or
	// none (no --auth-file); the others need no token.
	if s := doc.Components.SecuritySchemes["bearerAuth"]; s == nil || s.Value.Type != "http" || s.Value.Scheme != "bearer" {
		t.Errorf("components.securitySchemes.bearerAuth is not an HTTP bearer scheme")
	}
	if got, _ := json.Marshal(doc.Security); string(got) != `[{"bearerAuth":[]},{}]` {
		t.Errorf("security = %s, want [{\"bearerAuth\":[]},{}]: a bearer token with --auth-file, none without", got)
	}
	for key, op := range operations(doc) {
		public := op.Security != nil && len(*op.Security) == 0
		if strings.Contains(key, " /v1/") {
			if public || !slices.Contains([]string{"producer", "worker", "admin", "any"}, role(op)) {
				t.Errorf("%s: x-fenceq-role = %q, security = %v; want a role and the default bearer security", key, role(op), op.Security)
			}
			if !strings.HasPrefix(op.Description, "Role: ") {
				t.Errorf("%s: description does not start with the role: %q", key, op.Description)
			}
		} else if !public || role(op) != "" {
			t.Errorf("%s: want security [] and no x-fenceq-role", key)
		}
	}

	// Request bodies are JSON only: the server reads any body as JSON
	// (curl -d sends form encoding), but a client sends application/json,
	// and only that is documented.
	for key, op := range operations(doc) {
		if op.RequestBody == nil {
			continue
		}
		if types := sortedKeys(op.RequestBody.Value.Content); !slices.Equal(types, []string{"application/json"}) {
			t.Errorf("%s: request body types %v, want only application/json", key, types)
		}
	}

	// fencing_token in request bodies: an unsigned integer up to
	// 4294967295; optional (0 = not given) on the fenced job calls,
	// required (at least 1) where the server needs one.
	optional := map[string]bool{"heartbeat": true, "complete": true, "fail": true}
	required := map[string]bool{"checkJob": true, "checkLease": true, "renewLease": true, "releaseLease": true}
	seen := map[string]bool{}
	for key, op := range operations(doc) {
		if op.RequestBody == nil {
			continue
		}
		media := op.RequestBody.Value.Content.Get("application/json")
		if media == nil || media.Schema == nil || media.Schema.Value == nil {
			continue
		}
		body := media.Schema.Value
		tok := body.Properties["fencing_token"]
		if tok == nil {
			if optional[op.OperationID] || required[op.OperationID] {
				t.Errorf("%s (%s): the request body has no fencing_token", key, op.OperationID)
			}
			continue
		}
		seen[op.OperationID] = true
		s := tok.Value
		wantMin := 0.0
		if required[op.OperationID] {
			wantMin = 1
		}
		if !s.Type.Is("integer") || s.Format != "uint64" || s.Min == nil || *s.Min != wantMin || s.Max == nil || *s.Max != 4294967295 {
			t.Errorf("%s: fencing_token = type %v format %q min %s max %s; want integer uint64 %v..4294967295",
				key, s.Type.Slice(), s.Format, bound(s.Min), bound(s.Max), wantMin)
		}
		if got := slices.Contains(body.Required, "fencing_token"); got != required[op.OperationID] {
			t.Errorf("%s: fencing_token required = %v, want %v", key, got, required[op.OperationID])
		}
		if optional[op.OperationID] && !strings.Contains(s.Description, "0 or absent") {
			t.Errorf("%s: fencing_token's description does not give the rule for 0 or absent: %q", key, s.Description)
		}
	}
	for id := range optional {
		if !seen[id] {
			t.Errorf("operation %s: not found with a fencing_token", id)
		}
	}
	job := doc.Components.Schemas["Job"].Value.Properties["fencing_token"].Value
	if job.Max == nil || *job.Max != 4294967295 || slices.Contains(doc.Components.Schemas["Job"].Value.Required, "fencing_token") {
		t.Errorf("Job.fencing_token: want optional, at most 4294967295")
	}
}

func TestOpenAPIRoutes(t *testing.T) {
	doc := loadOpenAPI(t)
	store, err := bolt.Open(filepath.Join(t.TempDir(), "fenceq.db"), bolt.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	// With an Index the status page's routes are registered too.
	srv := api.New(store, api.Config{Logger: slog.New(slog.DiscardHandler), Index: http.NotFoundHandler()})
	routes := api.RoutesForTest(srv)
	ops := operations(doc)

	// Every echo route is documented. ":id" is the document's "{id}"; a
	// wildcard ("/v1/leases/*") is covered by the documented paths that
	// start with a parameter where the star is ("/v1/leases/{name}",
	// "/v1/leases/{name}/acquire", …).
	param := regexp.MustCompile(`:(\w+)`)
	for _, r := range routes {
		method, path, _ := strings.Cut(r, " ")
		docPath := param.ReplaceAllString(path, "{$1}")
		covered := ops[method+" "+docPath] != nil
		if prefix, ok := strings.CutSuffix(docPath, "*"); ok {
			covered = false
			for key := range ops {
				m, p, _ := strings.Cut(key, " ")
				if rest, ok := strings.CutPrefix(p, prefix); m == method && ok && strings.HasPrefix(rest, "{") {
					covered = true
				}
			}
		}
		if !covered {
			t.Errorf("route %s is not in api/openapi.json", r)
		}
	}

	// Every documented path and method is routed, to the route it
	// describes: echo's router is asked for a concrete path, with a lease
	// name holding a percent-encoded slash as the document prescribes.
	samples := map[string]string{"id": "7", "name": "data%2Fa.csv"}
	docParam := regexp.MustCompile(`\{(\w+)\}`)
	for _, key := range sortedKeys(ops) {
		method, docPath, _ := strings.Cut(key, " ")
		concrete := docParam.ReplaceAllStringFunc(docPath, func(m string) string { return samples[m[1:len(m)-1]] })
		want := docParam.ReplaceAllString(docPath, ":$1")
		if !slices.Contains(routes, method+" "+want) {
			// Not an exact template: the longest wildcard route above it.
			want = ""
			for _, r := range routes {
				m, p, _ := strings.Cut(r, " ")
				if prefix, ok := strings.CutSuffix(p, "*"); ok && m == method && strings.HasPrefix(docPath, prefix) && len(p) > len(want) {
					want = p
				}
			}
		}
		got, ok := api.RouteForTest(srv, method, concrete)
		if !ok || got != want || want == "" {
			t.Errorf("documented %s (as %s %s): echo routes it to %q (registered: %v), want %q", key, method, concrete, got, ok, want)
		}
	}
}

// contract sends requests to a real server and validates each request and
// reply against the document with kin-openapi.
type contract struct {
	t      *testing.T
	ts     *testServer
	router routers.Router
	opts   *openapi3filter.Options
	// statuses validated per documented operation ("POST /v1/claim").
	seen map[string]map[int]bool
}

func newContract(t *testing.T, ts *testServer) *contract {
	t.Helper()
	doc := loadOpenAPI(t)
	tightenResponses(doc)
	// The test's server listens on a port of its own, not the document's
	// server (fenceq serve's default address).
	doc.Servers = nil
	router, err := gorillamux.NewRouter(doc)
	if err != nil {
		t.Fatalf("gorillamux.NewRouter: %v", err)
	}
	opts := &openapi3filter.Options{
		IncludeResponseStatus: true, // a status the operation does not document fails
		MultiError:            true,
		SkipSettingDefaults:   true,
		// The document's only scheme is bearerAuth: where it is the
		// alternative tried, the request must carry one. The other
		// alternative, {}, is a server without --auth-file.
		AuthenticationFunc: func(_ context.Context, in *openapi3filter.AuthenticationInput) error {
			if in.SecuritySchemeName != "bearerAuth" {
				return fmt.Errorf("unexpected security scheme %q", in.SecuritySchemeName)
			}
			if !strings.HasPrefix(in.RequestValidationInput.Request.Header.Get("Authorization"), "Bearer ") {
				return errors.New("no bearer token")
			}
			return nil
		},
	}
	return &contract{t: t, ts: ts, router: router, opts: opts, seen: map[string]map[int]bool{}}
}

// tightenResponses makes every object schema (one with properties or
// allOf) refuse
// properties it does not list (unevaluatedProperties: false), so that a
// field the server sends but the document lacks fails validation. The
// published document leaves objects open, as clients must ignore fields
// they do not know. A schema composed with allOf is closed at its own
// level, where the members' properties count as evaluated; its members
// are replaced by open copies, or they would refuse each other's fields.
func tightenResponses(doc *openapi3.T) {
	closed := false
	seen := map[*openapi3.Schema]bool{}
	var tighten func(ref *openapi3.SchemaRef)
	tighten = func(ref *openapi3.SchemaRef) {
		if ref == nil || ref.Value == nil || seen[ref.Value] {
			return
		}
		s := ref.Value
		seen[s] = true
		for _, p := range s.Properties {
			tighten(p)
		}
		tighten(s.Items)
		tighten(s.AdditionalProperties.Schema)
		for _, x := range slices.Concat(s.OneOf, s.AnyOf) {
			tighten(x)
		}
		for i, m := range s.AllOf {
			tighten(m)
			open := *m.Value
			open.UnevaluatedProperties = openapi3.BoolSchema{}
			s.AllOf[i] = &openapi3.SchemaRef{Value: &open}
		}
		if len(s.Properties) > 0 || len(s.AllOf) > 0 {
			s.UnevaluatedProperties = openapi3.BoolSchema{Has: &closed}
		}
	}
	for _, item := range doc.Paths.Map() {
		for _, op := range item.Operations() {
			for _, resp := range op.Responses.Map() {
				for _, media := range resp.Value.Content {
					tighten(media.Schema)
				}
			}
		}
	}
}

// request is one call of the workload.
type request struct {
	method, path string
	body         any    // as for testServer.do
	token        string // bearer token; "" sends none
	// breaks: the request itself does not conform to the document (a
	// deliberate client error); ValidateRequest must refuse it.
	breaks bool
}

func (c *contract) newRequest(r request, raw []byte) *http.Request {
	c.t.Helper()
	var body io.Reader = http.NoBody
	if raw != nil {
		body = bytes.NewReader(raw)
	}
	req, err := http.NewRequest(r.method, c.ts.URL+r.path, body)
	if err != nil {
		c.t.Fatalf("%s %s: %v", r.method, r.path, err)
	}
	if raw != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if r.token != "" {
		req.Header.Set("Authorization", "Bearer "+r.token)
	}
	return req
}

// do sends r, checks the status and validates the request and the reply.
func (c *contract) do(r request, want int) response {
	c.t.Helper()
	var raw []byte
	if r.body != nil {
		var err error
		if raw, err = io.ReadAll(bodyReader(c.t, r.body)); err != nil {
			c.t.Fatal(err)
		}
	}
	what := r.method + " " + r.path
	req := c.newRequest(r, raw)
	route, params, err := c.router.FindRoute(req)
	if err != nil {
		c.t.Fatalf("%s: not a documented operation: %v", what, err)
	}
	in := &openapi3filter.RequestValidationInput{Request: req, PathParams: params, Route: route, Options: c.opts}
	err = openapi3filter.ValidateRequest(context.Background(), in)
	switch {
	case err != nil && !r.breaks:
		c.t.Errorf("%s: the request does not conform to the document: %v", what, err)
	case err == nil && r.breaks:
		c.t.Errorf("%s: the request should break the document, but it validates", what)
	}

	res := c.ts.doRequest(c.newRequest(r, raw))
	if res.status != want {
		c.t.Errorf("%s: got %v, want status %d", what, res, want)
	}
	out := &openapi3filter.ResponseValidationInput{RequestValidationInput: in, Status: res.status, Header: res.header, Options: c.opts}
	out.SetBodyBytes(res.body)
	if err := openapi3filter.ValidateResponse(context.Background(), out); err != nil {
		c.t.Errorf("%s: the %d reply does not match the document: %v\nbody: %.2000s", what, res.status, err, res.body)
	}
	key := route.Method + " " + route.Path
	if c.seen[key] == nil {
		c.seen[key] = map[int]bool{}
	}
	c.seen[key][res.status] = true
	return res
}

func (c *contract) job(r request, want int) jobView {
	c.t.Helper()
	res := c.do(r, want)
	var j jobView
	if err := json.Unmarshal(res.body, &j); err != nil || j.ID == 0 {
		c.t.Fatalf("%s %s: %s is not a job (%v)", r.method, r.path, res.body, err)
	}
	return j
}

// principals is an auth file with one principal per role set; the map
// holds their tokens.
func principals(t *testing.T) (*api.Principals, map[string]string) {
	t.Helper()
	tokens := map[string]string{}
	var file strings.Builder
	for name, roles := range map[string][]api.Role{
		"admin":    {api.RoleAdmin},
		"producer": {api.RoleProducer},
		"worker":   {api.RoleWorker},
		"prodwork": {api.RoleProducer, api.RoleWorker},
	} {
		token, line, err := api.NewToken(name, roles)
		if err != nil {
			t.Fatal(err)
		}
		tokens[name] = token
		file.WriteString(line + "\n")
	}
	ps, err := api.ParsePrincipals(strings.NewReader(file.String()))
	if err != nil {
		t.Fatal(err)
	}
	return ps, tokens
}

func TestOpenAPIResponses(t *testing.T) {
	ps, tokens := principals(t)
	ts := newTestServer(t, db.Rules{MaxPayloadBytes: 1024},
		api.Config{Principals: ps, MaxBodyBytes: 16 << 10, Index: web.Handler()})
	c := newContract(t, ts)
	admin, producer, worker := tokens["admin"], tokens["producer"], tokens["worker"]
	get := func(path, token string) request { return request{method: http.MethodGet, path: path, token: token} }
	post := func(path, token string, body any) request {
		return request{method: http.MethodPost, path: path, token: token, body: body}
	}
	jobPath := func(id uint64, op string) string { return fmt.Sprintf("/v1/jobs/%d/%s", id, op) }

	// Unauthenticated endpoints and pages.
	c.do(get("/healthz", ""), http.StatusOK)
	c.do(get("/readyz", ""), http.StatusOK)
	c.do(get("/metrics", ""), http.StatusOK)
	if res := c.do(get("/openapi.json", ""), http.StatusOK); !bytes.Equal(res.body, api.OpenAPIDocument()) {
		t.Errorf("GET /openapi.json is not the embedded document")
	}
	c.do(get("/", ""), http.StatusOK)
	c.do(get("/jobs/1", ""), http.StatusOK)
	c.do(get("/jobs/x", ""), http.StatusNotFound)
	c.do(get("/assets/app.css", ""), http.StatusOK)
	c.do(get("/assets/app.js?v=0", ""), http.StatusOK)
	c.do(get("/assets/nope.txt", ""), http.StatusNotFound)
	c.do(get("/assets/favicon.svg", ""), http.StatusOK)
	c.do(get("/favicon.ico", ""), http.StatusOK)

	// Enqueue: one (201), the same idempotency key again (200), a list (201).
	first := c.job(post("/v1/jobs", producer, `{"queue":"emails","kind":"send","payload":{"to":"ada@example.com"},"priority":5,"max_attempts":3,"idempotency_key":"k1"}`), http.StatusCreated)
	c.job(post("/v1/jobs", producer, `{"queue":"emails","payload":{"to":"other"},"idempotency_key":"k1"}`), http.StatusOK)
	batch := c.do(post("/v1/jobs", producer, `[{"queue":"emails","payload":1},{"queue":"emails"},{"queue":"later","delay_ms":3600000},{"queue":"other","run_at":"2030-01-02T03:04:05Z"}]`), http.StatusCreated)
	if !bytes.Contains(batch.body, []byte(`"jobs"`)) {
		t.Fatalf("batch enqueue: %s", batch.body)
	}
	// What the document refuses, the server refuses: run_at with a
	// delay_ms, and a body of null (issue 31).
	for _, body := range []string{
		`{"queue":"other","run_at":"2030-01-02T03:04:05Z","delay_ms":1000}`,
		`[{"queue":"other","delay_ms":5,"run_at":"2030-01-02T03:04:05Z"}]`,
		`null`, `[null]`,
	} {
		r := post("/v1/jobs", producer, body)
		r.breaks = true
		c.do(r, http.StatusBadRequest)
	}
	c.job(get(fmt.Sprintf("/v1/jobs/%d", first.ID), producer), http.StatusOK)
	c.do(get("/v1/jobs?queue=emails&limit=2", producer), http.StatusOK) // with next
	c.do(get("/v1/jobs?state=scheduled&after=1", producer), http.StatusOK)

	// Claims: one job, then max, then nothing (204).
	claimed := c.job(post("/v1/claim", worker, `{"worker":"w1","queues":["emails"],"lease_ms":60000}`), http.StatusOK)
	if claimed.ID != first.ID || claimed.FencingToken != 1 {
		t.Fatalf("claim = job %d token %d, want job %d token 1", claimed.ID, claimed.FencingToken, first.ID)
	}
	c.do(post("/v1/claim", worker, `{"worker":"w2","queue":"emails","max":5,"wait_ms":0}`), http.StatusOK)
	c.do(post("/v1/claim", worker, `{"worker":"w1","queues":["nothing-here"]}`), http.StatusNoContent)

	// Heartbeat, check, complete without claim_next.
	id := claimed.ID
	c.job(post(jobPath(id, "heartbeat"), worker, `{"worker":"w1","fencing_token":1,"lease_ms":60000}`), http.StatusOK)
	c.do(post(jobPath(id, "check"), producer, `{"fencing_token":1}`), http.StatusOK)
	c.do(post(jobPath(id, "check"), producer, `{"fencing_token":2}`), http.StatusConflict)
	c.do(post(jobPath(999999, "check"), producer, `{"fencing_token":1}`), http.StatusNotFound)
	done := c.job(post(jobPath(id, "complete"), worker, `{"worker":"w1","fencing_token":1,"result":{"sent":true},"attestation":{"sig":"abc"}}`), http.StatusOK)
	if done.State != "completed" {
		t.Fatalf("complete: state %q", done.State)
	}

	// Refusals of a caller that does not hold the claim (the job is
	// completed now): heartbeat and fail 404, complete 409.
	c.do(post(jobPath(id, "heartbeat"), worker, `{"worker":"w1","fencing_token":1}`), http.StatusNotFound)
	c.do(post(jobPath(id, "fail"), worker, `{"worker":"w1","fencing_token":1,"error":"late"}`), http.StatusNotFound)
	c.do(post(jobPath(id, "complete"), worker, `{"worker":"w1","fencing_token":1,"result":2}`), http.StatusConflict)
	// A token above 4294967295 is invalid_argument, and the document says so.
	for _, op := range []string{"heartbeat", "complete", "fail"} {
		r := post(jobPath(id, op), worker, `{"worker":"w1","fencing_token":4294967296}`)
		r.breaks = true
		c.do(r, http.StatusBadRequest)
	}
	r := post(jobPath(id, "check"), producer, `{"fencing_token":0}`)
	r.breaks = true
	c.do(r, http.StatusBadRequest)

	// complete with claim_next: the next job, several, none (null).
	c.job(post("/v1/jobs", producer, `{"queue":"chain","payload":"a"}`), http.StatusCreated)
	c.do(post("/v1/jobs", producer, `[{"queue":"chain","payload":"b"},{"queue":"chain","payload":"c"},{"queue":"chain","payload":"d"}]`), http.StatusCreated)
	cur := c.job(post("/v1/claim", worker, `{"worker":"c1","queues":["chain"]}`), http.StatusOK)
	var next struct {
		Next     *jobView  `json:"next"`
		NextJobs []jobView `json:"next_jobs"`
	}
	res := c.do(post(jobPath(cur.ID, "complete"), worker, fmt.Sprintf(`{"worker":"c1","fencing_token":%d,"claim_next":{"queues":["chain"],"lease_ms":60000}}`, cur.FencingToken)), http.StatusOK)
	if err := json.Unmarshal(res.body, &next); err != nil || next.Next == nil {
		t.Fatalf("complete with claim_next: %s (%v)", res.body, err)
	}
	cur = *next.Next
	res = c.do(post(jobPath(cur.ID, "complete"), worker, fmt.Sprintf(`{"worker":"c1","fencing_token":%d,"claim_next":{"queues":["chain"],"max":5}}`, cur.FencingToken)), http.StatusOK)
	if err := json.Unmarshal(res.body, &next); err != nil || len(next.NextJobs) != 2 {
		t.Fatalf("complete with claim_next.max: %s (%v)", res.body, err)
	}
	cur = next.NextJobs[0]
	res = c.do(post(jobPath(cur.ID, "complete"), worker, fmt.Sprintf(`{"worker":"c1","fencing_token":%d,"claim_next":{"queues":["nothing-here"]}}`, cur.FencingToken)), http.StatusOK)
	if !bytes.Contains(res.body, []byte(`"next":null`)) {
		t.Fatalf("complete with nothing to claim next: %s", res.body)
	}

	// fail: a retry later, then final (dead); retry and cancel.
	failing := c.job(post("/v1/jobs", producer, `{"queue":"flaky","max_attempts":5}`), http.StatusCreated)
	c.job(post("/v1/claim", worker, `{"worker":"f1","queues":["flaky"]}`), http.StatusOK)
	c.job(post(jobPath(failing.ID, "fail"), worker, `{"worker":"f1","fencing_token":1,"error":"boom","retry_delay_ms":0}`), http.StatusOK)
	c.job(post("/v1/claim", worker, `{"worker":"f1","queues":["flaky"]}`), http.StatusOK)
	dead := c.job(post(jobPath(failing.ID, "fail"), worker, `{"worker":"f1","fencing_token":2,"error":"worse","retry_delay_ms":null,"final":true}`), http.StatusOK)
	if dead.State != "dead" {
		t.Fatalf("final fail: state %q", dead.State)
	}
	c.job(post(jobPath(failing.ID, "retry"), admin, nil), http.StatusOK)
	c.do(post(jobPath(failing.ID, "retry"), admin, nil), http.StatusConflict)
	c.job(post(jobPath(failing.ID, "cancel"), admin, nil), http.StatusOK)
	c.do(post(jobPath(failing.ID, "cancel"), admin, nil), http.StatusConflict)
	c.do(post(jobPath(999999, "cancel"), admin, nil), http.StatusNotFound)
	// A job waiting for a retry, for the status's retrying list.
	later := c.job(post("/v1/jobs", producer, `{"queue":"later"}`), http.StatusCreated)
	c.job(post("/v1/claim", worker, `{"worker":"f1","queues":["later"]}`), http.StatusOK)
	c.job(post(jobPath(later.ID, "fail"), worker, `{"worker":"f1","fencing_token":1,"error":"busy","retry_delay_ms":600000}`), http.StatusOK)
	// Batches: heartbeats with a stale item, completions with claim_next
	// and an unknown job, failures; malformed batches are 400.
	c.do(post("/v1/jobs", producer, `[{"queue":"bat"},{"queue":"bat"},{"queue":"bat"}]`), http.StatusCreated)
	var two struct {
		Jobs []jobView `json:"jobs"`
	}
	res = c.do(post("/v1/claim", worker, `{"worker":"b1","queues":["bat"],"max":2,"lease_ms":60000}`), http.StatusOK)
	if err := json.Unmarshal(res.body, &two); err != nil || len(two.Jobs) != 2 {
		t.Fatalf("claim of 2: %s (%v)", res.body, err)
	}
	ba, bb := two.Jobs[0].ID, two.Jobs[1].ID
	res = c.do(post("/v1/jobs/heartbeat", worker, fmt.Sprintf(`{"worker":"b1","jobs":[{"id":%d,"fencing_token":1,"lease_ms":60000},{"id":%d,"fencing_token":2}]}`, ba, bb)), http.StatusOK)
	if !bytes.Contains(res.body, []byte(`"code":"not_found"`)) {
		t.Fatalf("batch heartbeat with a stale item: %s", res.body)
	}
	res = c.do(post("/v1/jobs/complete", worker, fmt.Sprintf(`{"worker":"b1","jobs":[{"id":%d,"fencing_token":1,"result":{"ok":1}},{"id":999999}],"claim_next":{"queues":["bat"],"max":2,"lease_ms":60000}}`, ba)), http.StatusOK)
	var batchOut struct {
		NextJobs []jobView `json:"next_jobs"`
	}
	if err := json.Unmarshal(res.body, &batchOut); err != nil || len(batchOut.NextJobs) != 1 {
		t.Fatalf("batch complete with claim_next: %s (%v)", res.body, err)
	}
	c.do(post("/v1/jobs/fail", worker, fmt.Sprintf(`{"worker":"b1","jobs":[{"id":%d,"fencing_token":1,"error":"boom","retry_delay_ms":null},{"id":%d,"error":"x","final":true}]}`, bb, batchOut.NextJobs[0].ID)), http.StatusOK)
	r = post("/v1/jobs/complete", worker, `{"worker":"b1","jobs":[]}`)
	r.breaks = true
	c.do(r, http.StatusBadRequest)
	// One job twice: the document says so where JSON Schema can (two
	// equal items, uniqueItems); the same id in two different items is
	// the server's rule alone.
	r = post("/v1/jobs/fail", worker, fmt.Sprintf(`{"worker":"b1","jobs":[{"id":%d},{"id":%d}]}`, bb, bb))
	r.breaks = true
	c.do(r, http.StatusBadRequest)
	c.do(post("/v1/jobs/fail", worker, fmt.Sprintf(`{"worker":"b1","jobs":[{"id":%d},{"id":%d,"error":"x"}]}`, bb, bb)), http.StatusBadRequest)
	// claim_next needs a worker, its own or the batch's (issue 31).
	r = post("/v1/jobs/complete", worker, `{"jobs":[{"id":999999,"worker":"b1"}],"claim_next":{"queues":["bat"]}}`)
	r.breaks = true
	c.do(r, http.StatusBadRequest)
	r = post("/v1/jobs/complete", worker, `{"worker":"","jobs":[{"id":999999,"worker":"b1"}],"claim_next":{"queues":["bat"]}}`)
	r.breaks = true
	c.do(r, http.StatusBadRequest)
	c.do(post("/v1/jobs/complete", worker, `{"jobs":[{"id":999999,"worker":"b1"}],"claim_next":{"worker":"b1","queues":["nothing"]}}`), http.StatusOK)
	c.do(post("/v1/jobs/complete", worker, `{"jobs":[{"id":999999,"worker":"b1"}]}`), http.StatusOK)
	// A batch's worker over maxLength 200 is the whole request's 400, not
	// an item's refusal in a 200.
	for _, body := range []string{
		fmt.Sprintf(`{"worker":%q,"jobs":[{"id":999999,"worker":"b1"}]}`, strings.Repeat("w", 201)),
		fmt.Sprintf(`{"jobs":[{"id":999999,"worker":%q}]}`, strings.Repeat("w", 201)),
	} {
		r = post("/v1/jobs/heartbeat", worker, body)
		r.breaks = true
		c.do(r, http.StatusBadRequest)
	}
	r = post("/v1/jobs/heartbeat", worker, `{"worker":"b1","jobs":[{"id":1,"lease_ms":"long"}]}`)
	r.breaks = true
	c.do(r, http.StatusBadRequest)
	// A job left claimed and one scheduled for the status page's lists.
	c.job(post("/v1/jobs", producer, `{"queue":"held"}`), http.StatusCreated)
	held := c.job(post("/v1/claim", worker, `{"worker":"h1","queues":["held"],"lease_ms":60000}`), http.StatusOK)
	// Another worker acting on it is refused (a zombie with held_by).
	c.do(post(jobPath(held.ID, "heartbeat"), worker, `{"worker":"intruder","fencing_token":1}`), http.StatusNotFound)

	// Bad input, missing things, sizes.
	r = post("/v1/jobs", producer, `{"queue":"emails"`)
	r.breaks = true
	c.do(r, http.StatusBadRequest)
	r = post("/v1/jobs", producer, `{"priority":"high"}`)
	r.breaks = true
	c.do(r, http.StatusBadRequest)
	r = post("/v1/claim", worker, `{"queues":["emails"]}`) // no worker
	r.breaks = true
	c.do(r, http.StatusBadRequest)
	r = get("/v1/jobs/abc", producer)
	r.breaks = true
	c.do(r, http.StatusBadRequest)
	c.do(get("/v1/jobs/999999", producer), http.StatusNotFound)
	c.do(post("/v1/jobs", producer, fmt.Sprintf(`{"payload":%q}`, strings.Repeat("x", 2000))), http.StatusRequestEntityTooLarge)
	c.do(post("/v1/jobs", producer, fmt.Sprintf(`{"payload":%q}`, strings.Repeat("x", 20000))), http.StatusRequestEntityTooLarge)
	// No token: the document allows it (a server without --auth-file needs
	// none), and this server's 401 is documented.
	c.do(get("/v1/queues", ""), http.StatusUnauthorized)
	c.do(post("/v1/claim", producer, `{"worker":"p"}`), http.StatusForbidden)

	// Named leases, the name with slashes as one percent-encoded segment.
	name := "/v1/leases/" + url.PathEscape("/data/a.csv")
	l := c.do(post(name+"/acquire", worker, `{"holder":"h1","ttl_ms":60000}`), http.StatusOK)
	var lease struct {
		FencingToken uint64 `json:"fencing_token"`
	}
	if err := json.Unmarshal(l.body, &lease); err != nil || lease.FencingToken != 1 {
		t.Fatalf("acquire: %s (%v)", l.body, err)
	}
	c.do(post(name+"/acquire", worker, `{"holder":"h2"}`), http.StatusConflict)
	c.do(post(name+"/renew", worker, `{"holder":"h1","fencing_token":1,"ttl_ms":60000}`), http.StatusOK)
	c.do(post(name+"/renew", worker, `{"holder":"h2","fencing_token":1}`), http.StatusConflict)
	c.do(post(name+"/check", producer, `{"fencing_token":1}`), http.StatusOK)
	c.do(get(name, worker), http.StatusOK)
	c.do(post("/v1/leases/"+url.PathEscape("/data/b.csv")+"/acquire", worker, `{"holder":"h1"}`), http.StatusOK)
	c.do(get("/v1/leases?prefix=/data/&limit=1", worker), http.StatusOK) // with next
	c.do(get("/v1/leases?after=/data/a.csv", worker), http.StatusOK)
	c.do(post(name+"/release", worker, `{"holder":"h1","fencing_token":1}`), http.StatusOK)
	c.do(post(name+"/release", worker, `{"holder":"h1","fencing_token":1}`), http.StatusConflict)
	c.do(post(name+"/check", producer, `{"fencing_token":1}`), http.StatusConflict)
	c.do(post(name+"/acquire", worker, `{"holder":"h1","ttl_ms":60000}`), http.StatusOK) // token 2, held
	c.do(post("/v1/leases/never/renew", worker, `{"holder":"h1","fencing_token":1}`), http.StatusNotFound)
	c.do(post("/v1/leases/never/release", worker, `{"holder":"h1","fencing_token":1}`), http.StatusNotFound)
	c.do(post("/v1/leases/never/check", worker, `{"fencing_token":1}`), http.StatusNotFound)
	c.do(get("/v1/leases/never", worker), http.StatusNotFound)
	r = get("/v1/leases?limit=5000", worker)
	r.breaks = true
	c.do(r, http.StatusBadRequest)
	r = post(name+"/renew", worker, `{"holder":"h1"}`) // no token
	r.breaks = true
	c.do(r, http.StatusBadRequest)

	// Queue pause and resume (admin): a pause, its repeat, the claim it
	// leaves empty, a resume, a bad name; "held" stays paused for the
	// read side below.
	c.do(post("/v1/queues/flaky/pause", admin, nil), http.StatusOK)
	c.do(post("/v1/queues/flaky/pause", admin, nil), http.StatusOK)
	c.do(post("/v1/claim", worker, `{"worker":"f1","queues":["flaky"]}`), http.StatusNoContent)
	c.do(post("/v1/queues/flaky/resume", admin, nil), http.StatusOK)
	c.do(post("/v1/queues/flaky/resume", admin, nil), http.StatusOK)
	c.do(post("/v1/queues/held/pause", admin, nil), http.StatusOK)
	r = post("/v1/queues/a%20b/pause", admin, nil) // the path's {queue} has QueueName's pattern
	r.breaks = true
	c.do(r, http.StatusBadRequest)
	r = post("/v1/queues/a%20b/resume", admin, nil)
	r.breaks = true
	c.do(r, http.StatusBadRequest)
	c.do(post("/v1/queues/held/resume", producer, nil), http.StatusForbidden)

	// Schedules: create (201), replace (200), read, list (with next),
	// pause, resume, trigger (the job, with schedule and scheduled_for),
	// delete; refusals: bad spec (400), unknown (404), producer writing (403).
	put := func(path, token string, body any) request {
		return request{method: http.MethodPut, path: path, token: token, body: body}
	}
	c.do(put("/v1/schedules/nightly%20report", admin, `{"cron":"30 2 * * *","timezone":"Europe/Berlin","job":{"queue":"reports","kind":"nightly","payload":{"report":"sales"},"priority":2,"max_attempts":4}}`), http.StatusCreated)
	c.do(put("/v1/schedules/nightly%20report", admin, `{"cron":"30 3 * * *","timezone":"Europe/Berlin","job":{"queue":"reports","payload":{"report":"sales"}}}`), http.StatusOK)
	c.do(put("/v1/schedules/sync", admin, `{"every_ms":60000,"start_at":"2030-01-01T00:00:00Z","catchup":"all","catchup_window_ms":600000,"overlap":"skip","jitter_ms":1000,"job":{"queue":"sync","payload":[1,2]}}`), http.StatusCreated)
	c.do(put("/v1/schedules/bad", admin, `{"cron":"61 * * * *","job":{"queue":"q"}}`), http.StatusBadRequest)
	c.do(put("/v1/schedules/bad", admin, `{"cron":"* * * * *","every_ms":1000,"job":{"queue":"q"}}`), http.StatusBadRequest)
	c.do(put("/v1/schedules/bad", producer, `{"cron":"* * * * *","job":{"queue":"q"}}`), http.StatusForbidden)
	c.do(get("/v1/schedules/nightly%20report", producer), http.StatusOK)
	c.do(get("/v1/schedules/nope", producer), http.StatusNotFound)
	c.do(get("/v1/schedules?limit=1", producer), http.StatusOK) // with next
	c.do(get("/v1/schedules", admin), http.StatusOK)
	c.do(post("/v1/schedules/sync/pause", admin, nil), http.StatusOK)
	c.do(post("/v1/schedules/sync/resume", admin, nil), http.StatusOK)
	c.do(post("/v1/schedules/nope/resume", admin, nil), http.StatusNotFound)
	if j := c.job(post("/v1/schedules/sync/trigger", admin, nil), http.StatusCreated); j.ID == 0 {
		t.Errorf("trigger answered no job")
	}
	c.do(post("/v1/schedules/nope/trigger", admin, nil), http.StatusNotFound)
	c.do(post("/v1/schedules/sync/pause", worker, nil), http.StatusForbidden)
	c.do(request{method: http.MethodDelete, path: "/v1/schedules/sync", token: admin}, http.StatusOK)
	c.do(request{method: http.MethodDelete, path: "/v1/schedules/sync", token: admin}, http.StatusNotFound)

	// Read side: counts, stats (with the refusals above), audit, history,
	// status for an admin and for principals that see less, whoami.
	c.do(get("/v1/queues", producer), http.StatusOK)
	c.do(get("/v1/stats", producer), http.StatusOK)
	c.do(get("/v1/audit?limit=3", admin), http.StatusOK) // with next
	c.do(get("/v1/audit?after=3", admin), http.StatusOK)
	r = get("/v1/audit?limit=0", admin)
	r.breaks = true
	c.do(r, http.StatusBadRequest)
	c.do(get("/v1/audit/verify", admin), http.StatusOK)
	// This server keeps every audit record (no AuditRetention): both
	// archive calls are refused (TestAuditArchive has the rest).
	c.do(get("/v1/audit/archive", admin), http.StatusConflict)
	c.do(post("/v1/audit/archive/remove", admin, `{"through_seq":1,"through_hash":"`+strings.Repeat("0", 64)+`"}`), http.StatusConflict)
	c.do(get(fmt.Sprintf("/v1/jobs/%d/history?limit=2", failing.ID), producer), http.StatusOK) // with next
	c.do(get(fmt.Sprintf("/v1/jobs/%d/history", id), producer), http.StatusOK)
	c.do(get(fmt.Sprintf("/v1/jobs/%d/refusals?limit=5", bb), producer), http.StatusOK)
	c.do(get(fmt.Sprintf("/v1/jobs/%d/refusals", id), producer), http.StatusOK)
	r = get(fmt.Sprintf("/v1/jobs/%d/refusals?limit=0", bb), producer)
	r.breaks = true
	c.do(r, http.StatusBadRequest)
	st := c.do(get("/v1/status", admin), http.StatusOK)
	for _, part := range []string{`"zombies":[{`, `"claimed":{"jobs":[{`, `"scheduled":{"jobs":[{`, `"retrying":{"jobs":[{`, `"workers":[{`, `"latency_ms":`, `"leases":[{`, `"verified":{`} {
		if !bytes.Contains(st.body, []byte(part)) {
			t.Errorf("GET /v1/status: no %s in %s", part, st.body)
		}
	}
	c.do(get("/v1/status?limit=1", worker), http.StatusOK)
	c.do(get("/v1/status", producer), http.StatusOK)
	r = get("/v1/status?limit=0", producer)
	r.breaks = true
	c.do(r, http.StatusBadRequest)
	c.do(get("/v1/whoami", worker), http.StatusOK)
	if _, isBolt := ts.store.(*bolt.Store); !isBolt {
		c.do(get("/v1/backup", admin), http.StatusConflict) // PostgreSQL: pg_dump, not /v1/backup
	} else if res := c.do(get("/v1/backup", admin), http.StatusOK); !bytes.Contains(res.body[:min(len(res.body), 4096)], []byte{0xed, 0xda, 0x0c, 0xed}) {
		// bbolt's magic 0xED0CDAED, little-endian, in the meta page.
		t.Errorf("GET /v1/backup: the body is not a bbolt file (%d bytes)", len(res.body))
	}

	// Every documented operation was exercised.
	for key := range operations(loadOpenAPI(t)) {
		if c.seen[key] == nil {
			t.Errorf("documented operation %s was not exercised", key)
		}
	}
	if testing.Verbose() {
		for _, key := range sortedKeys(c.seen) {
			var statuses []int
			for s := range c.seen[key] {
				statuses = append(statuses, s)
			}
			slices.Sort(statuses)
			t.Logf("validated %-36s %v", key, statuses)
		}
	}
}

// TestOpenAPIRoles checks x-fenceq-role of every operation against the
// server: every principal of the auth file is refused (403) exactly when
// it lacks the role, and no token is 401 on every /v1 route.
func TestOpenAPIRoles(t *testing.T) {
	doc := loadOpenAPI(t)
	ps, tokens := principals(t)
	ts := newTestServer(t, db.Rules{}, api.Config{Principals: ps, Index: web.Handler()})
	// The principals' roles; admin passes every check.
	roles := map[string][]string{"admin": {"admin"}, "producer": {"producer"}, "worker": {"worker"}, "prodwork": {"producer", "worker"}}
	allowed := func(who, role string) bool {
		return role == "any" || slices.Contains(roles[who], role) || slices.Contains(roles[who], "admin")
	}
	docParam := regexp.MustCompile(`\{(\w+)\}`)
	send := func(method, path, token string) response {
		var body io.Reader
		if method == http.MethodPost {
			body = strings.NewReader("{}")
		}
		req := ts.newRequest(method, path, body)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		return ts.doRequest(req)
	}
	for _, key := range sortedKeys(operations(doc)) {
		op := operations(doc)[key]
		method, path, _ := strings.Cut(key, " ")
		path = docParam.ReplaceAllStringFunc(path, func(m string) string {
			if m == "{name}" {
				return url.PathEscape("some/lease")
			}
			return "1"
		})
		r := role(op)
		if r == "" {
			if res := send(method, path, ""); res.status == http.StatusUnauthorized || res.status == http.StatusForbidden {
				t.Errorf("%s is documented without security, but without a token it is %v", key, res)
			}
			continue
		}
		if res := send(method, path, ""); res.status != http.StatusUnauthorized {
			t.Errorf("%s without a token: got %v, want 401", key, res)
		}
		for _, who := range sortedKeys(roles) {
			res := send(method, path, tokens[who])
			if refused := res.status == http.StatusForbidden || res.status == http.StatusUnauthorized; refused == allowed(who, r) {
				t.Errorf("%s (x-fenceq-role %s) as %s (roles %v): got %v, want refused = %v", key, r, who, roles[who], res, !allowed(who, r))
			}
		}
	}
}

// TestOpenAPIWithoutAnAuthFile: a server without --auth-file needs no
// token, and the document says so (its security has the empty
// alternative): the README's calls, sent without a token, conform.
func TestOpenAPIWithoutAnAuthFile(t *testing.T) {
	ts := newTestServer(t, db.Rules{}, api.Config{})
	c := newContract(t, ts)
	post := func(path, body string) request { return request{method: http.MethodPost, path: path, body: body} }
	j := c.job(post("/v1/jobs", `{"queue":"emails","payload":{"to":"ada@example.com"}}`), http.StatusCreated)
	claimed := c.job(post("/v1/claim", `{"worker":"w1","queues":["emails"],"lease_ms":2000}`), http.StatusOK)
	if claimed.ID != j.ID {
		t.Fatalf("claimed job %d, want %d", claimed.ID, j.ID)
	}
	c.job(request{method: http.MethodGet, path: fmt.Sprintf("/v1/jobs/%d", j.ID)}, http.StatusOK)
	c.job(post(fmt.Sprintf("/v1/jobs/%d/complete", j.ID), fmt.Sprintf(`{"worker":"w1","fencing_token":%d,"result":{"sent":true}}`, claimed.FencingToken)), http.StatusOK)
	c.do(post("/v1/leases/%2Fdata%2Fa.csv/acquire", `{"holder":"etl-1","ttl_ms":30000}`), http.StatusOK)
	c.do(post("/v1/leases/%2Fdata%2Fa.csv/check", `{"fencing_token":1}`), http.StatusOK)
	c.do(request{method: http.MethodGet, path: "/v1/status?limit=5"}, http.StatusOK)
	c.do(request{method: http.MethodGet, path: "/v1/whoami"}, http.StatusOK)
}

// TestOpenAPIRequestFieldsHaveNoDefault: a `default` on a request field
// makes generated clients (openapi-typescript's types among them) require
// the field, so the README's {queue, payload} would not type-check. What
// an absent field means is said in its description instead.
func TestOpenAPIRequestFieldsHaveNoDefault(t *testing.T) {
	doc := loadOpenAPI(t)
	seen := map[*openapi3.Schema]bool{}
	var walk func(where string, ref *openapi3.SchemaRef)
	walk = func(where string, ref *openapi3.SchemaRef) {
		if ref == nil || ref.Value == nil || seen[ref.Value] {
			return
		}
		s := ref.Value
		seen[s] = true
		if s.Default != nil {
			t.Errorf("%s: default %v in a request body; say what absent means in the description", where, s.Default)
		}
		for name, p := range s.Properties {
			walk(where+"."+name, p)
		}
		walk(where+"[]", s.Items)
		for _, x := range slices.Concat(s.OneOf, s.AnyOf, s.AllOf) {
			walk(where, x)
		}
	}
	n := 0
	for key, op := range operations(doc) {
		if op.RequestBody == nil {
			continue
		}
		for _, media := range op.RequestBody.Value.Content {
			walk(key, media.Schema)
			n++
		}
	}
	if n == 0 {
		t.Fatal("no request bodies in the document")
	}
}
