package workflow

import (
	"context"
	"errors"
	"fmt"

	"bindery/change"
	"bindery/config"
	"bindery/gitlab"
	"bindery/store"
)

// The legacy MR-first flow (workflow.approvalFirst false): one MR per request, created before the
// approval, its number sent in the ticket's ext.mrId; on approval that MR is approved and merged.
// Every step reads the remote state first, so a re-run (sweep, operator) is safe.

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
// a flag of its caller: the row written by apply (MR_CREATING / CREATE_STARTED) goes on; a
// failed or pending create (an operator's retry) is moved back to CREATE_STARTED first; an MR
// already recorded on the operation is read, not created again. Then the pipeline: passed →
// MR_CREATED / CREATE_SUCCEEDED and the approval ticket with ext.mrId; failed (after the flaky
// retries) → CREATE_FAILED / CREATE_PIPELINE_FAILED; no answer in time → MR_CREATING /
// CREATE_PIPELINE_PENDING (WAIT_MANUAL: an operator retries on the same MR).
func (w *Workflow) createMR(ctx context.Context, r *stepRun) error {
	timedOut := r.req.Operation.Step == store.StepCreatePipelinePending
	switch st, step := r.req.Binding.Status, r.req.Operation.Step; {
	case st == store.StatusMRCreating && step == store.StepCreateStarted:
	case st == store.StatusMRCreating || st == store.StatusCreateFailed:
		if err := r.move(ctx, store.Change{To: store.StatusMRCreating, Step: store.StepCreateStarted}); err != nil {
			return err
		}
	case st == store.StatusMRCreated:
		return w.openTicket(ctx, r) // the MR passed CI before a crash: the ticket is next
	default:
		return nil // moved on
	}
	spec, _, err := w.legacySpec(r.req.Operation)
	if err != nil {
		return failed(store.StatusCreateFailed, store.StepCreateInvalid, err)
	}
	mr, err := w.change.Open(ctx, spec, r.req.Operation.MRIID)
	if err != nil {
		return err
	}
	if mr.IID != r.req.Operation.MRIID {
		if err := r.move(ctx, store.Change{To: store.StatusMRCreating, Step: store.StepCreateStarted, MRIID: mr.IID, Note: "Merge request !" + fmt.Sprint(mr.IID) + " opened."}); err != nil {
			return err
		}
	}
	if timedOut {
		if err := w.restartStuckPipeline(ctx, spec.Project, mr.IID); err != nil {
			return err
		}
	}
	res, err := w.waitPipeline(ctx, spec.Project, mr.IID)
	switch {
	case errors.Is(err, change.ErrMRClosed):
		return failed(store.StatusCreateFailed, store.StepHandleMRClosed, err)
	case err != nil:
		return err
	case res.Outcome == change.TimedOut:
		return r.move(ctx, store.Change{To: store.StatusMRCreating, Step: store.StepCreatePipelinePending, PipelineID: pipelineID(res),
			Note: "The pipeline gave no answer in time.", ReleaseLease: true})
	case res.Outcome == change.Failed:
		return failed(store.StatusCreateFailed, store.StepCreatePipelineFailed, errors.New("The merge request's pipeline failed."))
	}
	if err := r.move(ctx, store.Change{To: store.StatusMRCreated, Step: store.StepCreateSucceeded, PipelineID: pipelineID(res)}); err != nil {
		return err
	}
	return w.openTicket(ctx, r)
}

// waitPipeline polls the MR's pipeline in stages, with batch.flakyRetries new pipelines on the
// same commit after a failure before the failure counts.
func (w *Workflow) waitPipeline(ctx context.Context, project string, iid int64) (change.PipelineResult, error) {
	wake, stop := w.waker(project, iid)
	defer stop()
	snap := w.cfg.Current()
	for retries := snap.BatchFlakyRetries(); ; retries-- {
		res, err := w.change.WaitPipeline(ctx, project, iid, stages(snap), wake)
		if err != nil || res.Outcome != change.Failed || retries <= 0 {
			return res, err
		}
		w.log.InfoContext(ctx, "pipeline failed; retrying once on the same commit (flaky)", "project", project, "mr", iid)
		if err := w.change.RetryPipeline(ctx, project, iid); err != nil {
			return res, err
		}
	}
}

