package workflow

import (
	"time"

	"context"
	"errors"

	"bindery/api"
	"bindery/batch"
	"bindery/internal/vocab/apperr"
	"bindery/internal/vocab/state"
	"bindery/store"
)

// The close phase (docs/workflow.md, 'Closing a binding'): a VALIDATED binding is removed by
// revocation (owner or ops) or expiry. The binding stays VALIDATED with step CLOSE_STARTED while a
// delete action of its file goes through the waiting set and a batch like any other member; the
// batch ends it in CLOSED / CLOSE_SUCCEEDED (re-appliable) or HANDLE_FAILED / CLOSE_FAILED.

// Revoke starts the close phase of a VALIDATED request (CONFLICT otherwise). Revoking a request
// whose close phase already started changes nothing and answers its view.
func (w *Workflow) Revoke(ctx context.Context, operationID, actor string) (api.RequestView, error) {
	if err := w.startClose(ctx, operationID, revokedBy+actor+".", nil); err != nil {
		return api.RequestView{}, err
	}
	return w.Request(ctx, operationID)
}

// startClose moves the request to CLOSE_STARTED and admits its delete action, in one transaction.
// expired is the expiry the expiry cron read (nil: a revocation): a binding renewed since — its
// expiry moved — is not closed (a Conflict, as for one that moved on otherwise).
func (w *Workflow) startClose(ctx context.Context, operationID, note string, expired *time.Time) error {
	return retryPreempted(ctx, func() error {
		return w.db.InTx(ctx, func(tx *store.Tx) error {
			cur, err := tx.Request(ctx, operationID)
			if err != nil {
				return notFound(err)
			}
			if !cur.Current() || cur.Binding.Status != state.StatusValidated {
				st := cur.Operation.Status
				if cur.Current() {
					st = cur.Binding.Status
				}
				return apperr.New(apperr.Conflict, "Only a request in effect (VALIDATED) can be revoked; this one is %s.", st)
			}
			if e := cur.Binding.ExpiresAt; expired != nil && (e == nil || !e.Equal(*expired)) {
				return apperr.New(apperr.Conflict, "The binding was renewed: it now expires %v.", e)
			}
			_, err = w.beginClose(ctx, tx, cur, note)
			return err
		})
	})
}

// beginClose admits cur's delete action and moves it to CLOSE_STARTED with note, in tx (a
// revocation's, an expiry's, an access review's removal); false when its close phase had begun
// already: the admission is the guard, and nothing else is written.
func (w *Workflow) beginClose(ctx context.Context, tx *store.Tx, cur store.Request, note string) (bool, error) {
	added, err := tx.Admit(ctx, w.deletion(cur.Operation))
	if err != nil || !added {
		return false, err
	}
	// A file write still waiting for a batch (a renewal's new expiry, a drift restore) would
	// only write the file the removal deletes — and, merged after it, put it back: it leaves
	// with the removal's start.
	if err := tx.DropWaitingFileWrites(ctx, cur.Operation.OperationID); err != nil {
		return false, err
	}
	_, err = tx.Transition(ctx, cur, closeStarted(note))
	return err == nil, err
}

// deletion is the close phase's admission: the delete rendered from the target the request was
// accepted for (batch.TargetOf: its recorded definition, so a binding whose target left the
// catalog since is removed all the same), or — a request from before definitions were recorded,
// whose target left the catalog — without a rendered change, which the batch then fails visibly
// (HANDLE_FAILED / CLOSE_FAILED) rather than the revocation being refused.
func (w *Workflow) deletion(op store.Operation) store.Admission {
	if t, ok := batch.TargetOf(w.cfg.Current(), op); ok {
		if adm, err := batch.Admission(t, op, state.ActionDelete); err == nil {
			return adm
		}
	}
	return store.Admission{OperationID: op.OperationID, Action: state.ActionDelete, Partition: op.Project}
}

// expiryPage bounds one expiry run; the next run takes the rest.
const expiryPage = 200

// repairExpiries gives an expiry to the VALIDATED bindings that lack one after a crash between
// their validation and the write of their expiry: those of the catalog's targets with a ttl, and
// those of targets that left the catalog while bindings are in effect — each with the ttl of the
// target as its request was accepted (up to expiryPage per target and run).
func (w *Workflow) repairExpiries(ctx context.Context) error {
	snap := w.cfg.Current()
	var keys []string
	for _, t := range snap.Targets() {
		if t.TTL > 0 {
			keys = append(keys, t.Key)
		}
	}
	used, err := w.db.TargetsInUse(ctx)
	if err != nil {
		return err
	}
	for _, u := range used {
		if _, ok := snap.Target(u.Key); !ok && u.InEffect > 0 {
			keys = append(keys, u.Key)
		}
	}
	for _, key := range keys {
		ops, err := w.db.WithoutExpiry(ctx, key, expiryPage)
		if err != nil {
			return err
		}
		if err := w.fillExpiries(ctx, ops); err != nil {
			return err
		}
	}
	return nil
}

// Expire starts the close phase of every VALIDATED binding whose expires_at passed (the expiry
// cron). First it repairs missing expiries (repairExpiries). Safe on every instance at once: the
// waiting set's unique (operation, action) admits each delete once.
func (w *Workflow) Expire(ctx context.Context) (int, error) {
	if err := w.repairExpiries(ctx); err != nil {
		return 0, err
	}
	bs, err := w.db.ExpiredToClose(ctx, expiryPage)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, b := range bs {
		err := w.startClose(ctx, b.OperationID, expiredNote+".", b.ExpiresAt)
		var ae *apperr.Error
		switch {
		case err == nil:
			n++
		case errors.As(err, &ae) && ae.Code == apperr.Conflict:
			// moved on since the read (revoked, re-applied)
		default:
			return n, err
		}
	}
	return n, nil
}
