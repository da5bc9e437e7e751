package store

import (
	"bindery/internal/vocab/state"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// Admission puts an application into its partition's waiting set (table merge_batch_request).
type Admission struct {
	OperationID string
	Action      state.Action
	Partition   string // the target's GitLab project (docs/invariants.md, 'Partitions')
	// Change is the change as rendered and validated at admission (docs/workflow.md, 'Admission');
	// the batch runner commits it as it is, so the request finishes even if its target leaves the
	// catalog. Zero: not recorded, the runner renders from the catalog (batch.Admit fills it).
	Change AdmittedChange
}

// AdmittedChange is a request's file change as validated at admission: the target branch, the
// path, and for an ADD the file's content.
type AdmittedChange struct {
	Branch  string
	Path    string
	Content string
}

// Admit is DB.Admit inside the transaction. A duplicate leaves the transaction usable on both
// databases (the failed statement alone is undone; TestDuplicateKeyInsideATransaction pins it).
func (tx *Tx) admit(ctx context.Context, a Admission) (bool, error) {
	if a.Action != state.ActionAdd && a.Action != state.ActionDelete && !a.Action.InEffect() {
		return false, fmt.Errorf("admit %s: unknown action %q", a.OperationID, a.Action)
	}
	_, err := tx.tx.ExecContext(ctx, "INSERT INTO merge_batch_request (operation_id, action, partition_key, change_branch, change_path, change_content) VALUES (?, ?, ?, ?, ?, ?)",
		a.OperationID, a.Action, a.Partition, nullIfEmpty(a.Change.Branch), nullIfEmpty(a.Change.Path), nullIfEmpty(a.Change.Content))
	if err = translate(err); errors.Is(err, ErrDuplicate) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("admit %s: %w", a.OperationID, err)
	}
	return true, nil
}

// WaitingPlace is where a request stands in its partition's waiting set: "why is my request
// waiting" (docs/workflow.md, 'What the requester is told').
type WaitingPlace struct {
	Partition string
	Action    state.Action
	Since     time.Time // admitted at
	Ahead     int       // requests a claim takes before it, still waiting
	// NextBy is the operator who sent it into the next car, ahead of the waiting set ("": none).
	NextBy string
	// BlockedBy is the partition's BLOCKED batch, when one holds it: nothing of the partition is
	// batched until it is resolved (nil: none).
	BlockedBy *Batch
}

// Position is the 1-based place in the waiting set.
func (w WaitingPlace) Position() int { return w.Ahead + 1 }

// Waiting returns the request's place in the waiting set, ErrNotFound when it is not waiting
// (never admitted, already claimed by a batch, or removed by a failed batch).
func (db *DB) Waiting(ctx context.Context, operationID string) (WaitingPlace, error) {
	var w WaitingPlace
	var id int64
	var since dbTime
	var of, round sql.NullInt64
	var next sql.NullString
	// Its latest admission by the database clock, never by id (ids are no order on a distributed
	// MySQL); a request has at most one waiting row per action.
	err := db.ro.QueryRowContext(ctx, "SELECT id, partition_key, action, created_at, suspect_of, suspect_round, next_by FROM merge_batch_request "+
		"WHERE operation_id = ? AND batch_id IS NULL ORDER BY created_at DESC, id DESC LIMIT 1", operationID).Scan(&id, &w.Partition, &w.Action, &since, &of, &round, &next)
	if err != nil {
		return WaitingPlace{}, fmt.Errorf("waiting place of %s: %w", operationID, translate(err))
	}
	w.Since, w.NextBy = since.T, next.String
	// Counted in the claim's order: the rows an operator sent into the next car first, then the
	// suspect groups of a bisection (latest round first, see batch.Claim), then (created_at, id) —
	// the id only orders rows admitted in the same microsecond (millisecond on SQLite), the same
	// way for the claim and the count.
	at := db.timeArg(w.Since)
	sentNext := "SELECT COUNT(*) FROM " + db.hinted("merge_batch_request", "idx_merge_batch_request_next") +
		" WHERE partition_key = ? AND batch_id IS NULL AND next_by IS NOT NULL"
	q := "SELECT COUNT(*) FROM merge_batch_request WHERE partition_key = ? AND batch_id IS NULL " +
		"AND (next_by IS NOT NULL OR suspect_round IS NOT NULL OR created_at < ? OR (created_at = ? AND id < ?))"
	args := []any{w.Partition, at, at, id}
	switch {
	case next.Valid:
		q = sentNext + " AND (created_at < ? OR (created_at = ? AND id < ?))"
	case round.Valid:
		q = "SELECT (SELECT COUNT(*) FROM " + db.hinted("merge_batch_request", "idx_merge_batch_request_suspect") + " WHERE partition_key = ? AND batch_id IS NULL " +
			"AND suspect_round IS NOT NULL AND next_by IS NULL AND (suspect_round > ? OR (suspect_round = ? AND (suspect_of < ? OR (suspect_of = ? " +
			"AND (created_at < ? OR (created_at = ? AND id < ?))))))) + (" + sentNext + ")"
		args = []any{w.Partition, round.Int64, round.Int64, of.Int64, of.Int64, at, at, id, w.Partition}
	}
	err = db.ro.QueryRowContext(ctx, q, args...).Scan(&w.Ahead)
	if err != nil {
		return WaitingPlace{}, fmt.Errorf("waiting place of %s: %w", operationID, translate(err))
	}
	// The first BLOCKED car of the partition's train, if any: one read on the train's index.
	b, err := scanBatch(db.ro.QueryRowContext(ctx, "SELECT "+batchColumns+" FROM "+db.hinted("merge_batch", "idx_merge_batch_active")+
		" WHERE active_slot = ? AND status = ? ORDER BY train_seq, id LIMIT 1", w.Partition, state.BatchBlocked))
	switch err = translate(err); {
	case err == nil:
		w.BlockedBy = &b
	case !errors.Is(err, ErrNotFound):
		return WaitingPlace{}, fmt.Errorf("waiting place of %s: %w", operationID, err)
	}
	return w, nil
}

