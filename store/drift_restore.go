package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"bindery/internal/vocab/state"
)

// A drift finding's restore (docs/drift.md, 'Repairs'): bindery writes the binding's file again
// through the waiting set, a batch, the train and CI like any change, as a member whose action is
// RESTORE or REWRITE. The binding stays in effect meanwhile (a restore moves no status), and the
// finding stays open until the deploy that includes the restore's merge closes it. What became of
// a restore is read from the waiting set and the member history, never copied onto the finding.

// ErrRestoring: the binding's file is being restored already.
var ErrRestoring = errors.New("a restore of this file is on its way")

// restoreActions are the waiting set's actions of a restore.
var restoreActions = []any{state.ActionRestore, state.ActionRewrite}

// StartRestore records by's restore on finding f (read with LockDrift) and admits a — the
// rendered file, action RESTORE or REWRITE — into its partition's waiting set. A restore of the
// same binding that ended (its batch settled) leaves the waiting set first, so the unique
// (operation, action) admits this one; one still on its way is ErrRestoring.
func (tx *Tx) StartRestore(ctx context.Context, f DriftFinding, by string, a Admission) error {
	db := tx.db
	if _, err := tx.tx.ExecContext(ctx, db.deleteFrom("merge_batch_request", "uk_merge_batch_request_operation")+
		" WHERE operation_id = ? AND action IN (?, ?) AND batch_id IN (SELECT id FROM merge_batch WHERE status IN (?, ?))",
		f.OperationID, restoreActions[0], restoreActions[1], state.BatchSucceeded, state.BatchFailed); err != nil {
		return fmt.Errorf("restore %d: %w", f.ID, translate(err))
	}
	var n int
	if err := tx.tx.QueryRowContext(ctx, "SELECT COUNT(*) FROM merge_batch_request WHERE operation_id = ? AND action IN (?, ?)",
		f.OperationID, restoreActions[0], restoreActions[1]).Scan(&n); err != nil {
		return fmt.Errorf("restore %d: %w", f.ID, translate(err))
	}
	if n > 0 {
		return ErrRestoring
	}
	// The finding first, then the admission: the admission's time is never before the restore's.
	res, err := tx.tx.ExecContext(ctx, "UPDATE drift_finding SET restore_by = ?, restore_at = "+db.now()+", version = version + 1 WHERE id = ? AND version = ?",
		clipText(by, 254), f.ID, f.Version)
	if err != nil {
		return fmt.Errorf("restore %d: %w", f.ID, translate(err))
	}
	if n, err := affected(res); err != nil || n == 0 {
		return fmt.Errorf("restore %d: %w", f.ID, ErrPreempted)
	}
	added, err := tx.admit(ctx, a)
	if err == nil && !added {
		err = ErrRestoring
	}
	return err
}

// Where a restore stands (DriftRestore.State).
const (
	RestoreWaiting = "waiting" // in the waiting set
	RestoreBatched = "batched" // in a batch on its way (CI, the train, the merge)
	RestoreMerged  = "merged"  // merged; the finding closes with the deploy that includes it
	RestoreFailed  = "failed"  // its batch failed: the file is as it was, the finding open
	RestoreDone    = "done"    // deployed: the finding closed
)

// DriftRestore is what became of a finding's restore.
type DriftRestore struct {
	State   string
	BatchID int64
	MRIID   int64
	Note    string // the failed batch's note
}

// RestoreOf reads what became of f's restore (zero State: f has none).
func (db *DB) RestoreOf(ctx context.Context, f DriftFinding) (DriftRestore, error) {
	if f.RestoreAt == nil || f.OperationID == "" {
		return DriftRestore{}, nil
	}
	var out DriftRestore
	var batch sql.NullInt64
	err := db.ro.QueryRowContext(ctx, "SELECT batch_id FROM merge_batch_request WHERE operation_id = ? AND action IN (?, ?)",
		f.OperationID, restoreActions[0], restoreActions[1]).Scan(&batch)
	switch err = translate(err); {
	case err == nil && !batch.Valid:
		return DriftRestore{State: RestoreWaiting}, nil
	case err != nil && !errors.Is(err, ErrNotFound):
		return out, fmt.Errorf("restore of %d: %w", f.ID, err)
	}
	// Claimed (its row names the batch), or gone from the waiting set (its batch failed, or its
	// deploy closed the finding): the last batch that carried it since the restore was asked.
	var status state.BatchStatus
	var mr sql.NullInt64
	err = db.ro.QueryRowContext(ctx, "SELECT b.id, b.status, b.mr_iid, b.note FROM merge_batch_member m JOIN merge_batch b ON b.id = m.batch_id "+
		"WHERE m.operation_id = ? AND m.action IN (?, ?) AND m.claimed_at >= ? ORDER BY m.claimed_at DESC, m.id DESC LIMIT 1",
		f.OperationID, restoreActions[0], restoreActions[1], db.timeArg(*f.RestoreAt)).Scan(&out.BatchID, &status, &mr, &out.Note)
	switch err = translate(err); {
	case errors.Is(err, ErrNotFound):
		return DriftRestore{State: RestoreWaiting}, nil // claimed this instant: read again
	case err != nil:
		return out, fmt.Errorf("restore of %d: %w", f.ID, err)
	}
	out.MRIID = mr.Int64
	switch {
	case status == state.BatchFailed:
		out.State = RestoreFailed
	case f.State == DriftClosed:
		// Its deploy may call back before the batch has recorded its own merge: done all the same.
		out.State, out.Note = RestoreDone, ""
	case status.Active():
		out.State, out.Note = RestoreBatched, ""
	default:
		out.State, out.Note = RestoreMerged, ""
	}
	return out, nil
}

