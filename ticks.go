package main

import (
	"context"
	"log/slog"
	"time"

	"github.com/fenceq/fenceq/api"
	"github.com/fenceq/fenceq/db"
	"github.com/fenceq/fenceq/db/tick"
)

// startTicks runs the schedules' tick loop (db/tick) on store until stop
// is called; every replica runs one, and the store decides each tick once.
// A schedule put or resumed through handler wakes it, so that a new next
// fire time sooner than its sleep is not missed. Each pass is bounded below
// the write timeout (as a request is), so that its commit does not hold
// the requests' commits past theirs. stop returns once the loop has
// returned: shutdown calls it before the store is closed.
func startTicks(store db.Store, handler *api.Server, writeTimeout time.Duration, logger *slog.Logger) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	wake := make(chan struct{}, 1)
	handler.SetScheduleWaker(func() {
		select {
		case wake <- struct{}{}:
		default: // a wake is pending already
		}
	})
	o := tick.Options{Wake: wake, Logger: logger}
	if writeTimeout > 0 {
		o.Timeout = min(tick.DefaultTimeout, writeTimeout*9/10)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = tick.Run(ctx, store, o)
	}()
	return func() {
		cancel()
		<-done
	}
}
