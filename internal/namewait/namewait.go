// Package namewait wakes callers waiting for a name (a named lease to be
// released). Engines subscribe before they look, so a wake that comes
// between the look and the wait is not missed, and wake only after the
// change that frees the name has committed.
package namewait

import "sync"

// Waiters is a set of waits by name. The zero value is ready to use; it
// is safe for concurrent use.
type Waiters struct {
	mu sync.Mutex
	m  map[string]*wait
}

type wait struct {
	ch chan struct{}
	n  int
}

// Subscribe returns a channel closed at the next wake of name, and the
// function that ends the subscription.
func (w *Waiters) Subscribe(name string) (<-chan struct{}, func()) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.m == nil {
		w.m = map[string]*wait{}
	}
	lw := w.m[name]
	if lw == nil {
		lw = &wait{ch: make(chan struct{})}
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

// Wake wakes every caller waiting for name.
func (w *Waiters) Wake(name string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if lw := w.m[name]; lw != nil {
		close(lw.ch)
		delete(w.m, name)
	}
}

// WakeAll wakes every caller waiting for any name (a lost notification
// stream: everyone looks again).
func (w *Waiters) WakeAll() {
	w.mu.Lock()
	defer w.mu.Unlock()
	for name, lw := range w.m {
		close(lw.ch)
		delete(w.m, name)
	}
}

// Count is the number of callers waiting for name.
func (w *Waiters) Count(name string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	if lw := w.m[name]; lw != nil {
		return lw.n
	}
	return 0
}
