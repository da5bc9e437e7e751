package workflow

import (
	"context"
	"errors"
	"fmt"
	"time"

	"bindery/change"
	"bindery/config"
	"bindery/engine"
	"bindery/gitlab"
	"bindery/state"
	"bindery/store"
)

// The legacy MR-first flow (workflow.approvalFirst false): one MR per request, created before the
// approval, its number sent in the ticket's ext.mrId; on approval that MR is approved and merged.
// Each step is one action of the request's task; every step reads the remote state first, so a
// re-run (crash, operator) is safe.

// legacySpec is the request's own MR.
func (w *Workflow) legacySpec(op store.Operation) (change.Spec, config.Target, error) {
	t, ok := w.cfg.Current().Target(op.TargetKey)
	if !ok {
		return change.Spec{}, t, errTargetGone
	}
	f, err := fileOf(t, op)
	if err != nil {
		return change.Spec{}, t, err
	}
	return change.Spec{
		Project: t.Project, TargetBranch: t.Branch, SourceBranch: "bindery/op-" + op.OperationID,
		Title:       fmt.Sprintf("bindery: %s for %s", t.Key, op.SubjectID),
		Description: fmt.Sprintf("Request %s: %s", op.OperationID, op.Reason),
		Actions:     []change.FileAction{f},
	}, t, nil
}

// createMR is the legacy create step. It decides "insert or advance" from the database, not from
// a flag of its caller: the row written by apply (MR_CREATING / CREATE_STARTED) goes on; a failed
// create (an operator's retry) is moved back to CREATE_STARTED first; an MR already recorded on
// the operation is read, not created again (and one whose creation answer was lost is found by
// GitLab's 409). Then the pipeline wait starts (create_pipeline).
func (w *Workflow) createMR(ctx context.Context, r *reqRun) error {
	switch st, step := r.req.Binding.Status, r.req.Operation.Step; {
	case st == state.StatusMRCreating && step == state.StepCreateStarted:
	case st == state.StatusMRCreating || st == state.StatusCreateFailed:
		return r.move(ctx, store.Change{To: state.StatusMRCreating, Step: state.StepCreateStarted}, store.TaskNext{})
	case st == state.StatusMRCreated: // the MR passed CI before a crash: the ticket is next
		return r.r.Next(ctx, store.TaskNext{Step: stepTicket, Lane: laneOf(stepTicket)}, nil)
	default:
		return r.r.Finish(ctx, nil) // moved on
	}
	spec, _, err := w.legacySpec(r.req.Operation)
	if err != nil {
		return failed(state.StatusCreateFailed, state.StepCreateInvalid, err)
	}
	mr, err := w.change.Open(ctx, spec, r.req.Operation.MRIID)
	if err != nil {
		return err
	}
	r.memo = reqMemo{}
	if mr.IID == r.req.Operation.MRIID { // recorded by an earlier run: only the wait is next
		return r.r.Next(ctx, store.TaskNext{Step: stepCreatePipeline, Lane: laneOf(stepCreatePipeline), Wait: store.WaitStart, Memo: r.memo.encode()}, nil)
	}
	return r.then(ctx, stepCreatePipeline, 0, store.Change{To: state.StatusMRCreating, Step: state.StepCreateStarted, MRIID: mr.IID,
		Note: "Merge request !" + fmt.Sprint(mr.IID) + " opened."})
}

