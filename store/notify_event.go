package store

import (
	"bindery/internal/vocab/state"
	"context"
	"crypto/rand"
	"encoding/base32"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
)

// The outbox (docs/notifications.md). An event is inserted by the transaction of the change it
// reports, at the few places every such change goes through: a binding transition (Transition,
// transitionMany, an application's insert, alone or in a group), a batch's guarded write
// (AdvanceBatch), a refused callback. A change rolled back takes its events with it; a change
// committed has them, each with a stable id, and with its routing task (kind notify, step
// route) in the same commit: telling people is work from the first commit on, like any step.

// Event is one row of the outbox (table notify_event).
type Event struct {
	Seq         int64  // the row id: the outbox's order
	ID          string // stable: the webhook-id of each delivery, the email's Message-ID
	Type        state.EventType
	OperationID string // the request it is about ("": none)
	SubjectID   string // whom it concerns: the request's requester ("": operators only)
	BatchID     int64
	// Key, when set, makes the event one row however many instances find it (an overdue deploy,
	// a refused configuration): a second insert with the key is ErrDuplicate's "already told".
	Key       string
	Facts     EventFacts
	CreatedAt time.Time
}

// EventFacts are what an event reports, as they were at the change: the words people read are
// made of them at delivery (package notify), so a failure's recorded cause stays here for
// operators and only its safe details reach a requester.
type EventFacts struct {
	OperationID string              `json:"op,omitempty"`
	Subject     string              `json:"subject,omitempty"`
	TargetKey   string              `json:"target,omitempty"`
	Project     string              `json:"project,omitempty"`
	Flow        string              `json:"flow,omitempty"`
	From        state.BindingStatus `json:"from,omitempty"`
	Status      state.BindingStatus `json:"status,omitempty"`
	Step        state.Step          `json:"step,omitempty"`
	Note        string              `json:"note,omitempty"` // as recorded
	MRIID       int64               `json:"mr,omitempty"`
	PipelineID  int64               `json:"pipeline,omitempty"`
	BatchID     int64               `json:"batch,omitempty"`
	// A batch's: its members (batch.opened), the change a bisection isolated (batch.culprit)
	// and the bisection it ended (the batch whose failure started it, how many rounds).
	Members    []string `json:"members,omitempty"`
	Culprit    string   `json:"culprit,omitempty"`
	RootBatch  int64    `json:"root,omitempty"`
	RootMRIID  int64    `json:"rootMr,omitempty"`
	Bisections int      `json:"bisections,omitempty"`
	// Why: a blocked batch's reason, a refused callback's or configuration's, a disabled
	// endpoint's; Reason classifies a request's need of attention (failed, pending, approval).
	Why      string   `json:"why,omitempty"`
	Reason   string   `json:"reason,omitempty"`
	Endpoint string   `json:"endpoint,omitempty"`
	Refused  []string `json:"refused,omitempty"`
	SHA      string   `json:"sha,omitempty"`
	Instance string   `json:"instance,omitempty"`
	// A drift finding's (binding.drifted; Reason is its kind): the file, and the commit that
	// removed it (SHA) with its author and time.
	Path   string     `json:"path,omitempty"`
	Author string     `json:"author,omitempty"`
	At     *time.Time `json:"at,omitempty"`
	// Targets: the targets a reload removed from the catalog that bindings still use, with how
	// many are in flight and in effect (config.targets_removed).
	Targets []TargetUse `json:"targets,omitempty"`
	// ExpiresAt and Left: a binding's expiry and how long it had left when its reminder was
	// told (binding.expiring).
	ExpiresAt *time.Time    `json:"expiresAt,omitempty"`
	Left      time.Duration `json:"left,omitempty"`
	// An access review's (review.started, review.due): the review, its due date (ExpiresAt
	// is not reused: a due date is not an expiry) and how many items it asks to decide.
	Review int64      `json:"review,omitempty"`
	Due    *time.Time `json:"due,omitempty"`
	Items  int        `json:"items,omitempty"`
}

// Reasons a request needs attention (EventFacts.Reason).
const (
	AttentionFailed   = "failed"   // a failure status: an operator's retry or support
	AttentionPending  = "pending"  // a step whose outcome is unknown, or a person must act in GitLab
	AttentionApproval = "approval" // sent for approval longer than approval.timeout
	AttentionDeploy   = "deploy"   // merged, its deploy callback later than reconcile.deployOverdue
)

