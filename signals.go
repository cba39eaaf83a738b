package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

// signalContext returns a context that ends at the first SIGINT or SIGTERM,
// which starts a graceful shutdown. A second one exits the process at once
// with 128+signal (what a shell reports for a process killed by it):
// every acknowledged write is already durable, so nothing acknowledged is
// lost; only replies in flight are not sent.
func signalContext(stderr io.Writer) (context.Context, func()) {
	ctx, cancel := context.WithCancel(context.Background())
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	go func() {
		<-sigs
		cancel()
		sig := <-sigs
		fmt.Fprintf(stderr, "fenceq: second signal (%v): exiting at once\n", sig)
		code := 1
		if s, ok := sig.(syscall.Signal); ok {
			code = 128 + int(s)
		}
		os.Exit(code)
	}()
	return ctx, func() { signal.Stop(sigs); cancel() }
}
