package store

import (
	"bindery/internal/vocab/state"
	"context"
	"fmt"
	"time"
)

// Binding is the user-visible state of one subject–target relation (table binding). There is
// one row per relation (I5); OperationID names the application currently driving it.
type Binding struct {
	ID          int64
	SubjectID   string
	TargetKey   string
	Status      state.BindingStatus
	OperationID string
	// Version grows by one on every write; every write is guarded on it (I6).
	Version   int64
	ExpiresAt *time.Time
	CreatedAt time.Time
	UpdatedAt time.Time
}

const bindingColumns = "id, subject_id, target_key, status, operation_id, version, expires_at, created_at, updated_at"

func scanBinding(s scanner) (Binding, error) {
	var b Binding
	var expires, created, updated dbTime
	if err := s.Scan(&b.ID, &b.SubjectID, &b.TargetKey, &b.Status, &b.OperationID, &b.Version, &expires, &created, &updated); err != nil {
		return Binding{}, translate(err)
	}
	b.ExpiresAt, b.CreatedAt, b.UpdatedAt = expires.ptr(), created.T, updated.T
	return b, nil
}

func bindingByOperation(ctx context.Context, q queryer, operationID string) (Binding, error) {
	b, err := scanBinding(q.QueryRowContext(ctx, "SELECT "+bindingColumns+" FROM binding WHERE operation_id = ?", operationID))
	if err != nil {
		return Binding{}, fmt.Errorf("binding of operation %s: %w", operationID, err)
	}
	return b, nil
}

// BindingFor returns the relation's row, ErrNotFound when the subject never applied for target.
func (db *DB) BindingFor(ctx context.Context, subjectID, targetKey string) (Binding, error) {
	return bindingFor(ctx, db.ro, subjectID, targetKey)
}

func bindingFor(ctx context.Context, q queryer, subjectID, targetKey string) (Binding, error) {
	b, err := scanBinding(q.QueryRowContext(ctx, "SELECT "+bindingColumns+" FROM binding WHERE subject_id = ? AND target_key = ?", subjectID, targetKey))
	if err != nil {
		return Binding{}, fmt.Errorf("binding %s/%s: %w", subjectID, targetKey, err)
	}
	return b, nil
}

// ExpiredBindings returns up to limit VALIDATED bindings whose expires_at has passed by the
// database clock, oldest expiry first: the expiry cron starts their close phase.
func (db *DB) ExpiredBindings(ctx context.Context, limit int) ([]Binding, error) {
	rows, err := db.ro.QueryContext(ctx, "SELECT "+bindingColumns+" FROM binding WHERE status = ? AND expires_at < "+db.now()+
		" ORDER BY expires_at LIMIT ?", state.StatusValidated, limit)
	return collect(rows, err, scanBinding)
}

// ExpiredToClose returns up to limit VALIDATED bindings whose expires_at has passed by the
// database clock and whose close phase has not started (no delete action of their operation in
// the waiting set or a batch), oldest expiry first. Unlike ExpiredBindings, bindings already
// closing never crowd the page, so an expiry run always makes progress.
func (db *DB) ExpiredToClose(ctx context.Context, limit int) ([]Binding, error) {
	rows, err := db.ro.QueryContext(ctx, "SELECT "+prefixed("b.", bindingColumns)+" FROM binding b WHERE b.status = ? AND b.expires_at < "+db.now()+
		" AND NOT EXISTS (SELECT 1 FROM merge_batch_request r WHERE r.operation_id = b.operation_id AND r.action = ?)"+
		" ORDER BY b.expires_at LIMIT ?", state.StatusValidated, state.ActionDelete, limit)
	return collect(rows, err, scanBinding)
}

