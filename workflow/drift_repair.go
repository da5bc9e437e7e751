package workflow

import (
	"context"
	"errors"
	"fmt"

	"bindery/api"
	"bindery/batch"
	"bindery/internal/vocab/apperr"
	"bindery/internal/vocab/explain"
	"bindery/internal/vocab/state"
	"bindery/store"
)

// An operator's repairs of a drift finding (docs/drift.md, 'Repairs'). The HTTP layer audits
// them and makes them idempotent by operationId; here each is one transaction that locks the
// finding first, then — task before operation before binding — what it changes.

// AcceptDrift makes the repository win: a missing file's binding ends CLOSED ("removed outside
// bindery (commit …)"), a changed file becomes the binding's own, an unknown file becomes a
// binding in effect (its subject read from the path, its history saying so). CONFLICT when the
// finding is not open, or the binding is in flight now.
func (w *Workflow) AcceptDrift(ctx context.Context, id int64, actor string) (api.DriftFinding, error) {
	snap := w.cfg.Current()
	err := w.db.InTx(ctx, func(tx *store.Tx) error {
		f, err := w.openFinding(ctx, tx, id, "accepted")
		if err != nil {
			return err
		}
		switch f.Kind {
		case store.DriftMissing, store.DriftChanged:
			cur, err := tx.Request(ctx, f.OperationID)
			if err != nil {
				return notFound(err)
			}
			if !cur.Current() || !inEffect(cur.Operation) || cur.Binding.Status != state.StatusValidated && f.Kind == store.DriftMissing {
				return apperr.New(apperr.Conflict, "The binding of this finding is not in effect any more (it is %s); the next drift round looks again.", cur.Binding.Status)
			}
			if f.Kind == store.DriftMissing {
				if err := tx.DeleteTask(ctx, state.TaskRequest, f.OperationID); err != nil {
					return err
				}
				note := "Removed outside bindery (" + removalWords(f) + "); accepted by " + actor + "."
				if _, err := tx.Transition(ctx, cur, closedAtOnce(note)); err != nil {
					return err
				}
				return tx.DecideDrift(ctx, f, store.DriftDecision{State: store.DriftClosed, SettledOp: f.OperationID})
			}
			note := fmt.Sprintf("Its file was changed outside bindery (%s); %s accepted the file as the repository holds it.", f.Path, actor)
			if _, err := tx.Transition(ctx, cur, noted(cur, note)); err != nil {
				return err
			}
			return tx.DecideDrift(ctx, f, store.DriftDecision{State: store.DriftClosed, SettledOp: f.OperationID, SettledBlob: f.BlobID})
		}
		t, ok := snap.Target(f.TargetKey)
		if !ok {
			return apperr.New(apperr.Conflict, "Target %s is no longer in the catalog: bindery cannot take its file over.", f.TargetKey)
		}
		op := "adopted-" + store.NewEventID()
		note := fmt.Sprintf("Adopted from the config repository (%s) by %s.", f.Path, actor)
		err = tx.Adopt(ctx, []store.Adoption{{OperationID: op, SubjectID: f.Subject, TargetKey: t.Key, Project: t.Project,
			Reason: note, TargetDef: batch.TargetDef(t), Note: note}}, adopted())
		if errors.Is(err, store.ErrDuplicate) {
			return apperr.New(apperr.Conflict, "%s has a request for %s already; it owns the file once it is in effect.", f.Subject, f.TargetKey)
		}
		if err != nil {
			return err
		}
		return tx.DecideDrift(ctx, f, store.DriftDecision{State: store.DriftClosed, OperationID: op, SettledOp: op, SettledBlob: f.BlobID})
	})
	return w.decided(ctx, id, "accepted", actor, err)
}

