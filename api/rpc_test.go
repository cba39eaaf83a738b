package api_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/fenceq/fenceq/api"
	"github.com/fenceq/fenceq/api/fenceqv1"
	"github.com/fenceq/fenceq/api/fenceqv1/fenceqv1connect"
	"github.com/fenceq/fenceq/db"
	"github.com/fenceq/fenceq/internal/apitest"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// h2c is an HTTP client that speaks HTTP/2 without TLS, as gRPC clients do
// on plain TCP.
func h2c() *http.Client {
	tr := &http.Transport{}
	tr.Protocols = new(http.Protocols)
	tr.Protocols.SetUnencryptedHTTP2(true)
	return &http.Client{Transport: tr, Timeout: 20 * time.Second}
}

// bearer adds an Authorization header to every call ("" adds none).
func bearer(token string) connect.ClientOption {
	return connect.WithInterceptors(connect.UnaryInterceptorFunc(func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			if token != "" {
				req.Header().Set("Authorization", "Bearer "+token)
			}
			return next(ctx, req)
		}
	}))
}

// rpcAuthServer is a real server with an auth file (producer "prod",
// worker "work", admin "boss") and a small body limit.
type rpcAuthServer struct {
	*testServer
	tokens map[string]string
}

const rpcMaxBody = 4096

