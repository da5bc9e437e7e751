package store

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"bindery/internal/vocab/state"
)

// What the audit export reads (docs/api.md, 'The audit export'): a time range walked in pages
// in time order, each page one range read of an index (0182), so that a range of ten years costs
// what its rows cost and never holds them all.

// ExportCursor is where a walk goes on: after this time and row id (zero: from the start).
type ExportCursor struct {
	At time.Time
	ID int64
}

// RequestFacts are what an export row says of the request an action concerned.
type RequestFacts struct {
	OperationID string
	Subject     string
	TargetKey   string
	Project     string
	Status      state.BindingStatus
	TicketID    string
	DecidedBy   string
	MRIID       int64
	CreatedAt   time.Time
	// DeployedAt is when it first came into effect (its first CALLED_BACK; nil: never).
	DeployedAt *time.Time
}

// AuditBetween lists up to limit audited actions with from <= at < to, after c, in time order.
func (db *DB) AuditBetween(ctx context.Context, from, to time.Time, c ExportCursor, limit int) ([]AuditEntry, error) {
	q := "SELECT id, at, actor, action, params, request_id FROM audit_log WHERE at >= ? AND at < ?"
	args := []any{db.timeArg(from), db.timeArg(to)}
	if c.ID != 0 {
		q += " AND (at > ? OR (at = ? AND id > ?))"
		args = append(args, db.timeArg(c.At), db.timeArg(c.At), c.ID)
	}
	rows, err := db.ro.QueryContext(ctx, q+" ORDER BY at, id LIMIT ?", append(args, limit)...)
	out, err := collect(rows, err, func(s scanner) (AuditEntry, error) {
		var e AuditEntry
		var at dbTime
		var params string
		err := s.Scan(&e.ID, &at, &e.Actor, &e.Action, &params, &e.RequestID)
		e.At, e.Params = at.T, json.RawMessage(params)
		return e, err
	})
	if err != nil {
		return nil, fmt.Errorf("audit between %s and %s: %w", from, to, err)
	}
	return out, nil
}

// requestFactsColumns reads RequestFacts from operation o (with its first grant).
func (db *DB) requestFactsColumns() string {
	return "o.id, o.operation_id, o.subject_id, o.target_key, o.project, o.status, o.ticket_id, o.decided_by, o.mr_iid, o.created_at, " +
		"(SELECT MIN(s.at) FROM operation_step s WHERE s.operation_id = o.operation_id AND s.step = ?)"
}

func scanFacts(s scanner) (RequestFacts, int64, error) {
	var f RequestFacts
	var id int64
	var mr nullInt64
	var created, deployed dbTime
	err := s.Scan(&id, &f.OperationID, &f.Subject, &f.TargetKey, &f.Project, &f.Status, &f.TicketID, &f.DecidedBy, &mr, &created, &deployed)
	f.MRIID, f.CreatedAt, f.DeployedAt = int64(mr), created.T, deployed.ptr()
	return f, id, translate(err)
}

// ApplicationsBetween lists up to limit applications made with from <= created_at < to, after c,
// in time order, with their facts; and the cursor of the last.
func (db *DB) ApplicationsBetween(ctx context.Context, from, to time.Time, c ExportCursor, limit int) ([]RequestFacts, ExportCursor, error) {
	q := "SELECT " + db.requestFactsColumns() + " FROM operation o WHERE o.created_at >= ? AND o.created_at < ?"
	args := []any{state.StepCalledBack, db.timeArg(from), db.timeArg(to)}
	if c.ID != 0 {
		q += " AND (o.created_at > ? OR (o.created_at = ? AND o.id > ?))"
		args = append(args, db.timeArg(c.At), db.timeArg(c.At), c.ID)
	}
	rows, err := db.ro.QueryContext(ctx, q+" ORDER BY o.created_at, o.id LIMIT ?", append(args, limit)...)
	var last ExportCursor
	out, err := collect(rows, err, func(s scanner) (RequestFacts, error) {
		f, id, err := scanFacts(s)
		last = ExportCursor{At: f.CreatedAt, ID: id}
		return f, err
	})
	if err != nil {
		return nil, ExportCursor{}, fmt.Errorf("applications between %s and %s: %w", from, to, err)
	}
	return out, last, nil
}

// FactsOf reads the facts of the given requests (those that exist), one read per chunk.
func (db *DB) FactsOf(ctx context.Context, operationIDs []string) (map[string]RequestFacts, error) {
	out := map[string]RequestFacts{}
	for _, chunk := range chunks(operationIDs, maxInList) {
		rows, err := db.ro.QueryContext(ctx, "SELECT "+db.requestFactsColumns()+" FROM operation o WHERE o.operation_id IN "+inList(len(chunk)),
			append([]any{state.StepCalledBack}, anys(chunk)...)...)
		got, err := collect(rows, err, func(s scanner) (RequestFacts, error) { f, _, err := scanFacts(s); return f, err })
		if err != nil {
			return nil, fmt.Errorf("facts of %d requests: %w", len(chunk), err)
		}
		for _, f := range got {
			out[f.OperationID] = f
		}
	}
	return out, nil
}
