package bolt_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/fenceq/fenceq/db"
	"github.com/fenceq/fenceq/db/bolt"
	"github.com/fenceq/fenceq/db/dbtest"
)

// guardedFiles is a resource guarded by a named lease: an in-process "file
// store" that remembers the highest fencing token it has seen and refuses a
// write that carries a lower one. It needs no connection to fenceq; the
// tokens alone keep a holder that lost its lease from writing.
type guardedFiles struct {
	mu      sync.Mutex
	highest uint64
	files   map[string]string
}

var errStaleWrite = errors.New("refused: a newer holder has written")

func (g *guardedFiles) Write(token uint64, path, data string) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if token < g.highest {
		return fmt.Errorf("%w (token %d, highest seen %d)", errStaleWrite, token, g.highest)
	}
	g.highest = token
	g.files[path] = data
	return nil
}

// Two holders take turns on the lease "/data/a.csv". The first is paused
// past its lease (a stopped container, a long GC pause); meanwhile the
// second acquires the lease with a larger token and writes. When the first
// wakes up, its write carries the old token and the file store refuses it;
// fenceq refuses its renew too.
func ExampleStore_AcquireLease() {
	dir, err := os.MkdirTemp("", "fenceq-example")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)

	// A clock the example moves by hand, to show a pause without waiting.
	var mu sync.Mutex
	now := time.Date(2031, 1, 1, 12, 0, 0, 0, time.UTC)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	sleep := func(d time.Duration) { mu.Lock(); defer mu.Unlock(); now = now.Add(d) }

	store, err := bolt.Open(filepath.Join(dir, "fenceq.db"), bolt.Options{Rules: db.Rules{Now: clock}})
	if err != nil {
		panic(err)
	}
	defer store.Close()
	ctx := context.Background()
	files := &guardedFiles{files: map[string]string{}}
	const name = "/data/a.csv"

	a, err := store.AcquireLease(ctx, db.AcquireLeaseRequest{Principal: "local", Name: name, Holder: "etl", TTL: 10 * time.Second})
	if err != nil {
		panic(err)
	}
	fmt.Println("A holds token", a.FencingToken)
	fmt.Println("A writes:", files.Write(a.FencingToken, name, "rows from A"))

	sleep(15 * time.Second) // A is paused past its lease.

	// B — here a restart of the same holder name — acquires the expired lease.
	b, err := store.AcquireLease(ctx, db.AcquireLeaseRequest{Principal: "local", Name: name, Holder: "etl", TTL: 10 * time.Second})
	if err != nil {
		panic(err)
	}
	fmt.Println("B holds token", b.FencingToken)
	fmt.Println("B writes:", files.Write(b.FencingToken, name, "rows from B"))

	// A wakes up and carries on as if it still held the lease.
	fmt.Println("A writes:", files.Write(a.FencingToken, name, "late rows from A"))
	_, err = store.CheckLease(ctx, name, a.FencingToken)
	fmt.Println("A's token is current:", err == nil)
	_, err = store.RenewLease(ctx, db.RenewLeaseRequest{Principal: "local", Name: name, Holder: "etl", FencingToken: a.FencingToken})
	fmt.Println("A renews:", errors.Is(err, dbtest.ErrLeaseNotHeld))
	fmt.Println("file holds:", files.files[name])

	// Output:
	// A holds token 1
	// A writes: <nil>
	// B holds token 2
	// B writes: <nil>
	// A writes: refused: a newer holder has written (token 1, highest seen 2)
	// A's token is current: false
	// A renews: true
	// file holds: rows from B
}
