package explain

import (
	"fmt"
	"time"
)

// The words the store records with a deploy's flips and a refused callback: step notes and an
// event's why, read by requesters and operators as written.

// DeployIncludesRemoval is the note of a removal closed by the deploy callback of MR mr.
func DeployIncludesRemoval(mr int64) string {
	return fmt.Sprintf("the deploy of MR !%d includes the removal", mr)
}

// CallbackListsOthers is why a deploy callback's listed requests were refused: they are not the
// merge request's.
const CallbackListsOthers = "the deploy callback lists requests that are not of this merge request; they were not validated by it"

// DeployedInEffect is the note of a grant reconciliation proves deployed: the deploy of MR mr,
// merged at merged, includes its merge.
func DeployedInEffect(mr int64, merged time.Time) string {
	return fmt.Sprintf("in effect: the deploy of MR !%d (merged %s) includes this one's merge", mr, merged.UTC().Format(time.RFC3339))
}

// DeployedRemoved is the note of a removal reconciliation proves deployed.
func DeployedRemoved(mr int64, merged time.Time) string {
	return fmt.Sprintf("removed: the deploy of MR !%d (merged %s) includes the removal's merge", mr, merged.UTC().Format(time.RFC3339))
}

// EndpointFailing is why a notification endpoint was disabled: every delivery to it failed for
// longer than notify.disableAfter.
func EndpointFailing(after time.Duration) string {
	return fmt.Sprintf("every delivery failed for longer than notify.disableAfter (%s)", after)
}
