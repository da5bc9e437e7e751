package state

import (
	"slices"
	"testing"
)

// The lists the data layer selects by hold exactly what the predicates say of every status and
// step, and allBatchStatuses is the batch table's.
func TestTheSelectionListsAreThePredicates(t *testing.T) {
	for _, s := range AllStatuses {
		if got := slices.Contains(FailedStatuses(), s); got != s.Failed() {
			t.Errorf("FailedStatuses has %s: %v, Failed: %v", s, got, s.Failed())
		}
		if got := slices.Contains(EndedStatuses(), s); got != s.Reappliable() {
			t.Errorf("EndedStatuses has %s: %v, Reappliable: %v", s, got, s.Reappliable())
		}
		unfinished := s != StatusValidated && s != StatusRejected && s != StatusClosed
		if got := slices.Contains(UnfinishedStatuses(), s); got != unfinished {
			t.Errorf("UnfinishedStatuses has %s: %v, want %v", s, got, unfinished)
		}
	}
	for _, s := range Steps() {
		if got := slices.Contains(PendingSteps(), s); got != s.Pending() {
			t.Errorf("PendingSteps has %s: %v, Pending: %v", s, got, s.Pending())
		}
	}
	if len(allBatchStatuses) != len(batchTransitions) {
		t.Fatalf("allBatchStatuses has %d statuses, the batch table %d", len(allBatchStatuses), len(batchTransitions))
	}
	for _, s := range allBatchStatuses {
		if !s.Known() {
			t.Errorf("allBatchStatuses has %s, the batch table does not", s)
		}
		if got := slices.Contains(ActiveBatchStatuses(), s); got != s.Active() {
			t.Errorf("ActiveBatchStatuses has %s: %v, Active: %v", s, got, s.Active())
		}
		if slices.Contains(ActiveBatchStatuses(), s) == slices.Contains(SettledBatchStatuses(), s) {
			t.Errorf("%s is in both or neither of the active and settled lists", s)
		}
	}
	if got := FailedStatuses(); len(got) != 2 {
		t.Errorf("FailedStatuses = %v", got)
	}
}
