package postgres

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// notifyChannel is the LISTEN/NOTIFY channel of every replica. A batch
// sends, on commit, one notification per queue and kind:
//
//	"a <queue>"        a job of queue became available
//	"l <ns> <queue>"   a job of queue becomes claimable at ns (run_at, lease end)
//	"r <name>"         the named lease was released
const notifyChannel = "fenceq"

func notifyAvailable(queue string) string { return "a " + queue }

func notifyLater(queue string, ns int64) string {
	return "l " + strconv.FormatInt(ns, 10) + " " + queue
}

func notifyReleased(name string) string { return "r " + name }

// waiter is one long-polling claim of this replica.
type waiter struct {
	queues []string
	ch     chan struct{} // one wake-up
	next   int64         // the due time it sleeps until (rules' clock), 0 for none; under waiters.mu
}

// waiters are the long-polling claims of this replica, FIFO per queue.
type waiters struct {
	mu      sync.Mutex
	byQueue map[string][]*waiter
}

func (ws *waiters) register(queues []string) *waiter {
	w := &waiter{queues: queues, ch: make(chan struct{}, 1)}
	ws.mu.Lock()
	defer ws.mu.Unlock()
	for _, q := range queues {
		ws.byQueue[q] = append(ws.byQueue[q], w)
	}
	return w
}

func (ws *waiters) setNext(w *waiter, ns int64) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	w.next = ns
}

func (ws *waiters) unregister(w *waiter) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	for _, q := range w.queues {
		list := ws.byQueue[q]
		for i, x := range list {
			if x == w {
				list = append(list[:i:i], list[i+1:]...)
				break
			}
		}
		if len(list) == 0 {
			delete(ws.byQueue, q)
		} else {
			ws.byQueue[q] = list
		}
	}
}

func wake(w *waiter) {
	select {
	case w.ch <- struct{}{}:
	default:
	}
}

// available wakes the oldest waiters of queue: they try to claim, and
// those that find nothing wait again.
func (ws *waiters) available(queue string) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	for _, w := range ws.byQueue[queue] {
		wake(w)
	}
}

// later wakes the waiters of queue that sleep past ns, so they set their
// timers to it.
func (ws *waiters) later(queue string, ns int64) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	for _, w := range ws.byQueue[queue] {
		if w.next == 0 || ns < w.next {
			w.next = ns
			wake(w)
		}
	}
}

// all wakes every waiter: after the listener lost its connection, when a
// notification may have been missed.
func (ws *waiters) all() {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	for _, list := range ws.byQueue {
		for _, w := range list {
			wake(w)
		}
	}
}

// listen holds a connection that LISTENs for the notifications of every
// replica (this one's included) and wakes the waiters they concern. It
// reconnects when the connection drops, then wakes every waiter once.
func (s *Store) listen(cfg *pgx.ConnConfig) {
	defer close(s.listened)
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		<-s.closing
		cancel()
	}()
	backoff := 50 * time.Millisecond
	for ctx.Err() == nil {
		conn, err := pgx.ConnectConfig(ctx, cfg)
		if err == nil {
			_, err = conn.Exec(ctx, `LISTEN `+notifyChannel)
		}
		if err == nil {
			backoff = 50 * time.Millisecond
			s.waiters.all()
			s.nameWaiters.all()
			for {
				n, err := conn.WaitForNotification(ctx)
				if err != nil {
					break
				}
				s.dispatch(n.Payload)
			}
		}
		if conn != nil {
			conn.Close(context.Background())
		}
		select {
		case <-ctx.Done():
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 2*time.Second)
	}
}

func (s *Store) dispatch(payload string) {
	kind, rest, _ := strings.Cut(payload, " ")
	switch kind {
	case "a":
		s.waiters.available(rest)
	case "l":
		ns, queue, _ := strings.Cut(rest, " ")
		if t, err := strconv.ParseInt(ns, 10, 64); err == nil {
			s.waiters.later(queue, t)
		}
	case "r":
		s.nameWaiters.wake(rest)
	}
}

// nameWaiters wakes acquires waiting for a name when any replica releases it.
type nameWaiters struct {
	mu sync.Mutex
	m  map[string]*leaseWait
}

type leaseWait struct {
	ch chan struct{}
	n  int
}

func (w *nameWaiters) subscribe(name string) (<-chan struct{}, func()) {
	w.mu.Lock()
	defer w.mu.Unlock()
	lw := w.m[name]
	if lw == nil {
		lw = &leaseWait{ch: make(chan struct{})}
		w.m[name] = lw
	}
	lw.n++
	return lw.ch, func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		lw.n--
		if lw.n == 0 && w.m[name] == lw {
			delete(w.m, name)
		}
	}
}

func (w *nameWaiters) wake(name string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if lw := w.m[name]; lw != nil {
		close(lw.ch)
		delete(w.m, name)
	}
}

func (w *nameWaiters) all() {
	w.mu.Lock()
	defer w.mu.Unlock()
	for name, lw := range w.m {
		close(lw.ch)
		delete(w.m, name)
	}
}
