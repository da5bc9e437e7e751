package workflow

import (
	"context"
	"errors"

	"bindery/api"
	"bindery/internal/vocab/apperr"
	"bindery/internal/vocab/state"
	"bindery/store"
)

// Withdraw ends a request that failed on its way to being in effect (CREATE_FAILED, or
// HANDLE_FAILED but a failed removal), on its owner's or an operator's word: CLOSED (step
// WITHDRAWN), through the transition table, after which the relation is re-appliable like any
// CLOSED one. A failed request is not re-appliable in place — an operator's recovery hangs on
// its operationId —; this is its requester's own way out.
//
// The MR of its own is closed: a legacy request's, by its close_mr step (the task written in
// the same transaction; merged meanwhile is logged, as for a rejected request's MR). A request
// of the batch path has no MR of its own — its batch's MR is shared, and a failed member is in no
// active batch any more; one that is (a settlement under way) or waits in the waiting set is
// refused, as nothing must batch a withdrawn request. A failed removal (CLOSE_FAILED) is
// refused: its file is still in the repository and the binding in effect; operators retry it.
// Withdrawing a withdrawn request changes nothing and answers its view.
func (w *Workflow) Withdraw(ctx context.Context, operationID, actor string) (api.RequestView, error) {
	err := retryPreempted(ctx, func() error {
		return w.db.InTx(ctx, func(tx *store.Tx) error {
			cur, err := tx.Request(ctx, operationID)
			if err != nil {
				return notFound(err)
			}
			op := cur.Operation
			switch {
			case !cur.Current():
				return apperr.New(apperr.Conflict, "This request was replaced by a newer application; there is nothing to withdraw.")
			case cur.Binding.Status == state.StatusClosed && op.Step == state.StepWithdrawn:
				return nil // withdrawn already
			case cur.Binding.Status == state.StatusHandleFailed && op.Step == state.StepCloseFailed:
				return apperr.New(apperr.Conflict, "Removing this binding's file failed: the binding is still in effect. Operators retry the removal; you can revoke it again once it is back in effect.")
			case !state.Withdrawable(cur.Binding.Status, op.Step):
				return apperr.New(apperr.Conflict, "Only a request that failed can be withdrawn; this one is %s.", cur.Binding.Status)
			}
			active, waiting, err := tx.Batching(ctx, operationID)
			switch {
			case err != nil:
				return err
			case active != 0:
				return apperr.New(apperr.Conflict, "Batch %d still holds this request (its settlement is under way); try again in a moment.", active)
			case waiting:
				return apperr.New(apperr.Conflict, "This request is queued for a batch again (an operator retried it); it is no longer failed.")
			}
			// Its own work first (task before operation, the one lock order): the legacy MR's
			// close, or none; a step running right now refuses the withdrawal.
			if op.Flow == FlowLegacy && op.MRIID > 0 {
				err = tx.PutTask(ctx, w.requestTask(operationID, stepCloseMR, 0, reqMemo{}), true)
			} else {
				err = tx.DeleteTask(ctx, state.TaskRequest, operationID)
			}
			if err != nil {
				return err
			}
			_, err = tx.Transition(ctx, cur, withdrawn(withdrawnBy+actor+"."))
			return err
		})
	})
	switch {
	case errors.Is(err, store.ErrTaskBusy), errors.Is(err, store.ErrRetry):
		return api.RequestView{}, apperr.Busy(err, "A step of this request is running right now; look again in a moment.")
	case errors.Is(err, store.ErrPreempted):
		return api.RequestView{}, apperr.Wrap(err, apperr.Conflict, "The request changed while withdrawing it; look at it again.")
	case err != nil:
		return api.RequestView{}, err
	}
	w.log.InfoContext(ctx, "withdrawn", "operation", operationID, "actor", actor)
	if row, ok := w.row(stepCloseMR); ok {
		w.engine.Nudge(row.Lane) // a legacy MR's close runs at once, here
	}
	return w.Request(ctx, operationID)
}
