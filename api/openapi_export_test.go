package api

import (
	"net/http"
	"net/http/httptest"

	"github.com/fenceq/fenceq/db"
)

// Test hooks for openapi_test.go (package api_test), which compares the
// OpenAPI document with the routes echo really has.

// RoutesForTest lists the server's registered routes as "METHOD path" in
// echo's form ("/v1/jobs/:id", "/v1/leases/*").
func RoutesForTest(s *Server) []string {
	var out []string
	for _, r := range s.echo.Routes() {
		out = append(out, r.Method+" "+r.Path)
	}
	return out
}

// RouteForTest returns the route template echo's router picks for method
// and escapedPath (what it is given for a request), and whether that is a
// registered route of that method rather than echo's 404 or 405.
func RouteForTest(s *Server, method, escapedPath string) (string, bool) {
	c := s.echo.NewContext(httptest.NewRequest(method, "/", http.NoBody), httptest.NewRecorder())
	s.echo.Router().Find(method, escapedPath, c)
	for _, r := range s.echo.Routes() {
		if r.Method == method && r.Path == c.Path() {
			return c.Path(), true
		}
	}
	return c.Path(), false
}

// WaitAuditVerificationForTest waits until no walk of the status page's
// audit verification is running (the background walk included).
func WaitAuditVerificationForTest(s *Server) {
	s.audit.run.Lock()
	s.audit.run.Unlock()
}

// AuditRequestStep is auditRequestStep, for the test that shows a
// request walks no more.
const AuditRequestStep = auditRequestStep

// ErrorCodesForTest returns the server's table of error codes and the
// statuses each is sent with (errors.go), and the code → status pairs the
// store's refusals (db.Codes) are sent with.
func ErrorCodesForTest() (table map[string][]int, refusals [][2]any) {
	for _, c := range db.Codes {
		apiErr, _ := toAPIError(&db.Error{Code: c})
		refusals = append(refusals, [2]any{apiErr.Code, apiErr.Status})
	}
	return errorCodes, refusals
}
