package e2e

// The protobuf API (proto/fenceq/v1, api/rpc.go) against the real binary:
// the decision record's stale-claim test over gRPC and over Connect on
// both engines, its compatibility promise (a client without the fencing
// fields, unknown fields, the field numbers 5/7/6), gRPC over TLS, health
// checking and reflection, and long-polls answered at shutdown.

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/fenceq/fenceq/api/fenceqv1"
	"github.com/fenceq/fenceq/api/fenceqv1/fenceqv1connect"
	"github.com/fenceq/fenceq/db/postgres/pgtest"
	"github.com/fenceq/fenceq/e2e/oldpb"
	"github.com/fenceq/fenceq/e2e/oldpb/oldpbconnect"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// h2cClient speaks HTTP/2 without TLS, as gRPC clients do on plain TCP.
func h2cClient() *http.Client {
	tr := &http.Transport{}
	tr.Protocols = new(http.Protocols)
	tr.Protocols.SetUnencryptedHTTP2(true)
	return &http.Client{Transport: tr, Timeout: 20 * time.Second}
}

// protoClient is a generated job service client over protocol ("grpc":
// gRPC over h2c, "grpcweb": gRPC-Web over HTTP/1.1, "connect": Connect
// over HTTP/1.1).
func protoClient(base, protocol string) fenceqv1connect.JobServiceClient {
	switch protocol {
	case "grpc":
		return fenceqv1connect.NewJobServiceClient(h2cClient(), base, connect.WithGRPC())
	case "grpcweb":
		return fenceqv1connect.NewJobServiceClient(&http.Client{Timeout: 20 * time.Second}, base, connect.WithGRPCWeb())
	}
	return fenceqv1connect.NewJobServiceClient(&http.Client{Timeout: 20 * time.Second}, base)
}

// protoEngines are the --db values of each engine.
func protoEngines(t *testing.T) map[string]func(t *testing.T) string {
	return map[string]func(t *testing.T) string{
		"bolt":     func(t *testing.T) string { return filepath.Join(t.TempDir(), "q.db") },
		"postgres": func(t *testing.T) string { return pgtest.NewSchema(t) },
	}
}

func wantCode(t *testing.T, what string, err error, code connect.Code, mentions ...string) {
	t.Helper()
	var cerr *connect.Error
	if !errors.As(err, &cerr) || cerr.Code() != code {
		t.Fatalf("%s = %v, want %s", what, err, code)
	}
	for _, m := range mentions {
		if !strings.Contains(cerr.Message(), m) {
			t.Fatalf("%s: message %q does not mention %q", what, cerr.Message(), m)
		}
	}
}

// TestProto_AStaleClaimOfTheSameWorkerIsFencedOff is the decision record's
// test (api's TestAStaleClaimOfTheSameWorkerIsFencedOff) over gRPC and
// over Connect, on both engines: the same worker name claims twice; the
// old token is refused on heartbeat (NOT_FOUND), fail (NOT_FOUND) and
// complete (FAILED_PRECONDITION) and changes nothing; the current token
// and no token are accepted.
func TestProto_AStaleClaimOfTheSameWorkerIsFencedOff(t *testing.T) {
	for engine, dbArg := range protoEngines(t) {
		for _, protocol := range []string{"grpc", "connect"} {
			t.Run(engine+"/"+protocol, func(t *testing.T) {
				t.Parallel()
				_, base := startServing(t, nil, "--db", dbArg(t), "--listen", "127.0.0.1:0")
				staleClaimScenario(t, protoClient(base, protocol))
			})
		}
	}
}

