package workflow

import (
	"testing"
	"time"
)

// A lease written with the hand-off is used as is only while half of it is certainly left;
// no lease (the sweep's hand-offs) is never fresh.
func TestAHeldLeaseIsFreshForHalfItsLength(t *testing.T) {
	for _, c := range []struct {
		name string
		held heldLease
		want bool
	}{
		{"no lease written", heldLease{}, false},
		{"just written", heldLease{written: time.Now(), ttl: 2 * time.Minute}, true},
		{"a third gone", heldLease{written: time.Now().Add(-40 * time.Second), ttl: 2 * time.Minute}, true},
		{"half gone", heldLease{written: time.Now().Add(-time.Minute), ttl: 2 * time.Minute}, false},
		{"expired", heldLease{written: time.Now().Add(-3 * time.Minute), ttl: 2 * time.Minute}, false},
	} {
		if got := c.held.fresh(); got != c.want {
			t.Errorf("%s: fresh = %t, want %t", c.name, got, c.want)
		}
	}
}
