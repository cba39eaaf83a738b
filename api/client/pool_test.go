package client_test

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/fenceq/fenceq/api"
	"github.com/fenceq/fenceq/api/client"
	"github.com/fenceq/fenceq/db"
	"github.com/fenceq/fenceq/internal/apitest"
)

// A Client shared by many goroutines keeps a connection for each call
// they make at once: net/http's default transport keeps two idle
// connections per server, so that 16 goroutines calling together would
// dial 14 connections every time (and the server set up as many).
func TestClient_SharedByManyGoroutinesReusesItsConnections(t *testing.T) {
	store := apitest.Bolt(t, db.Rules{})
	var opened atomic.Int64
	srv := httptest.NewUnstartedServer(api.New(store, api.Config{}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			opened.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(func() {
		srv.CloseClientConnections()
		srv.Close()
	})
	c := mustClient(t, srv.URL) // the default HTTP client: no WithHTTPClient
	// Rounds of calls made at once: between two rounds every connection
	// is idle, and the next round finds as many as the pool kept.
	const goroutines, calls = 16, 10
	ctx := context.Background()
	for range calls {
		var wg sync.WaitGroup
		errs := make(chan error, goroutines)
		start := make(chan struct{})
		for range goroutines {
			wg.Go(func() {
				<-start
				if _, err := c.Enqueue(ctx, client.NewJob{Queue: "pool"}); err != nil {
					errs <- err
				}
			})
		}
		close(start)
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
	}
	qs, err := c.Queues(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(qs) != 1 || qs[0].Queue != "pool" || qs[0].Counts["available"] != goroutines*calls {
		t.Fatalf("queues %+v, want %d jobs available in pool", qs, goroutines*calls)
	}
	// One connection per goroutine, and a few more for the dials net/http
	// starts while it waits for a connection to come back; not one per
	// round.
	if got := opened.Load(); got > 2*goroutines {
		t.Errorf("%d connections for %d rounds of %d calls at once, want at most %d: calls do not reuse connections", got, calls, goroutines, 2*goroutines)
	}
}
