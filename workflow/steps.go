package workflow

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"bindery/change"
	"bindery/engine"
	"bindery/outbound"
	"bindery/state"
	"bindery/store"
)

// A single request's own steps (the approval ticket, the legacy flow's MR, its merge) are tasks
// of the engine (kind store.TaskRequest, ref = the operationId), written in the transaction of
// the state that needs them. Each run is one bounded action: one call to the approval system,
// one look at a pipeline, one merge action; the outcome and the next due time are written in one
// transaction fenced on the task's epoch, then guarded on the request's version (I6). Every step
// reads the remote state first, so a re-run after a crash, an operator's retry or a lost claim is
// safe. Every step declares its failure state: the engine has it written for any error or panic
// the step did not turn into a state itself — a request is never left "in progress" without work
// due for it.

// The steps (stored as the task's step; never rename one), each with its lane, its declared
// failure, and how it takes an unavailable dependency.
const (
	stepTicket         = "ticket"          // open the approval ticket (both flows)
	stepCreate         = "create"          // legacy: branch, commit and MR
	stepCreatePipeline = "create_pipeline" // legacy: the MR's pipeline, one look per run
	stepApprove        = "approve"         // legacy, after the approval: the reviewer accounts approve
	stepCloseMR        = "close_mr"        // legacy, rejected: close the request's MR
	stepTicketPoll     = "ticket_poll"     // waiting for the decision: ask the approval system now and then
	// change.MergeAttempt, MergeRebasing, MergePipeline, MergeChecking, MergeBlocked: legacy merge,
	// one action per run (MergeBlocked waits for a person, without the project's merge slot)
)

type stepDef struct {
	failTo   state.BindingStatus
	failStep state.Step
	// attempts bounds the runs of a step whose dependency does not answer (0: a polling step,
	// which keeps looking until its wait times out); backoff is the wait before the second.
	attempts int
	backoff  time.Duration
	run      func(w *Workflow, ctx context.Context, r *reqRun) error
}

// ticketAttempts and ticketBackoff: a 5xx or a lost answer from the approval system is often
// momentary (0.1s, 0.2s, 0.4s later it answers), and APPROVAL_SEND_FAILED waits for an operator.
// Retrying is safe: the approval system opens one ticket per operationId.
const (
	ticketAttempts = 4
	ticketBackoff  = 100 * time.Millisecond
	// mrAttempts: a legacy MR step tries an unavailable GitLab this often before it fails (about
	// a minute and a half with the default poll.short and poll.long).
	mrAttempts = 6
)

var steps map[string]stepDef

func init() { // in init: the step functions themselves read the table
	steps = map[string]stepDef{
		stepTicket:                   {state.StatusCreateFailed, state.StepApprovalSendFailed, ticketAttempts, ticketBackoff, (*Workflow).openTicket},
		stepCreate:                   {state.StatusCreateFailed, state.StepCreateFailed, mrAttempts, 0, (*Workflow).createMR},
		stepCreatePipeline:           {state.StatusCreateFailed, state.StepCreateFailed, 0, 0, (*Workflow).createPipeline},
		stepApprove:                  {state.StatusHandleFailed, state.StepHandleApproveFailed, mrAttempts, 0, (*Workflow).approveMR},
		string(change.MergeAttempt):  {state.StatusHandleFailed, state.StepHandleMergeFailed, mrAttempts, 0, (*Workflow).mergeMR},
		string(change.MergeRebasing): {state.StatusHandleFailed, state.StepHandleMergeFailed, 0, 0, (*Workflow).mergeMR},
		string(change.MergePipeline): {state.StatusHandleFailed, state.StepHandleMergeFailed, 0, 0, (*Workflow).mergeMR},
		string(change.MergeChecking): {state.StatusHandleFailed, state.StepHandleMergeFailed, 0, 0, (*Workflow).mergeMR},
		string(change.MergeBlocked):  {state.StatusHandleFailed, state.StepHandleMergeFailed, 0, 0, (*Workflow).mergeMR},
		stepCloseMR:                  {"", 0, mrAttempts, 0, (*Workflow).closeRejectedMR},
		stepTicketPoll:               {"", 0, 0, 0, (*Workflow).pollTicket},
	}
}

// laneOf is a step's lane: a request's first steps — the approval ticket, a legacy MR's creation —
// run in their own lane, so that no number of batches in CI delays them.
func laneOf(step string) string {
	if step == stepTicket || step == stepCreate {
		return engine.LaneFirst
	}
	return engine.LaneBackground
}

// polls reports the steps that wait for GitLab by the staged schedule.
func polls(step string) bool { return step == stepCreatePipeline || change.MergePhase(step).Polls() }

// reqMemo is what a request's task remembers between runs.
type reqMemo struct {
	Flaky   int    `json:"flaky,omitempty"`   // flaky retries used on the current pipeline wait
	Restart bool   `json:"restart,omitempty"` // an operator's retry: replace a pipeline still running
	Regen   bool   `json:"regen,omitempty"`   // the merge regenerated the branch once already
	Refused int    `json:"refused,omitempty"` // merges GitLab refused in a row
	Ticket  string `json:"ticket,omitempty"`  // the approval ticket's id, once sent
	// Tested: the head whose pipeline passed (the only sha merged); Approved: the head the
	// reviewer accounts approved.
	Tested   string `json:"tested,omitempty"`
	Approved string `json:"approved,omitempty"`
}