// createPipeline is one look at the legacy MR's pipeline: passed → MR_CREATED / CREATE_SUCCEEDED
// and the approval ticket with ext.mrId; failed (after the flaky retries) → CREATE_FAILED /
// CREATE_PIPELINE_FAILED; no answer within poll.timeout → MR_CREATING / CREATE_PIPELINE_PENDING
// (WAIT_MANUAL: an operator retries on the same MR, replacing a pipeline still running).
func (w *Workflow) createPipeline(ctx context.Context, r *reqRun) error {
	op := r.req.Operation
	if r.req.Binding.Status != state.StatusMRCreating || op.MRIID == 0 {
		return r.r.Finish(ctx, nil)
	}
	if r.memo.Restart { // an operator's retry of a pipeline that gave no answer in time
		if _, err := w.change.RestartStuckPipeline(ctx, op.Project, op.MRIID); err != nil {
			return err
		}
		r.memo.Restart = false
	}
	look, err := w.change.LookAtPipeline(ctx, op.Project, op.MRIID, w.cfg.Current().BatchFlakyRetries()-r.memo.Flaky)
	switch {
	case errors.Is(err, change.ErrMRClosed):
		return failed(state.StatusCreateFailed, state.StepHandleMRClosed, err)
	case err != nil:
		return err
	case look.Retried:
		r.memo.Flaky++
		return r.r.Next(ctx, store.TaskNext{Wait: store.WaitStart, Memo: r.memo.encode(), Note: "the pipeline failed; a new run on the same commit"}, nil)
	case look.Outcome == change.Failed:
		pipeline := pipelineID(look.PipelineResult)
		w.change.KeepFailedJob(ctx, w.db, op.Project, pipeline)
		return &failure{to: state.StatusCreateFailed, step: state.StepCreatePipelineFailed, err: words("The merge request's pipeline failed."), pipeline: pipeline}
	case look.Outcome == change.Passed:
		return r.then(ctx, stepTicket, 0, store.Change{To: state.StatusMRCreated, Step: state.StepCreateSucceeded, PipelineID: pipelineID(look.PipelineResult)})
	}
	next, timedOut := r.r.Poll(w.stages(), "waiting for the merge request's pipeline")
	if timedOut {
		return r.finish(ctx, store.Change{To: state.StatusMRCreating, Step: state.StepCreatePipelinePending, PipelineID: pipelineID(look.PipelineResult),
			Note: "The pipeline gave no answer in time."})
	}
	next.Memo = r.memo.encode()
	return r.r.Next(ctx, next, nil)
}

// approveMR is the legacy handle step after the approval: remote state first (merged → finish as
// merged; closed → HANDLE_FAILED / HANDLE_MR_CLOSED), then both reviewers approve, then the merge.
// A failed step an operator retries (HANDLE_FAILED with its MR) is moved back to HANDLE_STARTED.
func (w *Workflow) approveMR(ctx context.Context, r *reqRun) error {
	switch st := r.req.Binding.Status; {
	case st == state.StatusMerging:
	case st == state.StatusHandleFailed && r.req.Operation.MRIID > 0:
		return r.move(ctx, store.Change{To: state.StatusMerging, Step: state.StepHandleStarted}, store.TaskNext{})
	default:
		return r.r.Finish(ctx, nil)
	}
	op := r.req.Operation
	mr, err := w.change.Approve(ctx, op.Project, op.MRIID)
	switch {
	case errors.Is(err, change.ErrMRClosed):
		return failed(state.StatusHandleFailed, state.StepHandleMRClosed, err)
	case err != nil && engine.Transient(err):
		return err
	case err != nil:
		return failed(state.StatusHandleFailed, state.StepHandleApproveFailed, err)
	case mr.Merged():
		return w.recordMerged(ctx, r, "Already merged.", mr)
	}
	r.memo = reqMemo{Approved: mr.SHA}
	return r.then(ctx, string(change.MergeAttempt), 0, store.Change{To: state.StatusMerging, Step: state.StepHandleApproved})
}

// mergeSlot serialises the legacy merges of one project across every instance: each MR is merged
// on top of the target, so concurrent merges into one branch make each other rebase again and
// again until they give up. (The batch path needs none: its partition slot allows one batch.)
func mergeSlot(project string) string { return "legacy-merge:" + project }

// slotSafety is when a request waiting for its project's merge slot looks again by itself: the
// end of the merge before it hands the slot on at once; this only covers a missed hand-over.
const slotSafety = time.Minute