// RestoringRelations are the relations of targets whose open finding has a restore on its way
// (in the waiting set, in a batch, or merged and waiting for its deploy): target key → subjects.
// The drift round leaves them as they are — nothing in flight is drift. A restore merged longer
// than overdue ago whose deploy callback never came is on its way no more: the round then finds
// the file as bindery wrote it and closes the finding itself.
func (db *DB) RestoringRelations(ctx context.Context, targets []string, overdue time.Duration) (map[string]map[string]bool, error) {
	out := map[string]map[string]bool{}
	for _, c := range chunks(targets, maxInList) {
		rows, err := db.ro.QueryContext(ctx, "SELECT f.target_key, f.subject FROM drift_finding f WHERE f.target_key IN "+inList(len(c))+
			" AND f.state = ? AND f.restore_at IS NOT NULL AND EXISTS (SELECT 1 FROM merge_batch_request r LEFT JOIN merge_batch b ON b.id = r.batch_id "+
			"WHERE r.operation_id = f.operation_id AND r.action IN (?, ?) AND (r.batch_id IS NULL OR b.status IN (?, ?) OR (b.status = ? AND b.settled_at > "+db.nowPlus()+")))",
			append(anys(c), DriftOpen, restoreActions[0], restoreActions[1], state.BatchRunning, state.BatchBlocked, state.BatchSucceeded, -micros(overdue))...)
		pairs, err := collect(rows, err, func(s scanner) ([2]string, error) {
			var p [2]string
			return p, s.Scan(&p[0], &p[1])
		})
		if err != nil {
			return nil, fmt.Errorf("restoring relations: %w", translate(err))
		}
		for _, p := range pairs {
			if out[p[0]] == nil {
				out[p[0]] = map[string]bool{}
			}
			out[p[0]][p[1]] = true
		}
	}
	return out, nil
}

// RestoresOfMR lists the operations whose restore MR project!iid carried (a deploy callback that
// lists one of them names its own MR's change, not another's).
func (tx *Tx) RestoresOfMR(ctx context.Context, project string, iid int64) ([]string, error) {
	rows, err := tx.tx.QueryContext(ctx, "SELECT DISTINCT m.operation_id FROM merge_batch b JOIN merge_batch_member m ON m.batch_id = b.id "+
		"WHERE b.project = ? AND b.mr_iid = ? AND m.action IN (?, ?)", project, iid, restoreActions[0], restoreActions[1])
	ops, err := collect(rows, err, func(s scanner) (string, error) { var id string; return id, s.Scan(&id) })
	if err != nil {
		return nil, fmt.Errorf("restores of %s!%d: %w", project, iid, translate(err))
	}
	return ops, nil
}

// CloseRestored closes the open findings whose restore MR project!iid carried, now that a deploy
// includes it, and takes their restores out of the waiting set (they are done). It returns the
// findings closed.
func (tx *Tx) CloseRestored(ctx context.Context, project string, iid int64) (int, error) {
	db := tx.db
	ops, err := tx.RestoresOfMR(ctx, project, iid)
	if err != nil || len(ops) == 0 {
		return 0, err
	}
	closed := 0
	for _, c := range chunks(ops, maxInList) {
		res, err := tx.tx.ExecContext(ctx, "UPDATE drift_finding SET state = ?, closed_at = "+db.now()+", version = version + 1 "+
			"WHERE state = ? AND restore_at IS NOT NULL AND operation_id IN "+inList(len(c)), append([]any{DriftClosed, DriftOpen}, anys(c)...)...)
		if err != nil {
			return closed, fmt.Errorf("close restored findings: %w", translate(err))
		}
		n, err := affected(res)
		if err != nil {
			return closed, translate(err)
		}
		closed += int(n)
		if _, err := tx.tx.ExecContext(ctx, db.deleteFrom("merge_batch_request", "uk_merge_batch_request_operation")+" WHERE action IN (?, ?) AND operation_id IN "+inList(len(c))+
			" AND batch_id IN (SELECT id FROM merge_batch WHERE project = ? AND mr_iid = ?)",
			append(append([]any{restoreActions[0], restoreActions[1]}, anys(c)...), project, iid)...); err != nil {
			return closed, fmt.Errorf("end restores: %w", translate(err))
		}
	}
	return closed, nil
}
