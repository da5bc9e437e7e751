package batch

import (
	"fmt"
	"strings"

	"bindery/internal/vocab/state"
	"bindery/store"
)

// The member transitions of a batch, as tables. A batch carries two kinds of members: the create
// phase's (action ADD; MR_CREATING → MR_CREATED → MERGING → MERGED) and the close phase's
// (action DELETE; the binding stays VALIDATED, step CLOSE_STARTED, until its removal merged,
// then CLOSE_MERGED until the deploy that includes it → CLOSED). Each move names the statuses it applies to, so one move per phase covers members at
// any point of the batch, and members already past it are left alone.

var (
	creating = []state.BindingStatus{state.StatusMRCreating}
	created  = []state.BindingStatus{state.StatusMRCreated, state.StatusMerging}
	inBatch  = []state.BindingStatus{state.StatusMRCreating, state.StatusMRCreated, state.StatusMerging}
	closing  = []state.BindingStatus{state.StatusValidated}
)

func add(ops []string, c store.MemberChange) store.MemberMove {
	return store.MemberMove{Action: state.ActionAdd, OperationIDs: ops, Change: c}
}

func del(ops []string, c store.MemberChange) store.MemberMove {
	return store.MemberMove{Action: state.ActionDelete, OperationIDs: ops, Change: c}
}

// batchedStep is the claim's move: approved requests leave the waiting set for a batch.
var batchedStep = store.MemberChange{From: creating, To: state.StatusMRCreating, Step: state.StepBatched}

// mrOpened records the batch's MR on the members still being created, and on the close phase's:
// the MR that carries a request's current action is the one its deploy callback names.
func mrOpened(iid int64, note string) []store.MemberMove {
	return []store.MemberMove{
		add(nil, store.MemberChange{From: creating, To: state.StatusMRCreating, Step: state.StepCreateStarted, MRIID: iid, Note: note}),
		del(nil, store.MemberChange{From: closing, FromStep: state.StepCloseStarted, To: state.StatusValidated, Step: state.StepCloseStarted, MRIID: iid, Note: note}),
	}
}

// pipelinePassed: the MR is created (its pipeline passed) and the merge phase starts.
func pipelinePassed(pipeline int64, note string) []store.MemberMove {
	return []store.MemberMove{
		add(nil, store.MemberChange{From: creating, To: state.StatusMRCreated, Step: state.StepCreateSucceeded, PipelineID: pipeline, Note: note}),
		add(nil, store.MemberChange{From: []state.BindingStatus{state.StatusMRCreated}, To: state.StatusMerging, Step: state.StepHandleStarted, PipelineID: pipeline}),
	}
}

// handling records a step of the merge phase (approved, rebasing, a new head's pipeline).
func handling(step state.Step, note string) []store.MemberMove {
	return []store.MemberMove{add(nil, store.MemberChange{From: []state.BindingStatus{state.StatusMerging}, To: state.StatusMerging, Step: step, Note: note})}
}

// merged: the batch's MR landed. A removal, like a grant, waits for the deploy that includes the
// merge (the binding is in effect until then); one whose file was already absent (iid 0: no MR
// merged, nothing to deploy) is closed at once.
func merged(iid int64, note string) []store.MemberMove {
	removed := store.MemberChange{From: closing, To: state.StatusValidated, Step: state.StepCloseMerged, MRIID: iid, Note: note}
	if iid == 0 {
		removed = store.MemberChange{From: closing, To: state.StatusClosed, Step: state.StepCloseSucceeded, Note: note}
	}
	return []store.MemberMove{
		add(nil, store.MemberChange{From: inBatch, To: state.StatusMerged, Step: state.StepHandleMerged, MRIID: iid, Note: note}),
		del(nil, removed),
	}
}

// requeued: bisection returned these members to the waiting set (the close phase's keep their
// CLOSE_STARTED step, now with the note).
func requeued(ops []string, note string) []store.MemberMove {
	if len(ops) == 0 {
		return nil // a nil list would mean every member
	}
	return []store.MemberMove{
		add(ops, store.MemberChange{From: inBatch, To: state.StatusMRCreating, Step: state.StepQueued, Note: note}),
		del(ops, store.MemberChange{From: closing, To: state.StatusValidated, Step: state.StepCloseStarted, Note: note}),
	}
}

// stopAt is where a blocked batch leaves its members (the batch holds its slot for operators):
// create is the step of members still being created, handle of those in the merge phase. The
// close phase's members stay VALIDATED at CLOSE_STARTED: the binding is still in effect.
type stopAt struct{ create, handle state.Step }

