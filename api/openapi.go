package api

import (
	_ "embed"
	"net/http"

	"github.com/labstack/echo/v4"
)

// openAPIDocument is the OpenAPI 3.1 document of the HTTP API, written by
// hand in openapi.json next to this file. api/openapi_test.go holds it to
// the server: every route is documented and every documented path routed,
// and real replies of a running server validate against its schemas.
//
//go:embed openapi.json
var openAPIDocument []byte

// OpenAPIDocument returns a copy of the OpenAPI document served at
// GET /openapi.json.
func OpenAPIDocument() []byte {
	return append([]byte(nil), openAPIDocument...)
}

// openAPI serves GET /openapi.json. Like /healthz it needs no token: it
// says what the API is, nothing about the queue.
func (s *Server) openAPI(c echo.Context) error {
	return c.Blob(http.StatusOK, echo.MIMEApplicationJSON, openAPIDocument)
}
