package store

import (
	"bindery/internal/vocab/state"
	"context"
	"fmt"
	"slices"
	"time"
)

// MemberChange moves many requests at once (a batch's members at hand-off and settlement,
// reconciliation): those whose status is one of From go to To / Step; the others are left alone
// and reported as not flipped. Every From → To must be in the transition table.
type MemberChange struct {
	From       []state.BindingStatus
	To         state.BindingStatus
	Step       state.Step
	Note       string
	MRIID      int64 // > 0: record the batch's MR on every flipped operation
	PipelineID int64 // > 0: record its pipeline
	// FromStep, when set, narrows From to the operations at that step: a removal waiting for
	// its deploy (CLOSE_MERGED) is VALIDATED like a binding in effect.
	FromStep state.Step
}

// Check refuses a change that names no From status or a move the transition table does not allow.
func (c MemberChange) Check() error {
	if len(c.From) == 0 {
		return fmt.Errorf("member change to %s: no From statuses", c.To)
	}
	for _, f := range c.From {
		if !state.CanTransition(f, c.To) {
			return &state.ErrIllegalTransition{From: f, To: c.To}
		}
	}
	return nil
}

// transitionMany applies c to the given operations, a chunk of at most maxInList ids per
// statement, never a statement per row. Per chunk: a locking read of the operations (the one
// lock order: operation first), the operation update, the binding update (which must change
// exactly the rows flipped, else ErrPreempted), and a multi-row insert into the step history.
// batchID > 0 records the batch on the operations. project != "" restricts the flip to that
// project's operations. It returns the operations flipped, as they are after the change, with
// the time they spent in each stage up to it (Operation.Stages).
func (tx *Tx) transitionMany(ctx context.Context, operationIDs []string, c MemberChange, batchID int64, project string) ([]Operation, error) {
	if err := c.Check(); err != nil {
		return nil, err
	}
	db := tx.db
	ids := slices.Clone(operationIDs)
	// Sorted and deduplicated: every bulk writer takes its row locks in the same order.
	slices.Sort(ids)
	ids = slices.Compact(ids)
	var flipped []Operation
	for _, chunk := range chunks(ids, maxInList) {
		// The stage times come with the locking read: a validation's stage metrics need no
		// read of the step history.
		rows, err := tx.tx.QueryContext(ctx, "SELECT "+db.now()+", "+stageTimeColumns()+", "+operationColumns+" FROM "+db.hinted("operation", "uk_operation_operation")+
			" WHERE operation_id IN "+inList(len(chunk))+db.forUpdate(), anys(chunk)...)
		var now time.Time // the locking read's clock: the flip's time, stage times and history included
		ops, err := collect(rows, err, func(s scanner) (Operation, error) {
			o, at, err := scanMoving(s)
			now = at
			return o, err
		})
		if err != nil {
			return nil, err
		}
		var eligible []string
		var moved []Operation
		for _, o := range ops {
			if slices.Contains(c.From, o.Status) && (c.FromStep == 0 || o.Step == c.FromStep) && (project == "" || o.Project == project) {
				eligible = append(eligible, o.OperationID)
				moved = append(moved, o)
			}
		}
		if len(eligible) == 0 {
			continue
		}

		var a assignments
		a.set(db.addStageTimeAt(), db.addStageTimeArgs(now)...)
		a.set("status = ?, step = ?, version = version + 1, updated_at = ?", c.To, c.Step, db.timeArg(now))
		a.refs(c.MRIID, c.PipelineID)
		if batchID != 0 {
			a.set("batch_id = ?", batchID)
		}
		res, err := tx.tx.ExecContext(ctx, "UPDATE "+db.hinted("operation", "uk_operation_operation")+" SET "+a.list+" WHERE operation_id IN "+inList(len(eligible)),
			append(a.args, anys(eligible)...)...)
		if err := requireN(res, err, len(eligible), "move %d operations to %s", len(eligible), c.To); err != nil {
			return nil, err
		}
		args := append([]any{c.To}, anys(eligible)...)
		args = append(args, anys(c.From)...)
		res, err = tx.tx.ExecContext(ctx, "UPDATE "+db.hinted("binding", "uk_binding_operation")+" SET status = ?, version = version + 1, updated_at = "+db.now()+
			" WHERE operation_id IN "+inList(len(eligible))+" AND status IN "+inList(len(c.From)), args...)
		if err := requireN(res, err, len(eligible), "move %d bindings to %s", len(eligible), c.To); err != nil {
			return nil, err
		}
		steps := make([]stepRow, len(moved))
		for i, o := range moved {
			steps[i] = stepRow{o.OperationID, o.Version + 1}
		}
		if err := insertSteps(ctx, tx.tx, steps, c.Step, c.To, c.Note); err != nil {
			return nil, err
		}
		if err := tx.trackRemovals(ctx, moved, c); err != nil {
			return nil, err
		}
		moves := make([]state.Move, len(moved))
		for i, o := range moved {
			moves[i] = state.Move{From: o.Status, To: c.To, FromStep: o.Step, Step: c.Step, MR: c.MRIID != 0}
		}
		first := len(flipped)
		for _, o := range moved {
			o.Status, o.Step, o.Version = c.To, c.Step, o.Version+1
			if c.MRIID != 0 {
				o.MRIID = c.MRIID
			}
			if c.PipelineID != 0 {
				o.PipelineID = c.PipelineID
			}
			if batchID != 0 {
				o.BatchID = batchID
			}
			flipped = append(flipped, o)
		}
		if _, err := tx.insertEvents(ctx, requestEvents(flipped[first:], moves, c.Note), true); err != nil {
			return nil, err
		}
	}
	return flipped, nil
}

