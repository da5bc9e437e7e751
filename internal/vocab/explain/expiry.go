package explain

import (
	"fmt"
	"time"
)

// The words of a binding's expiry and its renewal (docs/workflow.md, 'Expiry, reminders and
// renewal'): the request page, the list of a person's requests and the reminder say them alike.

// ExpiresIn is how long a binding has left, in the words the request page and "My requests"
// show beside the Renew button: "expires in 6 days", "expires in 5 hours", "expires in under an
// hour", "expired".
func ExpiresIn(left time.Duration) string {
	switch {
	case left <= 0:
		return "expired"
	case left < time.Hour:
		return "expires in under an hour"
	case left < 47*time.Hour+30*time.Minute:
		h := int((left + 30*time.Minute) / time.Hour) // the nearest hour
		return fmt.Sprintf("expires in %d %s", h, Plural(h, "hour"))
	}
	d := int((left + 12*time.Hour) / (24 * time.Hour)) // the nearest day
	return fmt.Sprintf("expires in %d %s", d, Plural(d, "day"))
}

// ExpiryTime is an expiry as people read it: "Fri 11 Dec 2026 09:00 UTC".
func ExpiryTime(at time.Time) string { return at.UTC().Format("Mon 2 Jan 2006 15:04 UTC") }

// Expiring is the reminder's sentence (binding.expiring): when the access ends and how to keep
// it.
func Expiring(title string, at time.Time, left time.Duration) string {
	return fmt.Sprintf("Your access to %s %s, on %s. To keep it, renew it on your request's page (Renew); a renewal never interrupts your access.",
		title, ExpiresIn(left), ExpiryTime(at))
}

// ExpiringSummary is the reminder's one line (an email's subject, a chat's first line).
func ExpiringSummary(title string, left time.Duration) string {
	return fmt.Sprintf("Your access to %s %s: renew it to keep it", title, ExpiresIn(left))
}

// What a renewal's caller reads when it is refused, and the timeline's words of a renewal.
const (
	NotRenewable   = "Only a binding in effect with an expiry can be renewed (not one whose removal has started, nor one that never expires)."
	RenewalPending = "A renewal of this binding already waits for its decision in the approval system; it stays in effect meanwhile."
	RenewedAlready = "This binding was just renewed: a renewal now would not move its expiry."
)

// PastMaxTTL is the refusal of a renewal the target's maxTtl leaves no room for.
func PastMaxTTL(maxTTL string, until time.Time) string {
	return fmt.Sprintf("This binding cannot be renewed past %s: its target allows at most %s from when it first came into effect. Apply again once it has expired.", ExpiryTime(until), maxTTL)
}

// Renewed is the timeline's note of a renewal: the new expiry and who renewed or approved it.
func Renewed(until time.Time, by string) string {
	if by == "" {
		return "Renewed: now expires " + ExpiryTime(until) + "."
	}
	return "Renewed by " + by + ": now expires " + ExpiryTime(until) + "."
}

// RenewalWaiting is what the request page says while a renewal waits for the approvers.
func RenewalWaiting(by string) string {
	return "A renewal asked by " + by + " waits for the approvers; the binding stays in effect until its current expiry meanwhile."
}

// RenewalFile says where a renewal's rewrite of the binding's file (its new expiry) stands: state
// is waiting, batched, merged, failed or done (as a drift restore's), batch and mr the batch that
// carries it and its MR, note a failed batch's note. The binding is in effect throughout.
func RenewalFile(state string, batch, mr int64, note string) string {
	switch state {
	case "waiting":
		return "The file with the new expiry waits for a batch; your access goes on meanwhile."
	case "batched":
		if mr > 0 {
			return fmt.Sprintf("Batch %d carries the file with the new expiry (MR !%d) through CI and the train; your access goes on meanwhile.", batch, mr)
		}
		return fmt.Sprintf("Batch %d carries the file with the new expiry through CI and the train; your access goes on meanwhile.", batch)
	case "merged":
		return fmt.Sprintf("The file with the new expiry merged (MR !%d); it is in effect with the next deploy.", mr)
	case "failed":
		s := fmt.Sprintf("The file with the new expiry did not merge: batch %d failed", batch)
		if note != "" {
			s += " (" + note + ")"
		}
		return s + ". Your access and its new expiry stand in bindery; the operators are told of the file by the drift check."
	case "done":
		return fmt.Sprintf("The file with the new expiry is in effect (MR !%d).", mr)
	}
	return ""
}
