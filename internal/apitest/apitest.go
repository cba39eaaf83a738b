// Package apitest serves the real API for tests: api.New over a real store
// (by default a bbolt file in the test's temporary directory), on an
// httptest server at 127.0.0.1:0. The api, api/client and cli tests share
// it; StartWith takes the store factory, so the HTTP tests can run on any
// engine.
package apitest

import (
	"context"
	"log/slog"
	"net/http/httptest"
	"path/filepath"
	"testing"

	"github.com/fenceq/fenceq/api"
	"github.com/fenceq/fenceq/db"
	"github.com/fenceq/fenceq/db/bolt"
)

// Server is a running API and the store behind it.
type Server struct {
	URL   string
	Store db.Store
	HTTP  *httptest.Server
}

// Factory opens a fresh store with rules for one test and closes it on
// cleanup, after checking it as its engine can (see db/dbtest.Factory).
type Factory func(tb testing.TB, rules db.Rules) db.Store

// Bolt is the default Factory: a bbolt file in tb.TempDir(). On cleanup
// the file must pass the store's integrity check and audit verification
// before it is closed; a failure there fails the test.
func Bolt(tb testing.TB, rules db.Rules) db.Store {
	tb.Helper()
	return BoltWith(tb, bolt.Options{Rules: rules})
}

// BoltWith is Bolt with the engine's own options too.
func BoltWith(tb testing.TB, opts bolt.Options) db.Store {
	tb.Helper()
	path := filepath.Join(tb.TempDir(), "fenceq.db")
	store, err := bolt.Open(path, opts)
	if err != nil {
		tb.Fatalf("bolt.Open(%s) error = %v", path, err)
	}
	tb.Cleanup(func() {
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
	return store
}

// Start serves api.New over a fresh bbolt store with rules (StartWith Bolt).
func Start(tb testing.TB, rules db.Rules, cfg api.Config) *Server {
	tb.Helper()
	return Serve(tb, Bolt(tb, rules), cfg)
}

// StartWith serves api.New over a fresh store from newStore with rules.
func StartWith(tb testing.TB, newStore Factory, rules db.Rules, cfg api.Config) *Server {
	tb.Helper()
	return Serve(tb, newStore(tb, rules), cfg)
}

// Serve serves api.New(store, cfg) (a nil cfg.Logger discards). On cleanup
// — before the store's own, cleanups running last-in first-out — the
// server stops and its client connections are closed.
func Serve(tb testing.TB, store db.Store, cfg api.Config) *Server {
	tb.Helper()
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	srv := httptest.NewUnstartedServer(api.New(store, cfg))
	srv.Config.Protocols = api.Protocols() // h2c too: gRPC clients (api/rpc.go)
	srv.Start()
	tb.Cleanup(func() {
		srv.CloseClientConnections()
		srv.Close()
	})
	return &Server{URL: srv.URL, Store: store, HTTP: srv}
}
