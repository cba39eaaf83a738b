package main

import (
	"context"
	"log/slog"
	"net/http"
	"time"

	"github.com/fenceq/fenceq/db"
)

// shutdown stops srv gracefully: no new connections; waiting claims are
// answered 204 (or with the job already handed to them) and waiting lease
// acquires as timed out, at once, instead of holding the exit for their
// whole wait; every other request in flight, and so every commit, finishes.
// Connections still busy after timeout (a long backup download) are closed.
// The caller closes the store after it.
func shutdown(srv *http.Server, store db.Store, timeout time.Duration, logger *slog.Logger) {
	start := time.Now()
	logger.Info("shutting down: answering waiting claims, finishing in-flight requests", "timeout", timeout)
	store.StopWaiting()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if err := srv.Shutdown(ctx); err != nil {
		logger.Warn("shutdown timed out: closing the connections still busy", "timeout", timeout, "err", err)
		_ = srv.Close()
	}
	logger.Info("requests finished", "took", time.Since(start).Round(time.Millisecond))
}