func staleClaimScenario(t *testing.T, c fenceqv1connect.JobServiceClient) {
	ctx := context.Background()
	// The payload keeps its bytes: key order, spacing, an integer above 2^53.
	const payload = `{"z": 1, "a": 9007199254740993}`
	enq, err := c.EnqueueJob(ctx, connect.NewRequest(&fenceqv1.EnqueueJobRequest{Queue: "q", Payload: []byte(payload)}))
	if err != nil {
		t.Fatalf("EnqueueJob() = %v", err)
	}
	id := enq.Msg.GetJob().GetId()
	claim := func(lease int64) *fenceqv1.Job {
		t.Helper()
		res, err := c.ClaimJob(ctx, connect.NewRequest(&fenceqv1.ClaimJobRequest{Worker: "w1", Queues: []string{"q"}, LeaseMs: lease}))
		if err != nil {
			t.Fatalf("ClaimJob() = %v", err)
		}
		return res.Msg.GetJob()
	}
	first := claim(1000)
	if first.GetId() != id || first.GetAttempts() != 1 || first.GetFencingToken() != 1 || first.GetClaimedBy() != "local|w1" {
		t.Fatalf("first claim = %v, want job %d with attempts and token 1 by local|w1", first, id)
	}
	if string(first.GetPayload()) != payload {
		t.Fatalf("claimed payload = %s, want the enqueued bytes %s", first.GetPayload(), payload)
	}
	if again := claim(1000); again != nil {
		t.Fatalf("a claim during the lease = %v, want none", again)
	}
	time.Sleep(time.Until(first.GetLeaseExpiresAt().AsTime()) + 50*time.Millisecond)
	second := claim(10000)
	if second.GetId() != id || second.GetAttempts() != 2 || second.GetFencingToken() != 2 {
		t.Fatalf("second claim = %v, want job %d with attempts and token 2", second, id)
	}

	get := func() *fenceqv1.Job {
		t.Helper()
		res, err := c.GetJob(ctx, connect.NewRequest(&fenceqv1.GetJobRequest{Id: id}))
		if err != nil {
			t.Fatalf("GetJob() = %v", err)
		}
		return res.Msg.GetJob()
	}
	unchanged := func(what string, before *fenceqv1.Job) {
		t.Helper()
		if after := get(); !proto.Equal(before, after) {
			t.Fatalf("%s changed the job:\nbefore %v\nafter  %v", what, before, after)
		}
	}
	before := get()
	_, err = c.HeartbeatJob(ctx, connect.NewRequest(&fenceqv1.HeartbeatJobRequest{Id: id, Worker: "w1", FencingToken: 1, LeaseMs: 10000}))
	wantCode(t, "stale heartbeat", err, connect.CodeNotFound, "fencing token 1")
	unchanged("stale heartbeat", before)
	_, err = c.FailJob(ctx, connect.NewRequest(&fenceqv1.FailJobRequest{Id: id, Worker: "w1", FencingToken: 1, Error: "boom", Final: true}))
	wantCode(t, "stale fail", err, connect.CodeNotFound, "fencing token 1")
	unchanged("stale fail", before)
	_, err = c.CompleteJob(ctx, connect.NewRequest(&fenceqv1.CompleteJobRequest{Id: id, Worker: "w1", FencingToken: 1,
		Result: []byte(`{"ok":"stale"}`), Attestation: []byte(`{"sig":"stale"}`)}))
	wantCode(t, "stale complete", err, connect.CodeFailedPrecondition, "fencing token 1")
	unchanged("stale complete", before)
	_, err = c.HeartbeatJob(ctx, connect.NewRequest(&fenceqv1.HeartbeatJobRequest{Id: id, Worker: "w1", FencingToken: 4294967296}))
	wantCode(t, "token above 4294967295", err, connect.CodeInvalidArgument, "4294967296")
	unchanged("token above 4294967295", before)

	hb, err := c.HeartbeatJob(ctx, connect.NewRequest(&fenceqv1.HeartbeatJobRequest{Id: id, Worker: "w1", FencingToken: 2, LeaseMs: 10000}))
	if err != nil || hb.Msg.GetJob().GetState() != "claimed" || hb.Msg.GetJob().GetFencingToken() != 2 {
		t.Fatalf("heartbeat with the current token = %v, %v; want claimed with token 2", hb, err)
	}
	if _, err := c.HeartbeatJob(ctx, connect.NewRequest(&fenceqv1.HeartbeatJobRequest{Id: id, Worker: "w1", LeaseMs: 10000})); err != nil {
		t.Fatalf("heartbeat without a token = %v, want accepted", err)
	}
	const result = `{"rows": 42,  "big": 12345678901234567890}`
	done, err := c.CompleteJob(ctx, connect.NewRequest(&fenceqv1.CompleteJobRequest{Id: id, Worker: "w1", FencingToken: 2, Result: []byte(result)}))
	if err != nil || done.Msg.GetJob().GetState() != "completed" {
		t.Fatalf("complete with the current token = %v, %v; want completed", done, err)
	}
	if got := get(); string(got.GetResult()) != result || got.GetAttestation() != nil {
		t.Fatalf("stored result %s attestation %s, want the bytes sent, %s, and none", got.GetResult(), got.GetAttestation(), result)
	}
}

