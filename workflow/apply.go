package workflow

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"bindery/api"
	"bindery/batch"
	"bindery/internal/vocab/apperr"
	"bindery/internal/vocab/state"
	"bindery/internal/work/change"
	"bindery/store"
)

// ApplyInput is a validated application: the subject is the caller's canonical identity, never
// a client-supplied value.
type ApplyInput struct {
	api.ApplyRequest
	Subject string `json:"-"`
	// Idempotency, when set, is the request's idempotency record (its Body is filled here with
	// the ApplyResult as JSON): it is written in the application's own transaction, so the
	// application and its answer are one commit.
	Idempotency *store.Answer `json:"-"`
}

// Apply does the synchronous part of an application (docs/workflow.md, 'Applying'): the target
// exists, the access mode allows it, the subject can be rendered into the target's path, the
// relation has no active request; then it writes the first state of the flow workflow.approvalFirst
// selects — APPROVAL_SENDING (approval-first) or MR_CREATING (legacy) — with its first step's task
// in the same transaction, and answers at once. The step is data from that commit on: this
// instance's first-steps lane runs it now (however many batches wait on CI), and if this instance
// dies before, any other one does.
func (w *Workflow) Apply(ctx context.Context, in ApplyInput) (api.ApplyResult, error) {
	snap := w.cfg.Current()
	t, ok := snap.Target(in.TargetKey)
	if !ok {
		return api.ApplyResult{}, apperr.Invalid("targetKey", "is not in the catalog")
	}
	if !snap.ApplyOpen(time.Now()) {
		return api.ApplyResult{}, apperr.New(apperr.ApplyClosed, "Applications are closed right now (access mode %s).", snap.ApplyMode())
	}
	if _, err := change.RenderPath(t, in.Subject); err != nil {
		return api.ApplyResult{}, apperr.Wrap(err, apperr.InvalidArgument, "Your identity cannot be used in this target's file path; please contact the maintainers.")
	}
	first := w.requestTask("", stepCreate, 0, reqMemo{})
	a := store.Application{
		OperationID: in.OperationID, SubjectID: in.Subject, TargetKey: t.Key, Project: t.Project, Reason: in.Reason,
		Flow: FlowLegacy, Status: state.StatusMRCreating, Step: state.StepCreateStarted, Task: &first,
		// The target as it is now goes with the request: a reload that changes or removes it
		// later harms nothing already accepted.
		TargetDef: batch.TargetDef(t),
	}
	if snap.ApprovalFirst() {
		first = w.requestTask("", stepTicket, 0, reqMemo{})
		a.Flow, a.Status, a.Step = FlowApprovalFirst, state.StatusApprovalSending, state.StepApprovalSending
	}
	// The answer is known before the commit: the first state is what this transaction writes.
	res := api.ApplyResult{Code: api.CodeAccepted, OperationID: a.OperationID, Status: a.Status, NextAction: state.NextActionFor(a.Status, a.Step)}
	if in.Idempotency != nil {
		rec := *in.Idempotency
		body, err := json.Marshal(res)
		if err != nil {
			return api.ApplyResult{}, err
		}
		rec.Body, a.Answer = body, &rec
	}
	err := w.db.Submit(ctx, a)
	var busy *store.ErrApplyInProgress
	switch {
	case errors.As(err, &busy):
		return api.ApplyResult{}, apperr.Wrap(err, apperr.ApplyInProgress, "You already have an active request for %s (%s).", t.Title, busy.Binding.Status)
	case errors.Is(err, store.ErrPreempted):
		return api.ApplyResult{}, apperr.Wrap(err, apperr.ApplyInProgress, "Another request for %s is being submitted right now.", t.Title)
	case errors.Is(err, store.ErrDuplicate):
		return w.resent(ctx, in, t.Key, err)
	case err != nil:
		return api.ApplyResult{}, err
	}
	w.engine.Nudge(first.Lane)
	return res, nil
}

// resent answers an application whose operationId is taken. When the request holding it is this
// one (same subject, target and reason) it is a resend after a lost answer whose idempotency
// record did not survive (a crash between the application's commit and the stored answer, then
// the key's lease ran out): the replay's answer, DUPLICATE_SUBMIT with the current state.
// Anything else is another request's id.
func (w *Workflow) resent(ctx context.Context, in ApplyInput, targetKey string, dup error) (api.ApplyResult, error) {
	r, err := w.db.Request(ctx, in.OperationID)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return api.ApplyResult{}, err // the database's failure, not the caller's id
	}
	op := r.Operation
	if err != nil || op.SubjectID != in.Subject || op.TargetKey != targetKey || op.Reason != in.Reason {
		return api.ApplyResult{}, apperr.Wrap(dup, apperr.Conflict, "This operationId is already used by another request; generate a new one.")
	}
	st := op.Status
	if r.Current() {
		st = r.Binding.Status
	}
	next := nextAction(st, op.Step, op.UpdatedAt, w.deployCutoff(ctx, op))
	return api.ApplyResult{Code: api.CodeDuplicateSubmit, OperationID: in.OperationID, Status: st, NextAction: next}, nil
}
