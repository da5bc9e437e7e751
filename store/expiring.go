package store

import (
	"context"
	"fmt"
	"time"

	"bindery/internal/vocab/state"
)

// What the expiry reminders read (docs/notifications.md, 'Expiry reminders'): the bindings in
// effect whose expiry nears, and the expiry of the requests a list shows.

// Expiring is a binding in effect whose expiry nears.
type Expiring struct {
	Operation Operation
	ExpiresAt time.Time
	Left      time.Duration // until ExpiresAt, by the database clock at the read
}

// ExpiringCursor is where a walk through the expiring bindings goes on: after this expiry and
// binding row (zero: from the start).
type ExpiringCursor struct {
	At time.Time
	ID int64
}

// ExpiringWithin lists up to limit bindings in effect — VALIDATED at CALLED_BACK (a binding whose
// removal runs is not reminded) — whose expiry is still ahead and at most within from now by the
// database clock, soonest first, after c; and the cursor of the next page (zero: none): a plain
// read along idx_binding_status_expires.
func (db *DB) ExpiringWithin(ctx context.Context, within time.Duration, c ExpiringCursor, limit int) ([]Expiring, ExpiringCursor, error) {
	q := "SELECT b.id, b.expires_at, " + db.elapsed("b.expires_at") + ", " + prefixed("o.", operationColumns) +
		" FROM binding b JOIN operation o ON o.operation_id = b.operation_id" +
		" WHERE b.status = ? AND b.expires_at > " + db.now() + " AND b.expires_at <= " + db.nowPlus() + " AND o.step = ?"
	args := []any{state.StatusValidated, micros(within), state.StepCalledBack}
	if c.ID != 0 {
		q += " AND (b.expires_at > ? OR (b.expires_at = ? AND b.id > ?))"
		args = append(args, db.timeArg(c.At), db.timeArg(c.At), c.ID)
	}
	q += " ORDER BY b.expires_at, b.id LIMIT ?"
	rows, err := db.ro.QueryContext(ctx, q, append(args, limit)...)
	var ids []int64
	out, err := collect(rows, err, func(s scanner) (Expiring, error) {
		var e Expiring
		var id int64
		var at dbTime
		var elapsed int64
		o, err := scanOperation(s, &id, &at, &elapsed)
		e.Operation, e.ExpiresAt, e.Left = o, at.T, -time.Duration(elapsed)*time.Microsecond
		ids = append(ids, id)
		return e, err
	})
	if err != nil {
		return nil, ExpiringCursor{}, fmt.Errorf("bindings expiring within %s: %w", within, err)
	}
	if len(out) < limit {
		return out, ExpiringCursor{}, nil
	}
	return out, ExpiringCursor{At: out[len(out)-1].ExpiresAt, ID: ids[len(ids)-1]}, nil
}

// Expiries reads the expiry of the bindings the given requests drive while in effect
// (VALIDATED), with the database clock: the list of a person's requests says when each expires.
func (db *DB) Expiries(ctx context.Context, operationIDs []string) (map[string]time.Time, time.Time, error) {
	out := map[string]time.Time{}
	now, err := db.Now(ctx)
	if err != nil {
		return nil, now, err
	}
	for _, chunk := range chunks(operationIDs, maxInList) {
		rows, err := db.ro.QueryContext(ctx, "SELECT operation_id, expires_at FROM binding WHERE status = ? AND expires_at IS NOT NULL AND operation_id IN "+inList(len(chunk)),
			append([]any{state.StatusValidated}, anys(chunk)...)...)
		type pair struct {
			op string
			at time.Time
		}
		got, err := collect(rows, err, func(s scanner) (pair, error) {
			var p pair
			var at dbTime
			err := s.Scan(&p.op, &at)
			p.at = at.T
			return p, err
		})
		if err != nil {
			return nil, now, fmt.Errorf("expiries: %w", err)
		}
		for _, p := range got {
			out[p.op] = p.at
		}
	}
	return out, now, nil
}
