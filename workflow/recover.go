package workflow

import (
	"context"
	"errors"
	"time"

	"bindery/apperr"
	"bindery/change"
	"bindery/store"
	"bindery/worker"
)

// Recovery (SPEC §11.14): single-request steps run under an operation lease written with the
// state that hands them off; a crashed or stopped instance leaves the lease to expire, and the
// sweep on any instance takes it over and re-runs the step from the remote state. Batches have
// their own leases, swept by package batch. Operators re-run a stopped step (retry) or settle a
// batch; the same step functions run, so a re-run is as safe as the first run.

// sweepPage bounds the operations one sweep resumes; the next sweep takes the rest.
const sweepPage = 100

// Sweep resumes the single-request steps whose lease expired and sweeps the batches. It
// returns how many steps and batches it picked up. Safe on every instance at once: taking an
// expired lease is a guarded write only one instance wins.
func (w *Workflow) Sweep(ctx context.Context) (int, error) {
	ops, err := w.db.ExpiredOperationLeases(ctx, sweepPage)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, op := range ops {
		k, fn := w.currentStep(op)
		if fn == nil {
			// Nothing of a single request runs in this state (a callback moved it on while its
			// step held the lease): just free it.
			_ = w.db.ReleaseOperationLease(ctx, op.OperationID, op.LeaseOwner)
			continue
		}
		// The step's own lease acquisition is the guard: another sweeper that already took it
		// makes this one a no-op. A full pool leaves the lease expired for the next sweep.
		if err := w.handOff(op.OperationID, k, fn); err != nil {
			w.log.WarnContext(ctx, "sweep: hand-off refused; the next sweep retries", "operation", op.OperationID, "err", err)
			if errors.Is(err, worker.ErrPoolStopped) {
				break
			}
			continue
		}
		w.log.InfoContext(ctx, "sweep: resuming a step whose lease expired", "operation", op.OperationID, "step", op.Step, "holder", op.LeaseOwner)
		n++
	}
	b, err := w.batches.Sweep(ctx)
	return n + b, err
}

// currentStep is the single-request step that drives op in its current state, nil when none
// does (waiting for a person, in the waiting set or a batch, finished).
func (w *Workflow) currentStep(op store.Operation) (stepKind, func(context.Context, *stepRun) error) {
	switch st := op.Status; {
	case st == store.StatusApprovalSending:
		return stepOpenTicket, w.openTicket
	case op.Flow != FlowLegacy:
		return stepKind{}, nil
	case st == store.StatusMRCreating && op.Step == store.StepCreateStarted, st == store.StatusMRCreated:
		return stepCreateMR, w.createMR
	case st == store.StatusMerging && op.Step != store.StepHandlePipelinePending:
		return stepMergeMR, w.mergeMR
	}
	return stepKind{}, nil
}