// FillExpiry gives the VALIDATED bindings of targetKey that have no expiry one: ttl after their
// last change (their validation), by the database clock. With operationIDs it touches only
// those (right after they were validated); without, every such binding of the target (the
// expiry cron's repair of a validation whose follow-up write was lost in a crash). It returns the
// rows changed; one statement per 500 ids.
func (db *DB) FillExpiry(ctx context.Context, targetKey string, ttl time.Duration, operationIDs ...string) (int, error) {
	if ttl <= 0 {
		return 0, nil
	}
	if len(operationIDs) == 0 {
		// A plain read first, then the guarded update by the unique key: the update never walks
		// the status index with locks (docs/invariants.md, 'Indexes'; see hinted).
		rows, err := db.ro.QueryContext(ctx, "SELECT operation_id FROM binding WHERE status = ? AND target_key = ? AND expires_at IS NULL",
			state.StatusValidated, targetKey)
		operationIDs, err = collect(rows, err, func(s scanner) (string, error) {
			var id string
			return id, s.Scan(&id)
		})
		if err != nil {
			return 0, fmt.Errorf("fill expiry of %s: %w", targetKey, err)
		}
	}
	q := "UPDATE " + db.hinted("binding", "uk_binding_operation") + " SET expires_at = " + db.timePlus("updated_at") +
		" WHERE target_key = ? AND status = ? AND expires_at IS NULL AND operation_id IN "
	total := 0
	for _, chunk := range chunks(operationIDs, maxInList) {
		res, err := db.rw.ExecContext(ctx, q+inList(len(chunk)), append([]any{micros(ttl), targetKey, state.StatusValidated}, anys(chunk)...)...)
		if err != nil {
			return total, fmt.Errorf("fill expiry of %s: %w", targetKey, translate(err))
		}
		n, err := affected(res)
		if err != nil {
			return total, translate(err)
		}
		total += int(n)
	}
	return total, nil
}

// WithoutExpiry returns the applications of up to limit VALIDATED bindings of targetKey that have
// no expiry (a crash between their validation and the write of their expiry, or a target without
// a ttl): the expiry cron's repair reads the ttl each was accepted with from them. One read on
// idx_binding_target_status.
func (db *DB) WithoutExpiry(ctx context.Context, targetKey string, limit int) ([]Operation, error) {
	rows, err := db.ro.QueryContext(ctx, "SELECT "+prefixed("o.", operationColumns)+" FROM "+db.hinted("binding", "idx_binding_target_status")+
		" JOIN operation o ON o.operation_id = binding.operation_id WHERE binding.target_key = ? AND binding.status = ? AND binding.expires_at IS NULL LIMIT ?",
		targetKey, state.StatusValidated, limit)
	out, err := collect(rows, err, scanOp)
	if err != nil {
		return nil, fmt.Errorf("bindings of %s without an expiry: %w", targetKey, err)
	}
	return out, nil
}

// TargetUse is how a target is used now: its bindings in flight (accepted, on their way to being
// in effect, or stopped at a failure on the way) and in effect (VALIDATED, a removal under way
// included). A reload that removes targets tells operators of those still used
// (config.targets_removed), and the ops console lists the used targets the catalog lacks.
type TargetUse struct {
	Key      string `json:"key"`
	InFlight int    `json:"inFlight"`
	InEffect int    `json:"inEffect"`
}

// TargetsInUse counts the bindings of each target some binding still uses (neither REJECTED nor
// CLOSED), in key order: one grouped read of idx_binding_target_status, however many bindings.
func (db *DB) TargetsInUse(ctx context.Context) ([]TargetUse, error) {
	rows, err := db.ro.QueryContext(ctx, "SELECT target_key, status, COUNT(*) FROM "+db.hinted("binding", "idx_binding_target_status")+
		" WHERE status NOT IN "+inEnded+" GROUP BY target_key, status ORDER BY target_key", anys(state.EndedStatuses())...)
	type counted struct {
		key    string
		status state.BindingStatus
		n      int
	}
	cs, err := collect(rows, err, func(s scanner) (counted, error) {
		var c counted
		return c, s.Scan(&c.key, &c.status, &c.n)
	})
	if err != nil {
		return nil, fmt.Errorf("targets in use: %w", err)
	}
	var out []TargetUse
	for _, c := range cs {
		if len(out) == 0 || out[len(out)-1].Key != c.key {
			out = append(out, TargetUse{Key: c.key})
		}
		if u := &out[len(out)-1]; c.status == state.StatusValidated {
			u.InEffect += c.n
		} else {
			u.InFlight += c.n
		}
	}
	return out, nil
}
