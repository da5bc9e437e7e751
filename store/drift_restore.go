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

// ErrRestoring: a change of the binding's file is on its way already (a restore, or a renewal's
// new expiry).
var ErrRestoring = errors.New("a change of this file is on its way")

// restoreActions are the waiting set's actions of a restore.
var restoreActions = []any{state.ActionRestore, state.ActionRewrite}

// fileActions are the waiting set's actions that write the file of a binding in effect: a
// restore's and a renewal's. One at a time per binding: two in one batch would change one path
// twice.
var fileActions = []any{state.ActionRestore, state.ActionRewrite, state.ActionRenew}

// inFileActions is fileActions' IN list.
var inFileActions = inList(len(fileActions))

// endFileWrites takes operationID's file writes whose batch settled out of the waiting set: they
// have ended (merged, or failed and left the file as it was).
func (tx *Tx) endFileWrites(ctx context.Context, operationID string) error {
	_, err := tx.tx.ExecContext(ctx, tx.db.deleteFrom("merge_batch_request", "uk_merge_batch_request_operation")+
		" WHERE operation_id = ? AND action IN "+inFileActions+" AND batch_id IN (SELECT id FROM merge_batch WHERE status IN "+inSettled+")",
		append(append([]any{operationID}, fileActions...), anys(state.SettledBatchStatuses())...)...)
	if err != nil {
		return fmt.Errorf("end the file writes of %s: %w", operationID, translate(err))
	}
	return nil
}

// fileWritesOnTheirWay counts operationID's changes of its file still in the waiting set or in a
// batch: its file writes, and its removal — a write admitted beside the removal could merge after
// it and put the removed file back.
func (tx *Tx) fileWritesOnTheirWay(ctx context.Context, operationID string) (int, error) {
	var n int
	if err := tx.tx.QueryRowContext(ctx, "SELECT COUNT(*) FROM merge_batch_request WHERE operation_id = ? AND action IN "+inList(len(fileActions)+1),
		append([]any{operationID, state.ActionDelete}, fileActions...)...).Scan(&n); err != nil {
		return 0, fmt.Errorf("file writes of %s: %w", operationID, translate(err))
	}
	return n, nil
}

// forgetDriftHead makes the next drift round read a's branch again even if its head does not move:
// a file write admitted now changes what the file should hold (a renewal's new expiry), and one
// whose batch fails leaves the branch where it was — the file's difference is found all the same.
func (tx *Tx) forgetDriftHead(ctx context.Context, a Admission) error {
	if a.Change.Branch == "" {
		return nil
	}
	_, err := tx.tx.ExecContext(ctx, "DELETE FROM drift_head WHERE project = ? AND branch = ?", a.Partition, a.Change.Branch)
	if err != nil {
		return fmt.Errorf("forget the drift head of %s %s: %w", a.Partition, a.Change.Branch, translate(err))
	}
	return nil
}

// DropWaitingFileWrites takes operationID's file writes (a restore's, a renewal's) out of the
// waiting set while no batch has claimed them: its binding's removal starts, the file goes away.
// One in a batch goes on ahead of the removal, or leaves that batch as moot when the batch loads
// its members again (batch: a write of a binding no longer in effect).
func (tx *Tx) DropWaitingFileWrites(ctx context.Context, operationID string) error {
	_, err := tx.tx.ExecContext(ctx, tx.db.deleteFrom("merge_batch_request", "uk_merge_batch_request_operation")+
		" WHERE operation_id = ? AND action IN "+inFileActions+" AND batch_id IS NULL", append([]any{operationID}, fileActions...)...)
	if err != nil {
		return fmt.Errorf("drop the file writes of %s: %w", operationID, translate(err))
	}
	return nil
}

// DropWaiting deletes the waiting rows ids (still unclaimed): a claim found their changes moot.
func (tx *Tx) DropWaiting(ctx context.Context, ids []int64) error {
	for _, chunk := range chunks(ids, maxInList) {
		_, err := tx.tx.ExecContext(ctx, "DELETE FROM merge_batch_request WHERE batch_id IS NULL AND id IN "+inList(len(chunk)), anys(chunk)...)
		if err != nil {
			return fmt.Errorf("drop waiting rows: %w", translate(err))
		}
	}
	return nil
}

// dropMootFileWrites deletes, of the waiting rows ids (members a batch just returned to the
// waiting set), the file writes whose operation's removal is admitted: the waiting set never
// holds a write of a file beside its removal (DropWaitingFileWrites keeps that when the removal
// is admitted, this when a write comes back).
func (tx *Tx) dropMootFileWrites(ctx context.Context, ids []int64) error {
	for _, chunk := range chunks(ids, maxInList) {
		_, err := tx.tx.ExecContext(ctx, "DELETE FROM merge_batch_request WHERE batch_id IS NULL AND id IN "+inList(len(chunk))+
			" AND action IN "+inFileActions+
			" AND EXISTS (SELECT 1 FROM merge_batch_request d WHERE d.operation_id = merge_batch_request.operation_id AND d.action = ?)",
			append(append(anys(chunk), fileActions...), state.ActionDelete)...)
		if err != nil {
			return fmt.Errorf("drop moot file writes: %w", translate(err))
		}
	}
	return nil
}

