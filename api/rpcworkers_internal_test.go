package api

import (
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// A call's panic is raised again in the handler's goroutine (where
// net/http recovers and logs it); the worker goes on serving calls, and
// an idle worker takes the next call rather than a new goroutine.
func TestRPCWorkers_PanicsReachTheHandlerAndWorkersAreReused(t *testing.T) {
	p := &rpcWorkers{work: make(chan *rpcTask), idle: time.Minute}
	var ran atomic.Int64
	p.run(func() { ran.Add(1) })
	for _, v := range []any{"boom", http.ErrAbortHandler} {
		got := func() (r any) {
			defer func() { r = recover() }()
			p.run(func() { panic(v) })
			return nil
		}()
		if v == http.ErrAbortHandler && got != v || v != http.ErrAbortHandler && !strings.HasPrefix(got.(string), "boom\n") {
			t.Errorf("run(panic(%v)) panicked with %v in the caller", v, got)
		}
	}
	// The worker started by the first call waits for the next: a call
	// sent to the channel now is taken by it.
	done := make(chan struct{})
	select {
	case p.work <- &rpcTask{fn: func() { ran.Add(1) }, done: done}:
	case <-time.After(5 * time.Second):
		t.Fatal("no idle worker took a call")
	}
	<-done
	if ran.Load() != 2 {
		t.Errorf("ran %d calls, want 2", ran.Load())
	}
	// An idle worker ends after idle: soon no worker takes a call.
	q := &rpcWorkers{work: make(chan *rpcTask), idle: time.Millisecond}
	q.run(func() {})
	for deadline := time.Now().Add(10 * time.Second); ; {
		time.Sleep(20 * time.Millisecond)
		t := &rpcTask{fn: func() {}, done: make(chan struct{}, 1)}
		select {
		case q.work <- t:
			<-t.done // a worker was still there (a loaded machine): again
		default:
			return
		}
		if time.Now().After(deadline) {
			break
		}
	}
	t.Error("workers idle for 20 times their idle time still take calls after 10 s")
}
