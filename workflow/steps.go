package workflow

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"time"

	"bindery/change"
	"bindery/outbound"
	"bindery/store"
	"bindery/worker"
)

// A single-request step (an approval ticket, the legacy flow's MR, its merge) runs on the worker
// pool under the operation's lease. Every step declares its failure state; the wrapper writes it
// on any error or panic the step did not turn into a state itself, so that no exit path leaves a
// request "in progress" without an owner. Exceptions, where nothing is written:
//   - the context was cancelled by a shutdown: the lease expires and the sweep resumes the step
//     on any instance (remote state first makes the re-run safe);
//   - the lease was lost (another instance took the step over) or the request was moved by
//     someone else (ErrPreempted): the write would be stale.

// stepKind names a step and declares its failure.
type stepKind struct {
	name     string
	failTo   store.BindingStatus
	failStep store.Step
}

var (
	stepOpenTicket = stepKind{"open approval ticket", store.StatusCreateFailed, store.StepApprovalSendFailed}
	stepCreateMR   = stepKind{"create merge request", store.StatusCreateFailed, store.StepCreateFailed}
	stepMergeMR    = stepKind{"merge merge request", store.StatusHandleFailed, store.StepHandleMergeFailed}
)

// failure is a failure a step recognised: the wrapper writes this state instead of the declared
// one (pipeline failed, rebase conflict, MR closed outside bindery, …).
type failure struct {
	to   store.BindingStatus
	step store.Step
	err  error
}

func (f *failure) Error() string { return fmt.Sprintf("%s: %v", f.step, f.err) }
func (f *failure) Unwrap() error { return f.err }

func failed(to store.BindingStatus, step store.Step, err error) error {
	return &failure{to: to, step: step, err: err}
}

// stepRun is one run of a step: the request as this run last wrote it, so that every write —
// the failure included — is guarded on the version this run knows.
type stepRun struct {
	w   *Workflow
	req store.Request
}

// move writes a transition and remembers the result.
func (r *stepRun) move(ctx context.Context, c store.Change) error {
	next, err := r.w.db.Transition(ctx, r.req, c)
	if err != nil {
		return err
	}
	r.req = next
	return nil
}

// errLeaseLost cancels a step whose lease renewal found another holder.
var errLeaseLost = errors.New("operation lease lost to another instance")

// handOff queues a step on the pool; the step takes the operation's lease first (the sweep
// hands off steps whose lease expired), then checks that the request still needs it: another
// sweeper may have taken the same expired lease, finished the step and released the lease
// before this one got to it. A refusal is returned: the caller decides what it means (a new
// application persists a failure; the sweep simply tries again later).
func (w *Workflow) handOff(operationID string, k stepKind, fn func(ctx context.Context, r *stepRun) error) error {
	return w.pool.Submit(k.name+" "+operationID, func(ctx context.Context) { w.runStep(ctx, operationID, k, fn, heldLease{}) })
}

// heldLease is a lease the hand-off's own transition wrote for this instance: ttl long, from a
// moment after written (this process's clock, taken before the write).
type heldLease struct {
	written time.Time
	ttl     time.Duration
}

// fresh reports whether at least half of the lease is certainly left: the database wrote its
// end after written, and only elapsed time is compared, never the two clocks.
func (h heldLease) fresh() bool {
	return !h.written.IsZero() && time.Since(h.written) < h.ttl/2
}

// handOffHeld is handOff for a step whose lease the caller just wrote with the transition that
// hands it off (at written, for ttl). The step starts without taking the lease again while at
// least half of it is left: that transition already bumped the version, so a previous holder
// fails its writes, and taking the lease would only cost a transaction per step (a quarter of
// the statements of an application, see BENCHMARKS.md). A step that waited longer in the queue
// takes it as handOff's does.
func (w *Workflow) handOffHeld(operationID string, written time.Time, ttl time.Duration, k stepKind, fn func(ctx context.Context, r *stepRun) error) error {
	held := heldLease{written: written, ttl: ttl}
	return w.pool.Submit(k.name+" "+operationID, func(ctx context.Context) { w.runStep(ctx, operationID, k, fn, held) })
}

// rejectHandOff persists a refused hand-off so that polling shows a failure, never "processing"
// forever. A pool that is shutting down is not a failure of the request: the lease written with
// the state stays, expires, and the sweep of any instance resumes the step.
func (w *Workflow) rejectHandOff(ctx context.Context, cur store.Request, err error, to store.BindingStatus, step store.Step) (store.Request, error) {
	if errors.Is(err, worker.ErrPoolStopped) {
		w.log.WarnContext(ctx, "hand-off refused by a stopping pool; the sweep resumes the step", "operation", cur.Operation.OperationID)
		return cur, nil
	}
	w.log.WarnContext(ctx, "hand-off rejected; the request is marked failed", "operation", cur.Operation.OperationID, "err", err)
	next, werr := w.db.Transition(ctx, cur, store.Change{To: to, Step: step, Note: "The workers were all busy; an operator can retry.", ReleaseLease: true})
	if werr != nil {
		return cur, fmt.Errorf("persist rejected hand-off of %s: %w", cur.Operation.OperationID, werr)
	}
	return next, nil
}