// AdmitRenewal admits a — a renewal's file with its new expiry, action RENEW — into its
// partition's waiting set. A renewal's file still waiting for a batch takes a's content instead
// (the latest expiry wins, one commit); a file write in a batch on its way, or a restore, is
// ErrRestoring: the caller writes the file once that has ended.
func (tx *Tx) AdmitRenewal(ctx context.Context, a Admission) error {
	if a.Action != state.ActionRenew {
		return fmt.Errorf("admit the renewal of %s: action %q", a.OperationID, a.Action)
	}
	if err := tx.endFileWrites(ctx, a.OperationID); err != nil {
		return err
	}
	if err := tx.forgetDriftHead(ctx, a); err != nil {
		return err
	}
	res, err := tx.tx.ExecContext(ctx, "UPDATE merge_batch_request SET change_branch = ?, change_path = ?, change_content = ? "+
		"WHERE operation_id = ? AND action = ? AND batch_id IS NULL",
		nullIfEmpty(a.Change.Branch), nullIfEmpty(a.Change.Path), nullIfEmpty(a.Change.Content), a.OperationID, state.ActionRenew)
	if err != nil {
		return fmt.Errorf("admit the renewal of %s: %w", a.OperationID, translate(err))
	}
	if n, err := affected(res); err != nil || n > 0 {
		return err
	}
	if n, err := tx.fileWritesOnTheirWay(ctx, a.OperationID); err != nil || n > 0 {
		if err == nil {
			err = ErrRestoring
		}
		return err
	}
	added, err := tx.admit(ctx, a)
	if err == nil && !added {
		err = ErrRestoring
	}
	return err
}

