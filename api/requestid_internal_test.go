package api

import (
	"bytes"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fenceq/fenceq/db/bolt"
	"github.com/labstack/echo/v4"
)

// An internal error is logged in full with the request's id; the client is
// told only "internal error", with the id in the reply's header to quote.
func TestServer_InternalErrorCarriesRequestID(t *testing.T) {
	store, err := bolt.Open(filepath.Join(t.TempDir(), "fenceq.db"), bolt.Options{})
	if err != nil {
		t.Fatalf("bolt.Open() = %v", err)
	}
	defer store.Close()
	var logs bytes.Buffer
	s := New(store, Config{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	// A route of the test's that fails as no refusal does.
	s.echo.GET("/test/broken", func(c echo.Context) error { return errors.New("disk controller on fire") })
	srv := httptest.NewServer(s)
	defer srv.Close()

	req, _ := http.NewRequest(http.MethodGet, srv.URL+"/test/broken", nil)
	req.Header.Set(RequestIDHeader, "trace-42")
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatalf("GET /test/broken: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusInternalServerError || resp.Header.Get(RequestIDHeader) != "trace-42" {
		t.Fatalf("GET /test/broken = %d with %s %q, want 500 with trace-42", resp.StatusCode, RequestIDHeader, resp.Header.Get(RequestIDHeader))
	}
	line := logs.String()
	if !strings.Contains(line, `msg="internal error"`) || !strings.Contains(line, "request_id=trace-42") ||
		!strings.Contains(line, "disk controller on fire") {
		t.Fatalf("log = %q, want the internal error with request_id=trace-42 and the error", line)
	}
}
