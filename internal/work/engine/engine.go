// Package engine runs bindery's durable work (docs/architecture.md, "durable execution"). Every
// unit of in-flight work — a request's current step, a batch — is a row of table task with the
// time it must next run, on the database clock. A dispatcher on every instance claims due work by
// compare-and-set on the row's fencing epoch, runs one bounded action (one remote call, or one
// poll check), records the outcome and the next due time in one transaction fenced on that epoch,
// and lets go. No worker ever waits for CI: waiting is the row's due time.
//
// Work runs in lanes, each with its own workers on each instance, so that no number of batches
// in CI delays an application's first step. A claim's due time is its expiry: the work of an
// instance that dies falls due again by itself and any instance resumes it — every step reads
// the remote state first, so a re-run is safe.
//
// The engine classifies what a step returns, once for every kind of work:
//   - the step's context ended (shutdown, a lost claim): nothing is written (a clean shutdown
//     only gives the claim back, so another instance need not wait for it to expire);
//   - store.ErrPreempted (the fence, or a guarded business write, found someone else moved the
//     work on): the claim is released and the next run reads afresh;
//   - a dependency that did not answer (Unavailable, a temporary *outbound.Error, a database
//     conflict): due again after a backoff, at least as long as a Retry-After asked;
//   - anything else, a panic included, and a transient failure the kind gives up on: the kind's
//     declared failure, written under the fence.
package engine

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"bindery/internal/platform/metric"
	"bindery/internal/remote/outbound"
	"bindery/internal/vocab/state"
	"bindery/internal/work/service"
	"bindery/store"
)

// Lanes: a request's first steps (the approval ticket, a legacy MR's creation), everything else
// of requests and batches (pipeline polls, merges, settlements, batches), and telling people
// (routing events, delivering them) have separate budgets: no slow receiver of a notification
// delays a request's step.
const (
	LaneFirst      = "first"
	LaneBackground = "background"
	LaneNotify     = state.NotifyLane
)

// Kind is the code that runs the tasks of one kind.
type Kind struct {
	Name string
	// Run does one bounded action of r.Task's step and records the outcome with r.Next or
	// r.Finish (returning nil without either is a bug, handled as a failure). An error it returns
	// is classified by the engine (see the package comment).
	Run func(ctx context.Context, r *Run) error
	// Fail records the declared failure of the step for err and ends with r.Finish or r.Next.
	Fail func(ctx context.Context, r *Run, err error) error
	// Retry is when a step that failed on an unavailable dependency runs again: the wait before
	// the next attempt (r.Task.Failures attempts failed before this one), or false to give up
	// and Fail. Nil: Backoff(1s, 1m) forever.
	Retry func(r *Run, err error) (time.Duration, bool)
	// Lease is how long a claim of this kind lasts without renewal (default 2m).
	Lease func() time.Duration
}

// Options configure New.
type Options struct {
	DB       *store.DB
	Log      *slog.Logger
	Recorder *metric.Recorder // nil: no metrics
	Instance string           // the claims' owner
	// Lanes is how many workers each lane has on this instance (missing lanes: 1).
	Lanes map[string]int
	// IdlePoll is how often an idle lane looks for work that other instances made due (default
	// 1s): the longest an outside wake waits on an instance that did not receive it.
	IdlePoll time.Duration
}

// Engine dispatches due tasks to the kinds that run them.
type Engine struct {
	db       *store.DB
	log      *slog.Logger
	rec      *metric.Recorder
	instance string
	idle     time.Duration
	kinds    map[string]*Kind
	lanes    map[string]*lane

	// bg runs the lanes' dispatchers: their context ends when Stop begins, and nothing new is
	// claimed from then on.
	bg service.Base
	// ctx is every action's parent: an action outlives the dispatcher that started it (Stop lets
	// it finish), and ends when Stop's deadline passes or Kill.
	ctx    context.Context
	cancel context.CancelFunc
	runs   sync.WaitGroup
	// killed: a crash, not a shutdown; running actions give nothing back.
	killed atomic.Bool
}

type lane struct {
	name    string
	size    int
	running atomic.Int32
	nudge   chan struct{} // work of this lane became due on this instance
	freed   chan struct{} // a worker of this lane finished
}

