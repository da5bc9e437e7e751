package workflow

import (
	"context"
	"errors"
	"strings"

	"bindery/api"
	"bindery/batch"
	"bindery/internal/vocab/apperr"
	"bindery/internal/vocab/state"
	"bindery/internal/work/change"
	"bindery/internal/work/engine"
	"bindery/store"
)

// Recovery (docs/architecture.md): each piece of in-flight work is a task with a due time, in the
// transaction of the state that needs it, so an instance that dies leaves work that falls due
// again by itself (a claim's due time is its expiry) and any instance's dispatcher resumes it
// from the remote state. Operators re-run a stopped step (retry) or settle a batch; the same
// step functions run, so a re-run is as safe as the first run. The sweep only repairs what
// should never happen: in-flight work without a task.

// sweepPage bounds the orphans one sweep repairs; the next sweep takes the rest.
const sweepPage = 100

// Sweep gives in-flight work that has no task — an old database, a hand edit, a bug; never the
// product's own writes — the task that drives its state, and says so loudly. It returns how
// many it repaired. Safe on every instance at once: the task's unique key lets one insert win.
func (w *Workflow) Sweep(ctx context.Context) (int, error) {
	ops, batches, err := w.db.Orphans(ctx, sweepPage)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, op := range ops {
		step := currentStep(op)
		if step == "" {
			continue
		}
		if w.repair(ctx, w.requestTask(op.OperationID, step, 0, reqMemo{}), "operation", op.OperationID, string(op.Status)) {
			n++
		}
	}
	for _, b := range batches {
		t := w.batches.Repair(b)
		if w.repair(ctx, t, "batch", t.Ref, string(b.Status)) {
			n++
		}
	}
	if n > 0 {
		w.engine.NudgeAll()
	}
	return n, nil
}

// repair inserts one orphan's task; a concurrent repair (another instance) is not an error.
func (w *Workflow) repair(ctx context.Context, t store.TaskSpec, what, id, status string) bool {
	err := w.db.InTx(ctx, func(tx *store.Tx) error { return tx.InsertTask(ctx, t) })
	switch {
	case err == nil:
		w.log.ErrorContext(ctx, "CRITICAL: in-flight work had no task; it was given one", what, id, "status", status, "step", t.Step)
		w.rec.Inc("bindery_orphans_repaired_total", "kind", t.Kind)
		return true
	case !errors.Is(err, store.ErrDuplicate):
		w.log.WarnContext(ctx, "sweep: orphan not repaired", what, id, "err", err)
	}
	return false
}

// currentStep is the task step that drives op in its current state ("" when none of its own:
// waiting for a person, in the waiting set or a batch, stopped, finished). It is the Go side of
// the store's in-flight predicate (store.Orphans); a test holds the two together.
func currentStep(op store.Operation) Step {
	switch st := op.Status; {
	case st == state.StatusApprovalSending:
		return stepTicket
	case st == state.StatusApprovalSent:
		return stepTicketPoll
	case op.Flow != FlowLegacy:
		return ""
	case st == state.StatusMRCreated:
		return stepTicket
	case st == state.StatusMRCreating && op.Step == state.StepCreateStarted:
		return stepCreate
	case st == state.StatusMerging && op.Step.Info().Person:
		return stepMergeBlocked // it looks at the MR until a person cleared it
	case st == state.StatusMerging && !op.Step.Pending():
		return stepApprove
	}
	return ""
}

