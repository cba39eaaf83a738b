package api

// The protobuf front end (proto/fenceq/v1, docs/api.md "Protobuf"): the
// job, lease and schedule services served by connect-go on the JSON API's port —
// Connect and gRPC-Web over HTTP/1.1 and HTTP/2, gRPC over HTTP/2 (h2c or
// TLS, Protocols) — with gRPC health checking and server reflection.
// Requests whose path starts with a service's prefix never reach echo
// (ServeHTTP). They go through the same rules as the JSON routes, as the
// same functions: authorize (auth.go; each RPC needs the role of its JSON
// route in routeRoles), checkBodySize (--max-body), requestContext (the
// deadline), requestIDOf, observe (metrics.go), noteError and the one code
// table (errors.go, rpcCode), and the handlers call the same store with
// the same requests (rpc_handlers.go).

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net/http"
	"strings"
	"time"

	"connectrpc.com/connect"
	"connectrpc.com/grpchealth"
	"connectrpc.com/grpcreflect"
	"github.com/fenceq/fenceq/api/fenceqv1/fenceqv1connect"
)

// Protocols are the HTTP versions the server must accept for the protobuf
// API: HTTP/1.1, HTTP/2 over TLS, and HTTP/2 without TLS (h2c, which gRPC
// clients use on plain TCP). Set it as the http.Server's Protocols.
func Protocols() *http.Protocols {
	p := new(http.Protocols)
	p.SetHTTP1(true)
	p.SetHTTP2(true)
	p.SetUnencryptedHTTP2(true)
	return p
}

// rpcMethod is what the front end knows of an RPC: the JSON route whose
// rules it follows (role, metrics and refusal labels).
type rpcMethod struct {
	route string // "POST /v1/claim": the key of routeRoles
	role  Role   // when not "": overrides routeRoles (CheckLease: any principal)
}

// rpcMethods are the RPCs and their JSON routes. An RPC missing here is
// answered unimplemented (TestRPC_EveryProcedureHasARoute holds the table
// to the services).
var rpcMethods = map[string]rpcMethod{
	fenceqv1connect.JobServiceEnqueueJobProcedure:     {route: "POST /v1/jobs"},
	fenceqv1connect.JobServiceEnqueueJobsProcedure:    {route: "POST /v1/jobs"},
	fenceqv1connect.JobServiceClaimJobProcedure:       {route: "POST /v1/claim"},
	fenceqv1connect.JobServiceHeartbeatJobProcedure:   {route: "POST /v1/jobs/:id/heartbeat"},
	fenceqv1connect.JobServiceCompleteJobProcedure:    {route: "POST /v1/jobs/:id/complete"},
	fenceqv1connect.JobServiceFailJobProcedure:        {route: "POST /v1/jobs/:id/fail"},
	fenceqv1connect.JobServiceHeartbeatJobsProcedure:  {route: "POST /v1/jobs/heartbeat"},
	fenceqv1connect.JobServiceCompleteJobsProcedure:   {route: "POST /v1/jobs/complete"},
	fenceqv1connect.JobServiceFailJobsProcedure:       {route: "POST /v1/jobs/fail"},
	fenceqv1connect.JobServiceGetJobProcedure:         {route: "GET /v1/jobs/:id"},
	fenceqv1connect.JobServiceCancelJobProcedure:      {route: "POST /v1/jobs/:id/cancel"},
	fenceqv1connect.JobServiceRetryJobProcedure:       {route: "POST /v1/jobs/:id/retry"},
	fenceqv1connect.JobServiceCheckJobProcedure:       {route: "POST /v1/jobs/:id/check"},
	fenceqv1connect.LeaseServiceAcquireLeaseProcedure: {route: "POST /v1/leases/*"},
	fenceqv1connect.LeaseServiceRenewLeaseProcedure:   {route: "POST /v1/leases/*"},
	fenceqv1connect.LeaseServiceReleaseLeaseProcedure: {route: "POST /v1/leases/*"},
	fenceqv1connect.LeaseServiceGetLeaseProcedure:     {route: "GET /v1/leases/*"},
	fenceqv1connect.LeaseServiceCheckLeaseProcedure:   {route: "POST /v1/leases/*", role: anyRole},

	fenceqv1connect.ScheduleServicePutScheduleProcedure:     {route: "PUT /v1/schedules/:name"},
	fenceqv1connect.ScheduleServiceGetScheduleProcedure:     {route: "GET /v1/schedules/:name"},
	fenceqv1connect.ScheduleServiceListSchedulesProcedure:   {route: "GET /v1/schedules"},
	fenceqv1connect.ScheduleServiceDeleteScheduleProcedure:  {route: "DELETE /v1/schedules/:name"},
	fenceqv1connect.ScheduleServicePauseScheduleProcedure:   {route: "POST /v1/schedules/:name/pause"},
	fenceqv1connect.ScheduleServiceResumeScheduleProcedure:  {route: "POST /v1/schedules/:name/resume"},
	fenceqv1connect.ScheduleServiceTriggerScheduleProcedure: {route: "POST /v1/schedules/:name/trigger"},
}

