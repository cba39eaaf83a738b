// Package apitest serves the real API for tests: api.New over a real bbolt
// file in the test's temporary directory, on an httptest server at
// 127.0.0.1:0. The api and api/client tests share it.
package apitest

import (
	"context"
	"log/slog"
	"net/http/httptest"
	"path/filepath"
	"testing"

	"github.com/fenceq/fenceq/api"
	"github.com/fenceq/fenceq/db"
)

// Server is a running API and the store behind it.
type Server struct {
	URL   string
	Store *db.Store
	HTTP  *httptest.Server
}

// Start opens a fresh store with opts and serves api.New(store, cfg) over
// it (a nil cfg.Logger discards). On cleanup the server stops, its client
// connections are closed, and the file must pass the store's integrity
// check and audit verification before it is closed; a failure there fails
// the test.
func Start(tb testing.TB, opts db.Options, cfg api.Config) *Server {
	tb.Helper()
	path := filepath.Join(tb.TempDir(), "fenceq.db")
	store, err := db.Open(path, opts)
	if err != nil {
		tb.Fatalf("db.Open(%s) error = %v", path, err)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	srv := httptest.NewServer(api.New(store, cfg))
	tb.Cleanup(func() {
		srv.CloseClientConnections()
		srv.Close()
		if err := store.Check(); err != nil {
			tb.Errorf("store.Check() after test = %v", err)
		}
		if rep, err := store.VerifyAudit(context.Background()); err != nil || !rep.OK {
			tb.Errorf("store.VerifyAudit() after test = %+v, %v; want OK", rep, err)
		}
		if err := store.Close(); err != nil {
			tb.Errorf("store.Close() = %v", err)
		}
	})
	return &Server{URL: srv.URL, Store: store, HTTP: srv}
}