// Retry re-runs the request's current step (an operator's action; the remote-state checks make
// it safe). A request carried by an active batch resumes its batch. A stopped single-request
// step (failed, pending, or waiting for a decision too long) gets its task again, due now on any
// instance. A request of the batch path whose batch failed goes back to the waiting set. A merged
// request whose deploy callback is overdue (reconcile.deployOverdue) is validated, a removal
// closed: the operator confirms the deploy. Anything else — a step running right now, queued, finished, a deploy
// callback not yet overdue — is a CONFLICT with a sentence that says why.
func (w *Workflow) Retry(ctx context.Context, operationID, actor string) (api.RequestView, error) {
	d, err := w.db.RequestDetail(ctx, operationID)
	if err != nil {
		return api.RequestView{}, notFound(err)
	}
	if d.Binding == nil {
		return api.RequestView{}, apperr.New(apperr.Conflict, "This request was replaced by a newer application; there is nothing to retry.")
	}
	op, status := d.Operation, d.Binding.Status
	note := "Retried by " + actor + "."
	if d.Batch != nil && d.Batch.Status.Active() && inBatchPhase(status, op.Step) {
		w.log.InfoContext(ctx, "retry: resuming the request's batch", "operation", operationID, "batch", d.Batch.ID, "actor", actor)
		if err := w.batches.Resume(ctx, d.Batch.ID); err != nil {
			return api.RequestView{}, batchConflict(err, d.Batch.ID)
		}
		return w.Request(ctx, operationID)
	}
	if deployOverdue(status, op.Step, op.UpdatedAt, w.deployCutoff(ctx, op)) {
		return w.confirmDeploy(ctx, operationID, status == state.StatusValidated, actor)
	}
	cur := store.Request{Operation: op, Binding: *d.Binding}
	move, step, m, err := w.retryPlan(ctx, cur)
	if err != nil {
		return api.RequestView{}, err
	}
	move.Note = note
	if step == "" {
		if err := w.readmit(ctx, op, move); err != nil {
			return api.RequestView{}, err
		}
		return w.Request(ctx, operationID)
	}
	err = w.db.InTx(ctx, func(tx *store.Tx) error {
		if err := tx.PutTask(ctx, w.requestTask(operationID, step, 0, m), true); err != nil {
			return err
		}
		_, err := tx.Transition(ctx, cur, move)
		return err
	})
	switch {
	case errors.Is(err, store.ErrTaskBusy), errors.Is(err, store.ErrRetry):
		// A deadlock is the database choosing a step of the request's that runs at this
		// moment over this write: the same answer as a claimed task.
		return api.RequestView{}, apperr.Busy(err, "A step of this request is running right now; look again in a moment.")
	case errors.Is(err, store.ErrPreempted):
		return api.RequestView{}, apperr.Wrap(err, apperr.Conflict, "The request changed while retrying; look at it again.")
	case err != nil:
		return api.RequestView{}, err
	}
	if row, ok := w.row(step); ok {
		w.engine.Nudge(row.Lane)
	}
	w.log.InfoContext(ctx, "retry: step due now", "operation", operationID, "step", step, "actor", actor)
	return w.Request(ctx, operationID)
}

// batchConflict turns the batch service's refusals into the API's plain sentences.
func batchConflict(err error, batchID int64) error {
	switch {
	case errors.Is(err, batch.ErrBusy):
		return apperr.Busy(err, "A step of batch %d is running right now; look again in a moment.", batchID)
	case errors.Is(err, batch.ErrSettled):
		return apperr.Wrap(err, apperr.Conflict, "Batch %d is already settled.", batchID)
	case errors.Is(err, store.ErrPreempted):
		return apperr.Wrap(err, apperr.Conflict, "Batch %d changed meanwhile; look at it again.", batchID)
	}
	return err
}

// confirmDeploy validates a merged request whose deploy callback is overdue, on an operator's
// word, through the validate path the callback and reconciliation use: the flip happens once
// whoever races it, and the metric and the "validated" line follow only a real flip.
// A removal waiting for its deploy is closed the same way.
func (w *Workflow) confirmDeploy(ctx context.Context, operationID string, removal bool, actor string) (api.RequestView, error) {
	move, after := inEffectNow, w.validated
	if removal {
		move, after = removedNow, w.removed
	}
	// Empty when it no longer waits: a deploy callback or reconciliation flipped it first, and
	// that flip was the one counted.
	flipped, err := w.db.TransitionMany(ctx, []string{operationID}, move("Deploy confirmed by "+actor+"."))
	if err != nil {
		return api.RequestView{}, err
	}
	after(ctx, flipped, "operator")
	if len(flipped) == 0 {
		w.log.InfoContext(ctx, "retry: the deploy was already validated (a callback or reconciliation came first)", "operation", operationID, "actor", actor)
	} else {
		w.log.InfoContext(ctx, "retry: deploy confirmed by an operator", "operation", operationID, "actor", actor)
	}
	return w.Request(ctx, operationID)
}

// readmit puts a request of the batch path whose batch ended without it back into the waiting
// set: its change validated again (a fixed catalog may make an invalid one valid), then the
// state and the admission in one transaction.
func (w *Workflow) readmit(ctx context.Context, op store.Operation, move store.Change) error {
	adm := w.deletion(op)
	if move.Step != state.StepCloseStarted {
		var err error
		if adm, err = w.admission(ctx, op, state.ActionAdd); errors.Is(err, change.ErrInvalidChange) {
			return apperr.Wrap(err, apperr.Conflict, "The request's file change is invalid: %s", noteFor(err))
		} else if err != nil {
			return err
		}
	}
	return retryPreempted(ctx, func() error {
		return w.db.InTx(ctx, func(tx *store.Tx) error {
			cur, err := tx.Request(ctx, op.OperationID)
			if err != nil {
				return err
			}
			if _, err := tx.Transition(ctx, cur, move); err != nil {
				return err
			}
			_, err = tx.Admit(ctx, adm)
			return err
		})
	})
}

// inBatchPhase: the request's state is the batch's to drive.
func inBatchPhase(status state.BindingStatus, step state.Step) bool {
	switch status {
	case state.StatusMRCreating, state.StatusMRCreated, state.StatusMerging, state.StatusValidated:
		return step != state.StepQueued
	}
	return false
}

