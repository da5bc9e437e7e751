package store

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"
)

// Request is one application as read for a transition: its operation and the relation's binding
// row while this operation is the relation's current one. Current() is false once a
// re-application replaced it; every transition then fails with ErrPreempted.
type Request struct {
	Operation Operation
	Binding   Binding
}

// Current reports whether the operation still drives its relation's binding row.
func (r Request) Current() bool {
	return r.Binding.ID != 0 && r.Binding.OperationID == r.Operation.OperationID
}

// Request reads operationID's operation and binding (ErrNotFound for an unknown operation).
func (db *DB) Request(ctx context.Context, operationID string) (Request, error) {
	return readRequest(ctx, db.ro, operationID)
}

// Request is DB.Request inside the transaction.
func (tx *Tx) Request(ctx context.Context, operationID string) (Request, error) {
	return readRequest(ctx, tx.tx, operationID)
}

func readRequest(ctx context.Context, q queryer, operationID string) (Request, error) {
	op, err := operationByID(ctx, q, operationID)
	if err != nil {
		return Request{}, err
	}
	b, err := bindingByOperation(ctx, q, operationID)
	if err != nil && !errors.Is(err, ErrNotFound) {
		return Request{}, err
	}
	return Request{Operation: op, Binding: b}, nil
}

// Application is a new application: the first state of the selected flow (APPROVAL_SENDING
// approval-first, MR_CREATING legacy) and what the request view shows.
type Application struct {
	OperationID string
	SubjectID   string
	TargetKey   string
	Project     string
	Flow        string
	Reason      string
	Status      BindingStatus
	Step        Step
	// Task, when set, is the first step's task, inserted in the application's transaction (its
	// Kind and Ref are the operation's): the step is data from the first commit on, so a crash
	// right after the answer leaves work that any instance runs.
	Task *TaskSpec
}

// ErrApplyInProgress refuses an application for a relation whose row is in a state that is not
// REAPPLIABLE (the API answers 409 APPLY_IN_PROGRESS). Binding is the row found.
type ErrApplyInProgress struct {
	Binding Binding
}

func (e *ErrApplyInProgress) Error() string {
	return fmt.Sprintf("relation %s/%s has an active application %s (%s)", e.Binding.SubjectID, e.Binding.TargetKey,
		e.Binding.OperationID, e.Binding.Status)
}

// Apply records a new application (I5): it inserts the operation, then either inserts the
// relation's binding row or — when the row exists in a REAPPLIABLE status — resets it in place
// with the new operationId, guarded on the exact status and version read; the first step goes to
// the history. Answers:
//   - ErrDuplicate: the operationId is already taken (the idempotency layer replays it);
//   - *ErrApplyInProgress: the relation's row is active or waiting for recovery — overwriting it
//     would orphan the recovery of its operation;
//   - ErrPreempted: a concurrent application (or any write) changed the relation between the
//     read and the write; nothing was written. The caller may answer 409 like the above.
func (db *DB) Apply(ctx context.Context, a Application) (Request, error) {
	var r Request
	err := db.InTx(ctx, func(tx *Tx) error {
		var err error
		r, err = tx.Apply(ctx, a)
		return err
	})
	return r, err
}

