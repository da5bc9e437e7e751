package store

import (
	"context"
	"fmt"
	"time"

	"bindery/internal/vocab/state"
)

// Adoption is a binding bindery takes over from the config repository as it is there (docs/drift.md):
// an unknown file an operator accepted, or a file of an imported repository. It is in effect from
// the start (the caller's move names the status and step: workflow's), with a history whose one
// row says where it came from.
type Adoption struct {
	OperationID string
	SubjectID   string
	TargetKey   string
	Project     string
	Reason      string
	TargetDef   string
	ExpiresAt   *time.Time // from the file, when it carries one
	Note        string     // the history's row
	// Path and Blob, when set, record the file as the binding's own (a closed finding of the
	// relation holding it, docs/drift.md): the drift check then holds the file against it rather
	// than what bindery would render.
	Path, Blob string
}

// Adopt writes adoptions in the transaction, each at in's status and step (in.Note unused: each
// adoption's own): their operations, bindings and history, a multi-row statement per chunk. A relation that has a binding already fails the whole
// transaction with ErrDuplicate: nothing is adopted half. Nobody is told (an adoption changes
// nothing of what is in effect).
func (tx *Tx) Adopt(ctx context.Context, as []Adoption, in Change) error {
	if !state.CanTransition("", in.To) {
		return &state.ErrIllegalTransition{From: "", To: in.To}
	}
	for _, c := range chunks(as, maxInList/4) {
		args := make([]any, 0, 9*len(c))
		for _, a := range c {
			args = append(args, a.OperationID, a.SubjectID, a.TargetKey, a.Project, state.FlowApprovalFirst, a.Reason,
				in.To, in.Step, nullIfEmpty(a.TargetDef))
		}
		if _, err := tx.tx.ExecContext(ctx, "INSERT INTO operation (operation_id, subject_id, target_key, project, flow, reason, status, step, target_def) VALUES "+
			rowsOf("(?, ?, ?, ?, ?, ?, ?, ?, ?)", len(c)), args...); err != nil {
			return fmt.Errorf("adopt: %w", translate(err))
		}
		args = args[:0]
		for _, a := range c {
			var exp any
			if a.ExpiresAt != nil {
				exp = tx.db.timeArg(*a.ExpiresAt)
			}
			args = append(args, a.SubjectID, a.TargetKey, in.To, a.OperationID, exp)
		}
		if _, err := tx.tx.ExecContext(ctx, "INSERT INTO binding (subject_id, target_key, status, operation_id, expires_at) VALUES "+
			rowsOf("(?, ?, ?, ?, ?)", len(c)), args...); err != nil {
			return fmt.Errorf("adopt: %w", translate(err))
		}
		for _, a := range c {
			if err := insertSteps(ctx, tx.tx, []stepRow{{a.OperationID, 1}}, in.Step, in.To, a.Note); err != nil {
				return fmt.Errorf("adopt: %w", translate(err))
			}
			if a.Blob != "" {
				if err := tx.settleAdopted(ctx, a); err != nil {
					return fmt.Errorf("adopt: %w", err)
				}
			}
		}
	}
	return nil
}

// RecordAudit is DB.RecordAudit in the transaction: the record commits with what it reports.
func (tx *Tx) RecordAudit(ctx context.Context, ev AuditEvent) (recorded bool, err error) {
	if ev.Key == "" {
		return false, fmt.Errorf("audit %s: empty event key", ev.Action)
	}
	return recordAudit(ctx, tx.tx, ev)
}

// settleAdopted records an adopted file as its binding's own: the relation's finding, closed,
// holding the file.
func (tx *Tx) settleAdopted(ctx context.Context, a Adoption) error {
	db := tx.db
	q := "INSERT INTO drift_finding (target_key, subject, project, path, kind, state, operation_id, blob_id, settled_op, settled_blob, closed_at) " +
		"VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, " + db.now() + ") "
	if db.dialect == MySQL {
		q += "ON DUPLICATE KEY UPDATE state = VALUES(state), operation_id = VALUES(operation_id), blob_id = VALUES(blob_id), settled_op = VALUES(settled_op), " +
			"settled_blob = VALUES(settled_blob), closed_at = VALUES(closed_at), version = version + 1"
	} else {
		q += "ON CONFLICT (target_key, subject) DO UPDATE SET state = excluded.state, operation_id = excluded.operation_id, blob_id = excluded.blob_id, " +
			"settled_op = excluded.settled_op, settled_blob = excluded.settled_blob, closed_at = excluded.closed_at, version = version + 1"
	}
	_, err := tx.tx.ExecContext(ctx, q, a.TargetKey, a.SubjectID, a.Project, clipText(a.Path, 1024), DriftUnknown, DriftClosed, a.OperationID, a.Blob, a.OperationID, a.Blob)
	return translate(err)
}