// mergeMR is one action of the legacy merge, with rebase-and-retry and regenerate-on-conflict
// (change.MergeStep), holding the project's merge slot. The specific failures get their own
// states: conflict → HANDLE_REBASE_CONFLICT, pipeline failed after a rebase →
// HANDLE_PIPELINE_FAILED (CONTACT_SUPPORT); no answer within poll.timeout → MERGING /
// HANDLE_PIPELINE_PENDING or HANDLE_REBASE_PENDING (WAIT_MANUAL). Something on the MR only a
// person can clear → MERGING / HANDLE_MR_BLOCKED with the reason, the merge slot given up while
// it waits (other requests of the project merge meanwhile); cleared → the merge goes on, not
// cleared within batch.blockedTimeout → HANDLE_FAILED.
func (w *Workflow) mergeMR(ctx context.Context, r *reqRun) error {
	op := r.req.Operation
	if r.req.Binding.Status != state.StatusMerging || op.MRIID == 0 {
		return r.r.Finish(ctx, nil)
	}
	spec, _, err := w.legacySpec(op)
	if err != nil {
		return failed(state.StatusHandleFailed, state.StepHandleMergeFailed, err)
	}
	phase := change.MergePhase(r.r.Task.Step)
	slot := mergeSlot(op.Project)
	if r.r.Task.Slot != slot && phase != change.MergeBlocked {
		ok, err := w.db.TakeSlot(ctx, r.r.Task, slot)
		if err != nil {
			return engine.Unavailable(err)
		}
		if !ok {
			return r.r.Await(ctx, slot, slotSafety, "waiting for another request's merge in "+op.Project)
		}
		r.r.Task.Slot = slot
	}
	if r.memo.Restart {
		if _, err := w.change.RestartStuckPipeline(ctx, op.Project, op.MRIID); err != nil {
			return err
		}
		r.memo.Restart = false
	}
	res, err := w.change.MergeStep(ctx, spec, op.MRIID, change.MergeState{Phase: phase, Regenerated: r.memo.Regen,
		Refused: r.memo.Refused, Tested: r.memo.Tested, Approved: r.memo.Approved})
	r.memo.Regen, r.memo.Refused = res.State.Regenerated, res.State.Refused
	r.memo.Tested, r.memo.Approved = res.State.Tested, res.State.Approved
	switch {
	case err == nil && res.Merged:
		return w.recordMerged(ctx, r, "", res.MR)
	case errors.Is(err, change.ErrConflict):
		return failed(state.StatusHandleFailed, state.StepHandleRebaseConflict, err)
	case errors.Is(err, change.ErrPipelineFailed):
		return failed(state.StatusHandleFailed, state.StepHandlePipelineFailed, err)
	case errors.Is(err, change.ErrMRClosed):
		return failed(state.StatusHandleFailed, state.StepHandleMRClosed, err)
	case err != nil:
		return err
	case res.Wait:
		return w.mergeWait(ctx, r, phase, res)
	case res.State.Phase == change.MergeBlocked:
		return r.blocked(ctx, res.Blocked)
	case res.Unblocked:
		return r.move(ctx, store.Change{To: state.StatusMerging, Step: state.StepHandleStarted, Note: "The merge request is no longer blocked."},
			store.TaskNext{Step: string(res.State.Phase)})
	}
	n := store.TaskNext{Step: string(res.State.Phase)}
	switch {
	case res.State.Phase.Polls() && res.State.Phase != phase:
		n.Wait = store.WaitStart
	case res.Pause:
		n.In = w.stages().Short
	}
	n.Memo = r.memo.encode()
	return r.r.Next(ctx, n, nil)
}