// mergeMR is the legacy handle step, after the approval: remote state first (merged → finish as
// merged; closed → HANDLE_FAILED / HANDLE_MR_CLOSED), approve by both reviewers, merge with
// rebase-and-retry and regenerate-on-conflict. The specific failures get their own states:
// conflict → HANDLE_REBASE_CONFLICT, pipeline failed after a rebase → HANDLE_PIPELINE_FAILED
// (CONTACT_SUPPORT); no answer in time → MERGING / HANDLE_PIPELINE_PENDING (WAIT_MANUAL).
func (w *Workflow) mergeMR(ctx context.Context, r *stepRun) error {
	timedOut := r.req.Operation.Step == store.StepHandlePipelinePending
	switch st := r.req.Binding.Status; {
	case st == store.StatusMerging:
	case st == store.StatusHandleFailed && r.req.Operation.MRIID > 0:
		if err := r.move(ctx, store.Change{To: store.StatusMerging, Step: store.StepHandleStarted}); err != nil {
			return err
		}
	default:
		return nil
	}
	op := r.req.Operation
	spec, _, err := w.legacySpec(op)
	if err != nil {
		return failed(store.StatusHandleFailed, store.StepHandleMergeFailed, err)
	}
	mr, err := w.change.Approve(ctx, spec.Project, op.MRIID)
	switch {
	case errors.Is(err, change.ErrMRClosed):
		return failed(store.StatusHandleFailed, store.StepHandleMRClosed, err)
	case err != nil:
		return failed(store.StatusHandleFailed, store.StepHandleApproveFailed, err)
	case mr.Merged():
		return w.recordMerged(ctx, r, "Already merged.")
	}
	if op.Step != store.StepHandleApproved {
		if err := r.move(ctx, store.Change{To: store.StatusMerging, Step: store.StepHandleApproved}); err != nil {
			return err
		}
	}
	if timedOut {
		if err := w.restartStuckPipeline(ctx, spec.Project, op.MRIID); err != nil {
			return err
		}
	}
	wake, stop := w.waker(spec.Project, op.MRIID)
	defer stop()
	// One legacy merge per project at a time on this instance: each MR is merged on top of the
	// target, so concurrent merges into one branch make each other rebase again and again until
	// they give up. (The batch path needs no lock: its partition slot allows one batch at once.)
	unlock, err := w.lockProject(ctx, spec.Project)
	if err != nil {
		return err
	}
	defer unlock()
	merged, err := w.change.Merge(ctx, change.MergeInput{Spec: spec, IID: op.MRIID, Stages: stages(w.cfg.Current()), Wake: wake})
	switch {
	case err == nil && merged.Merged():
		return w.recordMerged(ctx, r, "")
	case errors.Is(err, change.ErrPending):
		return r.move(ctx, store.Change{To: store.StatusMerging, Step: store.StepHandlePipelinePending,
			Note: "A rebase or pipeline gave no answer in time.", ReleaseLease: true})
	case errors.Is(err, change.ErrConflict):
		return failed(store.StatusHandleFailed, store.StepHandleRebaseConflict, err)
	case errors.Is(err, change.ErrPipelineFailed):
		return failed(store.StatusHandleFailed, store.StepHandlePipelineFailed, err)
	case errors.Is(err, change.ErrMRClosed):
		return failed(store.StatusHandleFailed, store.StepHandleMRClosed, err)
	case err == nil:
		return fmt.Errorf("merge of !%d ended without a merged MR", op.MRIID)
	}
	return err
}

