package store

import (
	"bindery/internal/vocab/state"
	"context"
	"database/sql"
	"fmt"
	"time"
)

// StepRecord is one row of an operation's append-only step history (table operation_step):
// the step it entered, the binding status with it, and when, by the database clock.
type StepRecord struct {
	ID          int64
	OperationID string
	Step        state.Step
	Status      state.BindingStatus
	Note        string
	At          time.Time
}

// maxNote bounds the stored note (operation_step.note, merge_batch.note are VARCHAR(512)).
const maxNote = 512

func clipNote(s string) string { return clipText(s, maxNote) }

// clipText cuts s to at most n bytes, on a rune boundary.
func clipText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for i := n; i > 0; i-- {
		if s[i]&0xC0 != 0x80 {
			return s[:i]
		}
	}
	return ""
}

// stepRow is one operation's row of a history append: its version after the change, which
// orders its history (operation_step.seq; never the row's id, which a distributed MySQL hands out
// in blocks per server).
type stepRow struct {
	operationID string
	version     int64
}

// insertSteps appends one history row per operation, with one multi-row insert per chunk.
func insertSteps(ctx context.Context, tx *sql.Tx, ops []stepRow, step state.Step, status state.BindingStatus, note string) error {
	note = clipNote(note)
	for _, chunk := range chunks(ops, maxInList) {
		args := make([]any, 0, 5*len(chunk))
		for _, o := range chunk {
			args = append(args, o.operationID, o.version, step, status, note)
		}
		if _, err := tx.ExecContext(ctx, "INSERT INTO operation_step (operation_id, seq, step, status, note) VALUES "+
			rowsOf("(?, ?, ?, ?, ?)", len(chunk)), args...); err != nil {
			return fmt.Errorf("append step %s: %w", step, err)
		}
	}
	return nil
}

// Steps returns operationID's step history, oldest first: in the order of the operation's
// versions, which its changes took one after another.
func (db *DB) Steps(ctx context.Context, operationID string) ([]StepRecord, error) {
	rows, err := db.ro.QueryContext(ctx, "SELECT id, operation_id, step, status, note, at FROM operation_step WHERE operation_id = ? ORDER BY seq", operationID)
	return collect(rows, err, scanStep)
}

func scanStep(s scanner) (StepRecord, error) {
	var r StepRecord
	var at dbTime
	err := s.Scan(&r.ID, &r.OperationID, &r.Step, &r.Status, &r.Note, &at)
	r.At = at.T
	return r, err
}
