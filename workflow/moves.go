package workflow

import (
	"time"

	"bindery/internal/vocab/state"
	"bindery/store"
)

// A request's own transitions, each named for what it does. Every status change the workflow
// asks of the store is one of these movers (a batch's member moves are batch/moves.go's); the
// store writes it only when the transition table (internal/vocab/state) allows it from where the
// request is. A step's failure goes to the status and step its failure class names (failed).

// stays: a fact for the request's timeline (a drift restore asked for its file); the request
// stays at its status and step.
func stays(status state.BindingStatus, step state.Step, note string) store.Change {
	return store.Change{To: status, Step: step, Note: note}
}

// sendingTicket: the approval ticket is about to be sent (first send, an operator's retry, the
// legacy flow once its MR passed CI).
func sendingTicket() store.Change {
	return store.Change{To: state.StatusApprovalSending, Step: state.StepApprovalSending}
}

// ticketSent: the ticket is with the approval system (ticketID "" keeps the one recorded).
func ticketSent(note, ticketID string) store.Change {
	return store.Change{To: state.StatusApprovalSent, Step: state.StepApprovalSent, Note: note, TicketID: ticketID}
}

// approvalRejected: the approvers said no.
func approvalRejected(note, by string) store.Change {
	return store.Change{To: state.StatusRejected, Step: state.StepApprovalRejected, Note: note, DecidedBy: by}
}

// approvedToMerge: the legacy flow's approval; its own MR goes to the merge phase.
func approvedToMerge(note, by string) store.Change {
	return store.Change{To: state.StatusMerging, Step: state.StepHandleStarted, Note: note, DecidedBy: by}
}

// approvedInvalid: approved, but the request can no longer be carried out as asked.
func approvedInvalid(note, by string) store.Change {
	return store.Change{To: state.StatusCreateFailed, Step: state.StepCreateInvalid, Note: note, DecidedBy: by}
}

// queued: approved (by, "" when an operator put it back) into the waiting set for a batch.
func queued(note, by string) store.Change {
	return store.Change{To: state.StatusMRCreating, Step: state.StepQueued, Note: note, DecidedBy: by}
}

// creatingMR: the legacy flow's own MR is being created (mr > 0: it opened).
func creatingMR(mr int64, note string) store.Change {
	return store.Change{To: state.StatusMRCreating, Step: state.StepCreateStarted, MRIID: mr, Note: note}
}

// pipelineStuck: the legacy MR's pipeline gave no answer in time; an operator decides.
func pipelineStuck(pipeline int64, note string) store.Change {
	return store.Change{To: state.StatusMRCreating, Step: state.StepCreatePipelinePending, PipelineID: pipeline, Note: note}
}

// mrCreated: the legacy MR's pipeline passed.
func mrCreated(pipeline int64) store.Change {
	return store.Change{To: state.StatusMRCreated, Step: state.StepCreateSucceeded, PipelineID: pipeline}
}

// merging: the legacy MR's merge phase, at step (started, approved, held, blocked, resumed).
func merging(step state.Step, note string) store.Change {
	return store.Change{To: state.StatusMerging, Step: step, Note: note}
}

// mergedOwnMR: the legacy MR landed; the request waits for its deploy.
func mergedOwnMR(note string) store.Change {
	return store.Change{To: state.StatusMerged, Step: state.StepHandleMerged, Note: note}
}

// failed: a step failed for good, to the status and step of its failure class.
func failed(to state.BindingStatus, step state.Step, pipeline int64, note string) store.Change {
	return store.Change{To: to, Step: step, Note: note, PipelineID: pipeline}
}

// withdrawn: a failed request withdrawn by its owner or an operator.
func withdrawn(note string) store.Change {
	return store.Change{To: state.StatusClosed, Step: state.StepWithdrawn, Note: note}
}

// closeStarted: a binding in effect is to be removed (revocation, expiry, an operator's retry
// of a failed removal); it stays in effect until its removal is deployed.
func closeStarted(note string) store.Change {
	return store.Change{To: state.StatusValidated, Step: state.StepCloseStarted, Note: note}
}

// closedAtOnce: a binding whose file is already gone from the repository is closed.
func closedAtOnce(note string) store.Change {
	return store.Change{To: state.StatusClosed, Step: state.StepCloseSucceeded, Note: note}
}

// renewed: a binding in effect gets a new expiry.
func renewed(note string, at time.Time) store.Change {
	return store.Change{To: state.StatusValidated, Step: state.StepCalledBack, Note: note, ExpiresAt: &at}
}

// noted: the request stays where it is; note goes into its history.
func noted(cur store.Request, note string) store.Change {
	return store.Change{To: cur.Binding.Status, Step: cur.Operation.Step, Note: note}
}

// inEffectNow is the deploy's move of many requests at once: MERGED → VALIDATED (CALLED_BACK),
// the deploy includes their merge (a callback, a reconciliation by merge order, an operator's
// word), note in their history.
func inEffectNow(note string) store.MemberChange {
	return store.MemberChange{From: []state.BindingStatus{state.StatusMerged}, To: state.StatusValidated, Step: state.StepCalledBack, Note: note}
}

// removedNow is the deploy's move of removals: VALIDATED at CLOSE_MERGED → CLOSED
// (CLOSE_SUCCEEDED), the deploy includes the merge that removed their files.
func removedNow(note string) store.MemberChange {
	return store.MemberChange{From: []state.BindingStatus{state.StatusValidated}, FromStep: state.StepCloseMerged,
		To: state.StatusClosed, Step: state.StepCloseSucceeded, Note: note}
}

// adopted: a binding taken over from the config repository is in effect from the start
// (store.Tx.Adopt; docs/drift.md).
func adopted() store.Change {
	return store.Change{To: state.StatusValidated, Step: state.StepCalledBack}
}
