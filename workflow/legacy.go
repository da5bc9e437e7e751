package workflow

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"bindery/batch"
	"bindery/internal/platform/config"
	"bindery/internal/remote/gitlab"
	"bindery/internal/vocab/state"
	"bindery/internal/work/change"
	"bindery/internal/work/engine"
	"bindery/store"
)

// The legacy MR-first flow (workflow.approvalFirst false): one MR per request, created before the
// approval, its number sent in the ticket's ext.mrId; on approval that MR is approved and merged.
// Each step is one action of the request's task; every step reads the remote state first, so a
// re-run (crash, operator) is safe.

// legacySpec is the request's own MR.
func (w *Workflow) legacySpec(op store.Operation) (change.Spec, config.Target, error) {
	t, ok := batch.TargetOf(w.cfg.Current(), op)
	if !ok {
		return change.Spec{}, t, errTargetGone
	}
	f, err := fileOf(t, op)
	if err != nil {
		return change.Spec{}, t, err
	}
	return change.Spec{
		Project: t.Project, TargetBranch: t.Branch, SourceBranch: legacyBranchPrefix + op.OperationID,
		Title:       fmt.Sprintf("bindery: %s for %s", t.Key, op.SubjectID),
		Description: fmt.Sprintf("Request %s: %s", op.OperationID, op.Reason),
		Actions:     []change.FileAction{f},
	}, t, nil
}

// legacyBranchPrefix starts the branch of every legacy request's MR: bindery/op-<operationId>.
const legacyBranchPrefix = "bindery/op-"

// legacyTaskOfBranch names the request task behind a branch bindery wrote for a legacy request (a
// pipeline event that names no MR names its branch); false for any other branch.
func legacyTaskOfBranch(branch string) (store.TaskRef, bool) {
	op, ok := strings.CutPrefix(branch, legacyBranchPrefix)
	if !ok || op == "" {
		return store.TaskRef{}, false
	}
	return legacyMRTask(op), true
}

// legacyMRTask is what GitLab news of a legacy request's MR or branch wakes: the request's task
// at any step but the approval's. The ticket and its look wait for the approval system, asked
// every approval.pollAfter — a pipeline event is no news of the decision (woken, the look would
// read the ticket at each of them).
func legacyMRTask(op string) store.TaskRef {
	var steps []string
	for _, r := range (&Workflow{}).steps() {
		if r.Name != stepTicket && r.Name != stepTicketPoll {
			steps = append(steps, string(r.Name))
		}
	}
	return store.TaskRef{Kind: state.TaskRequest, Ref: op, Steps: steps}
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
		return r.move(ctx, creatingMR(0, ""), store.TaskNext{})
	case st == state.StatusMRCreated: // the MR passed CI before a crash: the ticket is next
		return r.Next(ctx, r.To(stepTicket), nil)
	default:
		return r.Finish(ctx, nil) // moved on
	}
	spec, _, err := w.legacySpec(r.req.Operation)
	if err != nil {
		return change.FailedInvalid.Because(err)
	}
	r.Memo = reqMemo{}
	o, err := w.mr.Open(ctx, spec, r.req.Operation.MRIID, false, &r.Memo.Memo)
	switch {
	case err != nil:
		return err
	case o.Result == change.Failed:
		return o.Cause // the step's declared failure, as before the lifecycle recognised it
	case o.Result == change.Absent:
		return change.ErrNothingToChange
	case o.MR.IID == r.req.Operation.MRIID: // recorded by an earlier run: only the wait is next
		return r.Next(ctx, r.To(stepCreatePipeline), nil)
	}
	return r.then(ctx, stepCreatePipeline, 0, creatingMR(o.MR.IID, "Merge request !"+fmt.Sprint(o.MR.IID)+" opened."))
}

