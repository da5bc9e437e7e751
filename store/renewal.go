package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"bindery/internal/vocab/state"
)

// Renewals of bindings in effect (table renewal; docs/workflow.md, 'Expiry, reminders and
// renewal').

// Renewal statuses.
const (
	RenewalPending   = "PENDING"
	RenewalRenewed   = "RENEWED"
	RenewalRejected  = "REJECTED"
	RenewalCancelled = "CANCELLED"
)

// Renewal is one renewal asked for.
type Renewal struct {
	ID           int64
	RenewalID    string // the renew call's operationId
	OperationID  string // the request whose binding it renews
	Mode         string // auto or approval
	Status       string
	RequestedBy  string
	DecidedBy    string
	TicketID     string
	OldExpiresAt time.Time
	NewExpiresAt *time.Time
	CreatedAt    time.Time
	DecidedAt    *time.Time
}

const renewalColumns = "id, renewal_id, operation_id, mode, status, requested_by, decided_by, ticket_id, old_expires_at, new_expires_at, created_at, decided_at"

func scanRenewal(s scanner) (Renewal, error) {
	var r Renewal
	var old, nw, created, decided dbTime
	if err := s.Scan(&r.ID, &r.RenewalID, &r.OperationID, &r.Mode, &r.Status, &r.RequestedBy, &r.DecidedBy, &r.TicketID, &old, &nw, &created, &decided); err != nil {
		return Renewal{}, translate(err)
	}
	r.OldExpiresAt, r.NewExpiresAt, r.CreatedAt, r.DecidedAt = old.T, nw.ptr(), created.T, decided.ptr()
	return r, nil
}

// ErrRenewalPending is InsertRenewal's answer when the binding has a renewal waiting for its
// decision already (one at a time).
var ErrRenewalPending = errors.New("a renewal of this binding waits for its decision")

// InsertRenewal records a renewal asked for: PENDING (its decision to come) or, decided at once,
// with its status. A PENDING renewal takes the binding's one pending slot (ErrRenewalPending
// when taken); a repeat of renewal_id is ErrDuplicate.
func (tx *Tx) InsertRenewal(ctx context.Context, r Renewal) error {
	var pending any
	if r.Status == RenewalPending {
		pending = r.OperationID
	} else if _, err := tx.RenewalPendingOf(ctx, r.OperationID); err == nil {
		return ErrRenewalPending
	} else if !errors.Is(err, ErrNotFound) {
		return err
	}
	var nw any
	if r.NewExpiresAt != nil {
		nw = tx.db.timeArg(*r.NewExpiresAt)
	}
	q := "INSERT INTO renewal (renewal_id, operation_id, pending_of, mode, status, requested_by, decided_by, old_expires_at, new_expires_at, decided_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, "
	if r.Status == RenewalPending {
		q += "NULL)"
	} else {
		q += tx.db.now() + ")"
	}
	_, err := tx.tx.ExecContext(ctx, q, clipText(r.RenewalID, 64), r.OperationID, pending, r.Mode, r.Status, clipText(r.RequestedBy, 254), clipText(r.DecidedBy, 254),
		tx.db.timeArg(r.OldExpiresAt), nw)
	if err = translate(err); errors.Is(err, ErrDuplicate) && r.Status == RenewalPending {
		if _, perr := tx.RenewalByID(ctx, r.RenewalID); errors.Is(perr, ErrNotFound) {
			return ErrRenewalPending // the slot, not the id, was taken
		}
	}
	if err != nil {
		return fmt.Errorf("record renewal %s of %s: %w", r.RenewalID, r.OperationID, err)
	}
	return nil
}

// RenewalByID reads the renewal renewalID (ErrNotFound when unknown).
func (tx *Tx) RenewalByID(ctx context.Context, renewalID string) (Renewal, error) {
	return renewalWhere(ctx, tx.tx, "renewal_id = ?", renewalID)
}

// RenewalPendingOf reads the renewal of operationID's binding that waits for its decision
// (ErrNotFound: none).
func (tx *Tx) RenewalPendingOf(ctx context.Context, operationID string) (Renewal, error) {
	return renewalWhere(ctx, tx.tx, "pending_of = ?", operationID)
}