func newRPCAuthServer(t *testing.T) *rpcAuthServer {
	t.Helper()
	tokens := map[string]string{}
	var file strings.Builder
	for name, role := range map[string]api.Role{"prod": api.RoleProducer, "work": api.RoleWorker, "boss": api.RoleAdmin} {
		token, line, err := api.NewToken(name, []api.Role{role})
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
	ts := newTestServer(t, db.Rules{}, api.Config{Principals: ps, MaxBodyBytes: rpcMaxBody})
	return &rpcAuthServer{ts, tokens}
}

// jsonAs sends a JSON request as principal who ("" = no token, "wrong" =
// an unknown one) and returns the status, code and message of its error.
func (s *rpcAuthServer) jsonAs(t *testing.T, who, method, path, body string) (int, string, string) {
	t.Helper()
	req, err := http.NewRequest(method, s.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	switch who {
	case "":
	case "wrong":
		req.Header.Set("Authorization", "Bearer fq_wrong")
	default:
		req.Header.Set("Authorization", "Bearer "+s.tokens[who])
	}
	resp, err := s.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var e struct {
		Error struct{ Code, Message string } `json:"error"`
	}
	b, _ := io.ReadAll(resp.Body)
	_ = json.Unmarshal(b, &e)
	return resp.StatusCode, e.Error.Code, e.Error.Message
}

// jobsAs is a gRPC client of the job service as who.
func (s *rpcAuthServer) jobsAs(who string) fenceqv1connect.JobServiceClient {
	token := s.tokens[who]
	if who == "wrong" {
		token = "fq_wrong"
	}
	return fenceqv1connect.NewJobServiceClient(h2c(), s.URL, connect.WithGRPC(), bearer(token))
}

// storeState is what a refusal must not change: the jobs and the audit
// chain's head.
func storeState(t *testing.T, st db.Store) string {
	t.Helper()
	ctx := context.Background()
	page, err := st.ListJobs(ctx, db.ListRequest{Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	rep, err := st.VerifyAudit(ctx)
	if err != nil || !rep.OK {
		t.Fatalf("VerifyAudit() = %+v, %v", rep, err)
	}
	b, _ := json.Marshal(page.Jobs)
	return fmt.Sprintf("%s audit %d %s", b, rep.HeadSeq, rep.HeadHash)
}

// TestRPC_EveryCodeOfTheOneTableHasTheSameMessageOverGRPC walks the API's
// one code table: each code is answered over gRPC with the gRPC code of
// the same name, and each one a request can provoke is provoked both ways
// — JSON and gRPC — with the same message, changing nothing.
func TestRPC_EveryCodeOfTheOneTableHasTheSameMessageOverGRPC(t *testing.T) {
	table, _ := api.ErrorCodesForTest()
	for code := range table {
		want := code
		if code == "cancelled" {
			want = "canceled" // gRPC's spelling of CANCELLED in connect's names
		}
		if got := api.RPCCodeForTest(code).String(); got != want {
			t.Errorf("API code %q is answered over gRPC as %q, want %q", code, got, want)
		}
	}

	s := newRPCAuthServer(t)
	ctx := context.Background()
	enq, err := s.jobsAs("prod").EnqueueJob(ctx, connect.NewRequest(&fenceqv1.EnqueueJobRequest{Queue: "q", Payload: []byte(`{"n":1}`)}))
	if err != nil {
		t.Fatalf("EnqueueJob() = %v", err)
	}
	id := enq.Msg.GetJob().GetId()
	big := strings.Repeat("w", rpcMaxBody+1)
	type row struct {
		name                   string
		code                   string
		who                    string
		method, path, jsonBody string
		call                   func(c fenceqv1connect.JobServiceClient) error
	}
	rows := []row{
		{"bad lease_ms", "invalid_argument", "work", "POST", "/v1/claim", `{"worker":"w","queues":["q"],"lease_ms":-1}`,
			func(c fenceqv1connect.JobServiceClient) error {
				_, err := c.ClaimJob(ctx, connect.NewRequest(&fenceqv1.ClaimJobRequest{Worker: "w", Queues: []string{"q"}, LeaseMs: -1}))
				return err
			}},
		{"token above 4294967295", "invalid_argument", "work", "POST", fmt.Sprintf("/v1/jobs/%d/heartbeat", id), `{"worker":"w","fencing_token":4294967296}`,
			func(c fenceqv1connect.JobServiceClient) error {
				_, err := c.HeartbeatJob(ctx, connect.NewRequest(&fenceqv1.HeartbeatJobRequest{Id: id, Worker: "w", FencingToken: 4294967296}))
				return err
			}},
		{"no token", "unauthenticated", "", "POST", "/v1/claim", `{"worker":"w","queues":["q"]}`,
			func(c fenceqv1connect.JobServiceClient) error {
				_, err := c.ClaimJob(ctx, connect.NewRequest(&fenceqv1.ClaimJobRequest{Worker: "w", Queues: []string{"q"}}))
				return err
			}},
		{"unknown token", "unauthenticated", "wrong", "POST", "/v1/claim", `{"worker":"w","queues":["q"]}`,
			func(c fenceqv1connect.JobServiceClient) error {
				_, err := c.ClaimJob(ctx, connect.NewRequest(&fenceqv1.ClaimJobRequest{Worker: "w", Queues: []string{"q"}}))
				return err
			}},
		{"producer claims", "permission_denied", "prod", "POST", "/v1/claim", `{"worker":"w","queues":["q"]}`,
			func(c fenceqv1connect.JobServiceClient) error {
				_, err := c.ClaimJob(ctx, connect.NewRequest(&fenceqv1.ClaimJobRequest{Worker: "w", Queues: []string{"q"}}))
				return err
			}},
		{"worker cancels", "permission_denied", "work", "POST", fmt.Sprintf("/v1/jobs/%d/cancel", id), ``,
			func(c fenceqv1connect.JobServiceClient) error {
				_, err := c.CancelJob(ctx, connect.NewRequest(&fenceqv1.CancelJobRequest{Id: id}))
				return err
			}},
		{"no such job", "not_found", "prod", "GET", "/v1/jobs/999999", ``,
			func(c fenceqv1connect.JobServiceClient) error {
				_, err := c.GetJob(ctx, connect.NewRequest(&fenceqv1.GetJobRequest{Id: 999999}))
				return err
			}},
		{"heartbeat of an unclaimed job", "not_found", "work", "POST", fmt.Sprintf("/v1/jobs/%d/heartbeat", id), `{"worker":"w"}`,
			func(c fenceqv1connect.JobServiceClient) error {
				_, err := c.HeartbeatJob(ctx, connect.NewRequest(&fenceqv1.HeartbeatJobRequest{Id: id, Worker: "w"}))
				return err
			}},
		{"complete of an unclaimed job", "failed_precondition", "work", "POST", fmt.Sprintf("/v1/jobs/%d/complete", id), `{"worker":"w"}`,
			func(c fenceqv1connect.JobServiceClient) error {
				_, err := c.CompleteJob(ctx, connect.NewRequest(&fenceqv1.CompleteJobRequest{Id: id, Worker: "w"}))
				return err
			}},
		{"retry of an available job", "failed_precondition", "boss", "POST", fmt.Sprintf("/v1/jobs/%d/retry", id), ``,
			func(c fenceqv1connect.JobServiceClient) error {
				_, err := c.RetryJob(ctx, connect.NewRequest(&fenceqv1.RetryJobRequest{Id: id}))
				return err
			}},
		{"body over --max-body", "resource_exhausted", "work", "POST", "/v1/claim", `{"worker":"` + big + `"}`,
			func(c fenceqv1connect.JobServiceClient) error {
				_, err := c.ClaimJob(ctx, connect.NewRequest(&fenceqv1.ClaimJobRequest{Worker: big}))
				return err
			}},
	}
	// Codes no request to a healthy server provokes, and where each is
	// shown: the mapping above holds them to their gRPC names.
	notProvoked := map[string]string{
		"cancelled":   "the client went away: nobody reads the answer",
		"internal":    "a server fault",
		"unavailable": "a passed deadline: TestRPC_ErrorsOfTheStoreMapAsTheJSONAPIs",
	}
	provoked := map[string]bool{}
	before := storeState(t, s.store)
	for _, r := range rows {
		provoked[r.code] = true
		status, jcode, jmsg := s.jsonAs(t, r.who, r.method, r.path, r.jsonBody)
		if jcode != r.code || status < 400 {
			t.Errorf("%s over JSON = %d %s %q, want %s", r.name, status, jcode, jmsg, r.code)
		}
		err := r.call(s.jobsAs(r.who))
		var cerr *connect.Error
		if !errors.As(err, &cerr) {
			t.Errorf("%s over gRPC = %v, want a %s error", r.name, err, r.code)
			continue
		}
		if cerr.Code() != api.RPCCodeForTest(r.code) || cerr.Message() != jmsg {
			t.Errorf("%s over gRPC = %s %q, want %s %q (the JSON API's message)", r.name, cerr.Code(), cerr.Message(), api.RPCCodeForTest(r.code), jmsg)
		}
	}
	if after := storeState(t, s.store); after != before {
		t.Errorf("the refusals changed the store:\nbefore %s\nafter  %s", before, after)
	}
	for code := range table {
		if !provoked[code] && notProvoked[code] == "" {
			t.Errorf("code %q of the table is neither provoked over gRPC here nor listed as not provokable", code)
		}
	}

	// The HTTP-only answers have gRPC counterparts: a method that does
	// not exist (the JSON API's 404 and 405) is unimplemented.
	raw := connect.NewClient[fenceqv1.GetJobRequest, fenceqv1.GetJobResponse](h2c(), s.URL+"/fenceq.v1.JobService/NoSuchMethod", connect.WithGRPC(), bearer(s.tokens["boss"]))
	if _, err := raw.CallUnary(ctx, connect.NewRequest(&fenceqv1.GetJobRequest{Id: id})); connect.CodeOf(err) != connect.CodeUnimplemented {
		t.Errorf("an unknown method = %v, want unimplemented", err)
	}
}

// TestRPC_ErrorsOfTheStoreMapAsTheJSONAPIs: a request whose deadline
// (Config.WriteTimeout) has passed before its commit is unavailable over
// gRPC as over JSON, with the same message, and writes nothing.
func TestRPC_ErrorsOfTheStoreMapAsTheJSONAPIs(t *testing.T) {
	ts := newTestServer(t, db.Rules{}, api.Config{WriteTimeout: time.Nanosecond})
	before := storeState(t, ts.store)
	r := ts.post("/v1/jobs", `{"queue":"q"}`)
	var e struct {
		Error struct{ Code, Message string } `json:"error"`
	}
	_ = json.Unmarshal(r.body, &e)
	if e.Error.Code != "unavailable" {
		t.Fatalf("enqueue past its deadline = %s, want unavailable", r)
	}
	c := fenceqv1connect.NewJobServiceClient(h2c(), ts.URL, connect.WithGRPC())
	_, err := c.EnqueueJob(context.Background(), connect.NewRequest(&fenceqv1.EnqueueJobRequest{Queue: "q"}))
	var cerr *connect.Error
	if !errors.As(err, &cerr) || cerr.Code() != connect.CodeUnavailable || cerr.Message() != e.Error.Message {
		t.Fatalf("enqueue past its deadline over gRPC = %v; want unavailable %q as over JSON", err, e.Error.Message)
	}
	if after := storeState(t, ts.store); after != before {
		t.Errorf("the refused enqueues changed the store:\nbefore %s\nafter  %s", before, after)
	}
}

// TestRPC_EveryProcedureHasTheRoleOfItsJSONRoute: every RPC of every
// service has a JSON route (the role matrix) that the server routes.
func TestRPC_EveryProcedureHasTheRoleOfItsJSONRoute(t *testing.T) {
	routes := api.RPCRoutesForTest()
	echoRoutes := api.RoutesForTest(api.New(apitest.Bolt(t, db.Rules{}), api.Config{}))
	for _, fd := range []protoreflect.FileDescriptor{fenceqv1.File_fenceq_v1_jobs_proto, fenceqv1.File_fenceq_v1_leases_proto, fenceqv1.File_fenceq_v1_schedules_proto} {
		for i := 0; i < fd.Services().Len(); i++ {
			svc := fd.Services().Get(i)
			for j := 0; j < svc.Methods().Len(); j++ {
				proc := "/" + string(svc.FullName()) + "/" + string(svc.Methods().Get(j).Name())
				r, ok := routes[proc]
				if !ok {
					t.Errorf("%s has no JSON route (rpcMethods)", proc)
					continue
				}
				if !slices.Contains(echoRoutes, r[0]) {
					t.Errorf("%s follows %q, which the server does not route", proc, r[0])
				}
				if r[1] == "" {
					t.Errorf("%s needs no role", proc)
				}
				delete(routes, proc)
			}
		}
	}
	for proc := range routes {
		t.Errorf("rpcMethods names %s, which no service has", proc)
	}
}

// grpcFrame is one gRPC message frame of payload.
func grpcFrame(payload []byte) []byte {
	b := make([]byte, 5, 5+len(payload))
	binary.BigEndian.PutUint32(b[1:], uint32(len(payload)))
	return append(b, payload...)
}

// rawGRPC posts body to procedure over h2c as a gRPC request and returns
// the grpc-status and grpc-message.
func rawGRPC(t *testing.T, url, procedure, token string, body []byte) (string, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url+procedure, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/grpc")
	req.Header.Set("TE", "trailers")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := h2c().Do(req)
	if err != nil {
		t.Fatalf("%s: %v", procedure, err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	status, msg := resp.Trailer.Get("Grpc-Status"), resp.Trailer.Get("Grpc-Message")
	if status == "" { // a trailers-only answer
		status, msg = resp.Header.Get("Grpc-Status"), resp.Header.Get("Grpc-Message")
	}
	return status, msg
}

// TestRPC_BadInputOverGRPCIsRefusedWithNothingWritten: malformed and
// oversized messages, unknown methods and missing authentication get
// clear codes; the server goes on serving and nothing is written.
func TestRPC_BadInputOverGRPCIsRefusedWithNothingWritten(t *testing.T) {
	s := newRPCAuthServer(t)
	before := storeState(t, s.store)
	const enqueue = "/fenceq.v1.JobService/EnqueueJob"
	work, prod := s.tokens["work"], s.tokens["prod"]
	for _, c := range []struct {
		name, procedure, token string
		body                   []byte
		want                   string // grpc-status
	}{
		{"malformed message", enqueue, prod, grpcFrame([]byte{0xff, 0xff, 0xff, 0xff}), "3"},
		{"a frame cut short", enqueue, prod, grpcFrame([]byte{0x0a, 0x05, 'q'})[:7], "3"},
		{"two messages", enqueue, prod, append(grpcFrame([]byte{0x0a, 1, 'q'}), grpcFrame([]byte{0x0a, 1, 'q'})...), "12"},
		{"oversized message", enqueue, prod, grpcFrame(bytes.Repeat([]byte{0x0a}, rpcMaxBody+10)), "8"},
		{"a length over the limit, no body", enqueue, prod, []byte{0, 0x7f, 0xff, 0xff, 0xff}, "8"},
		{"unknown method", "/fenceq.v1.JobService/DropAllJobs", prod, grpcFrame(nil), "12"},
		{"unknown service", "/fenceq.v1.NoService/Get", prod, grpcFrame(nil), "12"},
		{"missing auth", enqueue, "", grpcFrame([]byte{0x0a, 1, 'q'}), "16"},
		{"wrong role", enqueue, work, grpcFrame([]byte{0x0a, 1, 'q'}), "7"},
	} {
		status, msg := rawGRPC(t, s.URL, c.procedure, c.token, c.body)
		if status != c.want || msg == "" {
			t.Errorf("%s: grpc-status %q message %q, want status %s and a message", c.name, status, msg, c.want)
		}
	}
	if after := storeState(t, s.store); after != before {
		t.Errorf("bad input changed the store:\nbefore %s\nafter  %s", before, after)
	}
	// Still serving.
	if status, msg := rawGRPC(t, s.URL, enqueue, prod, grpcFrame([]byte{0x0a, 1, 'q'})); status != "0" {
		t.Fatalf("a good enqueue after the bad input = %s %q, want 0", status, msg)
	}
}

// TestRPC_RequestIDsMetricsAndRequiredFencingAreTheJSONAPIs: an RPC gets
// the request id rules of the JSON routes (a sane id of the caller's is
// kept, another replaced), is measured in /metrics under its procedure,
// and --require-fencing refuses a fenced call without a token.
func TestRPC_RequestIDsMetricsAndRequiredFencingAreTheJSONAPIs(t *testing.T) {
	ts := newTestServer(t, db.Rules{RequireFencing: true}, api.Config{})
	c := fenceqv1connect.NewJobServiceClient(ts.client, ts.URL)
	ctx := context.Background()
	for _, tc := range []struct{ sent, want string }{{"trace-42:abc", "trace-42:abc"}, {"bad id with spaces", ""}} {
		req, _ := http.NewRequest(http.MethodPost, ts.URL+"/fenceq.v1.JobService/GetJob", strings.NewReader(`{"id":"1"}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set(api.RequestIDHeader, tc.sent)
		res, err := ts.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		got := res.Header.Get(api.RequestIDHeader)
		if tc.want != "" && got != tc.want || tc.want == "" && (got == "" || got == tc.sent) {
			t.Errorf("request id %q answered with %q, want %q", tc.sent, got, tc.want)
		}
	}
	// A path the caller invents under a protobuf prefix is "unmatched":
	// callers cannot grow the metrics' label values.
	for _, p := range []string{"/grpc.health.v1.Invented/X1", "/grpc.reflection.v1.Made/Up2", "/fenceq.v1.JobService/Nope3"} {
		res, err := ts.client.Post(ts.URL+p, "application/json", strings.NewReader(`{}`))
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
	}
	m := ts.get("/metrics")
	if !strings.Contains(string(m.body), `route="/fenceq.v1.JobService/GetJob"`) {
		t.Errorf("/metrics does not measure the RPC under its procedure")
	}
	for _, invented := range []string{"X1", "Up2", "Nope3"} {
		if strings.Contains(string(m.body), invented) {
			t.Errorf("/metrics has a label from the invented path ending %s", invented)
		}
	}

	enq, err := c.EnqueueJob(ctx, connect.NewRequest(&fenceqv1.EnqueueJobRequest{Queue: "q"}))
	if err != nil {
		t.Fatal(err)
	}
	cl, err := c.ClaimJob(ctx, connect.NewRequest(&fenceqv1.ClaimJobRequest{Worker: "w", Queues: []string{"q"}}))
	if err != nil || cl.Msg.GetJob().GetId() != enq.Msg.GetJob().GetId() {
		t.Fatalf("ClaimJob() = %v, %v", cl, err)
	}
	before := storeState(t, ts.store)
	_, err = c.HeartbeatJob(ctx, connect.NewRequest(&fenceqv1.HeartbeatJobRequest{Id: enq.Msg.GetJob().GetId(), Worker: "w"}))
	if connect.CodeOf(err) != connect.CodeInvalidArgument || !strings.Contains(err.Error(), "required") {
		t.Fatalf("heartbeat without a token under --require-fencing = %v, want invalid_argument naming it required", err)
	}
	if after := storeState(t, ts.store); after != before {
		t.Errorf("the refused heartbeat changed the store")
	}
}

// TestRPC_SmallRepliesAreNotCompressed: a reply of one job goes out as it
// is even to a client that accepts gzip. Compressing each one (connect's
// default) cost the protobuf front end more than half its throughput
// (docs/performance.md): a gzip writer's reset for a few hundred bytes.
func TestRPC_SmallRepliesAreNotCompressed(t *testing.T) {
	ts := newTestServer(t, db.Rules{}, api.Config{})
	enq := ts.enqueue(`{"queue":"q","payload":{"n":1}}`)
	for _, proto := range []string{"connect", "grpc"} {
		req, _ := http.NewRequest(http.MethodPost, ts.URL+"/fenceq.v1.JobService/GetJob", strings.NewReader(fmt.Sprintf(`{"id":"%d"}`, enq.ID)))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept-Encoding", "gzip")
		if proto == "grpc" {
			req.Body = io.NopCloser(bytes.NewReader(grpcFrame(fmt.Appendf(nil, "\x08%c", enq.ID))))
			req.Header.Set("Content-Type", "application/grpc")
			req.Header.Set("Grpc-Accept-Encoding", "gzip")
		}
		client := ts.client
		if proto == "grpc" {
			client = h2c()
		}
		res, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != http.StatusOK {
			t.Fatalf("%s GetJob = %d %q", proto, res.StatusCode, body)
		}
		if ce, ge := res.Header.Get("Content-Encoding"), res.Header.Get("Grpc-Encoding"); ce != "" || ge != "" && ge != "identity" {
			t.Errorf("%s GetJob of one job was compressed: Content-Encoding %q, Grpc-Encoding %q", proto, ce, ge)
		}
	}
}

// rpcOutcomes are the /metrics count of procedure's requests measured with
// HTTP status code, and the refusal count of /v1/stats under the
// procedure and API code.
func rpcOutcomes(t *testing.T, ts *testServer, procedure, code, apiCode string) (measured, refused string) {
	t.Helper()
	m := ts.get("/metrics")
	prefix := fmt.Sprintf(`fenceq_http_request_duration_seconds_count{code=%q,method="POST",route=%q} `, code, procedure)
	measured = "0"
	for line := range strings.Lines(string(m.body)) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), prefix); ok {
			measured = v
		}
	}
	var stats struct {
		Refusals []struct {
			Route, Code string
			Count       uint64
		} `json:"refusals"`
	}
	if r := ts.get("/v1/stats"); r.status != http.StatusOK || json.Unmarshal(r.body, &stats) != nil {
		t.Fatalf("GET /v1/stats = %v", r)
	}
	refused = "0"
	for _, r := range stats.Refusals {
		if r.Route == "POST "+procedure && r.Code == apiCode {
			refused = fmt.Sprint(r.Count)
		}
	}
	return measured, refused
}

// TestRPC_DecodeFailuresAreCountedAsTheJSONAPIsBadRequests: a protobuf
// message that does not decode, or that inflates past --max-body, is
// refused by connect before any handler runs. It must still be measured in
// /metrics under the status its code has in the one table (400
// invalid_argument, 413 resource_exhausted), never as 200, and counted
// among the refusals of /v1/stats, as a JSON bad body is; and nothing is
// written.
func TestRPC_DecodeFailuresAreCountedAsTheJSONAPIsBadRequests(t *testing.T) {
	const limit = 4096
	ts := newTestServer(t, db.Rules{}, api.Config{MaxBodyBytes: limit})
	before := storeState(t, ts.store)
	const enqueue = "/fenceq.v1.JobService/EnqueueJob"
	var inflates bytes.Buffer // small on the wire, over the limit once inflated
	zw := gzip.NewWriter(&inflates)
	zw.Write(append([]byte{0x0a, 0x01, 'q', 0x12, 0x80, 0x40}, bytes.Repeat([]byte{'7'}, 8192)...))
	zw.Close()
	gzipped := append([]byte{1, 0, 0, 0, 0}, inflates.Bytes()...)
	binary.BigEndian.PutUint32(gzipped[1:], uint32(inflates.Len()))
	garbage := []byte{0xff, 0xff, 0xff, 0xff}
	for _, c := range []struct {
		name, contentType string
		header            map[string]string
		body              []byte
		status, apiCode   string
		wire              string // the answer: grpc-status, or Connect's HTTP status
	}{
		{"gRPC, malformed", "application/grpc", nil, grpcFrame(garbage), "400", "invalid_argument", "3"},
		{"gRPC-Web, malformed", "application/grpc-web+proto", nil, grpcFrame(garbage), "400", "invalid_argument", "3"},
		{"Connect, malformed", "application/proto", nil, garbage, "400", "invalid_argument", "400"},
		{"Connect JSON, malformed", "application/json", nil, []byte(`{"queue":`), "400", "invalid_argument", "400"},
		{"gRPC, inflates past the limit", "application/grpc", map[string]string{"Grpc-Encoding": "gzip"}, gzipped, "413", "resource_exhausted", "8"},
		{"Connect, inflates past the limit", "application/proto", map[string]string{"Content-Encoding": "gzip"}, inflates.Bytes(), "413", "resource_exhausted", "429"},
	} {
		t.Run(c.name, func(t *testing.T) {
			measured0, refused0 := rpcOutcomes(t, ts, enqueue, c.status, c.apiCode)
			req, _ := http.NewRequest(http.MethodPost, ts.URL+enqueue, bytes.NewReader(c.body))
			req.Header.Set("Content-Type", c.contentType)
			for k, v := range c.header {
				req.Header.Set(k, v)
			}
			client := ts.client
			if strings.HasPrefix(c.contentType, "application/grpc") {
				client = h2c()
			}
			res, err := client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, res.Body)
			res.Body.Close()
			wire := res.Trailer.Get("Grpc-Status") + res.Header.Get("Grpc-Status")
			if wire == "" {
				wire = fmt.Sprint(res.StatusCode)
			}
			if wire != c.wire {
				t.Errorf("the bad message was answered %s (HTTP %d), want %s", wire, res.StatusCode, c.wire)
			}
			measured1, refused1 := rpcOutcomes(t, ts, enqueue, c.status, c.apiCode)
			if measured1 == measured0 {
				t.Errorf("/metrics count of %s with code %s = %s before and after, want one more", enqueue, c.status, measured1)
			}
			if refused1 == refused0 {
				t.Errorf("/v1/stats refusals of POST %s %s = %s before and after, want one more", enqueue, c.apiCode, refused1)
			}
		})
	}
	if m := ts.get("/metrics"); strings.Contains(string(m.body), `code="200",method="POST",route="`+enqueue+`"`) {
		t.Errorf("/metrics measures a refused %s as 200", enqueue)
	}
	if after := storeState(t, ts.store); after != before {
		t.Errorf("the refused messages changed the store:\nbefore %s\nafter  %s", before, after)
	}
}