// createPipeline is one look at the legacy MR's pipeline: passed → MR_CREATED / CREATE_SUCCEEDED
// and the approval ticket with ext.mrId; failed (after the flaky retries) → CREATE_FAILED /
// CREATE_PIPELINE_FAILED; no answer within poll.timeout, even from a new pipeline →
// MR_CREATING / CREATE_PIPELINE_PENDING (WAIT_MANUAL: an operator retries on the same MR,
// replacing a pipeline still running).
func (w *Workflow) createPipeline(ctx context.Context, r *reqRun) error {
	op := r.req.Operation
	if r.req.Binding.Status != state.StatusMRCreating || op.MRIID == 0 {
		return r.Finish(ctx, nil)
	}
	if r.Memo.Restart { // an operator's retry of a pipeline that gave no answer in time
		if _, err := w.mr.RestartStuckPipeline(ctx, op.Project, op.MRIID); err != nil {
			return err
		}
		r.Memo.Restart = false
	}
	o, err := w.mr.Pipeline(ctx, r.Run, op.Project, op.MRIID, &r.Memo.Memo, true)
	if err != nil {
		return err
	}
	pipeline := pipelineID(o.Pipeline)
	switch o.Result {
	case change.Closed:
		return change.FailedMRClosed.Because(change.ErrMRClosed)
	case change.Retried, change.Replaced:
		n := r.To(stepCreatePipeline)
		n.Note = o.Note
		return r.Next(ctx, n, nil)
	case change.Failed:
		w.mr.KeepFailedJob(ctx, w.db, op.Project, pipeline)
		f := change.FailedPipeline
		f.Pipeline = pipeline
		return f.Because(words("The merge request's pipeline failed."))
	case change.Passed, change.Merged:
		return r.then(ctx, stepTicket, 0, mrCreated(pipeline))
	case change.Stuck:
		return r.finish(ctx, pipelineStuck(pipeline, "The pipeline gave no answer in time."))
	}
	return r.Next(ctx, o.Next, nil)
}

// approveMR is the legacy handle step after the approval: remote state first (merged → finish as
// merged; closed → HANDLE_FAILED / HANDLE_MR_CLOSED), then both reviewers approve, then the merge.
// A failed step an operator retries (HANDLE_FAILED with its MR) is moved back to HANDLE_STARTED.
func (w *Workflow) approveMR(ctx context.Context, r *reqRun) error {
	switch st := r.req.Binding.Status; {
	case st == state.StatusMerging:
	case st == state.StatusHandleFailed && r.req.Operation.MRIID > 0:
		return r.move(ctx, merging(state.StepHandleStarted, ""), store.TaskNext{})
	default:
		return r.Finish(ctx, nil)
	}
	op := r.req.Operation
	r.Memo = reqMemo{}
	o, err := w.mr.Approve(ctx, op.Project, op.MRIID, &r.Memo.Memo)
	switch {
	case err != nil:
		return err
	case o.Result == change.Closed:
		return change.FailedMRClosed.Because(change.ErrMRClosed)
	case o.Result == change.Merged:
		return w.recordMerged(ctx, r, "Already merged.", o.MR)
	}
	return r.then(ctx, stepMerge, 0, merging(state.StepHandleApproved, ""))
}

// mergeSlot serialises the legacy merges of one project across every instance: each MR is merged
// on top of the target, so concurrent merges into one branch make each other rebase again and
// again until they give up. (The batch path needs none: its partition slot allows one batch.)
func mergeSlot(project string) string { return "legacy-merge:" + project }

// slotSafety is when a request waiting for its project's merge slot looks again by itself: the
// end of the merge before it hands the slot on at once; this only covers a missed hand-over.
const slotSafety = time.Minute