// trackRemovals keeps removal_merged beside the moves of ops (as read, before c): a removal that
// reaches CLOSE_MERGED is listed with the MR that merged it, one that leaves it (closed by its
// deploy, or by an operator's confirmation) is no longer. Written after the binding, in the
// move's transaction.
func (tx *Tx) trackRemovals(ctx context.Context, ops []Operation, c MemberChange) error {
	var merged, left []any
	var args []any
	for _, o := range ops {
		switch {
		case c.Step == state.StepCloseMerged && o.Step != state.StepCloseMerged:
			mr := c.MRIID
			if mr == 0 {
				mr = o.MRIID
			}
			merged = append(merged, o.OperationID)
			args = append(args, o.OperationID, o.Project, mr)
		case c.Step != state.StepCloseMerged && o.Step == state.StepCloseMerged:
			left = append(left, o.OperationID)
		}
	}
	if len(merged) > 0 {
		upsert := " ON CONFLICT (operation_id) DO UPDATE SET project = excluded.project, mr_iid = excluded.mr_iid"
		if tx.db.dialect == MySQL {
			upsert = " ON DUPLICATE KEY UPDATE project = VALUES(project), mr_iid = VALUES(mr_iid)"
		}
		if _, err := tx.tx.ExecContext(ctx, "INSERT INTO removal_merged (operation_id, project, mr_iid) VALUES "+rowsOf("(?, ?, ?)", len(merged))+upsert, args...); err != nil {
			return fmt.Errorf("record %d merged removals: %w", len(merged), translate(err))
		}
	}
	if len(left) > 0 {
		if _, err := tx.tx.ExecContext(ctx, tx.db.deleteFrom("removal_merged", "PRIMARY")+" WHERE operation_id IN "+inList(len(left)), left...); err != nil {
			return fmt.Errorf("forget %d merged removals: %w", len(left), translate(err))
		}
	}
	return nil
}

// requireN checks that a bulk guarded write changed exactly n rows (else ErrPreempted: a row
// changed without its operation lock, and the whole transaction rolls back).
func requireN(res interface{ RowsAffected() (int64, error) }, err error, n int, format string, args ...any) error {
	if err != nil {
		return fmt.Errorf(format+": %w", append(args, translate(err))...)
	}
	got, err := res.RowsAffected()
	if err != nil {
		return fmt.Errorf(format+": %w", append(args, translate(err))...)
	}
	if got != int64(n) {
		return fmt.Errorf(format+": %d of %d rows: %w", append(args, got, n, ErrPreempted)...)
	}
	return nil
}

// TransitionMany moves many requests at once (see MemberChange) and returns those flipped.
func (db *DB) TransitionMany(ctx context.Context, operationIDs []string, c MemberChange) ([]Operation, error) {
	var out []Operation
	err := db.InTx(ctx, func(tx *Tx) error {
		var err error
		out, err = tx.TransitionMany(ctx, operationIDs, c, "")
		return err
	})
	return out, err
}

// TransitionMany is DB.TransitionMany inside the transaction; project != "" limits it to that
// project's operations. Which move it is — a deploy's validations, a removal's close — is the
// caller's (workflow's transition table): it returns only the rows it really flipped, so that a
// request a racing callback or reconciliation flipped first is counted once.
func (tx *Tx) TransitionMany(ctx context.Context, operationIDs []string, c MemberChange, project string) ([]Operation, error) {
	return tx.transitionMany(ctx, operationIDs, c, 0, project)
}
