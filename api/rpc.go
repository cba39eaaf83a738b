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
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"connectrpc.com/connect"
	"connectrpc.com/grpchealth"
	"connectrpc.com/grpcreflect"
	"github.com/fenceq/fenceq/api/fenceqv1/fenceqv1connect"
	"github.com/fenceq/fenceq/db"
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
	s       *Server
	mux     *http.ServeMux
	errors  *connect.ErrorWriter
	workers rpcWorkers // the calls that come over HTTP/2 (rpcworkers.go)
}

func (s *Server) initRPC() {
	f := &rpcFront{s: s, mux: http.NewServeMux(), workers: rpcWorkers{work: make(chan *rpcTask), idle: rpcWorkerIdle}}
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
	w         rpcWriter // in the same allocation
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
	call.w.ResponseWriter = w
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
		fb := new(frameBody)
		fb.Reset(body)
		r.Body = fb
	}
	if known && r.ProtoMajor == 2 {
		f.workers.run(func() { f.mux.ServeHTTP(&call.w, r) })
	} else {
		f.mux.ServeHTTP(&call.w, r)
	}
	if call.status == http.StatusOK {
		// Neither a refusal above nor a handler's error (rpcErrors): an
		// error in the reply was connect's own, written before any handler
		// ran — a message that does not decode, one that inflates past
		// the limit, an unknown compression. It is measured and counted
		// as the JSON API's bad requests are, by its code.
		if e := call.w.outcome(); e != nil {
			call.status = s.noteError(ctx, e, http.MethodPost, route, r.Method, r.URL.Path, call.principal).Status
		}
	}
}

// rpcWriter is the ResponseWriter the protobuf front end hands connect:
// it keeps the HTTP status and the first bytes of an error reply, so that
// the outcome of a call connect refused by itself can be read (outcome).
type rpcWriter struct {
	http.ResponseWriter
	status  int
	errBody []byte // the start of a reply whose status is not 200
}

func (w *rpcWriter) WriteHeader(status int) {
	if w.status == 0 {
		w.status = status
	}
	w.ResponseWriter.WriteHeader(status)
}

func (w *rpcWriter) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	if w.status != http.StatusOK && len(w.errBody) < rpcErrBodyMax {
		w.errBody = append(w.errBody, p[:min(len(p), rpcErrBodyMax-len(w.errBody))]...)
	}
	return w.ResponseWriter.Write(p)
}

// Flush is what connect flushes replies and streams with.
func (w *rpcWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap serves http.ResponseController.
func (w *rpcWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// rpcErrBodyMax bounds what rpcWriter keeps of an error reply: a Connect
// error's code and message.
const rpcErrBodyMax = 1 << 10

// outcome is the error the reply carries, nil for none: gRPC's status
// (a trailer, or a header in a trailers-only gRPC-Web reply), or a
// Connect reply's status and error body.
func (w *rpcWriter) outcome() error {
	h := w.Header()
	grpcStatus, msg := h.Get("Grpc-Status"), h.Get("Grpc-Message")
	if v := h[http.TrailerPrefix+"Grpc-Status"]; len(v) > 0 {
		grpcStatus = v[0]
		if m := h[http.TrailerPrefix+"Grpc-Message"]; len(m) > 0 {
			msg = m[0]
		}
	}
	if grpcStatus != "" {
		n, err := strconv.Atoi(grpcStatus)
		if err != nil || n == 0 {
			return nil
		}
		if m, err := url.PathUnescape(msg); err == nil {
			msg = m // gRPC percent-encodes it
		}
		return rpcOutcomeError(connect.Code(n), msg)
	}
	if w.status == 0 || w.status == http.StatusOK {
		return nil
	}
	var body struct {
		Code    connect.Code `json:"code"`
		Message string       `json:"message"`
	}
	if json.Unmarshal(w.errBody, &body) != nil || body.Code == 0 {
		// A reply of the protocol layer (a wrong method or content
		// type), or the router's 404: the JSON API's answers to those.
		switch w.status {
		case http.StatusNotFound:
			return &Error{http.StatusNotFound, "not_found", "no such endpoint"}
		case http.StatusMethodNotAllowed:
			return &Error{http.StatusMethodNotAllowed, "invalid_argument", "method not allowed on this endpoint"}
		}
		return rpcOutcomeError(connect.CodeInvalidArgument, fmt.Sprintf("refused by the protocol layer with HTTP status %d", w.status))
	}
	return rpcOutcomeError(body.Code, body.Message)
}

// rpcOutcomeError is the error of a gRPC code connect answered with by
// itself: a code of the one table (errorCodes) as a refusal of that code,
// which toAPIError gives the table's first status; a server fault
// (internal, unknown, data_loss) as an error noteError logs as one; any
// other code as a bad request.
func rpcOutcomeError(code connect.Code, msg string) error {
	apiCode := code.String()
	if code == connect.CodeCanceled {
		apiCode = "cancelled"
	}
	if _, ok := errorCodes[apiCode]; ok && apiCode != "internal" {
		return &db.Error{Code: db.Code(apiCode), Message: msg}
	}
	switch code {
	case connect.CodeInternal, connect.CodeUnknown, connect.CodeDataLoss:
		return fmt.Errorf("rpc: %s: %s", code, msg)
	case connect.CodeDeadlineExceeded:
		return context.DeadlineExceeded
	}
	return invalidArgument("%s", msg)
}

// enveloped reports a gRPC or gRPC-Web request, whose messages are
// length-prefixed.
func enveloped(r *http.Request) bool {
	ct := r.Header.Get("Content-Type")
	return strings.HasPrefix(ct, "application/grpc")
}

// readFrame reads a gRPC request's (first) message frame and whatever
// follows it, within the body limit: one buffer of the size the frame
// declares (checked against the limit first), no copy.
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
	frame := make([]byte, 5+size)
	copy(frame, prefix[:])
	readErr := func(err error) *Error {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return s.checkBodySize(s.cfg.MaxBodyBytes + 1)
		}
		return invalidArgument("reading the request: %v", err)
	}
	if n, err := io.ReadFull(body, frame[5:]); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return nil, invalidArgument("the gRPC message is cut short: its frame promises %d bytes, the request has %d", size, n)
		}
		return nil, readErr(err)
	}
	// Normally nothing follows; what does (a second message) is kept for
	// connect to refuse.
	var probe [1]byte
	for {
		n, err := body.Read(probe[:])
		if n > 0 {
			rest, err := io.ReadAll(io.LimitReader(body, s.cfg.MaxBodyBytes))
			if err != nil {
				return nil, readErr(err)
			}
			return append(append(frame, probe[0]), rest...), nil
		}
		if errors.Is(err, io.EOF) {
			return frame, nil
		}
		if err != nil {
			return nil, readErr(err)
		}
	}
}

// frameBody is a request body read ahead (readFrame).
type frameBody struct{ bytes.Reader }

func (*frameBody) Close() error { return nil }

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
