package testkit

import (
	"sync"
	"time"
)

// Clock is a clock a test moves by hand, for code that takes its time from a Now function or a
// Now method (the simulators' pipelines and rebases, the rate limiter, the server's clock): what
// depends on time then happens when the test says, not when the machine gets to it. Time that
// the database keeps (due times, leases) is not on it: move that with the store's rows.
type Clock struct {
	mu  sync.Mutex
	now time.Time
}

// NewClock is a clock standing at t.
func NewClock(t time.Time) *Clock { return &Clock{now: t} }

// Now is the clock's time.
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