// PartitionsWaiting lists the partitions that have waiting requests. A batch round runs one
// claim per partition; reading them here (not from the catalog) lets the requests of a target
// removed from the config finish.
func (db *DB) PartitionsWaiting(ctx context.Context) ([]string, error) {
	rows, err := db.ro.QueryContext(ctx, "SELECT DISTINCT partition_key FROM merge_batch_request WHERE batch_id IS NULL")
	return collect(rows, err, func(s scanner) (string, error) {
		var p string
		return p, s.Scan(&p)
	})
}

// PartitionDue reports whether partition's waiting set should be batched now: a batch closes
// by size or by age (docs/workflow.md, 'Batch rounds'), so it is due when at least max requests
// wait or the oldest has waited longer than maxWait, by the database clock, or a suspect group
// (bisection) waits. maxWait ≤ 0: whatever waits is due. Up to three bounded reads on the claim and
// suspect indexes (at most max rows counted, one row probed for each of the other two).
func (db *DB) PartitionDue(ctx context.Context, partition string, max int, maxWait time.Duration) (bool, error) {
	if maxWait <= 0 {
		return true, nil
	}
	var n int
	err := db.ro.QueryRowContext(ctx, "SELECT COUNT(*) FROM (SELECT id FROM merge_batch_request WHERE partition_key = ? AND batch_id IS NULL AND created_at < "+
		db.now()+" LIMIT ?) w", partition, max).Scan(&n)
	if err != nil {
		return false, fmt.Errorf("partition %s due: %w", partition, translate(err))
	}
	if n >= max {
		return true, nil
	}
	// The half of a bisected batch is due at once: its batch closed already, and the culprit's
	// search should not wait for batch.maxWait. One probe on the suspects' index.
	var probe int64
	err = translate(db.ro.QueryRowContext(ctx, "SELECT id FROM "+db.hinted("merge_batch_request", "idx_merge_batch_request_suspect")+
		" WHERE partition_key = ? AND batch_id IS NULL AND suspect_round IS NOT NULL LIMIT 1", partition).Scan(&probe))
	switch {
	case err == nil:
		return true, nil
	case !errors.Is(err, ErrNotFound):
		return false, fmt.Errorf("partition %s due: %w", partition, err)
	}
	err = translate(db.ro.QueryRowContext(ctx, "SELECT id FROM merge_batch_request WHERE partition_key = ? AND batch_id IS NULL AND created_at < "+
		db.nowPlus()+" LIMIT 1", partition, -micros(maxWait)).Scan(&probe))
	switch {
	case errors.Is(err, ErrNotFound):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("partition %s due: %w", partition, err)
	}
	return true, nil
}

func nullIfEmpty(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// Batching says where a request's actions are on the batch path: the active batch (RUNNING,
// BLOCKED) that holds one of them (0: none), and whether one waits in the waiting set.
func (tx *Tx) Batching(ctx context.Context, operationID string) (activeBatch int64, waiting bool, err error) {
	type row struct {
		batch  int64
		status string
	}
	rows, err := tx.tx.QueryContext(ctx, "SELECT COALESCE(r.batch_id, 0), COALESCE(b.status, '') FROM merge_batch_request r "+
		"LEFT JOIN merge_batch b ON b.id = r.batch_id WHERE r.operation_id = ?", operationID)
	found, err := collect(rows, err, func(s scanner) (row, error) { var r row; return r, s.Scan(&r.batch, &r.status) })
	if err != nil {
		return 0, false, fmt.Errorf("batching of %s: %w", operationID, err)
	}
	for _, r := range found {
		switch {
		case r.batch == 0:
			waiting = true
		case state.BatchStatus(r.status).Active():
			activeBatch = r.batch
		}
	}
	return activeBatch, waiting, nil
}