// New returns an engine; Register the kinds, then Start it.
func New(o Options) *Engine {
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.IdlePoll <= 0 {
		o.IdlePoll = time.Second
	}
	ctx, cancel := context.WithCancel(context.Background())
	e := &Engine{db: o.DB, log: o.Log.With("component", "engine"), rec: o.Recorder, instance: o.Instance, idle: o.IdlePoll,
		kinds: map[string]*Kind{}, lanes: map[string]*lane{}, ctx: ctx, cancel: cancel}
	for _, name := range []string{LaneFirst, LaneBackground, LaneNotify} {
		size := o.Lanes[name]
		if size < 1 {
			size = 1
		}
		e.lanes[name] = &lane{name: name, size: size, nudge: make(chan struct{}, 1), freed: make(chan struct{}, 1)}
	}
	return e
}

// Register adds a kind. Call before Start.
func (e *Engine) Register(k Kind) {
	if k.Lease == nil {
		k.Lease = func() time.Duration { return 2 * time.Minute }
	}
	e.kinds[k.Name] = &k
}

// Instance is the owner name of this engine's claims.
func (e *Engine) Instance() string { return e.instance }

// Running is how many actions of lane run on this instance now.
func (e *Engine) Running(lane string) int {
	if l := e.lanes[lane]; l != nil {
		return int(l.running.Load())
	}
	return 0
}

// Start runs a dispatcher per lane until Stop (or until ctx ends, which stops dispatching the
// same way; the actions then running go on until Stop's deadline or Kill).
func (e *Engine) Start(ctx context.Context) error {
	if _, ok, err := e.bg.StartInit(ctx); !ok {
		return err
	}
	for _, l := range e.lanes {
		e.bg.Go(func(ctx context.Context) { e.dispatch(ctx, l) })
	}
	return nil
}

// Nudge tells this instance's dispatcher of lane that work there became due now (an
// application, a wake it received): it looks at once instead of at its next idle poll.
func (e *Engine) Nudge(laneName string) {
	if l := e.lanes[laneName]; l != nil {
		signal(l.nudge)
	}
}

// NudgeAll is Nudge for every lane.
func (e *Engine) NudgeAll() {
	for name := range e.lanes {
		e.Nudge(name)
	}
}

func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// Stop ends dispatching, lets the running actions finish until ctx ends, then cancels them: an
// action cut short writes nothing and its work resumes on any instance. The claims of actions
// that finished without an outcome are given back. It returns once the dispatchers and every
// action have ended — past ctx's end too, as a cancelled action only gives its claim back (at
// most a couple of seconds) — so the database may close after it. Safe before Start (the engine
// then never starts) and more than once.
func (e *Engine) Stop(ctx context.Context) error {
	e.bg.StopInit()
	done := make(chan struct{})
	go func() {
		// The dispatchers first: once they ended, nothing adds to runs.
		_ = e.bg.Wait(context.Background())
		e.runs.Wait()
		close(done)
	}()
	select {
	case <-done:
		e.cancel()
		return nil
	case <-ctx.Done():
		e.cancel()
		<-done
		return fmt.Errorf("engine: actions still running at shutdown were cancelled: %w", ctx.Err())
	}
}

// Kill stops the engine the way a killed process stops: every running action's context ends at
// once and nothing more is written for it, not even the claim given back (tests of recovery).
func (e *Engine) Kill() {
	e.killed.Store(true)
	e.cancel()
	e.bg.StopInit()
	_ = e.bg.Wait(context.Background())
	e.runs.Wait()
}

// dispatch is one lane's loop until quit ends: claim as much due work as there are free
// workers, run it, and sleep until the next due time, a nudge, a free worker or the idle poll.
func (e *Engine) dispatch(quit context.Context, l *lane) {
	var errAt time.Time
	for quit.Err() == nil {
		wait := e.idle
		free := l.size - int(l.running.Load())
		if free > 0 {
			more, next, err := e.fill(quit, l, free)
			switch {
			case err != nil:
				if time.Since(errAt) > time.Minute { // the database is down: say so once a minute
					e.log.Warn("dispatcher cannot read due work; retrying", "lane", l.name, "error", err)
					errAt = time.Now()
				}
			case more:
				continue
			case next > 0 && next < wait:
				wait = next
			}
		}
		t := time.NewTimer(wait)
		select {
		case <-quit.Done():
		case <-l.nudge:
		case <-l.freed:
		case <-t.C:
		}
		t.Stop()
	}
}

