package store

import (
	"bindery/internal/vocab/state"
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"
)

// Operation is one application (table operation), identified by the client's operationId: its
// fine-grained step and, in Status, the binding status as of its last transition — equal to the
// binding's while it is the relation's current application, the last status it reached once a
// re-application replaced it (so "my requests" shows every application with its outcome).
type Operation struct {
	ID          int64
	OperationID string
	SubjectID   string
	TargetKey   string
	Project     string
	Flow        string
	Reason      string
	Status      state.BindingStatus
	Step        state.Step
	// Version grows by one on every write (I6). Who may run the request's current step is its
	// task's business (table task), not the operation's.
	Version    int64
	MRIID      int64 // 0: no MR yet
	PipelineID int64 // 0: none
	BatchID    int64 // 0: not batched (legacy flow, or still waiting)
	CreatedAt  time.Time
	UpdatedAt  time.Time
	TicketID   string // the approval ticket it was sent with ("": none yet)
	// DecidedBy is who decided its approval, as the approval system named them ("": not named,
	// or not decided yet).
	DecidedBy string
	// TargetDef is the target's definition as the catalog had it when the request was accepted
	// (JSON of config.Target; "": accepted before it was recorded). The request goes on with it:
	// a target that left the catalog, or changed, since harms nothing in flight
	// (batch.TargetOf).
	TargetDef string
	// FileExpiresAt is the expiry the binding's file carries since a renewal rewrote it (nil: the
	// one its grant rendered, the request time plus the ttl; batch.RenderChange).
	FileExpiresAt *time.Time
	// Stages is the time spent in each stage entered, up to the change, on the operations a
	// bulk transition returns (TransitionMany: a deploy's or reconciliation's
	// flips, a batch's members); nil on every other read.
	Stages []StageTime
}

const operationColumns = "id, operation_id, subject_id, target_key, project, flow, reason, status, step, version, " +
	"mr_iid, pipeline_id, batch_id, created_at, updated_at, ticket_id, target_def, decided_by, file_expires_at"

// scanOperation scans operationColumns, after the lead columns of a join when given.
func scanOperation(s scanner, lead ...any) (Operation, error) {
	var o Operation
	var mr, pipeline, batch nullInt64
	var created, updated, fileExpiry dbTime
	var def nullString
	if err := s.Scan(append(lead, &o.ID, &o.OperationID, &o.SubjectID, &o.TargetKey, &o.Project, &o.Flow, &o.Reason, &o.Status, &o.Step,
		&o.Version, &mr, &pipeline, &batch, &created, &updated, &o.TicketID, &def, &o.DecidedBy, &fileExpiry)...); err != nil {
		return Operation{}, translate(err)
	}
	o.MRIID, o.PipelineID, o.BatchID, o.TargetDef = int64(mr), int64(pipeline), int64(batch), string(def)
	o.CreatedAt, o.UpdatedAt, o.FileExpiresAt = created.T, updated.T, fileExpiry.ptr()
	return o, nil
}

// scanOp is scanOperation for collect.
func scanOp(s scanner) (Operation, error) { return scanOperation(s) }

// Operation returns the application operationID (ErrNotFound when unknown).
func (db *DB) Operation(ctx context.Context, operationID string) (Operation, error) {
	return operationByID(ctx, db.ro, operationID)
}

func operationByID(ctx context.Context, q queryer, operationID string) (Operation, error) {
	o, err := scanOperation(q.QueryRowContext(ctx, "SELECT "+operationColumns+" FROM operation WHERE operation_id = ?", operationID))
	if err != nil {
		return Operation{}, fmt.Errorf("operation %s: %w", operationID, err)
	}
	return o, nil
}