// Retry re-runs the request's current step (an operator's action; the remote-state checks make
// it safe). A request carried by an active batch resumes its batch. A stopped single-request
// step (failed, pending, or refused by a full pool) is handed to the workers again under this
// instance's lease. A request of the batch path whose batch failed goes back to the waiting set.
// A merged request whose deploy callback is overdue (reconcile.deployOverdue) is validated: the
// operator confirms the deploy. Anything else — waiting for people, queued, finished, a deploy
// callback not yet overdue — is a CONFLICT: there is no step to run.
func (w *Workflow) Retry(ctx context.Context, operationID, actor string) (RequestView, error) {
	d, err := w.db.RequestDetail(ctx, operationID)
	if err != nil {
		return RequestView{}, notFound(err)
	}
	if d.Binding == nil {
		return RequestView{}, apperr.New(apperr.Conflict, "This request was replaced by a newer application; there is nothing to retry.")
	}
	op, status := d.Operation, d.Binding.Status
	note := "Retried by " + actor + "."
	if d.Batch != nil && d.Batch.Status.Active() && inBatchPhase(status, op.Step) {
		w.log.InfoContext(ctx, "retry: resuming the request's batch", "operation", operationID, "batch", d.Batch.ID, "actor", actor)
		if err := w.batches.Resume(ctx, d.Batch.ID); err != nil {
			return RequestView{}, err
		}
		return w.Request(ctx, operationID)
	}
	if op.LeaseOwner != "" && op.LeaseUntil != nil {
		if now, err := w.db.Now(ctx); err == nil && op.LeaseUntil.After(now) {
			return RequestView{}, apperr.New(apperr.Conflict, "A step of this request is running right now; retry when it stopped.")
		}
	}
	if deployOverdue(status, op.UpdatedAt, w.deployCutoff(ctx, op)) {
		return w.confirmDeploy(ctx, operationID, actor)
	}
	cur := store.Request{Operation: op, Binding: *d.Binding}
	move, k, fn, err := w.retryPlan(ctx, cur)
	if err != nil {
		return RequestView{}, err
	}
	move.Note = note
	if fn == nil {
		if err := w.readmit(ctx, op, move); err != nil {
			return RequestView{}, err
		}
		return w.Request(ctx, operationID)
	}
	move.LeaseOwner, move.LeaseTTL = w.instance, w.cfg.Current().StepLeaseTTL()
	written := time.Now()
	next, err := w.db.Transition(ctx, cur, move)
	if errors.Is(err, store.ErrPreempted) {
		return RequestView{}, apperr.Wrap(err, apperr.Conflict, "The request changed while retrying; look at it again.")
	}
	if err != nil {
		return RequestView{}, err
	}
	w.log.InfoContext(ctx, "retry: step handed to the workers", "operation", operationID, "step", k.name, "actor", actor)
	if err := w.handOffHeld(operationID, written, move.LeaseTTL, k, fn); err != nil {
		if _, err := w.rejectHandOff(ctx, next, err, k.failTo, handoffStepOf(k)); err != nil {
			return RequestView{}, err
		}
	}
	return w.Request(ctx, operationID)
}

