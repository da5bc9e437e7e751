package workflow

import (
	"context"
	"errors"
	"fmt"
	"time"

	"bindery/batch"
	"bindery/internal/platform/config"
	"bindery/internal/vocab/state"
	"bindery/internal/work/change"
	"bindery/store"
)

// fileOf renders the file a request adds to the repository with the batch path's renderer: the
// same bytes for the preview, the validation at admission, the legacy flow's MR and a batch.
func fileOf(t config.Target, op store.Operation) (change.FileAction, error) {
	return batch.RenderChange(t, op, state.ActionAdd)
}

// errTargetGone: the request's target left the catalog; its file cannot be rendered any more.
var errTargetGone = fmt.Errorf("%w: the target is no longer in the catalog", change.ErrInvalidChange)

// admission renders and validates a request's change for its partition's waiting set
// (docs/workflow.md, 'Admission'), so that a batch rarely fails because of one bad member: the file
// renders (path inside the repository, size cap; batch.Admission), and — for an ADD — no other
// target of the same project renders the same path for the same subject while that binding is
// active (two members writing one path fail a whole commit). The admission carries the change as
// validated, so the batch commits exactly that even if the target leaves the catalog meanwhile. An
// error wrapping change.ErrInvalidChange is the request's (CREATE_INVALID); any other is the
// database's.
func (w *Workflow) admission(ctx context.Context, op store.Operation, action state.Action) (store.Admission, error) {
	snap := w.cfg.Current()
	t, ok := batch.TargetOf(snap, op) // as accepted, whatever the catalog holds now
	if !ok {
		return store.Admission{}, errTargetGone
	}
	adm, err := batch.Admission(t, op, action)
	if err != nil || action != state.ActionAdd {
		return adm, err
	}
	for _, other := range snap.Targets() {
		if other.Key == t.Key || other.Project != t.Project {
			continue
		}
		p, err := change.RenderPath(other, op.SubjectID)
		if err != nil || p != adm.Change.Path {
			continue
		}
		b, err := w.db.BindingFor(ctx, op.SubjectID, other.Key)
		switch {
		case errors.Is(err, store.ErrNotFound):
			continue
		case err != nil:
			return store.Admission{}, err
		case !b.Status.Reappliable():
			return store.Admission{}, fmt.Errorf("%w: %s collides with the active binding for %s (request %s)", change.ErrInvalidChange, p, other.Key, b.OperationID)
		}
	}
	return adm, nil
}

// previewOperation is the request the preview renders: placeholders where apply fills values.
func previewOperation(subject, targetKey string, now time.Time) store.Operation {
	return store.Operation{SubjectID: subject, TargetKey: targetKey, OperationID: "(assigned when you apply)",
		Reason: "(your reason)", CreatedAt: now}
}