// renamingTransport sends the pre-fencing client's calls to today's
// service: its copy of the .proto has another package name
// (e2e/testdata/oldproto), the wire format names no message.
type renamingTransport struct{ http.RoundTripper }

func (r renamingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	req = req.Clone(req.Context())
	req.URL.Path = strings.Replace(req.URL.Path, "/fenceqold.v1.", "/fenceq.v1.", 1)
	return r.RoundTripper.RoundTrip(req)
}

// TestProto_AClientWithoutTheFencingFieldsWorksUnchanged: a client
// generated from a copy of the .proto without the three fencing_token
// fields (e2e/testdata/oldproto, e2e/oldpb) enqueues, claims, heartbeats,
// fails and completes against today's server, over gRPC, Connect and
// gRPC-Web (HTTP/1.1).
func TestProto_AClientWithoutTheFencingFieldsWorksUnchanged(t *testing.T) {
	_, base := startServing(t, nil, "--db", filepath.Join(t.TempDir(), "q.db"), "--listen", "127.0.0.1:0")
	ctx := context.Background()
	for _, protocol := range []string{"grpc", "connect", "grpcweb"} {
		hc, opts := &http.Client{Timeout: 20 * time.Second}, []connect.ClientOption{}
		switch protocol {
		case "grpc":
			hc, opts = h2cClient(), append(opts, connect.WithGRPC())
		case "grpcweb":
			opts = append(opts, connect.WithGRPCWeb())
		}
		hc.Transport = renamingTransport{cmpTransport(hc.Transport)}
		c := oldpbconnect.NewJobServiceClient(hc, base, opts...)
		queue := "old-" + protocol
		if _, err := c.EnqueueJob(ctx, connect.NewRequest(&oldpb.EnqueueJobRequest{Queue: queue, Payload: []byte(`[1,2]`)})); err != nil {
			t.Fatalf("%s: EnqueueJob() = %v", protocol, err)
		}
		for _, finish := range []string{"fail", "complete"} {
			cl, err := c.ClaimJob(ctx, connect.NewRequest(&oldpb.ClaimJobRequest{Worker: "old", Queues: []string{queue}, LeaseMs: 10000}))
			if err != nil || cl.Msg.GetJob() == nil {
				t.Fatalf("%s: ClaimJob() = %v, %v", protocol, cl, err)
			}
			id := cl.Msg.GetJob().GetId()
			if _, err := c.HeartbeatJob(ctx, connect.NewRequest(&oldpb.HeartbeatJobRequest{Id: id, Worker: "old", LeaseMs: 10000})); err != nil {
				t.Fatalf("%s: HeartbeatJob() without the field = %v", protocol, err)
			}
			if finish == "fail" {
				f, err := c.FailJob(ctx, connect.NewRequest(&oldpb.FailJobRequest{Id: id, Worker: "old", Error: "again", RetryDelayMs: proto.Int64(0)}))
				if err != nil || f.Msg.GetJob().GetState() != "available" {
					t.Fatalf("%s: FailJob() without the field = %v, %v; want available", protocol, f, err)
				}
				continue
			}
			d, err := c.CompleteJob(ctx, connect.NewRequest(&oldpb.CompleteJobRequest{Id: id, Worker: "old", Result: []byte(`"done"`)}))
			if err != nil || d.Msg.GetJob().GetState() != "completed" || string(d.Msg.GetJob().GetResult()) != `"done"` || d.Msg.GetJob().GetAttempts() != 2 {
				t.Fatalf("%s: CompleteJob() without the field = %v, %v; want completed after 2 attempts", protocol, d, err)
			}
		}
	}
}

