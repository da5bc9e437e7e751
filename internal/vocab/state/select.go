package state

import "slices"

// What a group of statuses or steps means, as lists. Code tests a row in hand with the predicates
// (Failed, Reappliable, Active, Pending…); the data layer selects rows with these lists, which
// are built from the same predicates and tables, so each meaning has one definition.

// FailedStatuses lists the statuses Failed reports.
func FailedStatuses() []BindingStatus { return statusesWhere(BindingStatus.Failed) }

// EndedStatuses lists the statuses Reappliable reports: a binding that holds nothing, and a new
// application may take its row.
func EndedStatuses() []BindingStatus { return statusesWhere(BindingStatus.Reappliable) }

// UnfinishedStatuses lists the statuses of a request on its way to being in effect or stopped at
// a failure on the way: neither in effect (VALIDATED, a removal under way included) nor ended.
func UnfinishedStatuses() []BindingStatus {
	return statusesWhere(func(s BindingStatus) bool { return s != StatusValidated && !s.Reappliable() })
}

// PendingSteps lists the steps Pending reports (the outcome is unknown; an operator's retry or
// a person outside bindery moves them), in code order.
func PendingSteps() []Step {
	var out []Step
	for _, s := range Steps() {
		if s.Pending() {
			out = append(out, s)
		}
	}
	return out
}

// ActiveBatchStatuses lists the batch statuses Active reports: a car in the train, holding its
// place.
func ActiveBatchStatuses() []BatchStatus { return batchStatusesWhere(BatchStatus.Active) }

// SettledBatchStatuses lists the terminal batch statuses: the batch left the train.
func SettledBatchStatuses() []BatchStatus {
	return batchStatusesWhere(func(s BatchStatus) bool { return !s.Active() })
}

func statusesWhere(keep func(BindingStatus) bool) []BindingStatus {
	return slices.DeleteFunc(slices.Clone(AllStatuses), func(s BindingStatus) bool { return !keep(s) })
}

// allBatchStatuses is the batch transition table's statuses in a fixed order.
var allBatchStatuses = []BatchStatus{BatchRunning, BatchBlocked, BatchSucceeded, BatchFailed}

func batchStatusesWhere(keep func(BatchStatus) bool) []BatchStatus {
	return slices.DeleteFunc(slices.Clone(allBatchStatuses), func(s BatchStatus) bool { return !keep(s) })
}

// DrivenByItsTask says whether a request of flow at status and step needs bindery itself to act
// — not a person, not the waiting set, not a batch: the approval ticket to send, or to read while
// its decision is awaited, and the legacy flow's own MR steps before a stop that waits for an
// operator (a step that waits for a person outside bindery is still driven by its task). Every
// such request has a request task; the orphan sweep gives one to any that lacks it.
func DrivenByItsTask(flow string, s BindingStatus, step Step) bool {
	switch s {
	case StatusApprovalSending, StatusApprovalSent:
		return true
	case StatusMRCreated:
		return flow == FlowLegacy
	case StatusMRCreating:
		return flow == FlowLegacy && step == StepCreateStarted
	case StatusMerging:
		info := step.Info()
		return flow == FlowLegacy && !(info.Pending && !info.Person)
	}
	return false
}

// Flows lists the flows a request may follow.
func Flows() []string { return []string{FlowApprovalFirst, FlowLegacy} }