// StartRestore records by's restore on finding f (read with LockDrift) and admits a — the
// rendered file, action RESTORE or REWRITE — into its partition's waiting set. A restore of the
// same binding that ended (its batch settled) leaves the waiting set first, so the unique
// (operation, action) admits this one; one still on its way, or a renewal's file, is
// ErrRestoring.
func (tx *Tx) StartRestore(ctx context.Context, f DriftFinding, by string, a Admission) error {
	db := tx.db
	if err := tx.endFileWrites(ctx, f.OperationID); err != nil {
		return err
	}
	if n, err := tx.fileWritesOnTheirWay(ctx, f.OperationID); err != nil || n > 0 {
		if err == nil {
			err = ErrRestoring
		}
		return err
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
	out, _, err := db.fileWrite(ctx, f.OperationID, restoreActions, *f.RestoreAt)
	if err != nil {
		return out, fmt.Errorf("restore of %d: %w", f.ID, err)
	}
	if (out.State == RestoreBatched || out.State == RestoreMerged) && f.State == DriftClosed {
		// Its deploy may call back before the batch has recorded its own merge: done all the same.
		out.State = RestoreDone
	}
	return out, nil
}

// RenewalFileOf reads what became of the file write of operationID's renewal granted at since
// (the file with its new expiry): the same states as a restore's, done once the deploy that
// includes its merge ended it.
func (db *DB) RenewalFileOf(ctx context.Context, operationID string, since time.Time) (DriftRestore, error) {
	out, gone, err := db.fileWrite(ctx, operationID, []any{state.ActionRenew}, since)
	if err != nil {
		return out, fmt.Errorf("the renewal's file of %s: %w", operationID, err)
	}
	if out.State == RestoreMerged && gone {
		out.State = RestoreDone
	}
	return out, nil
}

// fileWrite reads where operationID's latest file write of actions since `since` stands: waiting
// (in the waiting set, or about to be admitted), batched (in a batch on its way), merged or failed
// (by the last batch that carried it since then); gone says its waiting-set row has left (its
// deploy ended it). What became of a write is read from the waiting set and the member history,
// never copied.
func (db *DB) fileWrite(ctx context.Context, operationID string, actions []any, since time.Time) (DriftRestore, bool, error) {
	var out DriftRestore
	var batch sql.NullInt64
	in := inList(len(actions))
	err := translate(db.ro.QueryRowContext(ctx, "SELECT batch_id FROM merge_batch_request WHERE operation_id = ? AND action IN "+in,
		append([]any{operationID}, actions...)...).Scan(&batch))
	gone := errors.Is(err, ErrNotFound)
	switch {
	case err == nil && !batch.Valid:
		return DriftRestore{State: RestoreWaiting}, false, nil
	case err != nil && !gone:
		return out, false, err
	}
	// Claimed (its row names the batch), or gone from the waiting set: the last batch that carried
	// it since `since`.
	var status state.BatchStatus
	var mr sql.NullInt64
	err = translate(db.ro.QueryRowContext(ctx, "SELECT b.id, b.status, b.mr_iid, b.note FROM merge_batch_member m JOIN merge_batch b ON b.id = m.batch_id "+
		"WHERE m.operation_id = ? AND m.action IN "+in+" AND m.claimed_at >= ? ORDER BY m.claimed_at DESC, m.id DESC LIMIT 1",
		append(append([]any{operationID}, actions...), db.timeArg(since))...).Scan(&out.BatchID, &status, &mr, &out.Note))
	switch {
	case errors.Is(err, ErrNotFound):
		// Claimed this instant, or waiting for an earlier write of the file to end: read again.
		return DriftRestore{State: RestoreWaiting}, gone, nil
	case err != nil:
		return out, gone, err
	}
	out.MRIID = mr.Int64
	switch {
	case status == state.BatchFailed:
		out.State = RestoreFailed
	case status.Active():
		out.State, out.Note = RestoreBatched, ""
	default:
		out.State, out.Note = RestoreMerged, ""
	}
	return out, gone, nil
}

// RelationsBeingWritten are the relations of targets whose file is being written by bindery while
// the binding stays in effect — an open finding's restore, or a renewal's new expiry — in the
// waiting set, in a batch, or merged and waiting for its deploy: target key → subjects. The drift
// round leaves them as they are — nothing in flight is drift. A write merged longer than overdue
// ago whose deploy callback never came is on its way no more: the round then finds the file as
// bindery wrote it (and closes a restored finding itself).
func (db *DB) RelationsBeingWritten(ctx context.Context, targets []string, overdue time.Duration) (map[string]map[string]bool, error) {
	out := map[string]map[string]bool{}
	// The write's row: waiting, in an active batch, or in a batch merged less than overdue ago.
	onItsWay := "(r.batch_id IS NULL OR b.status IN " + inActive + " OR (b.status = ? AND b.settled_at > " + db.nowPlus() + "))"
	wayArgs := append(anys(state.ActiveBatchStatuses()), state.BatchSucceeded, -micros(overdue))
	for _, c := range chunks(targets, maxInList) {
		restores := "SELECT f.target_key, f.subject FROM drift_finding f WHERE f.target_key IN " + inList(len(c)) +
			" AND f.state = ? AND f.restore_at IS NOT NULL AND EXISTS (SELECT 1 FROM merge_batch_request r LEFT JOIN merge_batch b ON b.id = r.batch_id " +
			"WHERE r.operation_id = f.operation_id AND r.action IN (?, ?) AND " + onItsWay + ")"
		renewals := "SELECT o.target_key, o.subject_id FROM merge_batch_request r JOIN operation o ON o.operation_id = r.operation_id " +
			"LEFT JOIN merge_batch b ON b.id = r.batch_id WHERE r.action = ? AND o.target_key IN " + inList(len(c)) + " AND " + onItsWay
		args := append(append(append(anys(c), DriftOpen, restoreActions[0], restoreActions[1]), wayArgs...), state.ActionRenew)
		args = append(append(args, anys(c)...), wayArgs...)
		rows, err := db.ro.QueryContext(ctx, restores+" UNION "+renewals, args...)
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

// RestoresOfMR lists the operations whose file MR project!iid wrote while they stayed in effect —
// a restore, or a renewal's new expiry (a deploy callback that lists one of them names its own
// MR's change, not another's).
func (tx *Tx) RestoresOfMR(ctx context.Context, project string, iid int64) ([]string, error) {
	rows, err := tx.tx.QueryContext(ctx, "SELECT DISTINCT m.operation_id FROM merge_batch b JOIN merge_batch_member m ON m.batch_id = b.id "+
		"WHERE b.project = ? AND b.mr_iid = ? AND m.action IN "+inFileActions, append([]any{project, iid}, fileActions...)...)
	ops, err := collect(rows, err, func(s scanner) (string, error) { var id string; return id, s.Scan(&id) })
	if err != nil {
		return nil, fmt.Errorf("restores of %s!%d: %w", project, iid, translate(err))
	}
	return ops, nil
}

// CloseRestored closes the open findings whose restore MR project!iid carried, now that a deploy
// includes it, and takes its file writes (restores, renewals' new expiries) out of the waiting
// set: they are done. It returns the findings closed.
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
		if _, err := tx.tx.ExecContext(ctx, db.deleteFrom("merge_batch_request", "uk_merge_batch_request_operation")+" WHERE action IN "+inFileActions+" AND operation_id IN "+inList(len(c))+
			" AND batch_id IN (SELECT id FROM merge_batch WHERE project = ? AND mr_iid = ?)",
			append(append(append([]any{}, fileActions...), anys(c)...), project, iid)...); err != nil {
			return closed, fmt.Errorf("end restores: %w", translate(err))
		}
	}
	return closed, nil
}