// with is the members' moves, with the reason they stopped.
func (p stopAt) with(note string) []store.MemberMove {
	return []store.MemberMove{
		add(nil, store.MemberChange{From: creating, To: state.StatusMRCreating, Step: p.create, Note: note}),
		add(nil, store.MemberChange{From: created, To: state.StatusMerging, Step: p.handle, Note: note}),
	}
}

var (
	pipelinePending = stopAt{create: state.StepCreatePipelinePending, handle: state.StepHandlePipelinePending}
	rebasePending   = stopAt{create: state.StepCreatePipelinePending, handle: state.StepHandleRebasePending}
	mrBlocked       = stopAt{create: state.StepHandleMRBlocked, handle: state.StepHandleMRBlocked} // a person must act on the MR
)

// failure is the declared failure of a step: create is the step of members still being created
// (→ CREATE_FAILED), handle of those past it (→ HANDLE_FAILED); the close phase's members go to
// HANDLE_FAILED / CLOSE_FAILED whatever failed.
type failure struct {
	create, handle state.Step
	note           string
}

// moves applies the failure to ops (nil: every member the batch holds).
func (f failure) moves(ops []string) []store.MemberMove {
	return []store.MemberMove{
		add(ops, store.MemberChange{From: creating, To: state.StatusCreateFailed, Step: f.create, Note: f.note}),
		add(ops, store.MemberChange{From: created, To: state.StatusHandleFailed, Step: f.handle, Note: f.note}),
		del(ops, store.MemberChange{From: closing, To: state.StatusHandleFailed, Step: state.StepCloseFailed, Note: f.note}),
	}
}

func (f failure) with(note string) failure { f.note = note; return f }

// The declared failures.
var (
	failedCreate   = failure{create: state.StepCreateFailed, handle: state.StepHandleFailed}
	failedInvalid  = failure{create: state.StepCreateInvalid, handle: state.StepHandleFailed}
	failedPipeline = failure{create: state.StepCreatePipelineFailed, handle: state.StepHandlePipelineFailed}
	failedMRClosed = failure{create: state.StepHandleMRClosed, handle: state.StepHandleMRClosed}
	failedApprove  = failure{create: state.StepCreateFailed, handle: state.StepHandleApproveFailed}
	failedMerge    = failure{create: state.StepCreateFailed, handle: state.StepHandleMergeFailed}
	failedConflict = failure{create: state.StepHandleRebaseConflict, handle: state.StepHandleRebaseConflict}
	// abandoned: an operator settled the batch, or the sweep did once it stayed BLOCKED too long,
	// with no failure of its own decided — its members did not fail at anything of theirs, and
	// nothing tries them again by itself (docs/states.md, 'What people read of each state').
	abandoned = failure{create: state.StepBatchAbandoned, handle: state.StepBatchAbandoned}
)

// encode is the failure as recorded on a batch whose settlement did not go through
// (merge_batch.failing): its two steps' codes and its note, "create handle note".
func (f failure) encode() string {
	return fmt.Sprintf("%d %d %s", f.create, f.handle, f.note)
}

// decodeFailure reads what encode wrote. Anything unreadable (a hand-edited row) is the generic
// failure with the text as its note: the batch is still settled, never left active.
func decodeFailure(s string) failure {
	var create, handle int
	if _, err := fmt.Sscanf(s, "%d %d ", &create, &handle); err == nil {
		parts := strings.SplitN(s, " ", 3)
		f := failure{create: state.Step(create), handle: state.Step(handle)}
		if len(parts) == 3 {
			f.note = parts[2]
		}
		if f.create.Known() && f.handle.Known() {
			return f
		}
	}
	return failedCreate.with(s)
}

// resumed: an operator resumed a BLOCKED batch; its members show progress again.
func resumed(note string) []store.MemberMove {
	return []store.MemberMove{
		add(nil, store.MemberChange{From: creating, To: state.StatusMRCreating, Step: state.StepCreateStarted, Note: note}),
		add(nil, store.MemberChange{From: []state.BindingStatus{state.StatusMerging}, To: state.StatusMerging, Step: state.StepHandleStarted, Note: note}),
	}
}

// rebuilt: the car's branch is built again on what is ahead of it now; its members wait for the
// new branch's pipeline (the close phase's keep their CLOSE_STARTED step, now with the note).
func rebuilt(note string) []store.MemberMove {
	return []store.MemberMove{
		add(nil, store.MemberChange{From: inBatch, To: state.StatusMRCreating, Step: state.StepCreateStarted, Note: note}),
		del(nil, store.MemberChange{From: closing, To: state.StatusValidated, Step: state.StepCloseStarted, Note: note}),
	}
}