// restartStuckPipeline is an operator's retry of a step whose pipeline gave no answer in time:
// a pipeline that finished meanwhile is taken as it is; one still running gets a new pipeline
// on the same commit (the old one may never end). A rebase in progress is left to finish.
func (w *Workflow) restartStuckPipeline(ctx context.Context, project string, iid int64) error {
	mr, err := w.change.GitLab.GetMergeRequest(ctx, project, iid)
	if err != nil || mr.RebaseInProgress || !mr.Open() {
		return err
	}
	if p := mr.HeadPipeline; p != nil && p.SHA == mr.SHA && p.Outcome() != gitlab.Running {
		return nil
	}
	w.log.InfoContext(ctx, "retry: starting a new pipeline in place of one that gave no answer", "project", project, "mr", iid)
	return w.change.RetryPipeline(ctx, project, iid)
}

// recordMerged writes MERGED and replays a deploy callback that came first.
func (w *Workflow) recordMerged(ctx context.Context, r *stepRun, note string) error {
	if err := r.move(ctx, store.Change{To: store.StatusMerged, Step: store.StepHandleMerged, Note: note, ReleaseLease: true}); err != nil {
		return err
	}
	w.catchUpDeploy(ctx, r.req.Operation.Project, r.req.Operation.MRIID)
	return nil
}

// closeRejectedMR closes the MR of a rejected legacy request on the workers (closed or merged
// already → nothing to do: Close reads first). The request is REJECTED either way; a refused
// hand-off leaves the MR open, which only costs a branch, and is logged.
func (w *Workflow) closeRejectedMR(ctx context.Context, op store.Operation) {
	if op.MRIID == 0 {
		return
	}
	err := w.pool.Submit("close rejected MR "+op.OperationID, func(ctx context.Context) {
		if merged, err := w.change.Close(ctx, op.Project, op.MRIID); err != nil || merged {
			w.log.WarnContext(ctx, "closing the MR of a rejected request", "operation", op.OperationID, "mr", op.MRIID, "merged", merged, "err", err)
		}
	})
	if err != nil {
		w.log.WarnContext(ctx, "the MR of a rejected request stays open: the workers refused the close", "operation", op.OperationID, "mr", op.MRIID, "err", err)
	}
}

// stages is the polling schedule in force.
func stages(snap *config.Snapshot) change.Stages {
	short, n, long, timeout := snap.PollStages()
	return change.Stages{Short: short, ShortCount: n, Long: long, Timeout: timeout}
}

func pipelineID(res change.PipelineResult) int64 {
	if res.Pipeline != nil {
		return res.Pipeline.ID
	}
	return 0
}

// lockProject waits for the project's legacy merge lock (or ctx) and returns its release.
func (w *Workflow) lockProject(ctx context.Context, project string) (func(), error) {
	w.mu.Lock()
	ch := w.merging[project]
	if ch == nil {
		ch = make(chan struct{}, 1)
		w.merging[project] = ch
	}
	w.mu.Unlock()
	select {
	case ch <- struct{}{}:
		return func() { <-ch }, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// waker registers a channel a GitLab event for (project, iid) wakes; stop unregisters it.
func (w *Workflow) waker(project string, iid int64) (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	k := mrKey{project, iid}
	w.mu.Lock()
	if w.wakers[k] == nil {
		w.wakers[k] = map[chan struct{}]struct{}{}
	}
	w.wakers[k][ch] = struct{}{}
	w.mu.Unlock()
	return ch, func() {
		w.mu.Lock()
		delete(w.wakers[k], ch)
		if len(w.wakers[k]) == 0 {
			delete(w.wakers, k)
		}
		w.mu.Unlock()
	}
}

// wake pokes every legacy poller of (project, iid); it reports whether there was one.
func (w *Workflow) wake(project string, iid int64) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	for ch := range w.wakers[mrKey{project, iid}] {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
	return len(w.wakers[mrKey{project, iid}]) > 0
}
