package store

import (
	"bindery/internal/vocab/state"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Task is one unit of in-flight work (table task): a request's current step or a batch, keyed by
// (Kind, Ref). Waiting is this row: DueAt says when the work runs next, by the database clock, and
// the dispatcher of any instance claims it then (docs/architecture.md, "durable execution").
type Task struct {
	ID   int64
	Kind string // "request", "batch"
	Ref  string // the operationId, or the batch id in decimal
	Lane string // the concurrency budget it runs in ("first", "background")
	Step string // what the work does when it runs next (the kind's vocabulary)
	// DueAt is when it runs next; while claimed, when the claim expires.
	DueAt time.Time
	// Epoch is the fencing token: every claim and every outside reschedule adds one, and every
	// write of a holder is guarded on the epoch it claimed.
	Epoch int64
	Owner string // the instance holding the claim ("" : none)
	Wakes int64  // outside wakes so far; a holder compares it with the value it claimed with
	// Checks and WaitSince are the staged polling schedule of the current wait as data.
	Checks    int
	WaitSince *time.Time
	Failures  int    // consecutive transient failures (the backoff)
	Memo      string // the step's own memory
	Note      string // why it is waiting, for people
	Slot      string // a mutual-exclusion slot it holds ("" : none)
	CreatedAt time.Time
	UpdatedAt time.Time
	// Read with the row, on the database clock: how long the current wait has lasted (0 without
	// one), how long ago the task was created, and how long it has been due (negative: not yet).
	Waited  time.Duration
	Age     time.Duration
	Overdue time.Duration
}

// TaskRef names a task. Steps, when set, narrows a wake to the task while it is at one of them:
// the news that woke it is news only those steps wait for.
type TaskRef struct {
	Kind  string
	Ref   string
	Steps []string
}

// Claimed reports whether an instance holds the task and its claim is live (by the database
// clock, as read with the row).
func (t Task) Claimed() bool { return t.Owner != "" && t.Overdue < 0 }

// Queued reports whether the task is due and nobody runs it: it waits for a free worker of its
// lane (or for the dispatcher's next look).
func (t Task) Queued() bool { return t.Overdue >= 0 }

// ErrTaskBusy: an instance runs the task right now (its claim is live); an outside reschedule
// that must not interrupt a running step (an operator's retry) is refused with it.
var ErrTaskBusy = errors.New("the task is running right now")

func (db *DB) taskColumns() string { return db.taskColumnsOf("") }

// taskColumnsOf is taskColumns of the table aliased a ("t."), for a join.
func (db *DB) taskColumnsOf(a string) string {
	return prefixed(a, "id, kind, ref, lane, step, due_at, epoch, owner, wakes, checks, wait_since, failures, memo, note, slot, created_at, updated_at") + ", " +
		db.elapsed(a+"wait_since") + ", " + db.elapsed(a+"created_at") + ", " + db.elapsed(a+"due_at")
}

// taskBriefColumnsOf are the columns of a task the request view needs (scanTaskBrief), of the
// table aliased a.
func (db *DB) taskBriefColumnsOf(a string) string {
	return prefixed(a, "id, kind, ref, lane, step, due_at, epoch, owner") + ", " + db.elapsed(a+"due_at")
}

// scanTaskBrief scans taskBriefColumnsOf; the other fields stay zero.
func scanTaskBrief(s scanner) (Task, error) {
	var t Task
	var due dbTime
	var owner nullString
	var overdue nullInt64
	if err := s.Scan(&t.ID, &t.Kind, &t.Ref, &t.Lane, &t.Step, &due, &t.Epoch, &owner, &overdue); err != nil {
		return Task{}, translate(err)
	}
	t.DueAt, t.Owner, t.Overdue = due.T, string(owner), time.Duration(overdue)*time.Microsecond
	return t, nil
}

func scanTask(s scanner) (Task, error) {
	var t Task
	var due, since, created, updated dbTime
	var owner, slot nullString
	var waited, age, overdue nullInt64
	if err := s.Scan(&t.ID, &t.Kind, &t.Ref, &t.Lane, &t.Step, &due, &t.Epoch, &owner, &t.Wakes, &t.Checks, &since, &t.Failures,
		&t.Memo, &t.Note, &slot, &created, &updated, &waited, &age, &overdue); err != nil {
		return Task{}, translate(err)
	}
	t.DueAt, t.WaitSince, t.CreatedAt, t.UpdatedAt = due.T, since.ptr(), created.T, updated.T
	t.Owner, t.Slot = string(owner), string(slot)
	t.Waited, t.Age, t.Overdue = time.Duration(waited)*time.Microsecond, time.Duration(age)*time.Microsecond, time.Duration(overdue)*time.Microsecond
	return t, nil
}

// TaskSpec is a task as an outside writer (an application, a callback, a round, an operator)
// puts it: its step, lane and when it is due.
type TaskSpec struct {
	Kind, Ref, Lane, Step string
	In                    time.Duration // due this long after now (0: now)
	Memo                  string
	Note                  string
	// Wait starts a wait with the step (wait_since = now, checks 0): a polling step.
	Wait bool
}

// InsertTask creates a task for work that has none yet (a new application, a new batch):
// one statement. A task already there for (Kind, Ref) is ErrDuplicate.
func (tx *Tx) InsertTask(ctx context.Context, s TaskSpec) error {
	return tx.insertTasks(ctx, []TaskSpec{s})
}

// insertTasks is InsertTask for several tasks in one statement.
func (tx *Tx) insertTasks(ctx context.Context, specs []TaskSpec) error {
	db := tx.db
	var values strings.Builder
	args := make([]any, 0, 7*len(specs))
	for i, s := range specs {
		since := "NULL"
		if s.Wait {
			since = db.now()
		}
		if i > 0 {
			values.WriteString(", ")
		}
		values.WriteString("(?, ?, ?, ?, " + db.nowPlus() + ", " + since + ", ?, ?)")
		args = append(args, s.Kind, s.Ref, s.Lane, s.Step, micros(s.In), clipText(s.Memo, maxMemo), clipNote(s.Note))
	}
	if _, err := tx.tx.ExecContext(ctx, "INSERT INTO task (kind, ref, lane, step, due_at, wait_since, memo, note) VALUES "+values.String(), args...); err != nil {
		return fmt.Errorf("insert task %s %s: %w", specs[0].Kind, specs[0].Ref, translate(err))
	}
	return nil
}

// PutTask makes s the task's next run, inserting it or replacing the one there: an outside
// reschedule. It bumps the epoch, so a holder still running the old step fails its next write
// and writes nothing; with unlessClaimed a live claim refuses the reschedule (ErrTaskBusy) and
// changes nothing — an operator's retry never interrupts a step that is running.
func (tx *Tx) PutTask(ctx context.Context, s TaskSpec, unlessClaimed bool) error {
	db := tx.db
	since := "NULL"
	if s.Wait {
		since = db.now()
	}
	q := "UPDATE " + db.hinted("task", "uk_task_ref") + " SET lane = ?, step = ?, due_at = " + db.nowPlus() + ", epoch = epoch + 1, owner = NULL, checks = 0, failures = 0, " +
		"wait_since = " + since + ", memo = ?, note = ?, slot = NULL, updated_at = " + db.now() + " WHERE kind = ? AND ref = ?"
	args := []any{s.Lane, s.Step, micros(s.In), clipText(s.Memo, maxMemo), clipNote(s.Note), s.Kind, s.Ref}
	if unlessClaimed {
		q += " AND (owner IS NULL OR due_at <= " + db.now() + ")"
	}
	res, err := tx.tx.ExecContext(ctx, q, args...)
	if err != nil {
		return fmt.Errorf("put task %s %s: %w", s.Kind, s.Ref, translate(err))
	}
	if n, err := affected(res); err != nil || n == 1 {
		return translate(err)
	}
	if unlessClaimed {
		var id int64
		err := translate(tx.tx.QueryRowContext(ctx, "SELECT id FROM task WHERE kind = ? AND ref = ?", s.Kind, s.Ref).Scan(&id))
		switch {
		case err == nil:
			return fmt.Errorf("put task %s %s: %w", s.Kind, s.Ref, ErrTaskBusy)
		case !errors.Is(err, ErrNotFound):
			return fmt.Errorf("put task %s %s: %w", s.Kind, s.Ref, err)
		}
	}
	return tx.InsertTask(ctx, s)
}

// DeleteTask removes the task of (kind, ref), if any: the work is over (a decision arrived, an
// operator settled it). A holder still running it fails its next write.
func (tx *Tx) DeleteTask(ctx context.Context, kind, ref string) error {
	_, err := tx.tx.ExecContext(ctx, tx.db.deleteFrom("task", "uk_task_ref")+" WHERE kind = ? AND ref = ?", kind, ref)
	if err != nil {
		return fmt.Errorf("delete task %s %s: %w", kind, ref, translate(err))
	}
	return nil
}

// Task returns the task of (kind, ref) (ErrNotFound when there is none).
func (db *DB) Task(ctx context.Context, kind, ref string) (Task, error) {
	t, err := scanTask(db.ro.QueryRowContext(ctx, "SELECT "+db.taskColumns()+" FROM task WHERE kind = ? AND ref = ?", kind, ref))
	if err != nil {
		return Task{}, fmt.Errorf("task %s %s: %w", kind, ref, err)
	}
	return t, nil
}

// DueTasks returns up to limit tasks of lane that are due by the database clock, the longest
// due first: unclaimed work whose time came, and claims that expired (a crashed holder). A plain
// read: the claim that follows is the compare-and-set.
func (db *DB) DueTasks(ctx context.Context, lane string, limit int) ([]Task, error) {
	rows, err := db.ro.QueryContext(ctx, "SELECT "+db.taskColumns()+" FROM task WHERE lane = ? AND due_at <= "+db.now()+" ORDER BY due_at LIMIT ?", lane, limit)
	return collect(rows, err, scanTask)
}

// NextDue is how long until the next task of lane falls due by the database clock (ok false:
// the lane has no task at all). Negative: one is due already.
func (db *DB) NextDue(ctx context.Context, lane string) (time.Duration, bool, error) {
	var us nullInt64
	var n int
	err := db.ro.QueryRowContext(ctx, "SELECT COUNT(*), COALESCE(-"+db.elapsed("MIN(due_at)")+", 0) FROM (SELECT due_at FROM task WHERE lane = ? ORDER BY due_at LIMIT 1) d", lane).Scan(&n, &us)
	if err != nil {
		return 0, false, translate(err)
	}
	return time.Duration(us) * time.Microsecond, n > 0, nil
}

// QueuedAhead counts the tasks of lane that are due and were due before due: the work a due
// task waits behind for a free worker.
func (db *DB) QueuedAhead(ctx context.Context, lane string, due time.Time) (int, error) {
	var n int
	err := db.ro.QueryRowContext(ctx, "SELECT COUNT(*) FROM task WHERE lane = ? AND due_at < ? AND due_at <= "+db.now(), lane, db.timeArg(due)).Scan(&n)
	return n, translate(err)
}

// ClaimTask makes owner the holder of t for ttl: a compare-and-set on the epoch t was read with,
// and only while t is due (unclaimed and its time came, or its claim expired). The claim's due
// time is its expiry, so work whose holder dies falls due again by itself. Lost (another claim
// or a reschedule came first, or it is not due) → ErrPreempted. It returns t as claimed.
func (db *DB) ClaimTask(ctx context.Context, t Task, owner string, ttl time.Duration) (Task, error) {
	claim := func(e execer) error {
		res, err := e.ExecContext(ctx, "UPDATE "+db.hinted("task", "PRIMARY")+" SET epoch = epoch + 1, owner = ?, due_at = "+db.nowPlus()+", updated_at = "+db.now()+
			" WHERE id = ? AND epoch = ? AND due_at <= "+db.now(), owner, micros(ttl), t.ID, t.Epoch)
		return requireOne(res, err, "claim task %s %s", t.Kind, t.Ref)
	}
	// On SQLite the claim joins the steps' outcomes queued for the writer (InSharedTx): under
	// load a worker's claim and other workers' outcomes go in one commit.
	var err error
	if db.shared != nil {
		err = db.InSharedTx(ctx, func(tx *Tx) error { return claim(tx.tx) })
	} else {
		err = claim(db.rw)
	}
	if err != nil {
		return Task{}, err
	}
	t.Epoch++
	t.Owner = owner
	return t, nil
}

// ErrReleased is RenewTask's answer when the holder's own outcome has released the claim
// already: there is nothing left to extend.
var ErrReleased = errors.New("the claim was released by its outcome")

// RenewTask extends the holder's claim to ttl from now, guarded on its epoch (lost → ErrPreempted).
// Only a claim still held is extended: a step writes its outcome (the next step and its due time,
// the claim released, the epoch kept) before its action returns, and a renewal coming in between
// would move that due time to the lease's end (a poll meant for a minute later, run seconds after).
func (db *DB) RenewTask(ctx context.Context, t Task, ttl time.Duration) error {
	res, err := db.rw.ExecContext(ctx, "UPDATE "+db.hinted("task", "PRIMARY")+" SET due_at = "+db.nowPlus()+" WHERE id = ? AND epoch = ? AND owner IS NOT NULL", micros(ttl), t.ID, t.Epoch)
	err = requireOne(res, err, "renew task %s %s", t.Kind, t.Ref)
	if !errors.Is(err, ErrPreempted) {
		return err
	}
	var owner nullString
	switch rerr := translate(db.rw.QueryRowContext(ctx, "SELECT owner FROM task WHERE id = ? AND epoch = ?", t.ID, t.Epoch).Scan(&owner)); {
	case rerr == nil && owner == "":
		return fmt.Errorf("renew task %s %s: %w", t.Kind, t.Ref, ErrReleased)
	case rerr != nil && !errors.Is(rerr, ErrNotFound):
		return fmt.Errorf("renew task %s %s: %w", t.Kind, t.Ref, rerr)
	}
	return err
}

// WaitMode says what a TaskNext does with the current wait.
type WaitMode int

const (
	WaitNone  WaitMode = iota // no wait (checks 0, wait_since NULL): the next step is no poll
	WaitKeep                  // the same wait goes on (wait_since kept, checks as given)
	WaitStart                 // a new wait starts now (checks 0, wait_since now)
)

// TaskNext is a holder's outcome of one run: what the task does next and when.
type TaskNext struct {
	Step, Lane string        // "" keeps them
	In         time.Duration // due this long after now, unless a wake came during the run (then now)
	Wait       WaitMode
	Checks     int     // with WaitKeep: the checks made so far in the wait
	Failures   int     // consecutive transient failures (0: the action succeeded)
	Memo       *string // nil keeps it
	Note       string  // why it waits now ("" clears it)
	// Slot: nil keeps it; "" releases it (the first waiter for it is due now); else takes it
	// (ErrDuplicate when another task holds it).
	Slot *string
	// WaitsFor names the slot the task waits for: the end of its holder makes the first waiter
	// due at once (In is then only the safety net). "" : none.
	WaitsFor string
}

// AdvanceTask writes the holder's outcome: the next step and due time, the claim released. It is
// guarded on t's epoch (lost → ErrPreempted) and, as the first statement of the outcome's
// transaction, fences every business write that follows in it.
func (tx *Tx) AdvanceTask(ctx context.Context, t Task, n TaskNext) error {
	db := tx.db
	// A wake that came during the run brings the next look forward — for a wait only: a BLOCKED
	// window or a backoff outside a wait is not shortened by a webhook. due_at comes first: MySQL
	// evaluates assignments left to right, and its CASE must read wait_since before it changes.
	var a assignments
	switch n.Wait {
	case WaitNone:
		a.set("due_at = "+db.nowPlus(), micros(n.In))
	case WaitStart:
		a.set("due_at = CASE WHEN wakes <> ? THEN "+db.now()+" ELSE "+db.nowPlus()+" END", t.Wakes, micros(n.In))
	case WaitKeep:
		a.set("due_at = CASE WHEN wakes <> ? AND wait_since IS NOT NULL THEN "+db.now()+" ELSE "+db.nowPlus()+" END", t.Wakes, micros(n.In))
	}
	a.set("owner = NULL, failures = ?, note = ?, updated_at = "+db.now(), n.Failures, clipNote(n.Note))
	if n.Memo != nil {
		a.set("memo = ?", clipText(*n.Memo, maxMemo))
	}
	if n.Step != "" {
		a.set("step = ?", n.Step)
	}
	if n.Lane != "" {
		a.set("lane = ?", n.Lane)
	}
	switch n.Wait {
	case WaitNone:
		a.set("checks = 0, wait_since = NULL")
	case WaitKeep:
		a.set("checks = ?", n.Checks)
	case WaitStart:
		a.set("checks = 0, wait_since = " + db.now())
	}
	if n.Slot != nil {
		a.set("slot = ?", nullIfEmpty(*n.Slot))
	}
	a.set("waits_for = ?", nullIfEmpty(n.WaitsFor))
	res, err := tx.tx.ExecContext(ctx, "UPDATE "+db.hinted("task", "PRIMARY")+" SET "+a.list+" WHERE id = ? AND epoch = ?", append(a.args, t.ID, t.Epoch)...)
	if err := requireOne(res, err, "advance task %s %s", t.Kind, t.Ref); err != nil {
		return err
	}
	if n.Slot != nil && *n.Slot == "" && t.Slot != "" {
		return tx.wakeWaiter(ctx, t.Slot) // given up: it passes on as at the end of the task
	}
	if n.WaitsFor != "" {
		// The holder may have given the slot up between this task's failed take and now: then
		// no end of a holder will wake it, so it is due at once (its next run takes the slot).
		// A locking read (MySQL): a holder giving the slot up right now is waited for and seen.
		var holder int64
		err := translate(tx.tx.QueryRowContext(ctx, "SELECT id FROM task WHERE slot = ?"+db.forUpdate(), n.WaitsFor).Scan(&holder))
		if err != nil && !errors.Is(err, ErrNotFound) {
			return err
		}
		if errors.Is(err, ErrNotFound) {
			_, err := tx.tx.ExecContext(ctx, "UPDATE "+db.hinted("task", "PRIMARY")+" SET due_at = "+db.now()+", waits_for = NULL WHERE id = ?", t.ID)
			return translate(err)
		}
	}
	return nil
}

// FinishTask deletes the holder's task: the work is over. Guarded on t's epoch like AdvanceTask.
// A slot it held passes to the first task waiting for it (made due now).
func (tx *Tx) FinishTask(ctx context.Context, t Task) error {
	res, err := tx.tx.ExecContext(ctx, tx.db.deleteFrom("task", "PRIMARY")+" WHERE id = ? AND epoch = ?", t.ID, t.Epoch)
	if err := requireOne(res, err, "finish task %s %s", t.Kind, t.Ref); err != nil || t.Slot == "" {
		return err
	}
	return tx.wakeWaiter(ctx, t.Slot)
}

// wakeWaiter makes the first task waiting for slot (the oldest, by the database clock: ids are no
// order on a distributed MySQL) due now. A waiter that missed it (it began to wait just after)
// comes back at its safety net.
func (tx *Tx) wakeWaiter(ctx context.Context, slot string) error {
	db := tx.db
	var id int64
	// A locking read (MySQL): a task that starts waiting right now is seen once it commits,
	// never missed by both sides (see AdvanceTask's WaitsFor check).
	err := translate(tx.tx.QueryRowContext(ctx, "SELECT id FROM task WHERE waits_for = ? ORDER BY created_at, id LIMIT 1"+db.forUpdate(), slot).Scan(&id))
	switch {
	case errors.Is(err, ErrNotFound):
		return nil
	case err != nil:
		return fmt.Errorf("wake a waiter of %s: %w", slot, err)
	}
	_, err = tx.tx.ExecContext(ctx, "UPDATE "+db.hinted("task", "PRIMARY")+" SET due_at = "+db.now()+", waits_for = NULL WHERE id = ? AND waits_for = ?", id, slot)
	return translate(err)
}

// ReleaseTask ends the holder's claim without an outcome, due again in `in`: the run found that
// someone else moved the work on (its next run reads afresh), or it must wait for a slot.
func (db *DB) ReleaseTask(ctx context.Context, t Task, in time.Duration) error {
	res, err := db.rw.ExecContext(ctx, "UPDATE "+db.hinted("task", "PRIMARY")+" SET owner = NULL, due_at = "+db.nowPlus()+", updated_at = "+db.now()+
		" WHERE id = ? AND epoch = ?", micros(in), t.ID, t.Epoch)
	return requireOne(res, err, "release task %s %s", t.Kind, t.Ref)
}

// TakeSlot makes the holder of t the holder of slot (one legacy merge per project), guarded on
// t's epoch. Taken by another task → false.
func (db *DB) TakeSlot(ctx context.Context, t Task, slot string) (bool, error) {
	res, err := db.rw.ExecContext(ctx, "UPDATE "+db.hinted("task", "PRIMARY")+" SET slot = ? WHERE id = ? AND epoch = ?", slot, t.ID, t.Epoch)
	err = requireOne(res, err, "take slot %s for task %s %s", slot, t.Kind, t.Ref)
	if errors.Is(err, ErrDuplicate) {
		return false, nil
	}
	return err == nil, err
}

// WakeTasks makes the named tasks that wait for news (a wait: wait_since set) due now — a
// webhook says the pipeline or the MR changed — on whichever instance's dispatcher looks next. A
// claimed task keeps its claim; its holder's outcome makes it due now instead (see AdvanceTask).
// A task not waiting (a BLOCKED window, a backoff) is not brought forward, nor one at a step its
// ref's Steps leave out (not counted: it was not woken). It returns how many tasks it found. One
// statement per 250 tasks.
func (db *DB) WakeTasks(ctx context.Context, refs []TaskRef) (int, error) {
	n := 0
	for _, chunk := range chunks(refs, maxInList/2) {
		args := make([]any, 0, 2*len(chunk))
		cond := ""
		for i, r := range chunk {
			if i > 0 {
				cond += " OR "
			}
			cond += "(kind = ? AND ref = ?"
			args = append(args, r.Kind, r.Ref)
			if len(r.Steps) > 0 {
				cond += " AND step IN " + inList(len(r.Steps))
				args = append(args, anys(r.Steps)...)
			}
			cond += ")"
		}
		res, err := db.rw.ExecContext(ctx, "UPDATE "+db.hinted("task", "uk_task_ref")+" SET wakes = wakes + 1, due_at = CASE WHEN owner IS NULL AND wait_since IS NOT NULL AND due_at > "+db.now()+
			" THEN "+db.now()+" ELSE due_at END WHERE "+cond, args...)
		if err != nil {
			return n, fmt.Errorf("wake tasks: %w", translate(err))
		}
		k, err := affected(res)
		if err != nil {
			return n, translate(err)
		}
		n += int(k)
	}
	return n, nil
}

// TasksOf returns the tasks of the given refs that exist, by ref.
func (db *DB) TasksOf(ctx context.Context, kind string, refs []string) (map[string]Task, error) {
	out := make(map[string]Task, len(refs))
	for _, chunk := range chunks(refs, maxInList) {
		rows, err := db.ro.QueryContext(ctx, "SELECT "+db.taskColumns()+" FROM task WHERE kind = ? AND ref IN "+inList(len(chunk)), append([]any{kind}, anys(chunk)...)...)
		ts, err := collect(rows, err, scanTask)
		if err != nil {
			return nil, err
		}
		for _, t := range ts {
			out[t.Ref] = t
		}
	}
	return out, nil
}

// maxMemo bounds task.memo (VARCHAR(1024)).
const maxMemo = 1024

// elapsed is the microseconds from a DATETIME expression to the database's now (NULL stays NULL).
func (db *DB) elapsed(expr string) string {
	if db.dialect == MySQL {
		return "TIMESTAMPDIFF(MICROSECOND, " + expr + ", CURRENT_TIMESTAMP(6))"
	}
	return "CAST((julianday('now') - julianday(" + expr + ")) * 86400000000.0 AS INTEGER)"
}

// inFlight selects the operations state.DrivenByItsTask reports, built from it: per status, the
// flows and steps it holds for — no condition where it holds for all of them, otherwise the
// shorter of the steps it holds for (IN) and the steps it does not (NOT IN, so that a step code
// this release does not know counts as driven, as the rule's "every step but" says). Every one of
// them has a request task; Orphans finds those that do not.
func inFlight(alias string) (string, []any) {
	var terms []string
	var args []any
	for _, status := range state.AllStatuses {
		byFlow := map[string]string{} // flow -> its step condition ("" : every step)
		var flows []string
		for _, flow := range state.Flows() {
			var in, out []string
			for _, step := range state.Steps() {
				if state.DrivenByItsTask(flow, status, step) {
					in = append(in, itoa(step))
				} else {
					out = append(out, itoa(step))
				}
			}
			switch {
			case len(in) == 0:
				continue
			case len(out) == 0:
				byFlow[flow] = ""
			case len(in) <= len(out):
				byFlow[flow] = " AND " + alias + "step IN (" + strings.Join(in, ", ") + ")"
			default:
				byFlow[flow] = " AND " + alias + "step NOT IN (" + strings.Join(out, ", ") + ")"
			}
			flows = append(flows, flow)
		}
		if len(flows) == len(state.Flows()) && !slices.ContainsFunc(flows, func(f string) bool { return byFlow[f] != byFlow[flows[0]] }) {
			terms = append(terms, "("+alias+"status = ?"+byFlow[flows[0]]+")") // the same whatever the flow
			args = append(args, status)
			continue
		}
		for _, flow := range flows {
			terms = append(terms, "("+alias+"status = ? AND "+alias+"flow = ?"+byFlow[flow]+")")
			args = append(args, status, flow)
		}
	}
	return "(" + strings.Join(terms, " OR ") + ")", args
}

func itoa(s state.Step) string { return strconv.Itoa(int(s)) }

// Orphans lists in-flight work that has no task — which the product never leaves (a task is
// written in the transaction of the state that needs it) but an old database, a hand edit or a
// bug may: up to limit operations in a state that needs bindery to act (see inFlight) and active
// batches (RUNNING, BLOCKED). The sweep gives each a task and says so loudly. The id order only
// makes the bounded read stable; which orphans come first means nothing, each run takes the rest.
func (db *DB) Orphans(ctx context.Context, limit int) ([]Operation, []Batch, error) {
	flying, args := inFlight("o.")
	rows, err := db.ro.QueryContext(ctx, "SELECT "+prefixed("o.", operationColumns)+" FROM operation o WHERE "+flying+
		" AND NOT EXISTS (SELECT 1 FROM task t WHERE t.kind = ? AND t.ref = o.operation_id) ORDER BY o.id LIMIT ?", append(args, state.TaskRequest, limit)...)
	ops, err := collect(rows, err, scanOp)
	if err != nil {
		return nil, nil, fmt.Errorf("orphan operations: %w", err)
	}
	rows, err = db.ro.QueryContext(ctx, "SELECT "+prefixed("b.", batchColumns)+" FROM merge_batch b WHERE b.status IN "+inActive+
		" AND NOT EXISTS (SELECT 1 FROM task t WHERE t.kind = ? AND t.ref = "+db.text("b.id")+") ORDER BY b.id LIMIT ?", append(anys(state.ActiveBatchStatuses()), state.TaskBatch, limit)...)
	bs, err := collect(rows, err, scanBatch)
	if err != nil {
		return nil, nil, fmt.Errorf("orphan batches: %w", err)
	}
	return ops, bs, nil
}

// text casts an integer column to the text a task's ref holds.
func (db *DB) text(column string) string {
	if db.dialect == MySQL {
		return "CAST(" + column + " AS CHAR)"
	}
	return "CAST(" + column + " AS TEXT)"
}

// ActiveBatchByMR is the id of the active batch carried by MR mrIID of project (ErrNotFound:
// none): a GitLab webhook names the MR, and the batch's task is woken. Should two be found, the
// newest by the database clock (ids are no order on a distributed MySQL).
func (db *DB) ActiveBatchByMR(ctx context.Context, project string, mrIID int64) (int64, error) {
	var id int64
	err := db.ro.QueryRowContext(ctx, "SELECT id FROM merge_batch WHERE project = ? AND mr_iid = ? AND status IN "+inActive+" ORDER BY created_at DESC, id DESC LIMIT 1",
		append([]any{project, mrIID}, anys(state.ActiveBatchStatuses())...)...).Scan(&id)
	return id, translate(err)
}

// LegacyByMR is the legacy request whose own MR is mrIID of project (ErrNotFound: none); should
// two name it, the newest application by the database clock.
func (db *DB) LegacyByMR(ctx context.Context, project string, mrIID int64) (string, error) {
	var op string
	err := db.ro.QueryRowContext(ctx, "SELECT operation_id FROM operation WHERE project = ? AND mr_iid = ? AND flow = ? ORDER BY created_at DESC, id DESC LIMIT 1",
		project, mrIID, state.FlowLegacy).Scan(&op)
	return op, translate(err)
}