// confirmDeploy validates a merged request whose deploy callback is overdue, on an operator's
// word, through the validate path the callback and reconciliation use: the flip happens once
// whoever races it, and the metric and the "validated" line follow only a real flip.
func (w *Workflow) confirmDeploy(ctx context.Context, operationID, actor string) (RequestView, error) {
	flipped, err := w.db.ConfirmDeploy(ctx, operationID, "Deploy confirmed by "+actor+".")
	if err != nil {
		return RequestView{}, err
	}
	w.validated(ctx, flipped, "operator")
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
	if move.Step != store.StepCloseStarted {
		var err error
		if adm, err = w.admission(ctx, op, store.ActionAdd); errors.Is(err, change.ErrInvalidChange) {
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
func inBatchPhase(status store.BindingStatus, step store.Step) bool {
	switch status {
	case store.StatusMRCreating, store.StatusMRCreated, store.StatusMerging, store.StatusValidated:
		return step != store.StepQueued
	}
	return false
}

// retryPlan is what a retry writes and which step it hands off (fn nil: re-admission).
func (w *Workflow) retryPlan(ctx context.Context, cur store.Request) (store.Change, stepKind, func(context.Context, *stepRun) error, error) {
	op, status := cur.Operation, cur.Binding.Status
	conflict := func(what string) (store.Change, stepKind, func(context.Context, *stepRun) error, error) {
		return store.Change{}, stepKind{}, nil, apperr.New(apperr.Conflict, "Nothing to retry: the request is %s.", what)
	}
	switch {
	case status.Reappliable(), status == store.StatusValidated && (op.Step < store.StepCloseStarted || op.Step == store.StepCalledBack):
		return conflict("finished (" + string(status) + ")")
	case status.AwaitingApproval() || op.Step == store.StepApprovalSendFailed ||
		(op.Step == store.StepCreateHandoffRejected && op.Flow == FlowApprovalFirst):
		// (Re)open the ticket: idempotent by operationId in the approval system.
		return store.Change{To: store.StatusApprovalSending, Step: store.StepApprovalSending}, stepOpenTicket, w.openTicket, nil
	case status == store.StatusMerged:
		return conflict("merged and waiting for the deploy pipeline; reconciliation validates it")
	}
	if op.Flow == FlowLegacy {
		switch {
		case status == store.StatusMRCreating && op.Step == store.StepCreatePipelinePending:
			// Kept pending: the step sees it and restarts a pipeline that never answered.
			return store.Change{To: store.StatusMRCreating, Step: store.StepCreatePipelinePending}, stepCreateMR, w.createMR, nil
		case status == store.StatusMRCreating, status == store.StatusCreateFailed:
			return store.Change{To: store.StatusMRCreating, Step: store.StepCreateStarted}, stepCreateMR, w.createMR, nil
		case status == store.StatusMRCreated:
			return store.Change{To: store.StatusApprovalSending, Step: store.StepApprovalSending}, stepOpenTicket, w.openTicket, nil
		case status == store.StatusMerging && op.Step == store.StepHandlePipelinePending:
			return store.Change{To: store.StatusMerging, Step: store.StepHandlePipelinePending}, stepMergeMR, w.mergeMR, nil
		case status == store.StatusMerging, status == store.StatusHandleFailed && op.MRIID > 0:
			return store.Change{To: store.StatusMerging, Step: store.StepHandleStarted}, stepMergeMR, w.mergeMR, nil
		}
		return conflict(string(status))
	}
	// The batch path: a request whose batch ended without it goes back to the waiting set.
	switch {
	case status == store.StatusHandleFailed && op.Step == store.StepCloseFailed,
		status == store.StatusValidated && op.Step == store.StepCloseStarted:
		if _, err := w.db.Waiting(ctx, op.OperationID); err == nil {
			return conflict("queued for a batch round")
		}
		return store.Change{To: store.StatusValidated, Step: store.StepCloseStarted}, stepKind{}, nil, nil
	case status == store.StatusCreateFailed && op.Step == store.StepCreateInvalid:
		// Re-validated at the re-admission (a fixed catalog may make it valid now).
		return store.Change{To: store.StatusMRCreating, Step: store.StepQueued}, stepKind{}, nil, nil
	case status.Failed(), status == store.StatusMRCreating, status == store.StatusMRCreated, status == store.StatusMerging:
		if _, err := w.db.Waiting(ctx, op.OperationID); err == nil {
			return conflict("queued for a batch round")
		}
		return store.Change{To: store.StatusMRCreating, Step: store.StepQueued}, stepKind{}, nil, nil
	}
	return conflict(string(status))
}

func handoffStepOf(k stepKind) store.Step {
	if k.failTo == store.StatusHandleFailed {
		return store.StepHandleHandoffRejected
	}
	return store.StepCreateHandoffRejected
}

// SettleBatch settles an active batch now (an operator's action).
func (w *Workflow) SettleBatch(ctx context.Context, batchID int64, actor string) (BatchView, error) {
	b, err := w.batchRow(ctx, batchID) // the status decides; the members are read for the answer
	if err != nil {
		return BatchView{}, err
	}
	if !b.Status.Active() {
		return BatchView{}, apperr.New(apperr.Conflict, "Batch %d is already %s.", batchID, b.Status)
	}
	if err := w.batches.Settle(ctx, batchID, actor); err != nil {
		if errors.Is(err, store.ErrPreempted) {
			return BatchView{}, apperr.Wrap(err, apperr.Conflict, "Batch %d changed while settling; look at it again.", batchID)
		}
		return BatchView{}, err
	}
	return w.batchByID(ctx, batchID)
}

// RunRound runs one batch round now: the cron's own code.
func (w *Workflow) RunRound(ctx context.Context) (RoundResult, error) {
	outs, err := w.batches.Round(ctx)
	if err != nil {
		return RoundResult{}, err
	}
	res := RoundResult{Partitions: make([]PartitionRound, len(outs))}
	for i, o := range outs {
		p := PartitionRound{Partition: o.Partition, Outcome: string(o.Result), BatchID: o.BatchID, Claimed: o.Claimed}
		if o.Err != nil {
			p.Outcome = "ERROR"
			w.log.ErrorContext(ctx, "batch round failed for a partition", "partition", o.Partition, "err", o.Err)
		}
		res.Partitions[i] = p
	}
	return res, nil
}

// GitLabEvent takes a verified GitLab webhook as a hint: the pollers of that MR (a batch, a
// legacy request) check now instead of at their next interval. They still read the remote
// state before acting, so a forged or stale event changes nothing.
func (w *Workflow) GitLabEvent(ctx context.Context, ev GitLabEvent) (CallbackResult, error) {
	if ev.MRIID <= 0 {
		return CallbackResult{Code: CallbackIgnored}, nil
	}
	w.batches.Wake(ev.Project, ev.MRIID)
	w.wake(ev.Project, ev.MRIID)
	return CallbackResult{Code: CallbackAccepted}, nil
}
