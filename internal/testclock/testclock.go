// Package testclock is the clock tests give the store and the API in place
// of time.Now: it moves only when the test says so, so expiry is tested by
// moving it, not by sleeping.
package testclock

import (
	"sync"
	"time"
)

// Clock is a manual clock, safe for concurrent use.
type Clock struct {
	mu  sync.Mutex
	now time.Time
}

// New returns a clock that reads start until it is advanced.
func New(start time.Time) *Clock { return &Clock{now: start} }

// Now returns the clock's time (db.Rules.Now).
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock forward by d.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}
