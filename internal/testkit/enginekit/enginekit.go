// Package enginekit is the engine-plus-store harness of bindery's tests: a fresh database of
// each kind (SQLite and MariaDB, through storetest) and the engines a test starts on it, one per
// simulated instance, with the task-table moves the tests make (a task due now, a task gone).
// The engine, batch, notify and workflow tests build their instances on it.
package enginekit

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"bindery/internal/platform/metric"
	"bindery/internal/testkit"
	"bindery/internal/work/engine"
	"bindery/store"
	"bindery/store/storetest"
)

// Harness is one test's database and what the test does to its task table.
type Harness struct {
	T  testing.TB
	DB *store.DB

	mu      sync.Mutex
	engines []*engine.Engine // the engines built on it, nudged after the harness's own writes
}

// Each runs fn against a fresh SQLite and a fresh MariaDB database, in parallel subtests
// "sqlite" and "mysql" (storetest.Each).
func Each(t *testing.T, fn func(t *testing.T, h *Harness)) {
	t.Helper()
	storetest.Each(t, func(t *testing.T, db *store.DB) { fn(t, On(t, db)) })
}

// On is the harness of a database the test already has.
func On(t testing.TB, db *store.DB) *Harness { return &Harness{T: t, DB: db} }

// Options shape one instance's engine; zero values take the defaults below.
type Options struct {
	Instance string           // the claims' owner (default "test-1")
	Lanes    map[string]int   // workers per lane (default: first 1, background 2, notify 1)
	IdlePoll time.Duration    // how often an idle lane looks for work (default 100 ms)
	Log      *slog.Logger     // default: discarded
	Recorder *metric.Recorder // default: none
	Kinds    []engine.Kind    // registered before the engine starts
	Held     bool             // built but not started: its work waits until the test starts it
}

// Engine builds one instance's engine on the harness's database, registers o.Kinds and starts it
// (unless o.Held). It is killed when the test ends, as a crashed process is: a test that wants a
// graceful stop calls Stop itself.
func (h *Harness) Engine(o Options) *engine.Engine {
	h.T.Helper()
	if o.Instance == "" {
		o.Instance = "test-1"
	}
	if o.Lanes == nil {
		o.Lanes = map[string]int{engine.LaneFirst: 1, engine.LaneBackground: 2, engine.LaneNotify: 1}
	}
	// An idle lane's look is two queries; at 10 ms the suite's engines kept MariaDB busier than
	// the tests' own work did. The harness's writes (Put, DueNow, Expire) nudge its engines, as
	// the product's writers nudge their own; other instances' work is seen at the next look.
	if o.IdlePoll == 0 {
		o.IdlePoll = 100 * time.Millisecond
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	e := engine.New(engine.Options{DB: h.DB, Log: o.Log, Recorder: o.Recorder, Instance: o.Instance, Lanes: o.Lanes, IdlePoll: o.IdlePoll})
	for _, k := range o.Kinds {
		e.Register(k)
	}
	h.T.Cleanup(e.Kill)
	h.mu.Lock()
	h.engines = append(h.engines, e)
	h.mu.Unlock()
	if !o.Held {
		if err := e.Start(context.Background()); err != nil {
			h.T.Fatalf("start engine %s: %v", o.Instance, err)
		}
	}
	return e
}

// Put writes a due task (an outside writer's reschedule, as a callback's transaction does).
func (h *Harness) Put(spec store.TaskSpec) {
	h.T.Helper()
	if err := h.DB.InTx(context.Background(), func(tx *store.Tx) error {
		return tx.PutTask(context.Background(), spec, false)
	}); err != nil {
		h.T.Fatalf("put task %s/%s: %v", spec.Kind, spec.Ref, err)
	}
	h.nudge()
}

// nudge makes the harness's engines look for due work now (the harness changed the task table
// behind their backs).
func (h *Harness) nudge() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, e := range h.engines {
		e.NudgeAll()
	}
}

// Task is kind/ref's task as the dispatcher sees it; ok is false when there is none.
func (h *Harness) Task(kind, ref string) (store.Task, bool) {
	h.T.Helper()
	t, err := h.DB.Task(context.Background(), kind, ref)
	if errors.Is(err, store.ErrNotFound) {
		return store.Task{}, false
	}
	if err != nil {
		h.T.Fatalf("task %s/%s: %v", kind, ref, err)
	}
	return t, true
}