// fill claims up to free due tasks of lane and starts them, until quit ends. more: it filled
// every free worker and more may be due; next: how long until the next task falls due when none
// was left. Its reads and claims run under the actions' context, not quit's: a claim cut in
// its commit by a stop would leave the task claimed and unrun until its lease expired.
func (e *Engine) fill(quit context.Context, l *lane, free int) (more bool, next time.Duration, err error) {
	ctx := e.ctx
	due, err := e.db.DueTasks(ctx, l.name, 2*free+2)
	if err != nil {
		return false, 0, err
	}
	if len(due) == 0 {
		d, ok, err := e.db.NextDue(ctx, l.name)
		if err != nil || !ok {
			return false, 0, err
		}
		return false, max(d, time.Millisecond), nil
	}
	// Several instances read the same head of the queue: each starts at a random place in it,
	// so their compare-and-sets mostly hit different rows.
	start := rand.IntN(len(due))
	claimed := 0
	for i := range due {
		if claimed == free || quit.Err() != nil {
			break
		}
		t := due[(start+i)%len(due)]
		k := e.kinds[t.Kind]
		if k == nil {
			e.park(ctx, t)
			continue
		}
		ct, err := e.db.ClaimTask(ctx, t, e.instance, k.Lease())
		if errors.Is(err, store.ErrPreempted) {
			e.rec.Inc("bindery_engine_claims_total", "lane", l.name, "outcome", "lost")
			continue
		}
		if err != nil {
			return false, 0, err
		}
		e.rec.Inc("bindery_engine_claims_total", "lane", l.name, "outcome", "claimed")
		e.rec.Observe("bindery_engine_lag_seconds", t.Overdue.Seconds(), "lane", l.name)
		claimed++
		l.running.Add(1)
		e.runs.Add(1)
		go e.run(l, k, ct)
	}
	return claimed == free && len(due) > claimed, 0, nil
}

// park puts aside a task of a kind this instance does not know (a newer version wrote it): it
// claims it and gives it back due in a while, with a note, so it does not block the queue's head.
func (e *Engine) park(ctx context.Context, t store.Task) {
	ct, err := e.db.ClaimTask(ctx, t, e.instance, time.Minute)
	if err != nil {
		return
	}
	e.log.Error("task of an unknown kind; left for an instance that knows it", "kind", t.Kind, "ref", t.Ref, "step", t.Step)
	_ = e.db.InTx(ctx, func(tx *store.Tx) error {
		return tx.AdvanceTask(ctx, ct, store.TaskNext{In: parkFor, Wait: store.WaitKeep, Checks: ct.Checks, Failures: ct.Failures,
			Note: "no instance here runs tasks of kind " + t.Kind})
	})
}

// errClaimLost ends an action whose claim another holder took.
var errClaimLost = errors.New("the task's claim was taken by another holder")

// errTooLong ends an action that outlived its lease: an outbound call's own deadline is far
// shorter, so something is stuck. It counts as an unavailable dependency (tried again with
// backoff, the kind gives up in time), and its claim is no longer renewed — a wedged action that
// ignores its context loses the work to another holder, and its late writes are fenced out.
var errTooLong = errors.New("the action outlived its lease")

// run is one action: the claim renewed while it runs, the panic guard, the classification.
func (e *Engine) run(l *lane, k *Kind, t store.Task) {
	defer func() {
		l.running.Add(-1)
		signal(l.freed)
		e.runs.Done()
	}()
	log := e.log.With("kind", t.Kind, "ref", t.Ref, "step", t.Step, "epoch", t.Epoch)
	r := &Run{Task: t, e: e, kind: k, Log: log}
	ctx, cancel := context.WithCancelCause(e.ctx)
	defer cancel(nil)
	ctx, stop := context.WithTimeoutCause(ctx, k.Lease(), errTooLong)
	defer stop()
	stopRenew := e.renew(ctx, cancel, r)
	start := time.Now()
	err := guard(ctx, k.Run, r)
	stopRenew()
	outcome := e.settle(ctx, r, err)
	e.rec.Inc("bindery_engine_actions_total", "kind", t.Kind, "step", t.Step, "outcome", outcome)
	e.rec.Since("bindery_engine_action_seconds", start, "kind", t.Kind, "step", t.Step)
}