// OperationsBySubject lists a subject's applications newest first ("my requests"): by the
// database clock (created_at, then id), since ids are no order on a distributed MySQL.
func (db *DB) OperationsBySubject(ctx context.Context, subjectID string, p Page) ([]Operation, string, error) {
	c, after, err := decodeCursor(p.Cursor)
	if err != nil {
		return nil, "", err
	}
	q := "SELECT " + operationColumns + " FROM operation WHERE subject_id = ?"
	args := []any{subjectID}
	q, args = keyset{at: "created_at", id: "id", desc: true}.page(db, q, args, c, after, p.limit())
	rows, err := db.ro.QueryContext(ctx, q, args...)
	ops, err := collect(rows, err, scanOp)
	if err != nil {
		return nil, "", err
	}
	ops, next := trimPage(ops, p.limit(), func(o Operation) cursor { return cursor{ID: o.ID, At: o.CreatedAt} })
	return ops, next, nil
}

// StuckFilter selects the ops console's stuck list. Empty Statuses means every status that is
// not final (all but VALIDATED, REJECTED, CLOSED); Step 0 means any step.
type StuckFilter struct {
	Statuses []state.BindingStatus
	Step     state.Step
	// NeedsOperator keeps only the requests an operator or support must act on: a failure status
	// (CREATE_FAILED, HANDLE_FAILED) or a pending step (10501+, e.g. a pipeline that timed out),
	// and, when DeployOverdue > 0, a MERGED request unchanged for longer than DeployOverdue by
	// the database clock: its deploy callback is lost and no later MR of its project will let
	// reconciliation infer it, so only an operator's confirmation validates it. A removal
	// waiting for its deploy (VALIDATED at CLOSE_MERGED) as long is listed likewise.
	NeedsOperator bool
	DeployOverdue time.Duration
	// ApprovalOverdue > 0 (with NeedsOperator) adds the requests APPROVAL_SENT for longer than it:
	// people may have forgotten the ticket, or its decision was lost on the way.
	ApprovalOverdue time.Duration
	Page
}

// needsOperator is the one statement of "needs an operator" over operation rows (the stuck list's
// filter and the ops console's count): a failure; a step whose outcome is unknown on the way to
// being in effect; a grant merged longer than deployOverdue ago whose deploy has not come; a
// decision awaited (APPROVAL_SENT) longer than approvalOverdue. An overdue of 0 leaves its part
// out. (Removals whose deploy is overdue are VALIDATED; the stuck list reads them apart.)
func (db *DB) needsOperator(deployOverdue, approvalOverdue time.Duration) (string, []any) {
	failed, pending, unfinished := state.FailedStatuses(), state.PendingSteps(), state.UnfinishedStatuses()
	q := "(status IN " + inList(len(failed)) + " OR (step IN " + inList(len(pending)) + " AND status IN " + inList(len(unfinished)) + ")"
	args := append(append(anys(failed), anys(pending)...), anys(unfinished)...)
	if deployOverdue > 0 {
		q += " OR (status = ? AND updated_at < " + db.nowPlus() + ")"
		args = append(args, state.StatusMerged, -micros(deployOverdue))
	}
	if approvalOverdue > 0 {
		q += " OR (status = ? AND updated_at < " + db.nowPlus() + ")"
		args = append(args, state.StatusApprovalSent, -micros(approvalOverdue))
	}
	return q + ")", args
}