// Apply is DB.Apply inside the transaction.
func (tx *Tx) Apply(ctx context.Context, a Application) (Request, error) {
	if !CanTransition("", a.Status) {
		return Request{}, &ErrIllegalTransition{From: "", To: a.Status}
	}
	db := tx.db
	// The operation first: every cross-table write locks operation before binding.
	res, err := tx.tx.ExecContext(ctx, "INSERT INTO operation (operation_id, subject_id, target_key, project, flow, reason, status, step) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
		a.OperationID, a.SubjectID, a.TargetKey, a.Project, a.Flow, a.Reason, a.Status, a.Step)
	if err != nil {
		return Request{}, fmt.Errorf("apply %s: %w", a.OperationID, translate(err))
	}
	opID, err := res.LastInsertId()
	if err != nil {
		return Request{}, translate(err)
	}
	existing, err := bindingFor(ctx, tx.tx, a.SubjectID, a.TargetKey)
	db.hook("apply.read")
	var b Binding
	switch {
	case errors.Is(err, ErrNotFound):
		res, err := tx.tx.ExecContext(ctx, "INSERT INTO binding (subject_id, target_key, status, operation_id) VALUES (?, ?, ?, ?)",
			a.SubjectID, a.TargetKey, a.Status, a.OperationID)
		if err != nil {
			err = translate(err)
			if errors.Is(err, ErrDuplicate) {
				// A concurrent first application took the relation after our read.
				return Request{}, fmt.Errorf("apply %s: relation %s/%s: %w", a.OperationID, a.SubjectID, a.TargetKey, ErrPreempted)
			}
			return Request{}, fmt.Errorf("apply %s: %w", a.OperationID, err)
		}
		id, err := res.LastInsertId()
		if err != nil {
			return Request{}, translate(err)
		}
		b = Binding{ID: id, SubjectID: a.SubjectID, TargetKey: a.TargetKey, Status: a.Status, OperationID: a.OperationID, Version: 1}
	case err != nil:
		return Request{}, err
	case !existing.Status.Reappliable():
		return Request{}, &ErrApplyInProgress{Binding: existing}
	default:
		if !CanTransition(existing.Status, a.Status) {
			return Request{}, &ErrIllegalTransition{From: existing.Status, To: a.Status}
		}
		// Guarded on the exact status read and on the version: with two REAPPLIABLE statuses, a
		// row that changed between them must not pass as "still re-appliable".
		res, err := tx.tx.ExecContext(ctx, "UPDATE "+db.hinted("binding", "PRIMARY")+" SET status = ?, operation_id = ?, expires_at = NULL, version = version + 1, "+
			"updated_at = "+db.now()+" WHERE id = ? AND status = ? AND version = ?",
			a.Status, a.OperationID, existing.ID, existing.Status, existing.Version)
		if err := requireOne(res, err, "re-apply %s over %s", a.OperationID, existing.OperationID); err != nil {
			return Request{}, err
		}
		b = existing
		b.Status, b.OperationID, b.Version, b.ExpiresAt = a.Status, a.OperationID, existing.Version+1, nil
	}
	if err := insertSteps(ctx, tx.tx, []string{a.OperationID}, a.Step, a.Status, ""); err != nil {
		return Request{}, err
	}
	if a.Task != nil {
		t := *a.Task
		t.Ref = a.OperationID
		if err := tx.InsertTask(ctx, t); err != nil {
			return Request{}, err
		}
	}
	op := Operation{ID: opID, OperationID: a.OperationID, SubjectID: a.SubjectID, TargetKey: a.TargetKey, Project: a.Project,
		Flow: a.Flow, Reason: a.Reason, Status: a.Status, Step: a.Step, Version: 1}
	return Request{Operation: op, Binding: b}, nil
}

// Change is one transition of a request: the binding status and step it moves to, and what it
// records on the way. Zero fields leave the columns as they are.
type Change struct {
	To   BindingStatus
	Step Step
	Note string // stored with the step history row (e.g. a failure reason for operators)
	// MRIID and PipelineID record the MR and its pipeline on the operation.
	MRIID      int64
	PipelineID int64
	// TicketID records the approval ticket the request was sent with ("" keeps it).
	TicketID string
	// ExpiresIn sets binding.expires_at to this long after now (database clock); 0 keeps it.
	ExpiresIn time.Duration
}

// Transition moves a request to c.To / c.Step (SPEC §3): it checks the one transition table
// (illegal → *ErrIllegalTransition, nothing written), then writes operation then binding, each
// guarded on the version read (I6: 0 rows → ErrPreempted, nothing written), and appends the step
// to the history, all in one transaction. The returned Request carries the new status, step,
// versions and MR/pipeline; its times are the database's and are not re-read.
func (db *DB) Transition(ctx context.Context, cur Request, c Change) (Request, error) {
	var r Request
	err := db.InTx(ctx, func(tx *Tx) error {
		var err error
		r, err = tx.Transition(ctx, cur, c)
		return err
	})
	return r, err
}

// Transition is DB.Transition inside the transaction.
func (tx *Tx) Transition(ctx context.Context, cur Request, c Change) (Request, error) {
	op, b := cur.Operation, cur.Binding
	if !cur.Current() {
		return Request{}, fmt.Errorf("transition %s: replaced by a re-application: %w", op.OperationID, ErrPreempted)
	}
	if !CanTransition(b.Status, c.To) {
		return Request{}, &ErrIllegalTransition{From: b.Status, To: c.To}
	}
	db := tx.db
	var a assignments
	a.set("status = ?, step = ?, version = version + 1, updated_at = "+db.now(), c.To, c.Step)
	a.refs(c.MRIID, c.PipelineID)
	if c.TicketID != "" {
		a.set("ticket_id = ?", clipText(c.TicketID, 64))
	}
	res, err := tx.tx.ExecContext(ctx, "UPDATE "+db.hinted("operation", "PRIMARY")+" SET "+a.list+" WHERE id = ? AND version = ?", append(a.args, op.ID, op.Version)...)
	if err := requireOne(res, err, "transition operation %s", op.OperationID); err != nil {
		return Request{}, err
	}

	set := "status = ?, version = version + 1, updated_at = " + db.now()
	args := []any{c.To}
	if c.ExpiresIn > 0 {
		set += ", expires_at = " + db.nowPlus()
		args = append(args, micros(c.ExpiresIn))
	}
	args = append(args, b.ID, op.OperationID, b.Version)
	res, err = tx.tx.ExecContext(ctx, "UPDATE "+db.hinted("binding", "PRIMARY")+" SET "+set+" WHERE id = ? AND operation_id = ? AND version = ?", args...)
	if err := requireOne(res, err, "transition binding of %s", op.OperationID); err != nil {
		return Request{}, err
	}
	if err := insertSteps(ctx, tx.tx, []string{op.OperationID}, c.Step, c.To, c.Note); err != nil {
		return Request{}, err
	}

	op.Status, op.Step, op.Version = c.To, c.Step, op.Version+1
	if c.MRIID != 0 {
		op.MRIID = c.MRIID
	}
	if c.PipelineID != 0 {
		op.PipelineID = c.PipelineID
	}
	if c.TicketID != "" {
		op.TicketID = c.TicketID
	}
	b.Status, b.Version = c.To, b.Version+1
	return Request{Operation: op, Binding: b}, nil
}