func cmpTransport(rt http.RoundTripper) http.RoundTripper {
	if rt == nil {
		return http.DefaultTransport
	}
	return rt
}

// connectCall posts a hand-encoded message to procedure with the Connect
// protocol (application/proto) and returns the HTTP status and body.
func connectCall(t *testing.T, base, procedure string, msg []byte) (int, []byte) {
	t.Helper()
	res, err := http.Post(base+procedure, "application/proto", bytes.NewReader(msg))
	if err != nil {
		t.Fatalf("%s: %v", procedure, err)
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	return res.StatusCode, body
}

// TestProto_TheFieldNumbersAreTheContract: a fencing_token sent as field 5
// (heartbeat), 6 (fail) and 7 (complete) of a hand-encoded message is
// honoured — a token from the future is refused, the current one
// accepted — and a field number the server does not know is accepted and
// ignored.
func TestProto_TheFieldNumbersAreTheContract(t *testing.T) {
	_, base := startServing(t, nil, "--db", filepath.Join(t.TempDir(), "q.db"), "--listen", "127.0.0.1:0")
	c := protoClient(base, "connect")
	ctx := context.Background()
	enq, err := c.EnqueueJobs(ctx, connect.NewRequest(&fenceqv1.EnqueueJobsRequest{Jobs: []*fenceqv1.EnqueueJobRequest{{Queue: "q"}, {Queue: "q"}}}))
	if err != nil {
		t.Fatal(err)
	}
	cl, err := c.ClaimJob(ctx, connect.NewRequest(&fenceqv1.ClaimJobRequest{Worker: "w", Queues: []string{"q"}, LeaseMs: 30000, Max: 2}))
	if err != nil || len(cl.Msg.GetJobs()) != 2 {
		t.Fatalf("ClaimJob(max 2) = %v, %v", cl, err)
	}
	a, b := enq.Msg.GetJobs()[0].GetId(), enq.Msg.GetJobs()[1].GetId()
	// msg: id = 1, worker = 2, then the token at field tokenField, then
	// an unknown field 999 (a string).
	msg := func(id uint64, tokenField protowire.Number, token uint64) []byte {
		var m []byte
		m = protowire.AppendTag(m, 1, protowire.VarintType)
		m = protowire.AppendVarint(m, id)
		m = protowire.AppendTag(m, 2, protowire.BytesType)
		m = protowire.AppendString(m, "w")
		m = protowire.AppendTag(m, tokenField, protowire.VarintType)
		m = protowire.AppendVarint(m, token)
		m = protowire.AppendTag(m, 999, protowire.BytesType)
		m = protowire.AppendString(m, "a field from a newer client")
		return m
	}
	job := func(id uint64) *fenceqv1.Job {
		res, err := c.GetJob(ctx, connect.NewRequest(&fenceqv1.GetJobRequest{Id: id}))
		if err != nil {
			t.Fatal(err)
		}
		return res.Msg.GetJob()
	}
	for _, step := range []struct {
		what      string
		procedure string
		id        uint64
		field     protowire.Number
		token     uint64
		code      string // Connect's error code; "" = accepted
		state     string
	}{
		{"heartbeat, token 2 as field 5", "HeartbeatJob", a, 5, 2, "not_found", "claimed"},
		{"heartbeat, token 1 as field 5", "HeartbeatJob", a, 5, 1, "", "claimed"},
		{"fail, token 2 as field 6", "FailJob", b, 6, 2, "not_found", "claimed"},
		{"complete, token 2 as field 7", "CompleteJob", a, 7, 2, "failed_precondition", "claimed"},
		{"complete, token 1 as field 7", "CompleteJob", a, 7, 1, "", "completed"},
		{"fail, token 1 as field 6", "FailJob", b, 6, 1, "", "scheduled"}, // retried after the backoff
	} {
		before := job(step.id)
		status, body := connectCall(t, base, "/fenceq.v1.JobService/"+step.procedure, msg(step.id, step.field, step.token))
		if step.code == "" && status != 200 || step.code != "" && !strings.Contains(string(body), `"code":"`+step.code+`"`) {
			t.Fatalf("%s = %d %s, want %q", step.what, status, body, step.code)
		}
		after := job(step.id)
		if after.GetState() != step.state {
			t.Fatalf("%s: job is %s, want %s", step.what, after.GetState(), step.state)
		}
		if step.code != "" && !proto.Equal(before, after) {
			t.Fatalf("%s was refused but changed the job:\nbefore %v\nafter  %v", step.what, before, after)
		}
	}
}

// TestProto_GRPCOverTLSHealthAndReflection: gRPC over TLS (HTTP/2 by
// ALPN) reaches the job service; gRPC health checking answers SERVING
// for the server and each service; reflection lists the services.
func TestProto_GRPCOverTLSHealthAndReflection(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile, pool := selfSignedCert(t, dir)
	p := start(t, nil, "serve", "--db", filepath.Join(dir, "q.db"), "--listen", "127.0.0.1:0", "--tls-cert", certFile, "--tls-key", keyFile)
	re := regexp.MustCompile(`listen=https://(\S+)`)
	var addr string
	for deadline := time.Now().Add(10 * time.Second); addr == "" && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if m := re.FindStringSubmatch(p.stderr.String()); m != nil {
			addr = m[1]
		}
	}
	if addr == "" {
		t.Fatalf("no https listen line; stderr:\n%s", p.stderr)
	}
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}
	tr.Protocols = new(http.Protocols)
	tr.Protocols.SetHTTP2(true)
	hc := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	base := "https://" + addr
	ctx := context.Background()
	c := fenceqv1connect.NewJobServiceClient(hc, base, connect.WithGRPC())
	res, err := c.EnqueueJob(ctx, connect.NewRequest(&fenceqv1.EnqueueJobRequest{Queue: "tls"}))
	if err != nil || !res.Msg.GetCreated() {
		t.Fatalf("EnqueueJob over gRPC and TLS = %v, %v", res, err)
	}
	for _, svc := range []string{"", fenceqv1connect.JobServiceName, fenceqv1connect.LeaseServiceName} {
		status := grpcHealth(t, hc, base, svc)
		if status != 1 {
			t.Fatalf("health of %q = %d, want 1 (SERVING)", svc, status)
		}
	}
	if status := grpcHealth(t, hc, base, "no.such.Service"); status != -int(connect.CodeNotFound) {
		t.Fatalf("health of an unknown service = %d, want NOT_FOUND", status)
	}
	names := reflectionServices(t, hc, base)
	for _, want := range []string{fenceqv1connect.JobServiceName, fenceqv1connect.LeaseServiceName, "grpc.health.v1.Health"} {
		if !strings.Contains(names, want) {
			t.Fatalf("reflection lists %q, want %s in it", names, want)
		}
	}
}

