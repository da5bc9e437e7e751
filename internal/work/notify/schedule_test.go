package notify

import (
	"testing"
	"time"
)

// The Standard Webhooks schedule: ten attempts, the first at once, then 5 s, 5 min, 30 min, 2 h,
// 5 h, 10 h, 14 h, 20 h and 24 h, each within ±10 % jitter; a Retry-After is the least wait (up
// to a day); after the tenth attempt nothing is left.
func TestTheStandardSchedule(t *testing.T) {
	want := []time.Duration{0, 5 * time.Second, 5 * time.Minute, 30 * time.Minute, 2 * time.Hour, 5 * time.Hour, 10 * time.Hour, 14 * time.Hour, 20 * time.Hour, 24 * time.Hour}
	for i, w := range want {
		lo, _ := nextWait(schedule, i, 0, func() float64 { return 0 })
		hi, _ := nextWait(schedule, i, 0, func() float64 { return 0.999999 })
		mid, ok := nextWait(schedule, i, 0, func() float64 { return 0.5 })
		if !ok || mid != w || lo < w*9/10 || hi > w*11/10 || (w > 0 && lo >= hi) {
			t.Errorf("attempt %d: %s..%s (mid %s), want %s ±10%%", i+1, lo, hi, mid, w)
		}
	}
	if _, ok := nextWait(schedule, len(want), 0, defaultJitter); ok {
		t.Error("an attempt after the tenth")
	}
	if d, _ := nextWait(schedule, 1, time.Hour, defaultJitter); d != time.Hour {
		t.Errorf("Retry-After 1h after the first failure: %s", d)
	}
	if d, _ := nextWait(schedule, 1, 72*time.Hour, defaultJitter); d != 24*time.Hour {
		t.Errorf("Retry-After of three days: %s, want it capped at a day", d)
	}
	if d := retryAfter("Wed, 21 Oct 2015 07:28:00 GMT", time.Date(2015, 10, 21, 7, 27, 0, 0, time.UTC)); d != time.Minute {
		t.Errorf("Retry-After as a date: %s", d)
	}
	if d := retryAfter("soon", time.Now()); d != 0 {
		t.Errorf("unreadable Retry-After: %s", d)
	}
}