// runStep runs fn under the operation's lease with the failure guard. held is the lease the
// hand-off's transition wrote, if any (see handOffHeld).
func (w *Workflow) runStep(ctx context.Context, operationID string, k stepKind, fn func(ctx context.Context, r *stepRun) error, held heldLease) {
	log := w.log.With("operation", operationID, "step", k.name)
	ttl := w.cfg.Current().StepLeaseTTL()
	if !held.fresh() {
		// Taking the lease bumps the version: a previous holder that comes back fails its writes.
		if _, err := w.db.AcquireOperationLease(ctx, operationID, w.instance, ttl); err != nil {
			if !errors.Is(err, store.ErrPreempted) && ctx.Err() == nil {
				log.Error("step not started: lease", "err", err)
			}
			return // held by a live instance (it runs the step), unknown, or shutting down
		}
	}
	req, err := w.db.Request(ctx, operationID)
	// A sweep's hand-off (no lease written with it) may come after another instance finished
	// the step: the request's state says whether it is still the step to run.
	finished := false
	if err == nil && held.written.IsZero() {
		now, _ := w.currentStep(req.Operation)
		finished = now.name != k.name
	}
	if err != nil || finished || !req.Current() || req.Operation.LeaseOwner != w.instance {
		// Not ours any more (moved on, or its lease released or taken over since the hand-off):
		// a release by another owner's name changes nothing.
		if err != nil && ctx.Err() == nil {
			log.Error("step not started: read", "err", err)
		}
		_ = w.db.ReleaseOperationLease(context.WithoutCancel(ctx), operationID, w.instance)
		return
	}
	run := &stepRun{w: w, req: req}

	sctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	done := make(chan struct{})
	defer close(done)
	go w.renewLease(sctx, operationID, ttl, done, cancel)

	err = w.guard(sctx, run, fn)
	switch {
	case err == nil:
		return
	case ctx.Err() != nil:
		log.Info("step interrupted by shutdown; the sweep resumes it once the lease expires", "err", err)
		return
	case errors.Is(context.Cause(sctx), errLeaseLost):
		log.Info("step stopped: its lease was taken over by another instance", "err", err)
		return
	case errors.Is(err, store.ErrPreempted):
		log.Info("step stopped: the request moved on without it", "err", err)
		_ = w.db.ReleaseOperationLease(ctx, operationID, w.instance)
		return
	}
	to, step := k.failTo, k.failStep
	var f *failure
	if errors.As(err, &f) {
		to, step = f.to, f.step
	}
	werr := run.move(ctx, store.Change{To: to, Step: step, Note: noteFor(err), ReleaseLease: true})
	switch {
	case werr == nil:
		log.Warn("step failed", "err", err, "status", to, "failStep", step)
	case errors.Is(werr, store.ErrPreempted):
		// Another instance took the step over while this run failed (taking the lease bumped the
		// version), or a callback moved the request on: the failure is of a run that no longer
		// counts, and the takeover is the recovery working — not an error, nothing to write.
		log.Info("step stopped: the request moved on before this run's failure was written", "err", err)
		_ = w.db.ReleaseOperationLease(ctx, operationID, w.instance)
	default:
		log.Error("step failure not recorded", "err", werr, "stepErr", err, "status", to, "failStep", step)
	}
}

// guard runs fn and turns a panic into an error, so the declared failure is written for it too.
func (w *Workflow) guard(ctx context.Context, run *stepRun, fn func(context.Context, *stepRun) error) (err error) {
	defer func() {
		if p := recover(); p != nil {
			w.log.ErrorContext(ctx, "step panicked", "operation", run.req.Operation.OperationID, "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
			err = fmt.Errorf("step panicked: %v", p)
		}
	}()
	return fn(ctx, run)
}

// renewLease extends the lease while the step runs; losing it cancels the step.
func (w *Workflow) renewLease(ctx context.Context, operationID string, ttl time.Duration, done <-chan struct{}, cancel context.CancelCauseFunc) {
	t := time.NewTicker(ttl / 3)
	defer t.Stop()
	for {
		select {
		case <-done:
			return
		case <-ctx.Done():
			return
		case <-t.C:
		}
		err := w.db.RenewOperationLease(ctx, operationID, w.instance, ttl)
		switch {
		case errors.Is(err, store.ErrPreempted):
			cancel(errLeaseLost)
			return
		case err != nil && ctx.Err() == nil:
			w.log.Warn("lease renewal failed; retrying", "operation", operationID, "err", err)
		}
	}
}

// noteFor is the failure note operators and the owner see in the timeline: the classified cause
// of an outbound failure or a known step error, never raw upstream text or internals.
func noteFor(err error) string {
	var oe *outbound.Error
	switch {
	case errors.As(err, &oe):
		return "Failed: " + oe.Error() + "."
	case errors.Is(err, change.ErrConflict):
		return "The change conflicts with the target branch even after regenerating it."
	case errors.Is(err, change.ErrMRClosed):
		return "The merge request was closed outside bindery."
	case errors.Is(err, change.ErrPipelineFailed):
		return "The pipeline failed after the branch moved."
	case errors.Is(err, change.ErrInvalidChange):
		return "The rendered file change is invalid: " + err.Error()
	}
	var f *failure
	if errors.As(err, &f) && f.err != nil && errors.Unwrap(f.err) == nil {
		return f.err.Error()
	}
	return "Unexpected error; the details are in the server log."
}