// grpcHealth asks grpc.health.v1.Health/Check about service with a
// hand-encoded request: the status (1 = SERVING), or minus the gRPC code
// of an error.
func grpcHealth(t *testing.T, hc *http.Client, base, service string) int {
	t.Helper()
	var m []byte
	if service != "" {
		m = protowire.AppendTag(m, 1, protowire.BytesType)
		m = protowire.AppendString(m, service)
	}
	c := connect.NewClient[rawMessage, rawMessage](hc, base+"/grpc.health.v1.Health/Check", connect.WithGRPC(), connect.WithCodec(rawCodec{}))
	res, err := c.CallUnary(context.Background(), connect.NewRequest(&rawMessage{m}))
	if err != nil {
		return -int(connect.CodeOf(err))
	}
	b := res.Msg.b
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		b = b[n:]
		if num == 1 && typ == protowire.VarintType {
			v, _ := protowire.ConsumeVarint(b)
			return int(v)
		}
		b = b[protowire.ConsumeFieldValue(num, typ, b):]
	}
	return 0
}

// reflectionServices lists the services through v1 server reflection
// (a hand-encoded list_services request on the bidirectional stream).
func reflectionServices(t *testing.T, hc *http.Client, base string) string {
	t.Helper()
	c := connect.NewClient[rawMessage, rawMessage](hc, base+"/grpc.reflection.v1.ServerReflection/ServerReflectionInfo",
		connect.WithGRPC(), connect.WithCodec(rawCodec{}))
	stream := c.CallBidiStream(context.Background())
	var req []byte
	req = protowire.AppendTag(req, 7, protowire.BytesType) // list_services
	req = protowire.AppendString(req, "*")
	if err := stream.Send(&rawMessage{req}); err != nil {
		t.Fatalf("reflection send: %v", err)
	}
	_ = stream.CloseRequest()
	res, err := stream.Receive()
	if err != nil {
		t.Fatalf("reflection receive: %v", err)
	}
	_ = stream.CloseResponse()
	return fmt.Sprintf("%q", res.b)
}

