package bolt

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/fenceq/fenceq/db"
	bbolt "go.etcd.io/bbolt"
)

// A caller alone never waits for the settle time: with SettleTime an hour,
// a sequence of writes by one caller still commits each at once.
func TestALoneCallerNeverWaitsForTheSettleTime(t *testing.T) {
	opts := testOptions(newFakeClock())
	opts.SettleTime = time.Hour
	s := mustOpenStore(t, opts)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range 20 {
			mustEnqueue(t, s, db.EnqueueRequest{Queue: "q", IdempotencyKey: fmt.Sprint(i)})
		}
	}()
	select {
	case <-done:
	case <-time.After(time.Minute): // one settle would be an hour
		t.Fatal("20 writes by one caller did not finish in a minute: a commit waited for the settle time")
	}
	if c, _ := s.CommitStats(); c < 20 {
		t.Errorf("commits = %d, want one per write (20)", c)
	}
}

// One commit carries at most MaxCommitItems items however many mutations
// are waiting; a mutation larger than the budget is committed alone.
func TestACommitCarriesAtMostMaxCommitItems(t *testing.T) {
	opts := testOptions(newFakeClock())
	opts.MaxCommitItems = 10
	opts.SettleTime = -1
	s := mustOpenStore(t, opts)

	var mu sync.Mutex
	itemsByTx := map[*bbolt.Tx]int{}
	opsByTx := map[*bbolt.Tx]int{}
	record := func(items int) txFunc {
		return func(tx *bbolt.Tx) error {
			mu.Lock()
			defer mu.Unlock()
			itemsByTx[tx] += items
			opsByTx[tx]++
			return nil
		}
	}

	// Hold the commit loop in a commit while the others line up behind it.
	release := make(chan struct{})
	blocked := make(chan struct{})
	go func() {
		_ = s.update(t.Context(), txFunc(func(tx *bbolt.Tx) error { close(blocked); <-release; return nil }))
	}()
	<-blocked
	var wg sync.WaitGroup
	for _, items := range []int{4, 4, 4, 4, 4, 4, 50} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := s.updateItems(t.Context(), items, record(items)); err != nil {
				t.Errorf("updateItems(%d) = %v", items, err)
			}
		}()
	}
	time.Sleep(200 * time.Millisecond) // let them all wait to be taken
	close(release)
	wg.Wait()

	shared := false
	for tx, n := range itemsByTx {
		if n > 10 && opsByTx[tx] > 1 {
			t.Errorf("a commit carried %d mutations with %d items, want at most 10 items unless alone", opsByTx[tx], n)
		}
		if n == 50 && opsByTx[tx] != 1 {
			t.Errorf("the 50-item mutation shared its commit with %d others, want alone", opsByTx[tx]-1)
		}
		shared = shared || opsByTx[tx] > 1
	}
	if !shared {
		t.Errorf("no commit carried more than one mutation (%v): the test did not exercise gathering", opsByTx)
	}
}

// A mutation whose context ends before the commit loop takes it is not
// written: the caller gets the context's error, and fn never runs.
func TestAMutationNotTakenBeforeItsDeadlineIsNotWritten(t *testing.T) {
	s := mustOpenStore(t, testOptions(newFakeClock()))
	release := make(chan struct{})
	blocked := make(chan struct{})
	go func() {
		_ = s.update(t.Context(), txFunc(func(tx *bbolt.Tx) error { close(blocked); <-release; return nil }))
	}()
	<-blocked
	defer close(release)
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	ran := false
	err := s.update(ctx, txFunc(func(tx *bbolt.Tx) error { ran = true; return nil }))
	if !errors.Is(err, context.DeadlineExceeded) || ran {
		t.Errorf("update past its deadline behind a busy commit = %v (fn ran: %v), want context.DeadlineExceeded and not run", err, ran)
	}
}

// txFunc is a mutation that writes with fn and never refuses, for tests of
// the commit loop itself.
type txFunc func(tx *bbolt.Tx) error

func (f txFunc) decide(reader, time.Time) error { return nil }

func (f txFunc) apply(w *writer, _ int) (bool, error) { return false, f(w.tx) }