// DueNow makes kind/ref's task due now: its wait passed, or — while an instance holds it — its
// claim expired, as if the holder had crashed a lease ago.
func (h *Harness) DueNow(kind, ref string) {
	h.T.Helper()
	if _, err := h.DB.Raw().Exec("UPDATE task SET due_at = '2000-01-01 00:00:00' WHERE kind = ? AND ref = ?", kind, ref); err != nil {
		h.T.Fatalf("make %s/%s due: %v", kind, ref, err)
	}
	h.nudge()
}

// Expire ends kind/ref's claim as a lease that ran out without renewal ends it — its holder
// stalled: a new epoch, so the holder's renewals and late writes are fenced out whenever they
// come, and due now for any instance's dispatcher. One statement: DueNow alone leaves a live
// holder its claim, and a renewal of the holder's before another instance claimed the task put
// its due time back in the future.
func (h *Harness) Expire(kind, ref string) {
	h.T.Helper()
	res, err := h.DB.Raw().Exec("UPDATE task SET epoch = epoch + 1, owner = NULL, due_at = '2000-01-01 00:00:00' WHERE kind = ? AND ref = ?", kind, ref)
	if err == nil {
		var n int64
		if n, err = res.RowsAffected(); err == nil && n != 1 {
			err = fmt.Errorf("%d rows", n)
		}
	}
	if err != nil {
		h.T.Fatalf("expire the claim of %s/%s: %v", kind, ref, err)
	}
	h.nudge()
}

// TakeOver hands kind/ref's task to owner as another instance's claim would once the holder's
// lease had run out: a new epoch (the running attempt is fenced out) and a lease that outlasts
// the test. One statement, so no instance of the test ever sees the task due in between (a
// test that made it due first and then claimed it left a window in which the holder's own
// dispatcher took it back). It returns an error rather than failing the test: a step's code
// calls it, on an engine's goroutine.
func (h *Harness) TakeOver(kind, ref, owner string) error {
	res, err := h.DB.Raw().Exec("UPDATE task SET epoch = epoch + 1, owner = ?, due_at = '2999-01-01 00:00:00' WHERE kind = ? AND ref = ?", owner, kind, ref)
	if err != nil {
		return fmt.Errorf("take over %s/%s: %w", kind, ref, err)
	}
	if n, err := res.RowsAffected(); err != nil || n != 1 {
		return fmt.Errorf("take over %s/%s: %d rows, %v", kind, ref, n, err)
	}
	return nil
}

// WaitGone waits until kind/ref has no task any more (its work ended).
func (h *Harness) WaitGone(kind, ref string) {
	h.T.Helper()
	testkit.Eventually(h.T, fmt.Sprintf("task %s/%s to end", kind, ref), func() bool {
		_, err := h.DB.Task(context.Background(), kind, ref)
		return errors.Is(err, store.ErrNotFound)
	})
}

// NoOrphans fails the test when the database holds in-flight work without its task (a request
// or a batch nobody would ever run): call it from a Cleanup, after the test's instances stopped.
func (h *Harness) NoOrphans() {
	h.T.Helper()
	if ops, bs, err := h.DB.Orphans(context.Background(), 10); err == nil && len(ops)+len(bs) > 0 {
		h.T.Errorf("in-flight work without a task at the end of the test: requests %+v, batches %+v", ops, bs)
	}
}

// ClockPast waits until the database clock is past the time query returns (a MAX(created_at),
// say): a claim or a round takes the rows written strictly before its now, and SQLite's clock
// has milliseconds. A query that finds no time returns at once.
func (h *Harness) ClockPast(query string, args ...any) {
	h.T.Helper()
	var raw sql.NullString
	if err := h.DB.Raw().QueryRowContext(context.Background(), query, args...).Scan(&raw); err != nil {
		h.T.Fatalf("%s: %v", query, err)
	}
	if !raw.Valid || raw.String == "" {
		return
	}
	last, err := time.Parse("2006-01-02 15:04:05.999999999", raw.String)
	if err != nil {
		h.T.Fatalf("parse %q: %v", raw.String, err)
	}
	testkit.Eventually(h.T, "the database clock to pass "+raw.String, func() bool {
		now, err := h.DB.Now(context.Background())
		return err == nil && now.After(last)
	})
}
