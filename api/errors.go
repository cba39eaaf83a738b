package api

import (
	"connectrpc.com/connect"
	"context"
	"errors"
	"fmt"
	"net/http"
	"syscall"

	"github.com/fenceq/fenceq/db"
	"github.com/labstack/echo/v4"
)

// Error is an API error: an HTTP status, a stable code and a message that
// says what is wrong. It is written as {"error":{"code":…,"message":…}}.
type Error struct {
	Status  int
	Code    string
	Message string
}

func (e *Error) Error() string { return e.Code + ": " + e.Message }

func invalidArgument(format string, args ...any) *Error {
	return &Error{http.StatusBadRequest, "invalid_argument", fmt.Sprintf(format, args...)}
}

// errorCodes is the one table of the API's error codes and the HTTP
// statuses each is sent with. Every *Error the server writes has a pair
// from it, the OpenAPI document's ErrorCode (enum and x-fenceq-statuses)
// lists exactly it, and api/errorcodes_test.go holds both to that.
var errorCodes = map[string][]int{
	"invalid_argument":    {http.StatusBadRequest, http.StatusMethodNotAllowed},
	"unauthenticated":     {http.StatusUnauthorized},
	"permission_denied":   {http.StatusForbidden},
	"not_found":           {http.StatusNotFound},
	"failed_precondition": {http.StatusConflict},
	"resource_exhausted":  {http.StatusRequestEntityTooLarge, http.StatusInsufficientStorage},
	"cancelled":           {statusClientClosedRequest},
	"internal":            {http.StatusInternalServerError},
	"unavailable":         {http.StatusServiceUnavailable},
}

// statusClientClosedRequest is nginx's status for a request whose client
// went away before the reply; net/http has no name for it.
const statusClientClosedRequest = 499

// fullMessage names the flag an operator changes when the file is full.
const fullMessage = "the database file has reached its size limit (--max-db-size): the request was not committed; " +
	"reads go on; raise --max-db-size and restart the server, or free space in the file (finished jobs are deleted after --retention)"

// toAPIError classifies err. Unknown errors are internal: logged in full,
// shown to the client as "internal error". A full disk is logged the same
// way but named to the client (503 unavailable).
func toAPIError(err error) (*Error, bool) {
	var apiErr *Error
	if errors.As(err, &apiErr) {
		return apiErr, true
	}
	if errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) {
		// A server fault (logged as one), but the client is told what it
		// is: the commit failed, and the same request may succeed once
		// there is space again.
		return &Error{http.StatusServiceUnavailable, "unavailable",
			"the disk holding the queue is full (no space left on device): the request was not committed; retry when space has been freed"}, false
	}
	if errors.Is(err, db.ErrFull) {
		// 507, not 413: the request is fine, the server's file is full; a
		// client should not shrink the request, and generic clients do not
		// retry 507 by themselves as they do 503 (docs/edge.md).
		return &Error{http.StatusInsufficientStorage, "resource_exhausted", fullMessage}, true
	}
	if errors.Is(err, context.DeadlineExceeded) {
		// The request's own deadline (Config.WriteTimeout) passed before
		// its mutation was taken into a commit: nothing was written.
		return &Error{http.StatusServiceUnavailable, "unavailable",
			"the server could not take the request before its deadline: nothing was committed; retry"}, true
	}
	if errors.Is(err, context.Canceled) {
		// The client went away (a long-poll it stopped waiting for); the
		// reply is for nobody, and it is not a server fault.
		return &Error{statusClientClosedRequest, "cancelled", "the request was cancelled by the client"}, true
	}
	var he *echo.HTTPError
	if errors.As(err, &he) {
		msg := fmt.Sprint(he.Message)
		switch he.Code {
		case http.StatusNotFound:
			return &Error{http.StatusNotFound, "not_found", "no such endpoint"}, true
		case http.StatusMethodNotAllowed:
			return &Error{http.StatusMethodNotAllowed, "invalid_argument", "method not allowed on this endpoint"}, true
		case http.StatusRequestEntityTooLarge:
			return &Error{http.StatusRequestEntityTooLarge, "resource_exhausted", "request body is too large"}, true
		case http.StatusUnauthorized:
			return &Error{http.StatusUnauthorized, "unauthenticated", msg}, true
		case http.StatusForbidden:
			return &Error{http.StatusForbidden, "permission_denied", msg}, true
		}
		if he.Code < 500 {
			// No other client error of echo's is reached by a route of
			// ours; should one be, it is answered as a plain 400 so that
			// the status stays one the code table (errorCodes) lists.
			return &Error{http.StatusBadRequest, "invalid_argument", msg}, true
		}
	}
	var refusal *db.Error
	if errors.As(err, &refusal) {
		// The store's code is the API code (db.Code), sent with its first
		// status in errorCodes; its message is the API message.
		if statuses := errorCodes[string(refusal.Code)]; len(statuses) > 0 {
			return &Error{statuses[0], string(refusal.Code), refusal.Message}, true
		}
	}
	return &Error{http.StatusInternalServerError, "internal", "internal error"}, false
}

type errorBody struct {
	Error struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

func (s *Server) handleError(err error, c echo.Context) {
	if c.Response().Committed {
		return
	}
	req := c.Request()
	method, route := routeLabels(c)
	apiErr := s.noteError(req.Context(), err, method, route, req.Method, req.URL.Path, principalOf(c))
	var body errorBody
	body.Error.Code, body.Error.Message = apiErr.Code, apiErr.Message
	if err := c.JSON(apiErr.Status, body); err != nil {
		s.log.WarnContext(req.Context(), "write error response", "err", err)
	}
}

// noteError classifies err (toAPIError) and logs and counts it as both
// front ends do: an internal error logged in full, a cancelled request at
// debug level, a refusal counted under "method route" and logged. The
// caller writes the returned error in its own protocol.
func (s *Server) noteError(ctx context.Context, err error, method, route, rawMethod, path, principal string) *Error {
	apiErr, known := toAPIError(err)
	switch {
	case !known:
		s.log.ErrorContext(ctx, "internal error", "method", rawMethod, "path", path, "err", err)
	case apiErr.Code == "cancelled":
		// The client stopped waiting (a worker shutting down ends its own
		// long-poll): not a refusal, so not counted as one; /metrics still
		// measures the request (status 499).
		s.log.DebugContext(ctx, "cancelled by the client", "method", rawMethod, "path", path, "principal", principal)
	default:
		// Refusals change nothing and are not audited; they are counted and logged.
		s.refusals.add(method+" "+route, apiErr.Code)
		s.log.InfoContext(ctx, "refused", "method", rawMethod, "path", path, "principal", principal,
			"status", apiErr.Status, "code", apiErr.Code, "message", apiErr.Message)
	}
	return apiErr
}

// rpcCode is the gRPC code an API code is answered with over protobuf:
// the API's codes are gRPC's names (errorCodes), spelt as connect spells
// them except "cancelled". A code not in the table is internal.
func rpcCode(apiCode string) connect.Code {
	if apiCode == "cancelled" {
		return connect.CodeCanceled
	}
	var c connect.Code
	if _, ok := errorCodes[apiCode]; !ok || c.UnmarshalText([]byte(apiCode)) != nil {
		return connect.CodeInternal
	}
	return c
}