// RequestDetail is everything the request view (GET /api/requests/:operationId) shows.
type RequestDetail struct {
	Operation Operation
	// Binding is the relation's row while this operation drives it; nil once replaced.
	Binding *Binding
	Steps   []StepRecord // the timeline, oldest first
	// Batch is the last batch that claimed the request (nil: never batched).
	Batch *Batch
	// Waiting is its place in the waiting set (nil: not waiting).
	Waiting *WaitingPlace
	// Task is the work that drives the request now: its own task, else its active batch's
	// (nil: none — waiting for people, the waiting set, an operator, or finished). Ahead counts
	// the tasks of its lane due before it while it waits for a free worker.
	Task  *Task
	Ahead int
	// FailedJob is the failed job recorded for the pipeline the request page shows (Pipeline),
	// nil when none was.
	FailedJob *FailedJob
}

// Pipeline is the pipeline the request page shows: the newest batch's once it has an MR (a
// re-admitted or closing request's older MR is history), else the request's own.
func (d RequestDetail) Pipeline() int64 {
	if d.Batch != nil && d.Batch.MRIID != 0 {
		return d.Batch.PipelineID
	}
	return d.Operation.PipelineID
}

// RequestDetail reads the request view of operationID (ErrNotFound when unknown): a handful of
// indexed reads, independent of how many requests exist.
func (db *DB) RequestDetail(ctx context.Context, operationID string) (RequestDetail, error) {
	r, err := db.Request(ctx, operationID)
	if err != nil {
		return RequestDetail{}, err
	}
	d := RequestDetail{Operation: r.Operation}
	if r.Current() {
		b := r.Binding
		d.Binding = &b
	}
	if d.Steps, err = db.Steps(ctx, operationID); err != nil {
		return RequestDetail{}, err
	}
	// The latest claim, not operation.batch_id: a request re-admitted after a failed batch is
	// claimed by a new batch before its hand-off records it on the operation.
	var batchID int64
	err = db.ro.QueryRowContext(ctx, "SELECT batch_id FROM merge_batch_member WHERE operation_id = ? ORDER BY id DESC LIMIT 1",
		operationID).Scan(&batchID)
	if err = translate(err); err != nil && !errors.Is(err, ErrNotFound) {
		return RequestDetail{}, err
	}
	if batchID != 0 {
		b, err := db.Batch(ctx, batchID)
		if err != nil {
			return RequestDetail{}, err
		}
		d.Batch = &b
	}
	w, err := db.Waiting(ctx, operationID)
	switch {
	case err == nil:
		d.Waiting = &w
	case !errors.Is(err, ErrNotFound):
		return RequestDetail{}, err
	}
	if err := db.drivingTask(ctx, &d); err != nil {
		return RequestDetail{}, err
	}
	if p := d.Pipeline(); p != 0 {
		j, err := db.FailedJobOf(ctx, d.Operation.Project, p)
		switch {
		case err == nil:
			d.FailedJob = &j
		case !errors.Is(err, ErrNotFound):
			return RequestDetail{}, err
		}
	}
	return d, nil
}

// drivingTask fills d.Task (and d.Ahead): the request's own task, else its active batch's.
func (db *DB) drivingTask(ctx context.Context, d *RequestDetail) error {
	t, err := db.Task(ctx, TaskRequest, d.Operation.OperationID)
	if errors.Is(err, ErrNotFound) && d.Batch != nil && d.Batch.Status.Active() {
		t, err = db.Task(ctx, TaskBatch, strconv.FormatInt(d.Batch.ID, 10))
	}
	switch {
	case errors.Is(err, ErrNotFound):
		return nil
	case err != nil:
		return err
	}
	d.Task = &t
	if t.Queued() {
		if d.Ahead, err = db.QueuedAhead(ctx, t.Lane, t.DueAt); err != nil {
			return err
		}
	}
	return nil
}