// guard runs fn and turns a panic into an error.
func guard(ctx context.Context, fn func(context.Context, *Run) error, r *Run) (err error) {
	defer func() {
		if p := recover(); p != nil {
			r.Log.Error("CRITICAL: step panicked", "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
			err = fmt.Errorf("internal error: the step panicked: %v", p)
		}
	}()
	return fn(ctx, r)
}

// renew extends the claim every third of the lease while the action runs; a claim found taken
// cancels the action.
func (e *Engine) renew(ctx context.Context, cancel context.CancelCauseFunc, r *Run) (stop func()) {
	ttl := r.kind.Lease()
	// The claim as taken: the action may change its own copy meanwhile (a legacy merge records
	// the slot it took), and the renewal names the claim only (its id and epoch).
	task := r.Task
	done := make(chan struct{})
	var once sync.Once
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		tick := time.NewTicker(ttl / 3)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			err := e.db.RenewTask(ctx, task, ttl)
			switch {
			case errors.Is(err, store.ErrReleased):
				return // the step's outcome is written: the claim is over
			case errors.Is(err, store.ErrPreempted):
				cancel(errClaimLost)
				return
			case err != nil && ctx.Err() == nil:
				r.Log.Warn("claim not renewed; retrying", "error", err)
			}
		}
	}()
	return func() { once.Do(func() { close(done); <-stopped }) }
}

// settle classifies what the action returned and writes what it means; it returns the outcome's
// name for the metric.
func (e *Engine) settle(ctx context.Context, r *Run, err error) string {
	t := r.Task
	if errors.Is(context.Cause(ctx), errTooLong) && e.ctx.Err() == nil && !r.done {
		// Not a shutdown: the action was cut at its lease. The outcome is written with a fresh
		// context, under the same fence.
		ctx, err = context.WithoutCancel(ctx), Unavailable(fmt.Errorf("%w (%s): %v", errTooLong, r.kind.Lease(), err))
	}
	switch {
	case ctx.Err() != nil:
		if errors.Is(context.Cause(ctx), errClaimLost) {
			r.Log.Info("step stopped: its task was taken by another holder", "error", err)
			return "lost"
		}
		if !e.killed.Load() && !r.done {
			// A clean shutdown: give the claim back so that another instance need not wait
			// for it to expire. The step's outcome was not written; its next run re-reads.
			bctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
			_ = e.db.ReleaseTask(bctx, t, 0)
			cancel()
		}
		r.Log.Info("step interrupted by shutdown; it resumes on any instance", "error", err)
		return "interrupted"
	case err == nil && r.done:
		return "ok"
	case err == nil:
		err = fmt.Errorf("internal error: step %s of %s ended without an outcome", t.Step, t.Kind)
	case errors.Is(err, store.ErrPreempted):
		r.Log.Info("step stopped: the work moved on without it", "error", err)
		if !r.done {
			if rerr := e.db.ReleaseTask(ctx, t, 0); rerr == nil {
				e.Nudge(t.Lane)
			}
		}
		return "preempted"
	case r.done:
		// The outcome was written and something after it failed: the outcome stands.
		r.Log.Warn("step failed after its outcome was recorded", "error", err)
		return "ok"
	}
	if Transient(err) {
		wait, again := Backoff(time.Second, time.Minute)(r, err)
		if r.kind.Retry != nil {
			wait, again = r.kind.Retry(r, err)
		}
		if again {
			wait = max(wait, outbound.RetryAfterOf(err))
			werr := e.db.InTx(ctx, func(tx *store.Tx) error {
				return tx.AdvanceTask(ctx, t, store.TaskNext{In: wait, Wait: store.WaitKeep, Checks: t.Checks, Failures: t.Failures + 1,
					Note: fmt.Sprintf("a dependency is unavailable (%s); retrying in %s", Public(err), wait.Round(time.Millisecond))})
			})
			if werr != nil && !errors.Is(werr, store.ErrPreempted) {
				r.Log.Warn("retry not recorded; the claim expires and the step runs again", "error", werr, "step_error", err)
			}
			r.Log.Info("step failed on an unavailable dependency; retrying", "attempt", t.Failures+1, "wait", wait, "error", err)
			return "retry"
		}
	}
	if ferr := guard(ctx, func(ctx context.Context, r *Run) error { return r.kind.Fail(ctx, r, err) }, r); ferr != nil {
		if errors.Is(ferr, store.ErrPreempted) {
			r.Log.Info("step failed, but the work moved on before its failure was written", "error", err)
			return "preempted"
		}
		r.Log.Error("step failure not recorded; the claim expires and the step runs again", "error", err, "record", ferr)
		return "error"
	}
	r.Log.Warn("step failed", "error", err)
	return "failed"
}

