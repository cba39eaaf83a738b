package api

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"
)

// RequestIDHeader carries a request's id, in the request (the caller's own,
// when it is a sane token) and in every reply.
const RequestIDHeader = echo.HeaderXRequestID

// maxRequestIDLen bounds a caller's request id; a longer one is replaced.
const maxRequestIDLen = 128

type requestIDKey struct{}

// RequestID returns the id of the request ctx belongs to, "" outside one.
func RequestID(ctx context.Context) string {
	id, _ := ctx.Value(requestIDKey{}).(string)
	return id
}

// saneRequestID accepts what tracing proxies and load balancers send (UUIDs,
// hex, base64, "Root=1-…;Parent=…" style ids stop at the first ';'):
// 1 to 128 printable ASCII letters, digits and "-_.:+/=". Anything else —
// spaces, quotes, control characters that would forge a log line — is
// replaced by a generated id rather than echoed.
func saneRequestID(id string) bool {
	if id == "" || len(id) > maxRequestIDLen {
		return false
	}
	for i := 0; i < len(id); i++ {
		switch c := id[i]; {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case c == '-', c == '_', c == '.', c == ':', c == '+', c == '/', c == '=':
		default:
			return false
		}
	}
	return true
}

// requestIDs gives every request an id (echo's RequestID middleware, which
// takes X-Request-Id from the request or generates one and sets it on the
// reply), after dropping a caller's id that is not sane. The id goes into
// the request's context, where the server's log handler finds it, so every
// line logged about the request carries it. With debug logging on, each
// request is also logged when it has been answered.
func (s *Server) requestIDs(next echo.HandlerFunc) echo.HandlerFunc {
	withID := middleware.RequestIDWithConfig(middleware.RequestIDConfig{
		Generator: newRequestID,
		RequestIDHandler: func(c echo.Context, id string) {
			req := c.Request()
			c.SetRequest(req.WithContext(context.WithValue(req.Context(), requestIDKey{}, id)))
		},
	})(next)
	return func(c echo.Context) error {
		req := c.Request()
		if id := req.Header.Get(RequestIDHeader); id != "" && !saneRequestID(id) {
			req.Header.Del(RequestIDHeader)
		}
		start := time.Now()
		err := withID(c)
		if ctx := c.Request().Context(); s.log.Enabled(ctx, slog.LevelDebug) {
			s.log.DebugContext(ctx, "request", "method", req.Method, "path", req.URL.Path,
				"status", c.Response().Status, "bytes", c.Response().Size, "duration", time.Since(start))
		}
		return err
	}
}

// newRequestID is the id given to a request without a sane one of its own
// (both front ends): 32 hex digits.
func newRequestID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// requestIDOf is the id of a request with header h: the caller's own when
// it is sane (saneRequestID), else a new one. The protobuf front end's
// rule; the JSON routes' middleware above applies the same.
func requestIDOf(h http.Header) string {
	if id := h.Get(RequestIDHeader); saneRequestID(id) {
		return id
	}
	return newRequestID()
}

// requestIDHandler adds the request id of the context a record is logged
// with (Logger.InfoContext and the like) to the record.
type requestIDHandler struct{ slog.Handler }

func (h requestIDHandler) Handle(ctx context.Context, r slog.Record) error {
	if id := RequestID(ctx); id != "" {
		r.AddAttrs(slog.String("request_id", id))
	}
	return h.Handler.Handle(ctx, r)
}

func (h requestIDHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return requestIDHandler{h.Handler.WithAttrs(attrs)}
}

func (h requestIDHandler) WithGroup(name string) slog.Handler {
	return requestIDHandler{h.Handler.WithGroup(name)}
}