// retryPlan is what a retry writes and which task step it makes due ("": re-admission), with the
// step's memo. The resume of a legacy step comes from the request kind's step table (resumes);
// the rest is decided by the status.
func (w *Workflow) retryPlan(ctx context.Context, cur store.Request) (store.Change, Step, reqMemo, error) {
	op, status := cur.Operation, cur.Binding.Status
	conflict := func(what string) (store.Change, Step, reqMemo, error) {
		return store.Change{}, "", reqMemo{}, apperr.New(apperr.Conflict, "Nothing to retry: the request is %s.", what)
	}
	switch {
	case status.Reappliable(), status == state.StatusValidated && (op.Step < state.StepCloseStarted || op.Step == state.StepCalledBack):
		return conflict("finished (" + string(status) + ")")
	case status == state.StatusApprovalSent:
		// Waiting for a decision (approval.timeout lists it): the ticket is sent again —
		// idempotent by operationId in the approval system — and the request stays SENT.
		return ticketSent("", ""), stepTicket, reqMemo{}, nil
	case status == state.StatusApprovalSending || op.Step == state.StepApprovalSendFailed:
		// (Re)open the ticket: idempotent by operationId in the approval system.
		return sendingTicket(), stepTicket, reqMemo{}, nil
	case status == state.StatusMerged:
		return conflict("merged and waiting for the deploy pipeline; reconciliation validates it")
	case status == state.StatusValidated && op.Step == state.StepCloseMerged:
		return conflict("removed in a merged merge request and waiting for the deploy pipeline; reconciliation closes it")
	case status == state.StatusHandleFailed && op.Step == state.StepCloseFailed,
		status == state.StatusValidated && op.Step == state.StepCloseStarted:
		// The close phase goes through the batch path in both flows (a legacy request's removal
		// too): back to the waiting set, never to the legacy request's own MR.
		if _, err := w.db.Waiting(ctx, op.OperationID); err == nil {
			return conflict("queued for a batch round")
		}
		return closeStarted(""), "", reqMemo{}, nil
	}
	if op.Flow == FlowLegacy {
		if r, ok := w.legacyResume(status, op); ok {
			return r.move, r.step, r.memo, nil
		}
		return conflict(string(status))
	}
	// The batch path: a request whose batch ended without it goes back to the waiting set.
	switch {
	case status == state.StatusCreateFailed && op.Step == state.StepCreateInvalid:
		// Re-validated at the re-admission (a fixed catalog may make it valid now).
		return queued("", ""), "", reqMemo{}, nil
	case status.Failed(), status == state.StatusMRCreating, status == state.StatusMRCreated, status == state.StatusMerging:
		if _, err := w.db.Waiting(ctx, op.OperationID); err == nil {
			return conflict("queued for a batch round")
		}
		return queued("", ""), "", reqMemo{}, nil
	}
	return conflict(string(status))
}

// resume is a legacy retry: the transition and the task step it makes due.
type resume struct {
	move store.Change
	step Step
	memo reqMemo
}

// legacyResume is how an operator's retry resumes a legacy request stopped in status at op.Step:
// the step of the request kind's table that resumes it (a pending step restarts a pipeline that
// never answered), else from the status.
func (w *Workflow) legacyResume(status state.BindingStatus, op store.Operation) (resume, bool) {
	at := w.resumeAt(op.Step)
	restart := reqMemo{Memo: change.Memo{Restart: true}}
	switch {
	case status == state.StatusMRCreating && at != "":
		return resume{creatingMR(0, ""), at, restart}, true
	case status == state.StatusMerging && at != "":
		return resume{merging(state.StepHandleStarted, ""), at, restart}, true
	case status == state.StatusMRCreating, status == state.StatusCreateFailed:
		return resume{creatingMR(0, ""), stepCreate, reqMemo{}}, true
	case status == state.StatusMRCreated:
		return resume{sendingTicket(), stepTicket, reqMemo{}}, true
	case status == state.StatusMerging, status == state.StatusHandleFailed && op.MRIID > 0:
		return resume{merging(state.StepHandleStarted, ""), stepApprove, reqMemo{}}, true
	}
	return resume{}, false
}

// SettleBatch settles an active batch (an operator's action): its settle step runs at once on any
// instance; the view answers the batch as it is then.
func (w *Workflow) SettleBatch(ctx context.Context, batchID int64, actor string) (api.BatchView, error) {
	b, err := w.batchRow(ctx, batchID) // the status decides; the members are read for the answer
	if err != nil {
		return api.BatchView{}, err
	}
	if !b.Status.Active() {
		return api.BatchView{}, apperr.New(apperr.Conflict, "Batch %d is already %s.", batchID, b.Status)
	}
	if err := w.batches.Settle(ctx, batchID, actor); err != nil {
		return api.BatchView{}, batchConflict(err, batchID)
	}
	return w.batchByID(ctx, batchID)
}