// mergeMR is one action of the legacy merge (the lifecycle's merge phases), holding the project's
// merge slot. The specific failures get their own states: conflict → HANDLE_REBASE_CONFLICT,
// pipeline failed after a rebase (and its flaky retries) → HANDLE_PIPELINE_FAILED
// (CONTACT_SUPPORT); no answer within poll.timeout → MERGING / HANDLE_PIPELINE_PENDING or
// HANDLE_REBASE_PENDING (WAIT_MANUAL). Something on the MR only a person can clear → MERGING /
// HANDLE_MR_BLOCKED with the reason, the merge slot given up while it waits (other requests of
// the project merge meanwhile); cleared → the merge goes on, not cleared within
// batch.blockedTimeout → HANDLE_FAILED.
func (w *Workflow) mergeMR(ctx context.Context, r *reqRun) error {
	op := r.req.Operation
	if r.req.Binding.Status != state.StatusMerging || op.MRIID == 0 {
		return r.Finish(ctx, nil)
	}
	spec, _, err := w.legacySpec(op)
	if err != nil {
		return change.FailedMerge.Because(err)
	}
	phase := change.MergePhase(r.Step.Name)
	slot := mergeSlot(op.Project)
	if r.Task.Slot != slot && phase != change.MergeBlocked {
		ok, err := w.db.TakeSlot(ctx, r.Task, slot)
		if err != nil {
			return engine.Unavailable(err)
		}
		if !ok {
			return r.Await(ctx, slot, slotSafety, "waiting for another request's merge in "+op.Project)
		}
		r.Task.Slot = slot
	}
	o, err := w.mr.Merge(ctx, r.Run, spec, op.MRIID, phase, &r.Memo.Memo)
	if err != nil {
		return err
	}
	m := change.MergeMeaning(o)
	switch m.Class {
	case change.MergeLanded:
		return w.recordMerged(ctx, r, "", o.MR)
	case change.MergeFails:
		if o.Result == change.Expired {
			m.Failure.Cause = words("The merge request stayed blocked for longer than batch.blockedTimeout.")
			if o.Reason != "" {
				m.Failure.Cause = words(fmt.Sprintf("Nobody did this within batch.blockedTimeout: %s.", o.Reason))
			}
		}
		return &m.Failure
	case change.MergeAgain:
		n := r.To(Step(o.Phase))
		n.Note = o.Note
		return r.Next(ctx, n, nil)
	case change.MergeBlocks:
		return r.blocked(ctx, o.Reason)
	case change.MergeHolds:
		step := m.Steps.Handle
		note := "A pipeline or GitLab's mergeability check gave no answer in time."
		if o.Phase == change.MergeRebasing {
			note = "The rebase gave no answer in time."
		}
		return r.finish(ctx, merging(step, note))
	case change.MergeResumes:
		step := m.Steps.Handle
		return r.move(ctx, merging(step, "The merge request is no longer blocked."),
			r.To(Step(o.Phase)))
	}
	return r.Next(ctx, o.Next, nil) // MergeNext: waiting, or moved on
}

// blocked: something on the MR only a person can clear keeps GitLab from merging it. The request
// shows the reason (WAIT_MANUAL) and its task keeps looking, without the project's merge slot.
func (r *reqRun) blocked(ctx context.Context, reason string) error {
	none := ""
	n := r.To(stepMergeBlocked)
	n.Slot, n.Note = &none, "blocked: "+reason
	step := change.MRBlocked.Handle
	return r.move(ctx, merging(step, reason+"."), n)
}

// recordMerged writes MERGED with where mr landed in the project's merge order, ends the task
// (its merge slot with it) and replays a deploy callback that came first.
func (w *Workflow) recordMerged(ctx context.Context, r *reqRun, note string, mr gitlab.MergeRequest) error {
	land := change.Landed(r.req.Operation.Project, mr)
	err := r.Finish(ctx, func(tx *store.Tx) error {
		if err := tx.RecordMerge(ctx, *land); err != nil {
			return err
		}
		return r.transition(ctx, tx, mergedOwnMR(note))
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
		return r.Finish(ctx, nil)
	}
	merged, err := w.mr.Close(ctx, op.Project, op.MRIID)
	switch {
	case errors.Is(err, change.ErrLocked):
		return r.Next(ctx, store.TaskNext{In: w.mr.Stages().Short, Note: "the MR is being merged right now; looking again"}, nil)
	case err != nil:
		return err
	case merged:
		w.log.WarnContext(ctx, "the MR of a rejected request was merged outside bindery", "operation", op.OperationID, "mr", op.MRIID)
	}
	return r.Finish(ctx, nil)
}

func pipelineID(p *gitlab.Pipeline) int64 {
	if p != nil {
		return p.ID
	}
	return 0
}