// StuckOperations lists applications by status (and step), the longest unchanged first.
func (db *DB) StuckOperations(ctx context.Context, f StuckFilter) ([]Operation, string, error) {
	c, after, err := decodeCursor(f.Cursor)
	if err != nil {
		return nil, "", err
	}
	statuses := f.Statuses
	if len(statuses) == 0 {
		statuses = state.UnfinishedStatuses()
	}
	if len(statuses) > maxInList {
		return nil, "", fmt.Errorf("stuck list: %d statuses", len(statuses))
	}
	q := "SELECT " + operationColumns + " FROM operation WHERE status IN " + inList(len(statuses))
	args := anys(statuses)
	if f.Step != 0 {
		q += " AND step = ?"
		args = append(args, f.Step)
	}
	if f.NeedsOperator {
		needs, needsArgs := db.needsOperator(f.DeployOverdue, f.ApprovalOverdue)
		q += " AND " + needs
		args = append(args, needsArgs...)
	}
	q, args = keyset{at: "updated_at", id: "id"}.page(db, q, args, c, after, f.limit())
	rows, err := db.ro.QueryContext(ctx, q, args...)
	ops, err := collect(rows, err, scanOp)
	if err != nil {
		return nil, "", err
	}
	if f.NeedsOperator && f.DeployOverdue > 0 && len(f.Statuses) == 0 {
		// Removals whose deploy is overdue are VALIDATED, which the list above leaves out (every
		// binding in effect is): they come from removal_merged, in the same order, and the two
		// sorted lists are merged into the page.
		removals, err := db.overdueRemovals(ctx, f, c, after)
		if err != nil {
			return nil, "", err
		}
		ops = append(ops, removals...)
		slices.SortFunc(ops, func(a, b Operation) int {
			if c := a.UpdatedAt.Compare(b.UpdatedAt); c != 0 {
				return c
			}
			return cmp.Compare(a.ID, b.ID)
		})
		if len(ops) > f.limit()+1 {
			ops = ops[:f.limit()+1]
		}
	}
	ops, next := trimPage(ops, f.limit(), func(o Operation) cursor { return cursor{ID: o.ID, At: o.UpdatedAt} })
	return ops, next, nil
}

// overdueRemovals is the stuck list's page of removals waiting for their deploy for longer than
// f.DeployOverdue (after the cursor c when after), in the list's order.
func (db *DB) overdueRemovals(ctx context.Context, f StuckFilter, c cursor, after bool) ([]Operation, error) {
	q := "SELECT " + prefixed("o.", operationColumns) + " FROM removal_merged r JOIN operation o ON o.operation_id = r.operation_id" +
		" WHERE r.created_at < " + db.nowPlus() + " AND o.status = ? AND o.step = ?"
	args := []any{-micros(f.DeployOverdue), state.StatusValidated, state.StepCloseMerged}
	q, args = keyset{at: "o.updated_at", id: "o.id"}.page(db, q, args, c, after, f.limit())
	rows, err := db.ro.QueryContext(ctx, q, args...)
	return collect(rows, err, scanOp)
}

// OperationsByMR returns the MERGED applications carried by MR mrIID of project: the members a
// deploy callback without operationIds validates.
func (db *DB) OperationsByMR(ctx context.Context, project string, mrIID int64) ([]Operation, error) {
	return operationsByMR(ctx, db.ro, project, mrIID)
}

func operationsByMR(ctx context.Context, q queryer, project string, mrIID int64) ([]Operation, error) {
	rows, err := q.QueryContext(ctx, "SELECT "+operationColumns+" FROM operation WHERE project = ? AND mr_iid = ? AND status = ?",
		project, mrIID, state.StatusMerged)
	return collect(rows, err, scanOp)
}

// requireOne checks that a guarded write changed exactly one row (0 → ErrPreempted).
func requireOne(res interface{ RowsAffected() (int64, error) }, err error, format string, args ...any) error {
	if err != nil {
		return fmt.Errorf(format+": %w", append(args, translate(err))...)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return fmt.Errorf(format+": %w", append(args, translate(err))...)
	}
	if n != 1 {
		return fmt.Errorf(format+": %w", append(args, ErrPreempted)...)
	}
	return nil
}

// KeepTicket records the approval ticket operationID was sent with, once (a ticket recorded
// already stays). It is a fact learnt from the approval system, not a state: no version moves,
// so it is written even when the decision's callback moved the request on before the send's own
// step could record it (a quick approval system).
func (db *DB) KeepTicket(ctx context.Context, operationID, ticketID string) error {
	_, err := db.rw.ExecContext(ctx, "UPDATE operation SET ticket_id = ? WHERE operation_id = ? AND ticket_id = ''",
		clipText(ticketID, 64), operationID)
	return translate(err)
}