// ReviewEvent tells reviewer of review id of targetKey (review.started, review.due): keyed by the
// type, the review and the reviewer, so that each is told once however many instances find it.
func ReviewEvent(typ state.EventType, id int64, targetKey, reviewer string, due time.Time, items int) Event {
	return Event{Type: typ, SubjectID: reviewer, Key: fmt.Sprintf("%s:%d:%s", typ, id, clipText(reviewer, 200)),
		Facts: EventFacts{Subject: reviewer, TargetKey: targetKey, Review: id, Due: &due, Items: items}}
}

// ExpiringEvent is the reminder of a binding's expiry at offset before it: keyed by the request,
// the expiry and the offset, so that it is told once per binding and reminder however many
// instances find it, and again after a renewal moved the expiry.
func ExpiringEvent(x Expiring, offset time.Duration) Event {
	o, at := x.Operation, x.ExpiresAt
	return Event{Type: state.EventBindingExpiring, OperationID: o.OperationID, SubjectID: o.SubjectID,
		Key: fmt.Sprintf("%s:%s:%d:%d", state.EventBindingExpiring, clipText(o.OperationID, 64), at.UnixMicro(), int64(offset/time.Second)),
		Facts: EventFacts{OperationID: o.OperationID, Subject: o.SubjectID, TargetKey: o.TargetKey, Project: o.Project, Flow: o.Flow,
			Status: o.Status, Step: o.Step, ExpiresAt: &at, Left: x.Left}}
}

// NewEventID returns a fresh event id: "evt_" and 26 characters of randomness.
func NewEventID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return "evt_" + strings.ToLower(base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString(b[:]))
}

// EventRoutes decides which events get a routing task: those some receiver may want (a webhook
// or chat subscribed to the type, email for a requester's, the merge request's note for a
// batch's). The others are recorded and never routed: an event the configuration in force
// sends nowhere costs its row, not an action. Without one (a database no notifier serves: a
// tool, a test of something else) no event is routed.
type EventRoutes func(t state.EventType) bool

// RouteAll routes every event.
func RouteAll(state.EventType) bool { return true }

// SetEventRoutes installs the routing filter (the notifier builds it from notify.* at each
// reload).
func (db *DB) SetEventRoutes(r EventRoutes) { db.routes.Store(&r) }

func (db *DB) routed(t state.EventType) bool {
	if r := db.routes.Load(); r != nil && *r != nil {
		return (*r)(t)
	}
	return false
}

// routeTasks are the routing tasks of evs.
func (db *DB) routeTasks(evs []Event) []TaskSpec {
	var out []TaskSpec
	for _, e := range evs {
		if db.routed(e.Type) {
			out = append(out, TaskSpec{Kind: state.TaskNotify, Ref: e.ID, Lane: state.NotifyLane, Step: state.NotifyRoute})
		}
	}
	return out
}

// insertEvents writes evs, a multi-row statement per chunk, with their routing tasks when
// withTasks (false: the caller inserts the tasks returned with its own, one statement for both).
func (tx *Tx) insertEvents(ctx context.Context, evs []Event, withTasks bool) ([]TaskSpec, error) {
	if len(evs) == 0 {
		return nil, nil
	}
	for _, chunk := range chunks(evs, maxInList) {
		args := make([]any, 0, 7*len(chunk))
		for i := range chunk {
			e := &chunk[i]
			if e.ID == "" {
				e.ID = NewEventID()
			}
			data, err := json.Marshal(e.Facts)
			if err != nil {
				return nil, fmt.Errorf("event %s: %w", e.Type, err)
			}
			args = append(args, e.ID, e.Type, nullText(e.OperationID), nullText(clipText(e.SubjectID, 254)), nullInt(e.BatchID),
				nullText(clipText(e.Key, 191)), string(data))
		}
		if _, err := tx.tx.ExecContext(ctx, "INSERT INTO notify_event (event_id, type, operation_id, subject_id, batch_id, dedupe_key, data) VALUES "+
			rowsOf("(?, ?, ?, ?, ?, ?, ?)", len(chunk)), args...); err != nil {
			return nil, fmt.Errorf("record %d events (%s): %w", len(chunk), chunk[0].Type, translate(err))
		}
	}
	tasks := tx.db.routeTasks(evs)
	if !withTasks || len(tasks) == 0 {
		return tasks, nil
	}
	return nil, tx.insertTasks(ctx, tasks)
}