// RunRound runs one batch round now: the cron's own code.
func (w *Workflow) RunRound(ctx context.Context) (api.RoundResult, error) {
	outs, err := w.batches.Round(ctx)
	if err != nil {
		return api.RoundResult{}, err
	}
	res := api.RoundResult{Partitions: make([]api.PartitionRound, len(outs))}
	for i, o := range outs {
		p := api.PartitionRound{Partition: o.Partition, Outcome: string(o.Result), BatchID: o.BatchID, Claimed: o.Claimed}
		if o.Err != nil {
			p.Outcome = api.RoundError
			w.log.ErrorContext(ctx, "batch round failed for a partition", "partition", o.Partition, "err", o.Err)
		}
		res.Partitions[i] = p
	}
	return res, nil
}

// GitLabEvent takes a verified GitLab webhook as a hint: the work waiting on that MR (a batch, a
// legacy request's MR step — not its approval's) is due now, on whichever instance claims it
// first — this one is nudged. The steps still read the remote state before acting, so a forged or
// stale event changes nothing.
//
// A database conflict (a deadlock with a step or a claim that holds the same task's row) is
// tried again within the request: the wakes are idempotent, and a 5xx would count towards the
// failures that make GitLab disable the hook.
func (w *Workflow) GitLabEvent(ctx context.Context, ev GitLabEvent) (res api.CallbackResult, err error) {
	err = retryPreempted(ctx, func() error {
		var err error
		if res, err = w.gitlabEvent(ctx, ev); errors.Is(err, store.ErrRetry) {
			w.log.InfoContext(ctx, "a GitLab webhook lost a database conflict; handling it again", "project", ev.Project, "mr", ev.MRIID, "err", err)
		}
		return err
	})
	return res, err
}

func (w *Workflow) gitlabEvent(ctx context.Context, ev GitLabEvent) (api.CallbackResult, error) {
	if ev.MRIID <= 0 {
		return w.branchPipelineEvent(ctx, ev)
	}
	n, err := w.batches.Wake(ctx, ev.Project, ev.MRIID)
	if err != nil {
		return api.CallbackResult{}, err
	}
	op, err := w.db.LegacyByMR(ctx, ev.Project, ev.MRIID)
	switch {
	case err == nil:
		k, err := w.db.WakeTasks(ctx, []store.TaskRef{legacyMRTask(op)})
		if err != nil {
			return api.CallbackResult{}, err
		}
		n += k
	case !errors.Is(err, store.ErrNotFound):
		return api.CallbackResult{}, err
	}
	if n > 0 {
		w.engine.Nudge(engine.LaneBackground)
	}
	return api.CallbackResult{Code: api.CallbackAccepted}, nil
}

// branchPipelineEvent: a pipeline that is not an MR pipeline (projects with branch pipelines
// only) names no MR, but its ref is the branch bindery wrote — bindery/batch-<id> or
// bindery/op-<operationId> — and the work behind that branch is due now.
func (w *Workflow) branchPipelineEvent(ctx context.Context, ev GitLabEvent) (api.CallbackResult, error) {
	ref := strings.TrimPrefix(ev.Ref, "refs/heads/")
	task, ok := batch.TaskOfBranch(ref)
	if !ok {
		task, ok = legacyTaskOfBranch(ref)
	}
	if !ok {
		return api.CallbackResult{Code: api.CallbackIgnored}, nil
	}
	n, err := w.db.WakeTasks(ctx, []store.TaskRef{task})
	if err != nil {
		return api.CallbackResult{}, err
	}
	if n > 0 {
		w.engine.Nudge(engine.LaneBackground)
	}
	return api.CallbackResult{Code: api.CallbackAccepted}, nil
}

// GitLab event kinds bindery reads from POST /hooks/gitlab.
const (
	GitLabMergeRequest = "merge_request"
	GitLabPipeline     = "pipeline"
)

// GitLabEvent is the part of a verified GitLab webhook the workflow may use to shortcut polling.
// It is a hint: the workflow still reads the remote state before acting.
type GitLabEvent struct {
	Kind       string // GitLabMergeRequest or GitLabPipeline
	EventID    string // Idempotency-Key (stable across resends) or X-Gitlab-Event-UUID
	Project    string // path_with_namespace
	MRIID      int64  // the MR (0 when the pipeline is not an MR pipeline)
	Ref        string // pipeline events: the branch or ref it ran for (a branch pipeline's MR is found by it)
	PipelineID int64  // pipeline events
	Status     string // pipeline status (success, failed, …) or MR state (opened, merged, closed)
	Action     string // MR action (open, merge, close, approved, …)
}
