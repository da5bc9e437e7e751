package store

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"bindery/state"
)

// A partition's merge train: its active batches ("cars") in order (docs/architecture.md, "The
// merge train"), the operators' pause of it, and what an estimate of a car's merge reads.

// Train returns the active cars of partition in train order (a car claimed before the train
// existed, without a sequence, first): one read on idx_merge_batch_active.
func (db *DB) Train(ctx context.Context, partition string) ([]Batch, error) {
	rows, err := db.ro.QueryContext(ctx, "SELECT "+batchColumns+" FROM "+db.hinted("merge_batch", "idx_merge_batch_active")+
		" WHERE active_slot = ? ORDER BY train_seq, id", partition)
	out, err := collect(rows, err, scanBatch)
	if err != nil {
		return nil, fmt.Errorf("the train of %s: %w", partition, err)
	}
	return out, nil
}

// Trains returns the active cars of every partition that has one, in train order per partition.
func (db *DB) Trains(ctx context.Context) (map[string][]Batch, error) {
	rows, err := db.ro.QueryContext(ctx, "SELECT "+batchColumns+" FROM merge_batch WHERE status IN (?, ?) ORDER BY partition_key, train_seq, id",
		state.BatchRunning, state.BatchBlocked)
	cars, err := collect(rows, err, scanBatch)
	if err != nil {
		return nil, fmt.Errorf("the trains: %w", err)
	}
	out := map[string][]Batch{}
	for _, c := range cars {
		out[c.Partition] = append(out[c.Partition], c)
	}
	return out, nil
}

// Ahead is the car directly ahead of b in its train (ok false: b is the first).
func Ahead(train []Batch, b Batch) (Batch, bool) {
	var ahead Batch
	found := false
	for _, c := range train {
		if c.ID == b.ID {
			break
		}
		ahead, found = c, true
	}
	return ahead, found
}

// WakeBehind makes the tasks of the cars behind b due now when they wait for news (a pipeline,
// their turn to merge): b's branch, place or end changed what they were built on or wait for.
func (db *DB) WakeBehind(ctx context.Context, b Batch) (int, error) {
	train, err := db.Train(ctx, b.Partition)
	if err != nil {
		return 0, err
	}
	var refs []TaskRef
	for _, c := range train {
		if c.ID != b.ID && (c.TrainSeq > b.TrainSeq || b.TrainSeq == 0) {
			refs = append(refs, TaskRef{Kind: state.TaskBatch, Ref: strconv.FormatInt(c.ID, 10)})
		}
	}
	if len(refs) == 0 {
		return 0, nil
	}
	return db.WakeTasks(ctx, refs)
}

// LandedSHA is the commit batch b's MR put on its target branch when it merged ("" : not
// recorded, or GitLab gave none).
func (db *DB) LandedSHA(ctx context.Context, b Batch) (string, error) {
	if b.MRIID == 0 {
		return "", nil
	}
	var sha string
	err := translate(db.ro.QueryRowContext(ctx, "SELECT sha FROM mr_merge WHERE project = ? AND mr_iid = ?", b.Project, b.MRIID).Scan(&sha))
	if errors.Is(err, ErrNotFound) {
		return "", nil
	}
	return sha, err
}

// PipelineDurations returns how long the last n pipelines of partition's cars took to pass
// (newest first): what an estimate of a car's merge reads.
func (db *DB) PipelineDurations(ctx context.Context, partition string, n int) ([]time.Duration, error) {
	rows, err := db.ro.QueryContext(ctx, "SELECT "+db.elapsedBetween("ci_started_at", "ci_passed_at")+" FROM "+db.hinted("merge_batch", "idx_merge_batch_ci")+
		" WHERE partition_key = ? AND ci_passed_at IS NOT NULL AND ci_started_at IS NOT NULL ORDER BY ci_passed_at DESC LIMIT ?", partition, n)
	return collect(rows, err, func(s scanner) (time.Duration, error) {
		var us int64
		err := s.Scan(&us)
		return time.Duration(us) * time.Microsecond, err
	})
}