// rpcNeeds is the role an RPC needs: its JSON route's.
func rpcNeeds(m rpcMethod) Role {
	if m.role != "" {
		return m.role
	}
	if r, ok := routeRoles[m.route]; ok {
		return r
	}
	return RoleAdmin
}

// rpcExtras are the procedures of health checking and reflection: no
// authentication (as /healthz and /openapi.json), measured by their names.
var rpcExtras = map[string]bool{
	"/" + grpchealth.HealthV1ServiceName + "/Check":                       true,
	"/" + grpchealth.HealthV1ServiceName + "/Watch":                       true,
	"/" + grpcreflect.ReflectV1ServiceName + "/ServerReflectionInfo":      true,
	"/" + grpcreflect.ReflectV1AlphaServiceName + "/ServerReflectionInfo": true,
}

// rpcPrefixes are the path prefixes ServeHTTP hands to the protobuf front
// end: fenceq's services, health checking and reflection.
var rpcPrefixes = []string{"/fenceq.v1.", "/grpc.health.v1.", "/grpc.reflection."}

func isRPC(path string) bool {
	for _, p := range rpcPrefixes {
		if strings.HasPrefix(path, p) {
			return true
		}
	}
	return false
}

// rpcFront serves the protobuf API.
type rpcFront struct {
	s      *Server
	mux    *http.ServeMux
	errors *connect.ErrorWriter
}

func (s *Server) initRPC() {
	f := &rpcFront{s: s, mux: http.NewServeMux()}
	opts := []connect.HandlerOption{
		connect.WithReadMaxBytes(int(s.cfg.MaxBodyBytes)),
		// Replies smaller than this go out uncompressed even to a client
		// that accepts gzip: a gzip writer's reset costs more than a
		// job's bytes save.
		connect.WithCompressMinBytes(rpcCompressMinBytes),
		connect.WithInterceptors(rpcErrors{s}),
	}
	f.errors = connect.NewErrorWriter(opts...)
	f.mux.Handle(fenceqv1connect.NewJobServiceHandler(jobRPC{s}, opts...))
	f.mux.Handle(fenceqv1connect.NewLeaseServiceHandler(leaseRPC{s}, opts...))
	f.mux.Handle(fenceqv1connect.NewScheduleServiceHandler(scheduleRPC{s}, opts...))
	names := []string{fenceqv1connect.JobServiceName, fenceqv1connect.LeaseServiceName, fenceqv1connect.ScheduleServiceName}
	f.mux.Handle(grpchealth.NewHandler(rpcHealth{s, names}))
	reflector := grpcreflect.NewStaticReflector(append(names, grpchealth.HealthV1ServiceName)...)
	f.mux.Handle(grpcreflect.NewHandlerV1(reflector))
	f.mux.Handle(grpcreflect.NewHandlerV1Alpha(reflector))
	s.rpc = f
}

// rpcCompressMinBytes is the smallest reply compressed (when the client
// accepts it).
const rpcCompressMinBytes = 16 << 10

// rpcCallKey holds the *rpcCall of a request in its context.
type rpcCallKey struct{}

// rpcCall is one RPC as the front end sees it: the principal the handlers
// act for and the status its outcome is measured with.
type rpcCall struct {
	principal string
	status    int
}

func callOf(ctx context.Context) *rpcCall {
	c, _ := ctx.Value(rpcCallKey{}).(*rpcCall)
	if c == nil {
		return &rpcCall{}
	}
	return c
}

// ServeHTTP applies the rules of every request before connect decodes
// anything: request id, deadline, the RPC's existence, authentication and
// role, and the body limit. A refusal is written in the request's protocol
// (gRPC status, Connect error JSON) with the JSON API's message.
func (f *rpcFront) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	s := f.s
	id := requestIDOf(r.Header)
	r.Header.Set(RequestIDHeader, id)
	w.Header().Set(RequestIDHeader, id)
	call := &rpcCall{status: http.StatusOK}
	ctx := context.WithValue(r.Context(), requestIDKey{}, id)
	ctx = context.WithValue(ctx, rpcCallKey{}, call)
	ctx, cancel := s.requestContext(ctx)
	defer cancel()
	r = r.WithContext(ctx)
	route := r.URL.Path
	m, known := rpcMethods[route]
	service := strings.HasPrefix(route, "/fenceq.v1.")
	if !known && !rpcExtras[route] {
		// Labels are the server's names, never the caller's (routeLabels).
		route = "unmatched"
	}
	defer func() { s.observe(http.MethodPost, route, call.status, start) }()
	refuse := func(e *Error) {
		call.status = e.Status
		s.noteError(ctx, e, http.MethodPost, route, r.Method, r.URL.Path, call.principal)
		f.writeError(w, r, e)
	}
	if service && !known {
		// The JSON API's 404 "no such endpoint"; gRPC's unimplemented.
		refuse(&Error{http.StatusNotFound, "not_found", "no such method: " + r.URL.Path})
		return
	}
	if known {
		if s.cfg.Principals == nil {
			call.principal = LocalPrincipal
		} else {
			p, apiErr := s.authorize(r.Header.Get("Authorization"), rpcNeeds(m))
			call.principal = p.Name
			if apiErr != nil {
				refuse(apiErr)
				return
			}
		}
	}
	if apiErr := s.checkBodySize(r.ContentLength); apiErr != nil {
		refuse(apiErr)
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes+5)
	if known && enveloped(r) {
		// gRPC and gRPC-Web frame each message with its length. fenceq's
		// RPCs are unary: the one message is read here (not so the
		// reflection stream, whose client sends as it reads), so that one
		// over the limit is refused with the JSON API's message before it
		// is read, and one cut short is invalid_argument (connect would
		// call either something else).
		body, apiErr := s.readFrame(r.Body)
		if apiErr != nil {
			refuse(apiErr)
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
	}
	f.mux.ServeHTTP(w, r)
}