// rawMessage and rawCodec send and receive messages as the bytes they are.
type rawMessage struct{ b []byte }

type rawCodec struct{}

func (rawCodec) Name() string { return "proto" }

func (rawCodec) Marshal(v any) ([]byte, error) { return v.(*rawMessage).b, nil }

func (rawCodec) Unmarshal(b []byte, v any) error {
	v.(*rawMessage).b = append([]byte(nil), b...)
	return nil
}

// TestProto_AWaitingClaimIsAnsweredAtShutdown: a gRPC long-poll waiting
// for a job is answered (no job) at once when the server is told to stop,
// as the JSON API's are (the store's StopWaiting), and the server exits.
func TestProto_AWaitingClaimIsAnsweredAtShutdown(t *testing.T) {
	p, base := startServing(t, nil, "--db", filepath.Join(t.TempDir(), "q.db"), "--listen", "127.0.0.1:0")
	c := protoClient(base, "grpc")
	type answer struct {
		res *connect.Response[fenceqv1.ClaimJobResponse]
		err error
		at  time.Time
	}
	got := make(chan answer, 1)
	go func() {
		res, err := c.ClaimJob(context.Background(), connect.NewRequest(&fenceqv1.ClaimJobRequest{Worker: "w", Queues: []string{"empty"}, WaitMs: 20000}))
		got <- answer{res, err, time.Now()}
	}()
	time.Sleep(500 * time.Millisecond) // the claim is waiting
	stop := time.Now()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case a := <-got:
		if a.err != nil || a.res.Msg.GetJob() != nil {
			t.Fatalf("the waiting claim at shutdown = %v, %v; want an empty answer", a.res, a.err)
		}
		if d := a.at.Sub(stop); d > 5*time.Second {
			t.Fatalf("the waiting claim was answered %v after SIGTERM, want at once", d)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the waiting gRPC claim was not answered within 15 s of SIGTERM")
	}
	if code := p.exit(t, 15*time.Second); code != 0 {
		t.Fatalf("exit %d after SIGTERM; stderr:\n%s", code, p.stderr)
	}
}
