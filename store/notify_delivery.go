package store

import (
	"bindery/internal/vocab/state"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Deliveries (docs/notifications.md): one event for one receiver, each with its task (kind
// notify, step send) that carries the retry schedule, every attempt recorded, and the health of
// each receiver shared by every instance.

// Delivery statuses.
const (
	DeliveryPending   = "pending"   // its task is due or waiting for the next attempt
	DeliveryDelivered = "delivered" // the receiver took it
	DeliveryFailed    = "failed"    // the attempts ran out, or the receiver cannot take it
	DeliverySkipped   = "skipped"   // never sent: no address known, the receiver disabled or gone
)

// Delivery is one row of notify_delivery.
type Delivery struct {
	ID        int64
	EventID   string
	Channel   string // webhook, email, chat, mrnote
	Endpoint  string // the receiver whose health is tracked: "webhook:<name>", "email", "chat:<name>", "mrnote"
	Target    string // where it went: an address, a merge request ("project!iid"); "" for a webhook or chat
	Status    string
	Attempts  int
	LastCode  int
	LastError string
	NextAt    *time.Time
	CreatedAt time.Time
	UpdatedAt time.Time
	DoneAt    *time.Time
}

// DeliveryRef is the task ref of delivery id.
func DeliveryRef(id int64) string { return "delivery:" + strconv.FormatInt(id, 10) }

// DeliveryOf parses a task ref of DeliveryRef (ok false: a routing task's ref, an event id).
func DeliveryOf(ref string) (int64, bool) {
	n, ok := strings.CutPrefix(ref, "delivery:")
	if !ok {
		return 0, false
	}
	id, err := strconv.ParseInt(n, 10, 64)
	return id, err == nil
}

const deliveryColumns = "id, event_id, channel, endpoint, target, status, attempts, last_code, last_error, next_at, created_at, updated_at, done_at"

func scanDelivery(s scanner) (Delivery, error) {
	var d Delivery
	var next, created, updated, done dbTime
	if err := s.Scan(&d.ID, &d.EventID, &d.Channel, &d.Endpoint, &d.Target, &d.Status, &d.Attempts, &d.LastCode, &d.LastError,
		&next, &created, &updated, &done); err != nil {
		return Delivery{}, translate(err)
	}
	d.NextAt, d.CreatedAt, d.UpdatedAt, d.DoneAt = next.ptr(), created.T, updated.T, done.ptr()
	return d, nil
}

// NewDelivery is a receiver an event is routed to. Skip, when set, records it as skipped with
// that reason (no address known): nothing is sent, and the request page says why.
type NewDelivery struct {
	Channel, Endpoint, Target string
	Skip                      string
}

// AddDeliveries records the receivers of event eventID, each pending one with its send task due
// now, in the routing step's transaction (under its fence: routed once).
func (tx *Tx) AddDeliveries(ctx context.Context, eventID string, ds []NewDelivery) (tasks int, err error) {
	db := tx.db
	var specs []TaskSpec
	for _, d := range ds {
		status, why, done := DeliveryPending, "", "NULL"
		if d.Skip != "" {
			status, why, done = DeliverySkipped, d.Skip, db.now()
		}
		res, err := tx.tx.ExecContext(ctx, "INSERT INTO notify_delivery (event_id, channel, endpoint, target, status, last_error, done_at) VALUES (?, ?, ?, ?, ?, ?, "+done+")",
			eventID, d.Channel, clipText(d.Endpoint, 191), clipText(d.Target, 254), status, clipNote(why))
		if err != nil {
			return 0, fmt.Errorf("delivery of %s to %s: %w", eventID, d.Endpoint, translate(err))
		}
		if status != DeliveryPending {
			continue
		}
		id, err := res.LastInsertId()
		if err != nil {
			return 0, translate(err)
		}
		specs = append(specs, TaskSpec{Kind: state.TaskNotify, Ref: DeliveryRef(id), Lane: state.NotifyLane, Step: state.NotifySend})
	}
	if len(specs) == 0 {
		return 0, nil
	}
	return len(specs), tx.insertTasks(ctx, specs)
}

// Delivery reads delivery id (ErrNotFound when unknown).
func (db *DB) Delivery(ctx context.Context, id int64) (Delivery, error) {
	d, err := scanDelivery(db.ro.QueryRowContext(ctx, "SELECT "+deliveryColumns+" FROM notify_delivery WHERE id = ?", id))
	if err != nil {
		return Delivery{}, fmt.Errorf("delivery %d: %w", id, err)
	}
	return d, nil
}

// Attempt is one try of a delivery and what came of it.
type Attempt struct {
	ID         int64
	DeliveryID int64
	At         time.Time
	Code       int // the receiver's answer (HTTP status, SMTP reply code); 0: none came
	Latency    time.Duration
	Class      string // ok, or the failure's class: timeout, connect, dropped, status, gone, refused, …
	Error      string // what failed, in bindery's words (never the receiver's body)
	Instance   string
}

// Outcome is what an attempt means for its delivery and its receiver.
type Outcome struct {
	Attempt Attempt
	// Status is the delivery's status after it: pending (Next is when the next attempt is due),
	// delivered or failed.
	Status string
	Next   time.Duration
	// Disable, when set, switches the receiver off with this reason (it answered 410 Gone);
	// DisableAfter switches it off when it has failed for longer than that without a success,
	// with the reason FailingTooLong.
	Disable        string
	DisableAfter   time.Duration
	FailingTooLong string
}

// RecordAttempt writes an attempt of delivery d (as read: it must still be pending, else
// ErrPreempted) and its outcome — the attempt's row, the delivery, the receiver's health — in
// the send step's transaction. A receiver switched off by it is told to operators in the same
// transaction (endpoint.disabled); disabled says it was.
func (tx *Tx) RecordAttempt(ctx context.Context, d Delivery, o Outcome) (disabled bool, err error) {
	db := tx.db
	a := o.Attempt
	if _, err := tx.tx.ExecContext(ctx, "INSERT INTO notify_attempt (delivery_id, code, latency_ms, class, error, instance) VALUES (?, ?, ?, ?, ?, ?)",
		d.ID, a.Code, a.Latency.Milliseconds(), clipText(a.Class, 32), clipNote(a.Error), clipText(a.Instance, 64)); err != nil {
		return false, fmt.Errorf("attempt of delivery %d: %w", d.ID, translate(err))
	}
	var set assignments
	set.set("status = ?, attempts = attempts + 1, last_code = ?, last_error = ?, updated_at = "+db.now(), o.Status, a.Code, clipNote(a.Error))
	if o.Status == DeliveryPending {
		set.set("next_at = "+db.nowPlus(), micros(o.Next))
	} else {
		set.set("next_at = NULL, done_at = " + db.now())
	}
	res, err := tx.tx.ExecContext(ctx, "UPDATE "+db.hinted("notify_delivery", "PRIMARY")+" SET "+set.list+" WHERE id = ? AND status = ? AND attempts = ?",
		append(set.args, d.ID, DeliveryPending, d.Attempts)...)
	if err := requireOne(res, err, "record attempt of delivery %d", d.ID); err != nil {
		return false, err
	}
	return tx.health(ctx, d.Endpoint, a.Class == ClassOK, o)
}

// ClassOK is the class of an attempt the receiver took.
const ClassOK = "ok"

// health records an attempt's result on the receiver's row: a success clears its failing
// streak, a failure starts one (or keeps the start); a receiver failing longer than
// o.DisableAfter, or told to go away (o.Disable), is switched off — once, by the guarded write,
// whichever instance gets there first — and operators are told.
func (tx *Tx) health(ctx context.Context, endpoint string, ok bool, o Outcome) (bool, error) {
	disable, after := o.Disable, o.DisableAfter
	db := tx.db
	set, col := "failing_since = COALESCE(failing_since, "+db.excluded("failing_since")+")", "failing_since"
	if ok {
		set, col = "last_success = "+db.excluded("last_success")+", failing_since = NULL", "last_success"
	}
	q := "INSERT INTO notify_endpoint (endpoint, " + col + ", updated_at) VALUES (?, " + db.now() + ", " + db.now() + ")" +
		db.onConflict("endpoint") + set + ", updated_at = " + db.excluded("updated_at")
	if _, err := tx.tx.ExecContext(ctx, q, clipText(endpoint, 191)); err != nil {
		return false, fmt.Errorf("health of %s: %w", endpoint, translate(err))
	}
	if ok || (disable == "" && after <= 0) {
		return false, nil
	}
	why := disable
	if why == "" {
		why = o.FailingTooLong
	}
	now := 0
	if disable != "" {
		now = 1
	}
	res, err := tx.tx.ExecContext(ctx, "UPDATE notify_endpoint SET disabled_at = "+db.now()+", disabled_reason = ?, updated_at = "+db.now()+
		" WHERE endpoint = ? AND disabled_at IS NULL AND (? = 1 OR failing_since < "+db.nowPlus()+")", clipNote(why), clipText(endpoint, 191), now, -micros(after))
	if err != nil {
		return false, fmt.Errorf("disable %s: %w", endpoint, translate(err))
	}
	if n, err := affected(res); err != nil || n == 0 {
		return false, translate(err)
	}
	_, err = tx.Tell(ctx, Event{Type: state.EventEndpointDisabled, Facts: EventFacts{Endpoint: endpoint, Why: why}})
	return err == nil, err
}

// Endpoint is a receiver's health.
type Endpoint struct {
	Endpoint       string
	FailingSince   *time.Time
	LastSuccess    *time.Time
	DisabledAt     *time.Time
	DisabledReason string
}

// Disabled reports a receiver that was switched off.
func (e Endpoint) Disabled() bool { return e.DisabledAt != nil }

const endpointColumns = "endpoint, failing_since, last_success, disabled_at, disabled_reason"

func scanEndpoint(s scanner) (Endpoint, error) {
	var e Endpoint
	var failing, success, disabled dbTime
	if err := s.Scan(&e.Endpoint, &failing, &success, &disabled, &e.DisabledReason); err != nil {
		return Endpoint{}, translate(err)
	}
	e.FailingSince, e.LastSuccess, e.DisabledAt = failing.ptr(), success.ptr(), disabled.ptr()
	return e, nil
}

// EndpointHealth reads a receiver's health (a zero Endpoint of that name when it has none yet).
func (db *DB) EndpointHealth(ctx context.Context, endpoint string) (Endpoint, error) {
	e, err := scanEndpoint(db.ro.QueryRowContext(ctx, "SELECT "+endpointColumns+" FROM notify_endpoint WHERE endpoint = ?", endpoint))
	if errors.Is(err, ErrNotFound) {
		return Endpoint{Endpoint: endpoint}, nil
	}
	return e, err
}

// Endpoints reads every receiver's health.
func (db *DB) Endpoints(ctx context.Context) ([]Endpoint, error) {
	rows, err := db.ro.QueryContext(ctx, "SELECT "+endpointColumns+" FROM notify_endpoint ORDER BY endpoint")
	return collect(rows, err, scanEndpoint)
}

// EnableEndpoint switches a receiver on again (an operator's action); false: it was not off.
func (db *DB) EnableEndpoint(ctx context.Context, endpoint string) (bool, error) {
	res, err := db.rw.ExecContext(ctx, "UPDATE notify_endpoint SET disabled_at = NULL, disabled_reason = '', failing_since = NULL, updated_at = "+db.now()+
		" WHERE endpoint = ? AND disabled_at IS NOT NULL", endpoint)
	if err != nil {
		return false, translate(err)
	}
	n, err := affected(res)
	return n == 1, translate(err)
}

// EndDelivery ends a pending delivery without an attempt (its receiver is disabled or no longer
// configured), in the send step's transaction.
func (tx *Tx) EndDelivery(ctx context.Context, d Delivery, status, why string) error {
	db := tx.db
	res, err := tx.tx.ExecContext(ctx, "UPDATE "+db.hinted("notify_delivery", "PRIMARY")+" SET status = ?, last_error = ?, next_at = NULL, done_at = "+db.now()+
		", updated_at = "+db.now()+" WHERE id = ? AND status = ?", status, clipNote(why), d.ID, DeliveryPending)
	return requireOne(res, err, "end delivery %d", d.ID)
}

// Resend sends a delivery that ended (failed or skipped) again, from a fresh schedule: its task
// is due now. ErrNotFound: no such delivery; ErrPreempted: it is still pending or was delivered.
func (db *DB) Resend(ctx context.Context, id int64) error {
	return db.InTx(ctx, func(tx *Tx) error {
		res, err := tx.tx.ExecContext(ctx, "UPDATE "+db.hinted("notify_delivery", "PRIMARY")+" SET status = ?, attempts = 0, next_at = "+db.now()+", done_at = NULL, updated_at = "+db.now()+
			" WHERE id = ? AND status IN (?, ?)", DeliveryPending, id, DeliveryFailed, DeliverySkipped)
		if err := requireOne(res, err, "resend delivery %d", id); err != nil {
			if _, rerr := scanDelivery(tx.tx.QueryRowContext(ctx, "SELECT "+deliveryColumns+" FROM notify_delivery WHERE id = ?", id)); errors.Is(rerr, ErrNotFound) {
				return fmt.Errorf("delivery %d: %w", id, ErrNotFound)
			}
			return err
		}
		return tx.PutTask(ctx, TaskSpec{Kind: state.TaskNotify, Ref: DeliveryRef(id), Lane: state.NotifyLane, Step: state.NotifySend}, false)
	})
}

// DeliveryFilter selects deliveries for the ops console.
type DeliveryFilter struct {
	Endpoint string // "" : every receiver
	Status   string // "" : every status
	Limit    int
}

// Deliveries lists deliveries newest first.
func (db *DB) Deliveries(ctx context.Context, f DeliveryFilter) ([]Delivery, error) {
	q := "SELECT " + deliveryColumns + " FROM notify_delivery WHERE 1 = 1"
	var args []any
	if f.Endpoint != "" {
		q += " AND endpoint = ?"
		args = append(args, f.Endpoint)
	}
	if f.Status != "" {
		q += " AND status = ?"
		args = append(args, f.Status)
	}
	limit := f.Limit
	if limit <= 0 || limit > 500 {
		limit = 100
	}
	rows, err := db.ro.QueryContext(ctx, q+" ORDER BY created_at DESC, id DESC LIMIT ?", append(args, limit)...) // by time: ids need not follow it (docs/architecture.md)
	return collect(rows, err, scanDelivery)
}

// SentAbout lists the deliveries of the events about a request, with their events, oldest first.
func (db *DB) SentAbout(ctx context.Context, operationID string) ([]Delivery, error) {
	rows, err := db.ro.QueryContext(ctx, "SELECT "+prefixed("d.", deliveryColumns)+" FROM notify_event e JOIN notify_delivery d ON d.event_id = e.event_id "+
		"WHERE e.operation_id = ? ORDER BY d.created_at, d.id LIMIT 200", operationID)
	return collect(rows, err, scanDelivery)
}

// Attempts lists the attempts of a delivery, oldest first.
func (db *DB) Attempts(ctx context.Context, deliveryID int64) ([]Attempt, error) {
	rows, err := db.ro.QueryContext(ctx, "SELECT id, delivery_id, at, code, latency_ms, class, error, instance FROM notify_attempt WHERE delivery_id = ? ORDER BY at, id", deliveryID)
	return collect(rows, err, func(s scanner) (Attempt, error) {
		var a Attempt
		var at dbTime
		var ms int64
		err := s.Scan(&a.ID, &a.DeliveryID, &at, &a.Code, &ms, &a.Class, &a.Error, &a.Instance)
		a.At, a.Latency = at.T, time.Duration(ms)*time.Millisecond
		return a, err
	})
}

// PurgeAttempts deletes up to limit attempts older than keep (by the database clock) and returns
// how many it deleted.
func (db *DB) PurgeAttempts(ctx context.Context, keep time.Duration, limit int) (int64, error) {
	var ids []int64
	rows, err := db.ro.QueryContext(ctx, "SELECT id FROM notify_attempt WHERE at < "+db.nowPlus()+" ORDER BY at LIMIT ?", -micros(keep), limit)
	ids, err = collect(rows, err, func(s scanner) (int64, error) { var id int64; return id, s.Scan(&id) })
	if err != nil || len(ids) == 0 {
		return 0, err
	}
	var n int64
	for _, chunk := range chunks(ids, maxInList) {
		res, err := db.rw.ExecContext(ctx, "DELETE FROM notify_attempt WHERE id IN "+inList(len(chunk)), anys(chunk)...)
		if err != nil {
			return n, translate(err)
		}
		k, err := affected(res)
		if err != nil {
			return n, translate(err)
		}
		n += k
	}
	return n, nil
}

// onConflict starts the update of an upsert whose unique key is key.
func (db *DB) onConflict(key string) string {
	if db.dialect == MySQL {
		return " ON DUPLICATE KEY UPDATE "
	}
	return " ON CONFLICT (" + key + ") DO UPDATE SET "
}

// excluded names, in an upsert's update, the value the insert would have written to col.
func (db *DB) excluded(col string) string {
	if db.dialect == MySQL {
		return "VALUES(" + col + ")"
	}
	return "excluded." + col
}
