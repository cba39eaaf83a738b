package api

import (
	"fmt"
	"net/http"
	"runtime/debug"
	"sync"
	"time"
)

// rpcWorkers run the protobuf calls that come over HTTP/2. net/http's
// HTTP/2 server runs each request in a goroutine of its own, whose stack
// starts small and is grown — copied whole — on a call's way through
// connect to the store, a large part of the front end's own CPU per call
// (docs/performance.md, "Changes the code cites"). An HTTP/1.1 connection
// serves its requests in one goroutine whose stack has grown once. So a
// call is handed to an idle worker, whose stack has grown already; when
// none is idle a new one starts. A worker waits for its next call at most
// idle, then ends, so the workers are never more than the calls under
// way at once a moment ago.
type rpcWorkers struct {
	work chan *rpcTask
	idle time.Duration
}

// rpcWorkerIdle is how long a worker waits for its next call.
const rpcWorkerIdle = 10 * time.Second

// rpcTask is one call handed to a worker; done is sent a value when it
// has returned.
type rpcTask struct {
	fn    func()
	done  chan struct{}
	panic any // what fn panicked with, to panic with again in the handler
}

var rpcDonePool = sync.Pool{New: func() any { return make(chan struct{}, 1) }}

// run runs fn in a worker and returns once it has returned. A panic of
// fn's is raised again in the caller's goroutine, where net/http handles
// it as a handler's.
func (p *rpcWorkers) run(fn func()) {
	t := &rpcTask{fn: fn, done: rpcDonePool.Get().(chan struct{})}
	select {
	case p.work <- t:
	default:
		go p.worker(t)
	}
	<-t.done
	rpcDonePool.Put(t.done)
	if t.panic != nil {
		panic(t.panic)
	}
}

func (p *rpcWorkers) worker(t *rpcTask) {
	timer := time.NewTimer(p.idle)
	defer timer.Stop()
	for {
		t.runIn()
		timer.Reset(p.idle)
		select {
		case t = <-p.work:
		case <-timer.C:
			return
		}
	}
}

func (t *rpcTask) runIn() {
	defer func() {
		if v := recover(); v != nil {
			if v == http.ErrAbortHandler {
				t.panic = v
			} else {
				t.panic = fmt.Sprintf("%v\n%s", v, debug.Stack())
			}
		}
		t.done <- struct{}{}
	}()
	t.fn()
}