// Run is one action of a task: the task as claimed, and how to record the outcome.
type Run struct {
	Task store.Task
	Log  *slog.Logger
	// State is the kind's own data about this run (what its Fail needs to know: the rows the run
	// read, whose versions guard the failure's write).
	State any
	job   any // the kind's typed job (Def.Kind), for its Fail and Retry
	e     *Engine
	kind  *Kind
	done  bool
}

// DB is the engine's database.
func (r *Run) DB() *store.DB { return r.e.db }

// Next records the outcome of the action and what the task does next, in one transaction whose
// first statement is the fenced task write; write (optional) adds the business writes. Work
// due at once is started on this instance without waiting for a dispatcher's look.
func (r *Run) Next(ctx context.Context, n store.TaskNext, write func(tx *store.Tx) error) error {
	if err := r.commit(ctx, func(tx *store.Tx) error { return tx.AdvanceTask(ctx, r.Task, n) }, write); err != nil {
		return err
	}
	if n.In <= 0 {
		r.e.Nudge(cmp.Or(n.Lane, r.Task.Lane))
	}
	return nil
}

// Finish records the outcome of the action and ends the task (deleted under the fence); write
// (optional) adds the business writes, in the same transaction.
func (r *Run) Finish(ctx context.Context, write func(tx *store.Tx) error) error {
	return r.commit(ctx, func(tx *store.Tx) error { return tx.FinishTask(ctx, r.Task) }, write)
}

// HandedOver records that the action's outcome was written by an outside transaction — the one
// a webhook or callback runs, which replaced or ended this task under a new epoch: nothing is
// left to write under this run's fence.
func (r *Run) HandedOver() { r.done = true }

// Park puts aside work this version cannot run (a step a newer version wrote): due again in a
// while, with why, instead of failing it or running it wrong; logged as an error.
func (r *Run) Park(ctx context.Context, why string) error {
	r.Log.Error("work parked: this instance cannot run it", "why", why)
	next := store.TaskNext{In: parkFor, Wait: store.WaitKeep, Checks: r.Task.Checks, Failures: r.Task.Failures, Note: why}
	return r.commit(ctx, func(tx *store.Tx) error { return tx.AdvanceTask(ctx, r.Task, next) }, nil)
}

// parkFor is how long parked work waits before an instance looks at it again.
const parkFor = 5 * time.Minute

// Await ends the claim without an outcome to wait for slot, which another task holds: the end
// of the holder makes this task due at once (safety: due again after it anyway, should that
// wake be missed). The next run starts the step over.
func (r *Run) Await(ctx context.Context, slot string, safety time.Duration, note string) error {
	next := store.TaskNext{In: safety, Wait: store.WaitKeep, Checks: r.Task.Checks, Failures: r.Task.Failures, Note: note, WaitsFor: slot}
	return r.commit(ctx, func(tx *store.Tx) error { return tx.AdvanceTask(ctx, r.Task, next) }, nil)
}

// commit runs the fenced task write, then write, in one transaction. A failing database is
// Unavailable (the step is tried again); a fence that no longer holds stays store.ErrPreempted;
// a transition the tables refuse (a bug) stays what it is, so the step's failure is written.
func (r *Run) commit(ctx context.Context, fence, write func(tx *store.Tx) error) error {
	err := r.e.db.InSharedTx(ctx, func(tx *store.Tx) error {
		if err := fence(tx); err != nil {
			return err
		}
		if write != nil {
			return write(tx)
		}
		return nil
	})
	var illegal *state.ErrIllegalTransition
	var illegalBatch *state.ErrIllegalBatchTransition
	switch {
	case err == nil:
		r.done = true
		return nil
	case errors.As(err, &illegal), errors.As(err, &illegalBatch):
		return err
	}
	return Unavailable(err)
}

