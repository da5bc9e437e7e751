package explain

import (
	"testing"
	"time"
)

// What people read of the time a binding has left: to the nearest day beyond two days, to the
// nearest hour under it.
func TestHowLongABindingHasLeftReads(t *testing.T) {
	t.Parallel()
	day := 24 * time.Hour
	for _, c := range []struct {
		left time.Duration
		want string
	}{
		{6*day - time.Minute, "expires in 6 days"}, {30 * day, "expires in 30 days"}, {2 * day, "expires in 2 days"},
		{47 * time.Hour, "expires in 47 hours"}, {61 * time.Minute, "expires in 1 hour"}, {59 * time.Minute, "expires in under an hour"},
		{0, "expired"}, {-time.Hour, "expired"},
	} {
		if got := ExpiresIn(c.left); got != c.want {
			t.Errorf("%s left: %q, want %q", c.left, got, c.want)
		}
	}
	at := time.Date(2026, 12, 11, 9, 0, 0, 0, time.UTC)
	if got, want := Expiring("Team A", at, 6*day), "Your access to Team A expires in 6 days, on Fri 11 Dec 2026 09:00 UTC. To keep it, renew it on your request's page (Renew); a renewal never interrupts your access."; got != want {
		t.Errorf("the reminder reads %q, want %q", got, want)
	}
}