// elapsedBetween is the microseconds from one DATETIME expression to another.
func (db *DB) elapsedBetween(from, to string) string {
	if db.dialect == MySQL {
		return "TIMESTAMPDIFF(MICROSECOND, " + from + ", " + to + ")"
	}
	return "CAST((julianday(" + to + ") - julianday(" + from + ")) * 86400000000.0 AS INTEGER)"
}

// Pause is an operator's pause of a partition's train: no new car is claimed and no car merges
// until it is resumed.
type Pause struct {
	Partition string
	By        string
	Reason    string
	At        time.Time
}

// PauseTrain pauses partition's train (a pause already there is replaced: the latest reason
// stands). It reports whether the partition was running before.
func (tx *Tx) PauseTrain(ctx context.Context, partition, by, reason string) (bool, error) {
	res, err := tx.tx.ExecContext(ctx, "UPDATE train_pause SET paused_by = ?, reason = ?, paused_at = "+tx.db.now()+" WHERE partition_key = ?",
		by, clipNote(reason), partition)
	n, err := affectedOr(res, err)
	if err != nil || n > 0 {
		return false, err
	}
	_, err = tx.tx.ExecContext(ctx, "INSERT INTO train_pause (partition_key, paused_by, reason) VALUES (?, ?, ?)", partition, by, clipNote(reason))
	if err = translate(err); errors.Is(err, ErrDuplicate) {
		return false, ErrRetry // paused by someone else at this moment: read again
	}
	return err == nil, err
}

// ResumeTrain ends partition's pause and reports whether it was paused.
func (tx *Tx) ResumeTrain(ctx context.Context, partition string) (bool, error) {
	res, err := tx.tx.ExecContext(ctx, "DELETE FROM train_pause WHERE partition_key = ?", partition)
	n, err := affectedOr(res, err)
	return n > 0, err
}

// Paused returns partition's pause (ok false: it runs).
func (db *DB) Paused(ctx context.Context, partition string) (Pause, bool, error) {
	var p Pause
	var at dbTime
	err := translate(db.ro.QueryRowContext(ctx, "SELECT partition_key, paused_by, reason, paused_at FROM train_pause WHERE partition_key = ?", partition).
		Scan(&p.Partition, &p.By, &p.Reason, &at))
	switch {
	case errors.Is(err, ErrNotFound):
		return Pause{}, false, nil
	case err != nil:
		return Pause{}, false, fmt.Errorf("pause of %s: %w", partition, err)
	}
	p.At = at.T
	return p, true, nil
}

// Pauses returns every paused partition.
func (db *DB) Pauses(ctx context.Context) ([]Pause, error) {
	rows, err := db.ro.QueryContext(ctx, "SELECT partition_key, paused_by, reason, paused_at FROM train_pause ORDER BY partition_key")
	return collect(rows, err, func(s scanner) (Pause, error) {
		var p Pause
		var at dbTime
		err := s.Scan(&p.Partition, &p.By, &p.Reason, &at)
		p.At = at.T
		return p, err
	})
}

// SendNext marks operationID's waiting row for the next car of its partition, ahead of the
// waiting set (by: the operator). false: the request is not waiting (claimed, or never admitted).
func (tx *Tx) SendNext(ctx context.Context, operationID, by string) (bool, error) {
	res, err := tx.tx.ExecContext(ctx, "UPDATE merge_batch_request SET next_by = ? WHERE operation_id = ? AND batch_id IS NULL", by, operationID)
	n, err := affectedOr(res, err)
	return n > 0, err
}

func affectedOr(res interface{ RowsAffected() (int64, error) }, err error) (int64, error) {
	if err != nil {
		return 0, translate(err)
	}
	n, err := res.RowsAffected()
	return n, translate(err)
}