// enveloped reports a gRPC or gRPC-Web request, whose messages are
// length-prefixed.
func enveloped(r *http.Request) bool {
	ct := r.Header.Get("Content-Type")
	return strings.HasPrefix(ct, "application/grpc")
}

// readFrame reads a gRPC request's (first) message frame and whatever
// follows it, within the body limit.
func (s *Server) readFrame(body io.Reader) ([]byte, *Error) {
	var prefix [5]byte
	if n, err := io.ReadFull(body, prefix[:]); err != nil {
		if n == 0 && errors.Is(err, io.EOF) {
			return nil, nil // no message: connect answers it
		}
		return nil, invalidArgument("the gRPC message frame is cut short: %d of its 5 header bytes", n)
	}
	size := int64(binary.BigEndian.Uint32(prefix[1:]))
	if apiErr := s.checkBodySize(size); apiErr != nil {
		return nil, apiErr
	}
	rest, err := io.ReadAll(io.LimitReader(body, s.cfg.MaxBodyBytes+1))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return nil, s.checkBodySize(s.cfg.MaxBodyBytes + 1)
		}
		return nil, invalidArgument("reading the request: %v", err)
	}
	if int64(len(rest)) < size {
		return nil, invalidArgument("the gRPC message is cut short: its frame promises %d bytes, the request has %d", size, len(rest))
	}
	return append(prefix[:], rest...), nil
}

// writeError writes e in the request's protocol, or as the JSON API's
// error when the request is none of connect's.
func (f *rpcFront) writeError(w http.ResponseWriter, r *http.Request, e *Error) {
	cerr := connect.NewError(rpcCodeOf(e), errors.New(e.Message))
	if f.errors.IsSupported(r) {
		_ = f.errors.Write(w, r, cerr)
		return
	}
	var body errorBody
	body.Error.Code, body.Error.Message = e.Code, e.Message
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(e.Status)
	_ = encodeReply(w, body, "")
}

// rpcCodeOf is e's gRPC code (rpcCode). The HTTP answers that say the
// method is wrong — no such endpoint (404 from the router, not a missing
// job) and 405 — are gRPC's unimplemented.
func rpcCodeOf(e *Error) connect.Code {
	if e.Status == http.StatusMethodNotAllowed || strings.HasPrefix(e.Message, "no such method") {
		return connect.CodeUnimplemented
	}
	return rpcCode(e.Code)
}

// rpcErrors is the interceptor that turns every error a handler returns
// into the JSON API's code and message (noteError, rpcCode), logged and
// counted as the JSON routes' refusals are.
type rpcErrors struct{ s *Server }

func (i rpcErrors) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		res, err := next(ctx, req)
		if err == nil {
			return res, nil
		}
		call := callOf(ctx)
		var cerr *connect.Error
		if errors.As(err, &cerr) && !isAPIError(err) {
			// connect's own (a message that does not decode): as the JSON
			// API's bad body, invalid_argument.
			err = invalidArgument("%s", cerr.Message())
		}
		route := req.Spec().Procedure
		apiErr := i.s.noteError(ctx, err, http.MethodPost, route, http.MethodPost, route, call.principal)
		call.status = apiErr.Status
		return nil, connect.NewError(rpcCode(apiErr.Code), errors.New(apiErr.Message))
	}
}

func isAPIError(err error) bool {
	var e *Error
	return errors.As(err, &e)
}

func (i rpcErrors) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (i rpcErrors) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}

// rpcHealth answers gRPC health checks as /readyz: serving while the store
// answers a ping. The empty service name is the server as a whole.
type rpcHealth struct {
	s     *Server
	names []string
}

func (h rpcHealth) Check(ctx context.Context, req *grpchealth.CheckRequest) (*grpchealth.CheckResponse, error) {
	known := req.Service == ""
	for _, n := range h.names {
		known = known || req.Service == n
	}
	if !known {
		return nil, connect.NewError(connect.CodeNotFound, errors.New("unknown service "+req.Service))
	}
	if err := h.s.store.Ping(ctx); err != nil {
		return &grpchealth.CheckResponse{Status: grpchealth.StatusNotServing}, nil
	}
	return &grpchealth.CheckResponse{Status: grpchealth.StatusServing}, nil
}