// RenewalPendingOf is Tx.RenewalPendingOf on the read pool.
func (db *DB) RenewalPendingOf(ctx context.Context, operationID string) (Renewal, error) {
	return renewalWhere(ctx, db.ro, "pending_of = ?", operationID)
}

// RenewalByID is Tx.RenewalByID on the read pool.
func (db *DB) RenewalByID(ctx context.Context, renewalID string) (Renewal, error) {
	return renewalWhere(ctx, db.ro, "renewal_id = ?", renewalID)
}

func renewalWhere(ctx context.Context, q queryer, where string, arg any) (Renewal, error) {
	r, err := scanRenewal(q.QueryRowContext(ctx, "SELECT "+renewalColumns+" FROM renewal WHERE "+where, arg))
	if err != nil {
		return Renewal{}, fmt.Errorf("renewal %v: %w", arg, err)
	}
	return r, nil
}

// RenewalsOf lists the renewals of operationID's binding, newest first (at most limit).
func (db *DB) RenewalsOf(ctx context.Context, operationID string, limit int) ([]Renewal, error) {
	rows, err := db.ro.QueryContext(ctx, "SELECT "+renewalColumns+" FROM renewal WHERE operation_id = ? ORDER BY created_at DESC, id DESC LIMIT ?", operationID, limit)
	return collect(rows, err, scanRenewal)
}

// DecideRenewal ends the pending renewal renewalID with status (RENEWED with its new expiry,
// REJECTED, CANCELLED) and who decided, freeing the binding's pending slot; false when it was not
// pending (decided before).
func (tx *Tx) DecideRenewal(ctx context.Context, renewalID, status, decidedBy string, newExpiry *time.Time) (bool, error) {
	var nw any
	if newExpiry != nil {
		nw = tx.db.timeArg(*newExpiry)
	}
	res, err := tx.tx.ExecContext(ctx, "UPDATE renewal SET status = ?, decided_by = ?, new_expires_at = ?, decided_at = "+tx.db.now()+", pending_of = NULL WHERE renewal_id = ? AND status = ?",
		status, clipText(decidedBy, 254), nw, renewalID, RenewalPending)
	n, err := affectedOr(res, translate(err))
	if err != nil {
		return false, fmt.Errorf("decide renewal %s: %w", renewalID, err)
	}
	return n == 1, nil
}

// SetRenewalTicket records the approval ticket a pending renewal was sent with.
func (tx *Tx) SetRenewalTicket(ctx context.Context, renewalID, ticket string) error {
	_, err := tx.tx.ExecContext(ctx, "UPDATE renewal SET ticket_id = ? WHERE renewal_id = ?", clipText(ticket, 64), renewalID)
	return translate(err)
}

// LastRenewed is when operationID's binding was last renewed (the decision of its newest RENEWED
// renewal); ErrNotFound when it never was.
func (tx *Tx) LastRenewed(ctx context.Context, operationID string) (time.Time, error) {
	var at dbTime
	err := tx.tx.QueryRowContext(ctx, "SELECT MAX(decided_at) FROM renewal WHERE operation_id = ? AND status = ?", operationID, RenewalRenewed).Scan(&at)
	if err != nil {
		return time.Time{}, fmt.Errorf("last renewal of %s: %w", operationID, translate(err))
	}
	if !at.Valid {
		return time.Time{}, fmt.Errorf("last renewal of %s: %w", operationID, ErrNotFound)
	}
	return at.T, nil
}

// FirstGrant is when operationID's binding first came into effect (its first CALLED_BACK step;
// a renewal keeps it), and the database clock; ErrNotFound when it never did.
func (ex executor) FirstGrant(ctx context.Context, operationID string) (first, now time.Time, err error) {
	var at, clock dbTime
	err = ex.q().QueryRowContext(ctx, "SELECT MIN(at), "+ex.db.now()+" FROM operation_step WHERE operation_id = ? AND step = ?", operationID, state.StepCalledBack).Scan(&at, &clock)
	if err != nil {
		return time.Time{}, time.Time{}, fmt.Errorf("first grant of %s: %w", operationID, translate(err))
	}
	if !at.Valid {
		return time.Time{}, clock.T, fmt.Errorf("first grant of %s: %w", operationID, ErrNotFound)
	}
	return at.T, clock.T, nil
}
