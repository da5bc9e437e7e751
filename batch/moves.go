package batch

import (
	"fmt"
	"strings"

	"bindery/internal/vocab/state"
	"bindery/internal/work/change"
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

// flakyRetry records on the members still waiting for the batch's pipeline that it failed and
// runs once more (batch.flakyRetries): their timelines show both runs, and their pages say so.
func flakyRetry(pipeline int64, note string) []store.MemberMove {
	return []store.MemberMove{
		add(nil, store.MemberChange{From: creating, To: state.StatusMRCreating, Step: state.StepCreateStarted, PipelineID: pipeline, Note: note}),
		del(nil, store.MemberChange{From: closing, FromStep: state.StepCloseStarted, To: state.StatusValidated, Step: state.StepCloseStarted, Note: note}),
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

// stopped is where a blocked batch leaves its members (the batch holds its slot for operators),
// with the reason they stopped: at (change.PipelineStuck, RebaseStuck, MRBlocked) names the step
// of members still being created and of those in the merge phase. The close phase's members stay
// VALIDATED at CLOSE_STARTED: the binding is still in effect.
func stopped(at change.Steps, note string) []store.MemberMove {
	return []store.MemberMove{
		add(nil, store.MemberChange{From: creating, To: state.StatusMRCreating, Step: at.Create, Note: note}),
		add(nil, store.MemberChange{From: created, To: state.StatusMerging, Step: at.Handle, Note: note}),
	}
}

// failing is the moves of a decided failure (change.Failure) on ops (nil: every member the batch
// holds): members still being created → CREATE_FAILED at f.Create, those past it → HANDLE_FAILED
// at f.Handle; the close phase's members go to HANDLE_FAILED / CLOSE_FAILED whatever failed.
func failing(f change.Failure, ops []string) []store.MemberMove {
	return []store.MemberMove{
		add(ops, store.MemberChange{From: creating, To: state.StatusCreateFailed, Step: f.Create, Note: f.Note}),
		add(ops, store.MemberChange{From: created, To: state.StatusHandleFailed, Step: f.Handle, Note: f.Note}),
		del(ops, store.MemberChange{From: closing, To: state.StatusHandleFailed, Step: state.StepCloseFailed, Note: f.Note}),
	}
}

// abandoned: an operator settled the batch, or the sweep did once it stayed BLOCKED too long, with
// no failure of its own decided — its members did not fail at anything of theirs, and nothing
// tries them again by itself (docs/states.md, 'What people read of each state').
var abandoned = change.Failure{Steps: change.Steps{Create: state.StepBatchAbandoned, Handle: state.StepBatchAbandoned}}

// encodeFailure is the failure as recorded on a batch whose settlement did not go through
// (merge_batch.failing): its two steps' codes and its note, "create handle note".
func encodeFailure(f change.Failure) string {
	return fmt.Sprintf("%d %d %s", f.Create, f.Handle, f.Note)
}

// decodeFailure reads what encodeFailure wrote. Anything unreadable (a hand-edited row) is the
// generic failure with the text as its note: the batch is still settled, never left active.
func decodeFailure(s string) change.Failure {
	var create, handle int
	if _, err := fmt.Sscanf(s, "%d %d ", &create, &handle); err == nil {
		parts := strings.SplitN(s, " ", 3)
		f := change.Failure{Steps: change.Steps{Create: state.Step(create), Handle: state.Step(handle)}}
		if len(parts) == 3 {
			f.Note = parts[2]
		}
		if f.Create.Known() && f.Handle.Known() {
			return f
		}
	}
	return change.FailedCreate.With(s)
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
