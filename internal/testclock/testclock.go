// Package testclock is the clock tests give the service (btk.Config.Now):
// real time until a test stops it, then only the time the test sets.
package testclock

import (
	"sync"
	"time"
)

// Clock is safe for concurrent use. The zero Clock runs.
type Clock struct {
	mu      sync.Mutex
	stopped time.Time // zero while the clock runs
}

// Stopped returns a clock stopped at the current second (UTC).
func Stopped() *Clock {
	return &Clock{stopped: time.Now().UTC().Truncate(time.Second)}
}

// Now is the time the clock shows.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopped.IsZero() {
		return time.Now()
	}
	return c.stopped
}

// Freeze stops the clock at the current time (so that, say, nothing
// replenishes while a throttle is measured on a slow machine).
func (c *Clock) Freeze() {
	c.mu.Lock()
	c.stopped = time.Now()
	c.mu.Unlock()
}

// Advance moves the clock forward by d, stopping it first (at the current
// time) if it runs.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	if c.stopped.IsZero() {
		c.stopped = time.Now()
	}
	c.stopped = c.stopped.Add(d)
	c.mu.Unlock()
}