func (m reqMemo) encode() *string {
	b, _ := json.Marshal(m)
	s := string(b)
	return &s
}

// reqRun is one run of a request's task: the request as this run last wrote it, so that every
// write — the failure included — is guarded on the version this run knows.
type reqRun struct {
	r    *engine.Run
	req  store.Request
	memo reqMemo
	def  stepDef
}

// requestTask is the task of a request's step, due in `in`.
func requestTask(operationID, step string, in time.Duration, m reqMemo) store.TaskSpec {
	return store.TaskSpec{Kind: state.TaskRequest, Ref: operationID, Lane: laneOf(step), Step: step, In: in, Memo: *m.encode(), Wait: polls(step)}
}

func (w *Workflow) requestKind() engine.Kind {
	return engine.Kind{
		Name: state.TaskRequest,
		Run:  w.runRequest,
		Fail: w.failRequest,
		Retry: func(er *engine.Run, err error) (time.Duration, bool) {
			def := steps[er.Task.Step]
			short, _, long, timeout := w.cfg.Current().PollStages()
			if def.attempts == 0 { // a poll: a failed look tells nothing; keep looking until the wait times out
				wait, _ := engine.Backoff(short, long)(er, err)
				return wait, er.Task.Waited < timeout
			}
			return engine.Attempts(def.attempts, cmp.Or(def.backoff, short))(er, err)
		},
		Lease: func() time.Duration { return w.cfg.Current().StepLeaseTTL() },
	}
}

// runRequest is one run of a request's task: the request read afresh, then its step.
func (w *Workflow) runRequest(ctx context.Context, er *engine.Run) error {
	def, ok := steps[er.Task.Step]
	if !ok {
		return er.Park(ctx, fmt.Sprintf("no step %q of a request here", er.Task.Step))
	}
	req, err := w.db.Request(ctx, er.Task.Ref)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return er.Finish(ctx, nil)
	case err != nil:
		return engine.Unavailable(err)
	case !req.Current():
		return er.Finish(ctx, nil) // replaced by a re-application: nothing of it runs any more
	}
	var m reqMemo
	_ = json.Unmarshal([]byte(er.Task.Memo), &m) // unreadable: empty, the step re-reads
	r := &reqRun{r: er, req: req, memo: m, def: def}
	er.State = r
	return def.run(w, ctx, r)
}

// failRequest writes the step's declared failure (or the specific one it recognised), guarded on
// the version the run last wrote, and ends the task.
func (w *Workflow) failRequest(ctx context.Context, er *engine.Run, err error) error {
	r, ok := er.State.(*reqRun)
	if !ok || r.def.failTo == "" {
		return er.Finish(ctx, nil) // nothing to fail: the request could not be read, or a cleanup
	}
	to, step, pipeline := r.def.failTo, r.def.failStep, int64(0)
	var f *failure
	if errors.As(err, &f) {
		to, step, pipeline = f.to, f.step, f.pipeline
	}
	return r.finish(ctx, store.Change{To: to, Step: step, Note: noteFor(err), PipelineID: pipeline})
}

// move writes a transition of the request with the task's next state, in one fenced transaction.
func (r *reqRun) move(ctx context.Context, c store.Change, n store.TaskNext) error {
	if n.Memo == nil {
		n.Memo = r.memo.encode()
	}
	return r.r.Next(ctx, n, func(tx *store.Tx) error { return r.transition(ctx, tx, c) })
}

// then goes on to step (due in `in`) with a transition, in one fenced transaction.
func (r *reqRun) then(ctx context.Context, step string, in time.Duration, c store.Change) error {
	n := store.TaskNext{Step: step, Lane: laneOf(step), In: in}
	if polls(step) {
		n.Wait = store.WaitStart
	}
	return r.move(ctx, c, n)
}

// finish writes the request's last transition of this task and ends the task.
func (r *reqRun) finish(ctx context.Context, c store.Change) error {
	return r.r.Finish(ctx, func(tx *store.Tx) error { return r.transition(ctx, tx, c) })
}

func (r *reqRun) transition(ctx context.Context, tx *store.Tx, c store.Change) error {
	next, err := tx.Transition(ctx, r.req, c)
	if err == nil {
		r.req = next
	}
	return err
}

// failure is a failure a step recognised: the engine has this state written instead of the
// declared one (pipeline failed, rebase conflict, MR closed outside bindery, …).
type failure struct {
	to       state.BindingStatus
	step     state.Step
	err      error
	pipeline int64 // the pipeline that failed, recorded with the failure (0: none)
}

func (f *failure) Error() string { return fmt.Sprintf("%s: %v", f.step, f.err) }
func (f *failure) Unwrap() error { return f.err }

func failed(to state.BindingStatus, step state.Step, err error) error {
	return &failure{to: to, step: step, err: err}
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
	var own words
	if errors.As(err, &own) {
		return string(own)
	}
	return "Unexpected error; the details are in the server log."
}

// words is a failure a step words itself, with nothing of another error's text in it: its note
// records it as written. Any other error's text — a library's, a driver's, a panic's, however
// plain it looks — goes to the log only.
type words string

func (w words) Error() string { return string(w) }
