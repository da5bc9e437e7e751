package notify

import (
	"math/rand/v2"
	"time"
)

// schedule is the Standard Webhooks retry schedule: the wait before each attempt, the first
// at once. A delivery that failed its last attempt has failed for good (an operator may send
// it again from the ops console).
var schedule = []time.Duration{
	0, 5 * time.Second, 5 * time.Minute, 30 * time.Minute, 2 * time.Hour, 5 * time.Hour,
	10 * time.Hour, 14 * time.Hour, 20 * time.Hour, 24 * time.Hour,
}

// maxRetryAfter caps a receiver's Retry-After: a receiver may slow bindery down, not park a
// delivery for longer than the schedule's longest wait.
const maxRetryAfter = 24 * time.Hour

// nextWait is the wait before the next attempt of a delivery that has failed attempts times
// (counting the one just made), with jitter of ±10 % so that the deliveries of a burst do not
// come back at one instant; ok false: no attempt is left. retryAfter, when the receiver asked
// for it, is the least the wait may be.
func nextWait(sched []time.Duration, attempts int, retryAfter time.Duration, jitter func() float64) (time.Duration, bool) {
	if attempts >= len(sched) {
		return 0, false
	}
	d := time.Duration(float64(sched[attempts]) * (0.9 + 0.2*jitter()))
	return max(d, min(retryAfter, maxRetryAfter)), true
}

// defaultJitter is a uniform draw in [0, 1).
func defaultJitter() float64 { return rand.Float64() }