// Stages is a staged polling schedule: Short intervals for the first ShortCount checks, then
// Long ones, until Timeout after the wait started. Most pipelines and rebases finish quickly, so
// early checks are cheap and frequent; slow ones are not hammered.
type Stages struct {
	Short      time.Duration
	ShortCount int
	Long       time.Duration
	Timeout    time.Duration
}

// Poll is the outcome of a check that found no answer yet: the same wait's next check by the
// stages (the check count is data, so the schedule survives any restart), or timedOut when the
// wait has lasted Timeout — the check that found it was the last look.
func (r *Run) Poll(st Stages, note string) (next store.TaskNext, timedOut bool) {
	t := r.Task
	if t.Waited >= st.Timeout {
		return store.TaskNext{}, true
	}
	wait := st.Long
	if t.Checks < st.ShortCount {
		wait = st.Short
	}
	return store.TaskNext{In: wait, Wait: store.WaitKeep, Checks: t.Checks + 1, Note: note}, false
}

// Unavailable marks err as a dependency that did not answer (the database, mostly): the step is
// retried after a backoff, never failed for it. A store.ErrPreempted inside stays one.
func Unavailable(err error) error {
	if err == nil || errors.Is(err, store.ErrPreempted) || errors.As(err, new(unavailable)) {
		return err
	}
	return unavailable{err}
}

type unavailable struct{ err error }

func (e unavailable) Error() string { return e.err.Error() }
func (e unavailable) Unwrap() error { return e.err }

// Transient reports errors that say nothing about the work: a dependency that did not answer —
// Unavailable, a temporary *outbound.Error (no answer, timeout, open breaker, 429, 5xx), a
// database conflict.
func Transient(err error) bool {
	if errors.Is(err, store.ErrPreempted) {
		return false
	}
	var oe *outbound.Error
	if errors.As(err, &oe) {
		return oe.Temporary()
	}
	return errors.As(err, new(unavailable)) || errors.Is(err, store.ErrRetry)
}

// Public is what people may read of a transient error: the classified cause of an outbound
// failure (never upstream text), or which dependency failed; the rest goes to the log.
func Public(err error) string {
	var oe *outbound.Error
	switch {
	case errors.As(err, &oe):
		return oe.Error()
	case errors.Is(err, store.ErrRetry):
		return "database conflict (deadlock or busy)"
	case errors.As(err, new(unavailable)):
		return "database error (details in the server log)"
	}
	return "unexpected error (details in the server log)"
}

// Backoff is a Retry that waits base, then doubles up to max, forever.
func Backoff(base, max time.Duration) func(*Run, error) (time.Duration, bool) {
	return func(r *Run, _ error) (time.Duration, bool) {
		return backoff(base, max, r.Task.Failures), true
	}
}

// Attempts is a Retry that waits base, doubling, and gives up after n attempts in all.
func Attempts(n int, base time.Duration) func(*Run, error) (time.Duration, bool) {
	return func(r *Run, _ error) (time.Duration, bool) {
		return backoff(base, time.Hour, r.Task.Failures), r.Task.Failures+1 < n
	}
}

func backoff(base, max time.Duration, failures int) time.Duration {
	d := base
	for range min(failures, 30) {
		d *= 2
		if d >= max {
			return max
		}
	}
	return min(d, max)
}

// Gauges registers the lanes' gauges on set: workers and running actions per lane, on this
// instance (what waits is in the database: the ops console reads it there).
func (e *Engine) Gauges(set *metrics.Set) {
	if set == nil {
		return
	}
	for name, l := range e.lanes {
		set.NewGauge(`bindery_engine_workers{lane="`+name+`"}`, func() float64 { return float64(l.size) })
		set.NewGauge(`bindery_engine_running{lane="`+name+`"}`, func() float64 { return float64(l.running.Load()) })
	}
}