// RestoreDrift makes bindery win: the binding's file is written again as bindery renders it —
// created where it went missing, rewritten where it was changed — through the waiting set, a
// batch, the train and CI like any change (no approval: the binding was granted already). The
// binding stays in effect meanwhile; the finding stays open, the drift round leaves it alone, and
// the deploy that includes the restore's merge closes it. A batch that fails leaves it open, its
// restore saying so. CONFLICT for an unknown file (no binding owns it), a finding not open, a
// binding not in effect, or a restore already on its way.
func (w *Workflow) RestoreDrift(ctx context.Context, id int64, actor string) (api.DriftFinding, error) {
	snap := w.cfg.Current()
	err := w.db.InTx(ctx, func(tx *store.Tx) error {
		f, err := w.openFinding(ctx, tx, id, "restored")
		if err != nil {
			return err
		}
		if f.Kind == store.DriftUnknown || f.OperationID == "" {
			return apperr.New(apperr.Conflict, "No binding of bindery owns %s: there is nothing to restore. Accept it (a binding in effect) or ignore it.", f.Path)
		}
		cur, err := tx.Request(ctx, f.OperationID)
		if err != nil {
			return notFound(err)
		}
		if !cur.Current() || !inEffect(cur.Operation) {
			return apperr.New(apperr.Conflict, "The binding of this finding is not in effect any more (it is %s); the next drift round looks again.", cur.Binding.Status)
		}
		t, ok := batch.TargetOf(snap, cur.Operation)
		if !ok {
			return apperr.New(apperr.Conflict, "Target %s is no longer in the catalog: bindery cannot render its file.", f.TargetKey)
		}
		action := state.ActionRestore
		if f.Kind == store.DriftChanged {
			action = state.ActionRewrite
		}
		adm, err := batch.Admission(t, cur.Operation, action)
		if err != nil {
			return apperr.Wrap(err, apperr.Conflict, "bindery cannot render this binding's file: %v", err)
		}
		if err := tx.StartRestore(ctx, f, actor, adm); err != nil {
			if errors.Is(err, store.ErrRestoring) {
				return apperr.Wrap(err, apperr.Conflict, "A change of this file is on its way already (a restore, or a renewal's new expiry); restore it once that has ended.")
			}
			return err
		}
		_, err = tx.Transition(ctx, cur, stays(cur.Binding.Status, cur.Operation.Step, explain.DriftRestoreAsked(f.Path, actor)))
		return err
	})
	return w.decided(ctx, id, "restored", actor, err)
}

// IgnoreDrift leaves an open finding as it is, for reason: it stays ignored while the file stays
// as it was, and opens again when the file changes.
func (w *Workflow) IgnoreDrift(ctx context.Context, id int64, reason, actor string) (api.DriftFinding, error) {
	err := w.db.InTx(ctx, func(tx *store.Tx) error {
		f, err := w.openFinding(ctx, tx, id, "ignored")
		if err != nil {
			return err
		}
		return tx.DecideDrift(ctx, f, store.DriftDecision{State: store.DriftIgnored, SettledOp: f.OperationID, SettledBlob: f.BlobID, IgnoreReason: reason})
	})
	return w.decided(ctx, id, "ignored", actor, err)
}

// openFinding locks finding id, which must be open.
func (w *Workflow) openFinding(ctx context.Context, tx *store.Tx, id int64, what string) (store.DriftFinding, error) {
	f, err := tx.LockDrift(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return f, apperr.Wrap(err, apperr.NotFound, "No such drift finding.")
	}
	if err == nil && f.State != store.DriftOpen {
		err = apperr.New(apperr.Conflict, "This finding is %s; only an open finding can be %s.", f.State, what)
	}
	return f, err
}

// decided answers a repair: the finding as it is now, or the repair's error in the API's words.
func (w *Workflow) decided(ctx context.Context, id int64, what, actor string, err error) (api.DriftFinding, error) {
	switch {
	case errors.Is(err, store.ErrPreempted), errors.Is(err, store.ErrRetry):
		return api.DriftFinding{}, apperr.Wrap(err, apperr.Conflict, "The finding or its binding changed meanwhile; look at it again.")
	case err != nil:
		return api.DriftFinding{}, err
	}
	w.log.InfoContext(ctx, "drift finding "+what, "finding", id, "actor", actor)
	f, err := w.db.DriftFinding(ctx, id)
	if err != nil {
		return api.DriftFinding{}, err
	}
	return w.driftView(ctx, f)
}

// removalWords names the commit that removed a file, as the history keeps it.
func removalWords(f store.DriftFinding) string {
	if f.CommitSHA == "" {
		return "by a commit the repository does not name"
	}
	s := "commit " + f.CommitSHA[:min(len(f.CommitSHA), 12)]
	if f.Author != "" {
		s += " by " + f.Author
	}
	return s
}
