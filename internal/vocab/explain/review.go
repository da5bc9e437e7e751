package explain

import (
	"fmt"
	"time"
)

// The words of an access review (docs/workflow.md, 'Access reviews'): its callers' refusals, the
// notes of its items, the timeline's note of a removal, and what its reviewers are told.

// What a review's caller reads when it is refused.
const (
	ReviewNoBindings    = "This target has no binding in effect: there is nothing to review."
	ReviewOpenAlready   = "This target has an open review already; complete it before starting another."
	ReviewNotReviewer   = "Only an owner of this target or an operator can review its bindings."
	ReviewCompleted     = "This review is completed: its decisions can no longer change."
	ReviewItemDecided   = "This item was decided already, differently; a decision is final."
	ReviewCompletedOnce = "This review was completed already, by another call."
	ReviewDueInPast     = "must be in the future"
	ReviewUnknownTarget = "is not a target of the catalog"
)

// What a review's item says when its binding is no longer the one reviewed in effect.
const (
	ReviewItemClosed   = "The binding left effect on its own while under review (revoked, expired or re-applied); completing skips it."
	ReviewItemSkipped  = "Skipped at completion: the binding had left effect on its own."
	ReviewItemRemoving = "Removal under way: its revocation goes through a batch and the deploy."
	ReviewItemRemoved  = "Removed: the deploy took it out of effect."
)

// ReviewRemoval is the timeline's note of a revocation a review decided.
func ReviewRemoval(review int64, by, comment string) string {
	s := fmt.Sprintf("Removed by access review %d, decided by %s", review, by)
	if comment != "" {
		s += ": " + comment
	}
	return s + "."
}

// ReviewStarted is what a reviewer is told of a new review (review.started).
func ReviewStarted(title string, items int, due time.Time) string {
	return fmt.Sprintf("An access review of %s asks you to keep or remove each of its %d %s in effect by %s, on the Reviews page.",
		title, items, Plural(items, "binding"), ExpiryTime(due))
}

// ReviewDue is the reminder before a review's due date (review.due).
func ReviewDue(title string, due time.Time) string {
	return fmt.Sprintf("The access review of %s is due on %s: decide what is left and complete it on the Reviews page.", title, ExpiryTime(due))
}