// nullText turns "" ("none") into NULL.
func nullText(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// Tell records e with its routing task: news of a change written by a caller's own transaction
// (a refused callback, a disabled endpoint) — in the transaction, or in one of its own. An event
// with a Key that was told already is not told again (told false, nothing written).
func (ex executor) Tell(ctx context.Context, e Event) (told bool, err error) {
	return inWrite(ctx, ex, func(tx *Tx) (bool, error) { return tx.tell(ctx, e) })
}

func (tx *Tx) tell(ctx context.Context, e Event) (told bool, err error) {
	if e.ID == "" {
		e.ID = NewEventID()
	}
	// A duplicate key fails only its statement (both databases keep the transaction), and then
	// nothing else of the event is written.
	tasks, err := tx.insertEvents(ctx, []Event{e}, false)
	if errors.Is(err, ErrDuplicate) {
		return false, nil
	}
	if err == nil && len(tasks) > 0 {
		err = tx.insertTasks(ctx, tasks)
	}
	return err == nil, err
}

// KeysTold reports which of keys have an event already (the watch asks before it tells news
// that it finds again at every look).
func (db *DB) KeysTold(ctx context.Context, keys []string) (map[string]bool, error) {
	out := map[string]bool{}
	for _, chunk := range chunks(keys, maxInList) {
		rows, err := db.ro.QueryContext(ctx, "SELECT dedupe_key FROM notify_event WHERE dedupe_key IN "+inList(len(chunk)), anys(chunk)...)
		got, err := collect(rows, err, func(s scanner) (string, error) { var k string; return k, s.Scan(&k) })
		if err != nil {
			return nil, err
		}
		for _, k := range got {
			out[k] = true
		}
	}
	return out, nil
}

const eventColumns = "id, event_id, type, operation_id, subject_id, batch_id, dedupe_key, data, created_at"

func scanEvent(s scanner) (Event, error) {
	var e Event
	var op, subject, key nullString
	var batch nullInt64
	var data string
	var at dbTime
	if err := s.Scan(&e.Seq, &e.ID, &e.Type, &op, &subject, &batch, &key, &data, &at); err != nil {
		return Event{}, translate(err)
	}
	e.OperationID, e.SubjectID, e.Key, e.BatchID, e.CreatedAt = string(op), string(subject), string(key), int64(batch), at.T
	if err := json.Unmarshal([]byte(data), &e.Facts); err != nil {
		return Event{}, fmt.Errorf("event %s: facts: %w", e.ID, err)
	}
	return e, nil
}

// EventByID reads one event (ErrNotFound when unknown).
func (ex executor) EventByID(ctx context.Context, id string) (Event, error) {
	e, err := scanEvent(ex.q().QueryRowContext(ctx, "SELECT "+eventColumns+" FROM notify_event WHERE event_id = ?", id))
	if err != nil {
		return Event{}, fmt.Errorf("event %s: %w", id, err)
	}
	return e, nil
}

// EventsOf lists the events about a request, oldest first (at most limit).
func (db *DB) EventsOf(ctx context.Context, operationID string, limit int) ([]Event, error) {
	rows, err := db.ro.QueryContext(ctx, "SELECT "+eventColumns+" FROM notify_event WHERE operation_id = ? ORDER BY created_at, id LIMIT ?", operationID, limit)
	return collect(rows, err, scanEvent)
}

// Events lists events after seq (0: from the first), at most limit, in id order: the outbox as
// a log for tests and the chaos check, which page through every row (the order only keeps the
// pages apart; it claims nothing about time).
func (db *DB) Events(ctx context.Context, afterSeq int64, limit int) ([]Event, error) {
	rows, err := db.ro.QueryContext(ctx, "SELECT "+eventColumns+" FROM notify_event WHERE id > ? ORDER BY id LIMIT ?", afterSeq, limit)
	return collect(rows, err, scanEvent)
}

// requestEvents are the events of request transitions: moves[i] of ops[i] (as they are after
// the change).
func requestEvents(ops []Operation, moves []state.Move, note string) []Event {
	var out []Event
	for i, o := range ops {
		for _, t := range state.EventsOf(moves[i]) {
			f := EventFacts{OperationID: o.OperationID, Subject: o.SubjectID, TargetKey: o.TargetKey, Project: o.Project, Flow: o.Flow,
				From: moves[i].From, Status: moves[i].To, Step: moves[i].Step, Note: note, MRIID: o.MRIID, PipelineID: o.PipelineID, BatchID: o.BatchID}
			if t == state.EventRequestNeedsAttention {
				f.Reason = AttentionPending
				if moves[i].To.Failed() {
					f.Reason = AttentionFailed
				}
			}
			out = append(out, Event{Type: t, OperationID: o.OperationID, SubjectID: o.SubjectID, BatchID: o.BatchID, Facts: f})
		}
	}
	return out
}
