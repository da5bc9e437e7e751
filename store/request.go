package store

import (
	"bindery/internal/vocab/state"
	"context"
	"database/sql"
	"fmt"
	"strconv"
	"strings"
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

// readRequest reads the operation and its binding in one query: every step of a request begins
// with it.
func readRequest(ctx context.Context, q queryer, operationID string) (Request, error) {
	row, err := rowValues(q.QueryRowContext(ctx, requestQuery, operationID), nOperation+nBinding)
	if err != nil {
		return Request{}, fmt.Errorf("operation %s: %w", operationID, translate(err))
	}
	op, err := scanOperation(row[:nOperation])
	if err != nil {
		return Request{}, err
	}
	r := Request{Operation: op}
	if b := row[nOperation:]; b[0] != nil {
		if r.Binding, err = scanBinding(b); err != nil {
			return Request{}, err
		}
	}
	return r, nil
}

var requestQuery = "SELECT " + prefixed("o.", operationColumns) + ", " + prefixed("b.", bindingColumns) +
	" FROM operation o LEFT JOIN binding b ON b.operation_id = o.operation_id WHERE o.operation_id = ?"

// rowValues scans a row of n columns into driver values, for a row whose parts are scanned
// separately (a LEFT JOIN's part is absent when its first column is nil).
func rowValues(row *sql.Row, n int) (values, error) {
	raw := make(values, n)
	ptrs := make([]any, n)
	for i := range raw {
		ptrs[i] = &raw[i]
	}
	return raw, row.Scan(ptrs...)
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
	Status      state.BindingStatus
	Step        state.Step
	// TargetDef is the target's definition as the catalog had it when the request was accepted
	// (JSON; Operation.TargetDef): the request goes on with it whatever later reloads do.
	TargetDef string
	// Task, when set, is the first step's task, inserted in the application's transaction (its
	// Kind and Ref are the operation's): the step is data from the first commit on, so a crash
	// right after the answer leaves work that any instance runs.
	Task *TaskSpec
	// Answer, when set, is the request's idempotency record with its answer, written first in
	// the application's transaction: one commit holds the whole application.
	Answer *Answer
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

// Apply is DB.Apply inside the transaction.
func (tx *Tx) apply(ctx context.Context, a Application) (Request, error) {
	if !state.CanTransition("", a.Status) {
		return Request{}, &state.ErrIllegalTransition{From: "", To: a.Status}
	}
	one := []Application{a}
	w, err := tx.insertApplications(ctx, one)
	if err != nil {
		return Request{}, err
	}
	b := Binding{ID: w.bindingID, SubjectID: a.SubjectID, TargetKey: a.TargetKey, Status: a.Status, OperationID: a.OperationID, Version: 1}
	if w.bindings == 0 {
		if b, err = tx.reapply(ctx, a); err != nil {
			return Request{}, err
		}
	}
	if err := tx.insertFirstSteps(ctx, one); err != nil {
		return Request{}, err
	}
	op := Operation{ID: w.operationID, OperationID: a.OperationID, SubjectID: a.SubjectID, TargetKey: a.TargetKey, Project: a.Project,
		Flow: a.Flow, Reason: a.Reason, Status: a.Status, Step: a.Step, Version: 1, TargetDef: a.TargetDef}
	return Request{Operation: op, Binding: b}, nil
}

// written is what insertApplications wrote: how many binding rows it inserted (the others'
// relations had one already) and, for a single application, its operation's and its new
// binding's ids.
type written struct {
	bindings               int64
	operationID, bindingID int64
}

// insertApplications writes the rows apps start with, one multi-row statement per table, in the
// order every cross-table write takes: the idempotency records of those that carry an answer
// (first: a concurrent duplicate waits on its key holding nothing, until this transaction ends),
// the operations, then each relation's binding row unless the relation has one. An existing row
// is left as it is and locked by the statement (MySQL: ON DUPLICATE KEY takes its exclusive
// lock; SQLite: the one write connection), so concurrent applications for one relation go one
// at a time: each later one reads the row as the one before left it.
func (tx *Tx) insertApplications(ctx context.Context, apps []Application) (written, error) {
	db := tx.db
	var w written
	what := apps[0].OperationID
	if len(apps) > 1 {
		what = fmt.Sprintf("%d applications from %s", len(apps), what)
	}
	var answers []Answer
	for _, a := range apps {
		if a.Answer != nil {
			answers = append(answers, *a.Answer)
		}
	}
	if len(answers) > 0 {
		if err := tx.insertAnswers(ctx, answers); err != nil {
			return w, err
		}
	}
	args := make([]any, 0, 9*len(apps))
	for _, a := range apps {
		args = append(args, a.OperationID, a.SubjectID, a.TargetKey, a.Project, a.Flow, a.Reason, a.Status, a.Step, nullIfEmpty(a.TargetDef))
	}
	res, err := tx.tx.ExecContext(ctx, "INSERT INTO operation (operation_id, subject_id, target_key, project, flow, reason, status, step, target_def) VALUES "+
		rowsOf("(?, ?, ?, ?, ?, ?, ?, ?, ?)", len(apps)), args...)
	if err != nil {
		return w, fmt.Errorf("apply %s: %w", what, translate(err))
	}
	if len(apps) == 1 {
		if w.operationID, err = res.LastInsertId(); err != nil {
			return w, translate(err)
		}
	}
	args = args[:0]
	for _, a := range apps {
		args = append(args, a.SubjectID, a.TargetKey, a.Status, a.OperationID)
	}
	res, err = tx.tx.ExecContext(ctx, "INSERT INTO binding (subject_id, target_key, status, operation_id) VALUES "+
		rowsOf("(?, ?, ?, ?)", len(apps))+db.unlessRelationExists(), args...)
	if err != nil {
		return w, fmt.Errorf("apply %s: %w", what, translate(err))
	}
	if w.bindings, err = res.RowsAffected(); err != nil {
		return w, translate(err)
	}
	if len(apps) == 1 && w.bindings == 1 {
		if w.bindingID, err = res.LastInsertId(); err != nil {
			return w, translate(err)
		}
	}
	return w, nil
}

// insertFirstSteps appends each application's first step to the history and inserts the tasks
// of those that carry one (their Ref is the operationId): one statement per table for the
// usual case of one flow.
func (tx *Tx) insertFirstSteps(ctx context.Context, apps []Application) error {
	type first struct {
		step   state.Step
		status state.BindingStatus
	}
	var order []first
	ids := map[first][]stepRow{}
	var tasks []TaskSpec
	for _, a := range apps {
		f := first{a.Step, a.Status}
		if _, ok := ids[f]; !ok {
			order = append(order, f)
		}
		ids[f] = append(ids[f], stepRow{a.OperationID, 1})
		if a.Task != nil {
			t := *a.Task
			t.Ref = a.OperationID
			tasks = append(tasks, t)
		}
	}
	for _, f := range order {
		if err := insertSteps(ctx, tx.tx, ids[f], f.step, f.status, ""); err != nil {
			return err
		}
	}
	// The news of the applications (request.accepted), their routing tasks in the one statement
	// of the applications' tasks.
	ops, moves := make([]Operation, len(apps)), make([]state.Move, len(apps))
	for i, a := range apps {
		ops[i] = Operation{OperationID: a.OperationID, SubjectID: a.SubjectID, TargetKey: a.TargetKey, Project: a.Project, Flow: a.Flow}
		moves[i] = state.Move{To: a.Status, Step: a.Step}
	}
	routes, err := tx.insertEvents(ctx, requestEvents(ops, moves, ""), false)
	if err != nil {
		return err
	}
	tasks = append(tasks, routes...)
	if len(tasks) == 0 {
		return nil
	}
	return tx.insertTasks(ctx, tasks)
}

// reapply moves the relation's existing row, locked by the caller's insert, to a's operation:
// only from a REAPPLIABLE status (else *ErrApplyInProgress), guarded on the exact status and
// version read — with two REAPPLIABLE statuses, a row that changed between them must not pass
// as "still re-appliable".
func (tx *Tx) reapply(ctx context.Context, a Application) (Binding, error) {
	db := tx.db
	existing, err := bindingFor(ctx, tx.tx, a.SubjectID, a.TargetKey)
	if err != nil {
		return Binding{}, err
	}
	db.hook("apply.read")
	if !existing.Status.Reappliable() {
		return Binding{}, &ErrApplyInProgress{Binding: existing}
	}
	if !state.CanTransition(existing.Status, a.Status) {
		return Binding{}, &state.ErrIllegalTransition{From: existing.Status, To: a.Status}
	}
	res, err := tx.tx.ExecContext(ctx, "UPDATE "+db.hinted("binding", "PRIMARY")+" SET status = ?, operation_id = ?, expires_at = NULL, version = version + 1, "+
		"updated_at = "+db.now()+" WHERE id = ? AND status = ? AND version = ?",
		a.Status, a.OperationID, existing.ID, existing.Status, existing.Version)
	if err := requireOne(res, err, "re-apply %s over %s", a.OperationID, existing.OperationID); err != nil {
		return Binding{}, err
	}
	b := existing
	b.Status, b.OperationID, b.Version, b.ExpiresAt = a.Status, a.OperationID, existing.Version+1, nil
	return b, nil
}

// unlessRelationExists ends the binding insert so that an existing row for the relation is left
// as it is (0 rows affected) and locked, instead of failing the statement.
func (db *DB) unlessRelationExists() string {
	if db.dialect == MySQL {
		return " ON DUPLICATE KEY UPDATE id = id"
	}
	return " ON CONFLICT (subject_id, target_key) DO NOTHING"
}

// Change is one transition of a request: the binding status and step it moves to, and what it
// records on the way. Zero fields leave the columns as they are.
type Change struct {
	To   state.BindingStatus
	Step state.Step
	Note string // stored with the step history row (e.g. a failure reason for operators)
	// MRIID and PipelineID record the MR and its pipeline on the operation.
	MRIID      int64
	PipelineID int64
	// TicketID records the approval ticket the request was sent with ("" keeps it).
	TicketID string
	// DecidedBy records who decided the approval ("" keeps it).
	DecidedBy string
	// ExpiresIn sets binding.expires_at to this long after now (database clock); 0 keeps it.
	ExpiresIn time.Duration
	// ExpiresAt sets binding.expires_at to this time (a renewal); nil keeps it.
	ExpiresAt *time.Time
	// FileExpiresAt records the expiry the binding's file is rewritten with (a renewal of a
	// target whose file carries it); nil keeps it.
	FileExpiresAt *time.Time
}

// Transition is DB.Transition inside the transaction.
func (tx *Tx) transition(ctx context.Context, cur Request, c Change) (Request, error) {
	op, b := cur.Operation, cur.Binding
	if !cur.Current() {
		return Request{}, fmt.Errorf("transition %s: replaced by a re-application: %w", op.OperationID, ErrPreempted)
	}
	if !state.CanTransition(b.Status, c.To) {
		return Request{}, &state.ErrIllegalTransition{From: b.Status, To: c.To}
	}
	db := tx.db
	var a assignments
	a.set(db.addStageTime())
	a.set("status = ?, step = ?, version = version + 1, updated_at = "+db.now(), c.To, c.Step)
	a.refs(c.MRIID, c.PipelineID)
	if c.TicketID != "" {
		a.set("ticket_id = ?", clipText(c.TicketID, 64))
	}
	if c.DecidedBy != "" {
		a.set("decided_by = ?", clipText(c.DecidedBy, 254))
	}
	if c.FileExpiresAt != nil {
		a.set("file_expires_at = ?", db.timeArg(*c.FileExpiresAt))
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
	if c.ExpiresAt != nil {
		set += ", expires_at = ?"
		args = append(args, db.timeArg(*c.ExpiresAt))
	}
	args = append(args, b.ID, op.OperationID, b.Version)
	res, err = tx.tx.ExecContext(ctx, "UPDATE "+db.hinted("binding", "PRIMARY")+" SET "+set+" WHERE id = ? AND operation_id = ? AND version = ?", args...)
	if err := requireOne(res, err, "transition binding of %s", op.OperationID); err != nil {
		return Request{}, err
	}
	if err := insertSteps(ctx, tx.tx, []stepRow{{op.OperationID, op.Version + 1}}, c.Step, c.To, c.Note); err != nil {
		return Request{}, err
	}
	if err := tx.trackRemovals(ctx, []Operation{op}, MemberChange{Step: c.Step, MRIID: c.MRIID}); err != nil {
		return Request{}, err
	}
	move := state.Move{From: b.Status, To: c.To, FromStep: op.Step, Step: c.Step, MR: c.MRIID != 0}

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
	if c.DecidedBy != "" {
		op.DecidedBy = clipText(c.DecidedBy, 254)
	}
	if c.FileExpiresAt != nil {
		at := *c.FileExpiresAt
		op.FileExpiresAt = &at
	}
	b.Status, b.Version = c.To, b.Version+1
	if c.ExpiresAt != nil {
		at := *c.ExpiresAt
		b.ExpiresAt = &at
	}
	if _, err := tx.insertEvents(ctx, requestEvents([]Operation{op}, []state.Move{move}, c.Note), true); err != nil {
		return Request{}, err
	}
	return Request{Operation: op, Binding: b}, nil
}

// RequestDetail is everything the request view (GET /api/requests/:operationId) shows. Its
// batches and task are read brief, with only the fields the view needs (scanBatchBrief,
// scanTaskBrief): every column of the status read costs on every request page.
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
	// Ahead stops at QueueCounted; AheadMore says that more are queued than that.
	Task      *Task
	Ahead     int
	AheadMore bool
	// Now is the database clock at the read.
	Now time.Time
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

// RequestDetail reads the request view of operationID (ErrNotFound when unknown) in at most two
// indexed reads, independent of how many requests exist (docs/architecture.md, "A status read
// is at most two queries"). The first (statusRequest) is the operation, its binding, its own task, the database
// clock, whether it was ever admitted to a waiting set, the failed job of its own pipeline, and
// its steps: a row per step. The second (statusMore) reads only what the first says is there to
// read: its place in batching once it was admitted, and the count of tasks queued ahead of its
// own task when that task is queued. A request awaiting approval, the page a requester watches
// longest, is one read.
//
// MariaDB plans every table and subquery of a statement again at each execution, and the parts
// read only sometimes cost most of that planning; hence the split (BenchmarkStatusRead). The
// two reads are not one snapshot: what changed between them shows as it stood at the first.
func (db *DB) RequestDetail(ctx context.Context, operationID string) (RequestDetail, error) {
	d, more, err := db.statusRequest(ctx, operationID)
	if err == nil && more != (statusParts{}) {
		err = db.statusMore(ctx, &d, more)
	}
	if err != nil {
		return RequestDetail{}, err
	}
	return d, nil
}

// statusParts is what the second read of a status read holds.
type statusParts struct {
	position bool // the request was admitted: its batch, waiting place, batch task, their job
	ahead    bool // its own task is queued: the tasks queued ahead of it
}

// index numbers the combinations, for the table of texts.
func (p statusParts) index() int {
	i := 0
	if p.position {
		i |= 1
	}
	if p.ahead {
		i |= 2
	}
	return i
}

// Column counts of the status read's parts, in the order they are selected.
const nOperation, nBinding, nBatchBrief, nWaitingPlace, nTaskBrief, nFailedJob, nStep = 19, 9, 11, 7, 9, 3, 5

// columnsOf hands out a row's columns part by part.
type columnsOf values

func (c *columnsOf) next(n int) values {
	part := values((*c)[:n])
	*c = (*c)[n:]
	return part
}

// present says whether a LEFT JOIN found its row (its first column is never NULL).
func present(v values) bool { return v[0] != nil }

// statusRequest is the first read (RequestDetail): point lookups on unique indexes, one row per
// step (the other columns repeat, a history is tens of steps; a request without steps is one
// row). more is what the second read is to bring.
func (db *DB) statusRequest(ctx context.Context, operationID string) (d RequestDetail, more statusParts, err error) {
	rows, err := db.ro.QueryContext(ctx, statusRequestQueries[db.dialect], state.TaskRequest, operationID)
	if err != nil {
		return RequestDetail{}, more, fmt.Errorf("request %s: %w", operationID, translate(err))
	}
	defer rows.Close()
	const nRequest = nOperation + nBinding + nTaskBrief + 1 + 1 + nFailedJob
	raw := make(values, nRequest+nStep)
	ptrs := make([]any, len(raw))
	for i := range raw {
		ptrs[i] = &raw[i]
	}
	first := true
	for rows.Next() {
		if err := rows.Scan(ptrs...); err != nil {
			return RequestDetail{}, more, translate(err)
		}
		row := columnsOf(raw)
		if first {
			if more, err = d.request(&row); err != nil {
				return RequestDetail{}, more, err
			}
			first = false
			// The request's columns repeat on every further row: skip them without copying.
			var skip sql.RawBytes
			for i := range nRequest {
				ptrs[i] = &skip
			}
		} else {
			row = row[nRequest:]
		}
		if step := values(row); present(step) {
			r, err := scanStep(append(values{step[0], operationID}, step[1:]...))
			if err != nil {
				return RequestDetail{}, more, err
			}
			d.Steps = append(d.Steps, r)
		}
	}
	if err := rows.Err(); err != nil {
		return RequestDetail{}, more, fmt.Errorf("request %s: %w", operationID, translate(err))
	}
	if first {
		return RequestDetail{}, more, fmt.Errorf("request %s: %w", operationID, ErrNotFound)
	}
	return d, more, nil
}

// request scans statusRequest's columns up to the steps'.
func (d *RequestDetail) request(row *columnsOf) (more statusParts, err error) {
	if d.Operation, err = scanOperation(row.next(nOperation)); err != nil {
		return more, err
	}
	if v := row.next(nBinding); present(v) {
		b, err := scanBinding(v)
		if err != nil {
			return more, err
		}
		d.Binding = &b
	}
	if err := d.driveBy(row.next(nTaskBrief)); err != nil {
		return more, err
	}
	var clock dbTime
	if err := row.next(2).Scan(&clock, &more.position); err != nil {
		return more, err
	}
	d.Now = clock.T
	if err := d.failedJob(row.next(nFailedJob)); err != nil {
		return more, err
	}
	more.ahead = d.Task != nil && d.Task.Queued()
	return more, nil
}

// statusMore is the second read (RequestDetail) of parts: one row of point lookups on unique or
// leading-column indexes.
func (db *DB) statusMore(ctx context.Context, d *RequestDetail, parts statusParts) error {
	var args []any
	n := 0
	if parts.position {
		args = append(args, state.BatchBlocked, state.TaskBatch)
		n += 2*nBatchBrief + nWaitingPlace + 1 + nTaskBrief + 1 + nFailedJob
	}
	if parts.ahead {
		args = append(args, d.Task.ID)
		n++
	}
	id := d.Operation.OperationID
	raw, err := rowValues(db.ro.QueryRowContext(ctx, statusMoreQueries[db.dialect][parts.index()], append(args, id)...), n)
	if err != nil {
		// ErrNotFound too: nothing deletes an operation, so the database is not what bindery wrote.
		return fmt.Errorf("request %s: %w", id, translate(err))
	}
	row := columnsOf(raw)
	if parts.position {
		if err := d.position(&row); err != nil {
			return err
		}
	}
	if parts.ahead {
		return d.setAhead(row.next(1))
	}
	return nil
}

// position scans statusMore's columns of the request's place in batching.
func (d *RequestDetail) position(row *columnsOf) error {
	if v := row.next(nBatchBrief); present(v) {
		b, err := scanBatchBrief(v)
		if err != nil {
			return err
		}
		d.Batch = &b
	}
	if v := row.next(nWaitingPlace + 1); present(v) {
		var w WaitingPlace
		var id int64
		var since dbTime
		var of, round nullInt64
		var next nullString
		if err := v.Scan(&id, &w.Partition, &w.Action, &since, &of, &round, &next, &w.Ahead); err != nil {
			return err
		}
		w.Since, w.NextBy = since.T, string(next)
		d.Waiting = &w
	}
	if v := row.next(nBatchBrief); present(v) && d.Waiting != nil {
		b, err := scanBatchBrief(v)
		if err != nil {
			return err
		}
		d.Waiting.BlockedBy = &b
	}
	// The work that drives the request: its own task, else its active batch's.
	task, ahead := row.next(nTaskBrief), row.next(1)
	if d.Task == nil && d.Batch != nil && d.Batch.Status.Active() {
		if err := d.driveBy(task); err != nil {
			return err
		}
		if err := d.setAhead(ahead); err != nil {
			return err
		}
	}
	job := row.next(nFailedJob)
	if d.Batch != nil && d.Batch.MRIID != 0 {
		d.FailedJob = nil // the batch's pipeline is the page's, not the request's own
		return d.failedJob(job)
	}
	return nil
}

// driveBy records task (brief columns) as the work that drives the request; an absent task
// leaves d as it is.
func (d *RequestDetail) driveBy(task values) error {
	if !present(task) {
		return nil
	}
	t, err := scanTaskBrief(task)
	if err != nil {
		return err
	}
	d.Task = &t
	return nil
}

// setAhead records the count of tasks queued ahead of the driving task, cut at QueueCounted.
func (d *RequestDetail) setAhead(v values) error {
	d.Ahead, d.AheadMore = 0, false
	if err := v.Scan(&d.Ahead); err != nil {
		return err
	}
	if d.Ahead > QueueCounted {
		d.Ahead, d.AheadMore = QueueCounted, true
	}
	return nil
}

// failedJob records the failed job of the pipeline the page shows (RequestDetail.Pipeline), when
// one was recorded.
func (d *RequestDetail) failedJob(v values) error {
	if !present(v) {
		return nil
	}
	j := FailedJob{Project: d.Operation.Project, PipelineID: d.Pipeline()}
	if err := v.Scan(&j.JobID, &j.Name, &j.WebURL); err != nil {
		return err
	}
	d.FailedJob = &j
	return nil
}

// QueueCounted is how far a status read counts the tasks queued ahead of a request's: the read
// costs the same whether a lane has 10 or 10,000 tasks due (an apply burst leaves thousands of
// first steps due at once, and every waiting requester's page reads its place).
const QueueCounted = 100

// The status read's texts per dialect, written once: they are built of a dozen parts, and the
// status read runs on every request page. statusMoreQueries is indexed by statusParts.index.
var (
	statusRequestQueries = map[Dialect]string{MySQL: (&DB{dialect: MySQL}).statusRequestQuery(), SQLite: (&DB{dialect: SQLite}).statusRequestQuery()}
	statusMoreQueries    = map[Dialect][4]string{MySQL: (&DB{dialect: MySQL}).statusMoreTexts(), SQLite: (&DB{dialect: SQLite}).statusMoreTexts()}
)

// queuedAhead counts the tasks queued ahead of task t (an alias), up to QueueCounted: a probe for
// the entry QueueCounted+1 places ahead (a backward walk of the lane's index, at most that far)
// says whether to count at all. Ahead of a due task everything is due, so it is a plain range.
func (db *DB) queuedAhead(t string) string {
	ahead := " FROM task q WHERE q.lane = " + t + ".lane AND q.due_at < " + t + ".due_at"
	return "CASE WHEN " + t + ".id IS NULL OR " + t + ".due_at > " + db.now() + " THEN 0" +
		" WHEN (SELECT q.id" + ahead + " ORDER BY q.due_at DESC LIMIT 1 OFFSET " + strconv.Itoa(QueueCounted) + ") IS NOT NULL THEN " + strconv.Itoa(QueueCounted+1) +
		" ELSE (SELECT COUNT(*)" + ahead + ") END"
}

// statusRequestQuery builds statusRequest's query. Admitted: a request's row in the waiting set
// lives from its admission until a failed batch removes it, and a claim writes the batch's
// member rows in the same transaction that takes it, so "has either" is "was ever admitted".
// The steps are rows, not one aggregated value: MariaDB gathers rows wider than 512 characters
// (a step's note may be 512) through a temporary table with a BLOB column, which cost three
// times reading them as rows.
func (db *DB) statusRequestQuery() string {
	return "SELECT " + prefixed("o.", operationColumns) + ", " + prefixed("b.", bindingColumns) +
		", " + db.taskBriefColumnsOf("t.") + ", " + db.now() +
		", EXISTS (SELECT 1 FROM merge_batch_request r WHERE r.operation_id = o.operation_id)" +
		" OR EXISTS (SELECT 1 FROM merge_batch_member m WHERE m.operation_id = o.operation_id)" +
		", fj.job_id, fj.name, fj.web_url, s.id, s.step, s.status, s.note, s.at" +
		" FROM operation o LEFT JOIN binding b ON b.operation_id = o.operation_id" +
		" LEFT JOIN task t ON t.kind = ? AND t.ref = o.operation_id" +
		// The failed job of the request's own pipeline (legacy); statusMore reads its batch's.
		" LEFT JOIN failed_job fj ON fj.project = o.project AND fj.pipeline_id = o.pipeline_id" +
		" LEFT JOIN operation_step s ON s.operation_id = o.operation_id" +
		" WHERE o.operation_id = ? ORDER BY s.seq"
}

// statusMoreTexts builds statusMore's query for every combination of parts.
func (db *DB) statusMoreTexts() (texts [4]string) {
	for _, position := range []bool{false, true} {
		for _, ahead := range []bool{false, true} {
			p := statusParts{position: position, ahead: ahead}
			texts[p.index()] = db.statusMoreQuery(p)
		}
	}
	return texts
}

// statusMoreQuery builds statusMore's query of parts. The position: the batch of the request's
// latest claim (not operation.batch_id: a request re-admitted after a failed batch is claimed by
// a new batch before its hand-off records it on the operation), its place in the waiting set
// with the count ahead of it (in the claim's order, see Waiting) and the partition's BLOCKED
// batch, the batch's task with the tasks queued before it, and the failed job of the batch's
// pipeline. The request's own task is named by its id (read by the first).
func (db *DB) statusMoreQuery(p statusParts) string {
	var cols []string
	from := " FROM operation o"
	if p.position {
		text := "CHAR"
		if db.dialect == SQLite {
			text = "TEXT"
		}
		// Named indexes: with the ORs of the claim's order the optimizers otherwise merge indexes.
		suspect := db.hinted("merge_batch_request x", "idx_merge_batch_request_suspect")
		claim := db.hinted("merge_batch_request x", "idx_merge_batch_request_claim")
		// The rows an operator sent into the next car go first (see Claim), in the order they came.
		sentNext := "(SELECT COUNT(*) FROM " + db.hinted("merge_batch_request x", "idx_merge_batch_request_next") +
			" WHERE x.partition_key = w.partition_key AND x.batch_id IS NULL AND x.next_by IS NOT NULL"
		earlier := "(x.created_at < w.created_at OR (x.created_at = w.created_at AND x.id < w.id))"
		ahead := "CASE WHEN w.id IS NULL THEN 0 WHEN w.next_by IS NOT NULL THEN " + sentNext + " AND " + earlier + ") " +
			"WHEN w.suspect_round IS NULL THEN " +
			"(SELECT COUNT(*) FROM " + claim + " WHERE x.partition_key = w.partition_key AND x.batch_id IS NULL " +
			"AND (x.next_by IS NOT NULL OR x.suspect_round IS NOT NULL OR " + earlier + ")) ELSE " +
			"(SELECT COUNT(*) FROM " + suspect + " WHERE x.partition_key = w.partition_key AND x.batch_id IS NULL " +
			"AND x.suspect_round IS NOT NULL AND x.next_by IS NULL AND (x.suspect_round > w.suspect_round OR (x.suspect_round = w.suspect_round AND (x.suspect_of < w.suspect_of " +
			"OR (x.suspect_of = w.suspect_of AND " + earlier + "))))) + " + sentNext + ") END"
		cols = append(cols, prefixed("mb.", batchBriefColumns),
			"w.id, w.partition_key, w.action, w.created_at, w.suspect_of, w.suspect_round, w.next_by, "+ahead, prefixed("bb.", batchBriefColumns),
			db.taskBriefColumnsOf("bt."), db.queuedAhead("bt"), "fj.job_id, fj.name, fj.web_url")
		// The latest claim and the latest waiting row, by the database clock: ids are no order
		// (a distributed MySQL hands them out in blocks per server). A request's claims are a
		// batch's run apart; the id breaks a tie of SQLite's milliseconds, where it is the order
		// of insertion. A request has at most one waiting row per action, found on its unique
		// key; no index holds them in this order (an id order once tempted MariaDB into walking
		// the primary key backwards through the whole waiting set).
		from += " LEFT JOIN merge_batch mb ON mb.id = (SELECT m.batch_id FROM merge_batch_member m WHERE m.operation_id = o.operation_id ORDER BY m.claimed_at DESC, m.id DESC LIMIT 1)" +
			" LEFT JOIN merge_batch_request w ON w.id = (SELECT r.id FROM merge_batch_request r WHERE r.operation_id = o.operation_id AND r.batch_id IS NULL" +
			" ORDER BY r.created_at DESC, r.id DESC LIMIT 1)" +
			// The first BLOCKED car of the partition's train, when one holds it: a car behind it
			// cannot merge before it (a train of one car: the partition's only active batch).
			" LEFT JOIN merge_batch bb ON bb.id = (SELECT c.id FROM " + db.hinted("merge_batch c", "idx_merge_batch_active") +
			" WHERE c.active_slot = w.partition_key AND c.status = ? ORDER BY c.train_seq, c.id LIMIT 1)" +
			" LEFT JOIN task bt ON bt.kind = ? AND bt.ref = CAST(mb.id AS " + text + ")" +
			" LEFT JOIN failed_job fj ON fj.project = o.project AND fj.pipeline_id = mb.pipeline_id"
	}
	if p.ahead {
		cols = append(cols, db.queuedAhead("t"))
		from += " LEFT JOIN task t ON t.id = ?"
	}
	if len(cols) == 0 {
		return ""
	}
	return "SELECT " + strings.Join(cols, ", ") + from + " WHERE o.operation_id = ?"
}