// mergeWait is a merge phase that found nothing decided yet: the next look, up to poll.timeout
// for GitLab's own work (then WAIT_MANUAL for an operator's retry) and batch.blockedTimeout for a
// person to clear the MR (then HANDLE_FAILED).
func (w *Workflow) mergeWait(ctx context.Context, r *reqRun, phase change.MergePhase, res change.MergeResult) error {
	st := w.stages()
	if phase == change.MergeBlocked {
		st.Timeout = w.cfg.Current().BatchBlockedTimeout()
	}
	next, timedOut := r.r.Poll(st, "waiting for GitLab ("+string(phase)+")")
	switch {
	case !timedOut:
		next.Memo = r.memo.encode()
		return r.r.Next(ctx, next, nil)
	case phase == change.MergeBlocked && res.Blocked != "":
		return failed(state.StatusHandleFailed, state.StepHandleMergeFailed,
			words(fmt.Sprintf("Nobody did this within batch.blockedTimeout: %s.", res.Blocked)))
	case phase == change.MergeBlocked:
		return failed(state.StatusHandleFailed, state.StepHandleMergeFailed, words("The merge request stayed blocked for longer than batch.blockedTimeout."))
	case phase == change.MergeChecking:
		return r.blocked(ctx, fmt.Sprintf("GitLab kept computing whether MR !%d can be merged for longer than poll.timeout", r.req.Operation.MRIID))
	case phase == change.MergeRebasing:
		return r.finish(ctx, store.Change{To: state.StatusMerging, Step: state.StepHandleRebasePending, Note: "The rebase gave no answer in time."})
	}
	return r.finish(ctx, store.Change{To: state.StatusMerging, Step: state.StepHandlePipelinePending, Note: "A pipeline or GitLab's mergeability check gave no answer in time."})
}

// blocked: something on the MR only a person can clear keeps GitLab from merging it. The request
// shows the reason (WAIT_MANUAL) and its task keeps looking, without the project's merge slot.
func (r *reqRun) blocked(ctx context.Context, reason string) error {
	none := ""
	return r.move(ctx, store.Change{To: state.StatusMerging, Step: state.StepHandleMRBlocked, Note: reason + "."},
		store.TaskNext{Step: string(change.MergeBlocked), Wait: store.WaitStart, Slot: &none, Note: "blocked: " + reason})
}

// recordMerged writes MERGED with where mr landed in the project's merge order, ends the task
// (its merge slot with it) and replays a deploy callback that came first.
func (w *Workflow) recordMerged(ctx context.Context, r *reqRun, note string, mr gitlab.MergeRequest) error {
	land := change.Landed(r.req.Operation.Project, mr)
	err := r.r.Finish(ctx, func(tx *store.Tx) error {
		if err := tx.RecordMerge(ctx, *land); err != nil {
			return err
		}
		return r.transition(ctx, tx, store.Change{To: state.StatusMerged, Step: state.StepHandleMerged, Note: note})
	})
	if err != nil {
		return err
	}
	w.catchUpDeploy(ctx, r.req.Operation.Project, r.req.Operation.MRIID)
	return nil
}

// closeRejectedMR closes the MR of a rejected legacy request (closed or merged already → nothing
// to do: Close reads first). The request is REJECTED either way; the close is a task of its own,
// so a crash or a busy instance only delays it. A merged MR here is logged: somebody merged it
// by hand, and the request's file may be on the branch without an approval.
func (w *Workflow) closeRejectedMR(ctx context.Context, r *reqRun) error {
	op := r.req.Operation
	if op.MRIID == 0 {
		return r.r.Finish(ctx, nil)
	}
	merged, err := w.change.Close(ctx, op.Project, op.MRIID)
	switch {
	case errors.Is(err, change.ErrLocked):
		return r.r.Next(ctx, store.TaskNext{In: w.stages().Short, Note: "the MR is being merged right now; looking again"}, nil)
	case err != nil:
		return err
	case merged:
		w.log.WarnContext(ctx, "the MR of a rejected request was merged outside bindery", "operation", op.OperationID, "mr", op.MRIID)
	}
	return r.r.Finish(ctx, nil)
}

// stages is the polling schedule in force.
func (w *Workflow) stages() engine.Stages {
	short, n, long, timeout := w.cfg.Current().PollStages()
	return engine.Stages{Short: short, ShortCount: n, Long: long, Timeout: timeout}
}

func pipelineID(res change.PipelineResult) int64 {
	if res.Pipeline != nil {
		return res.Pipeline.ID
	}
	return 0
}
