package workflow

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"bindery/internal/remote/outbound"
	"bindery/internal/vocab/state"
	"bindery/internal/work/change"
	"bindery/internal/work/engine"
	"bindery/store"
)

// A single request's own steps (the approval ticket, the legacy flow's MR, its merge) are tasks
// of the engine (kind state.TaskRequest, ref = the operationId), written in the transaction of
// the state that needs them. Each run is one bounded action: one call to the approval system,
// one action of the MR's lifecycle (change.Lifecycle); the outcome and the next due time are
// written in one transaction fenced on the task's epoch, then guarded on the request's version
// (I6). Every step reads the remote state first, so a re-run after a crash, an operator's retry
// or a lost claim is safe. Every step declares its failure state: the engine has it written for
// any error or panic the step did not turn into a state itself — a request is never left "in
// progress" without work due for it.

// Step is a step of a request's task (stored as the task's step: never rename one).
type Step string

const (
	stepTicket         Step = "ticket"          // open the approval ticket (both flows)
	stepTicketPoll     Step = "ticket_poll"     // waiting for the decision: ask the approval system now and then
	stepCreate         Step = "create"          // legacy: branch, commit and MR
	stepCreatePipeline Step = "create_pipeline" // legacy: the MR's pipeline, one look per run
	stepApprove        Step = "approve"         // legacy, after the approval: the reviewer accounts approve
	// The legacy merge, one action per run (stepMergeBlocked waits for a person, without the
	// project's merge slot).
	stepMerge              = Step(change.MergeAttempt)
	stepMergeRebase        = Step(change.MergeRebasing)
	stepMergePipeline      = Step(change.MergePipeline)
	stepMergeChecking      = Step(change.MergeChecking)
	stepMergeBlocked       = Step(change.MergeBlocked)
	stepCloseMR       Step = "close_mr"     // legacy, rejected: close the request's MR
	stepRenewTicket   Step = "renew_ticket" // in effect: send a renewal's approval ticket
	stepRenewPoll     Step = "renew_poll"   // in effect, a renewal waits: ask the approval system now and then
	stepRenewFile     Step = "renew_file"   // in effect, renewed: its file's new expiry waits for an earlier write of the file
)

// reqMemo is what a request's task remembers between runs: its MR's lifecycle, and the approval
// ticket once sent.
type reqMemo struct {
	change.Memo
	Ticket string `json:"ticket,omitempty"`
}

type reqJob = engine.Job[reqMemo, Step]

// stepRow is one step of a request: the engine's part (lane, how it waits and retries, its
// action), the failure the request gets when the step fails without deciding one itself, what
// the request waits for while its task is at the step ({mr}: its merge request; "": the
// request's own step says it), the stopped steps an operator's retry resumes here, and what the
// step does, in words (docs/states.md is generated from this table).
type stepRow struct {
	engine.Step[reqMemo, Step]
	failTo   state.BindingStatus // "": a cleanup or a poll, nothing to fail
	failStep state.Step
	waiting  string
	resumes  []state.Step
	does     string
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

// steps is the one table of a request's steps. A request's first steps — the approval ticket, a
// legacy MR's creation — run in their own lane, so that no number of batches in CI delays them.
func (w *Workflow) steps() []stepRow {
	first, bg := engine.LaneFirst, engine.LaneBackground
	type es = engine.Step[reqMemo, Step]
	return []stepRow{
		{Step: es{Name: stepTicket, Lane: first, Attempts: ticketAttempts, Backoff: ticketBackoff, Run: w.run((*Workflow).openTicket)},
			failTo: state.StatusCreateFailed, failStep: state.StepApprovalSendFailed,
			does: "send the approval ticket (both flows; the legacy flow's with `ext.mrId`)"},
		{Step: es{Name: stepTicketPoll, Lane: bg, Polls: true, Run: w.run((*Workflow).pollTicket)},
			does: "APPROVAL_SENT: every `approval.pollAfter`, read the ticket; a decision found is applied as its callback would be; a ticket the approval system lost is sent again"},
		{Step: es{Name: stepCreate, Lane: first, Attempts: mrAttempts, Run: w.run((*Workflow).createMR)},
			failTo: state.StatusCreateFailed, failStep: state.StepCreateFailed, does: "legacy: branch, commit, MR"},
		{Step: es{Name: stepCreatePipeline, Lane: bg, Polls: true, Run: w.run((*Workflow).createPipeline)},
			failTo: state.StatusCreateFailed, failStep: state.StepCreateFailed, waiting: "the pipeline of {mr} to pass",
			resumes: []state.Step{state.StepCreatePipelinePending},
			does:    "legacy: one look at the MR's pipeline (flaky retries; no answer within `poll.timeout` → a new pipeline once, then CREATE_PIPELINE_PENDING)"},
		{Step: es{Name: stepApprove, Lane: bg, Attempts: mrAttempts, Run: w.run((*Workflow).approveMR)},
			failTo: state.StatusHandleFailed, failStep: state.StepHandleApproveFailed, does: "legacy, approved: both reviewer accounts approve"},
		w.mergeStep(es{Name: stepMerge}, "legacy: one merge action, holding the project's merge slot", state.StepHandleMRBlocked),
		w.mergeStep(es{Name: stepMergeRebase}, "legacy: wait for GitLab's rebase", state.StepHandleRebasePending),
		w.mergeStep(es{Name: stepMergePipeline}, "legacy: wait for the pipeline of a head the merge moved", state.StepHandlePipelinePending),
		w.mergeStep(es{Name: stepMergeChecking}, "legacy: wait while GitLab computes whether the MR can be merged"),
		w.mergeStep(es{Name: stepMergeBlocked}, "legacy: the MR waits for a person (HANDLE_MR_BLOCKED), one look per poll, without the merge slot; cleared → `merge`; not within `batch.blockedTimeout` → failed"),
		{Step: es{Name: stepCloseMR, Lane: bg, Attempts: mrAttempts, Run: w.run((*Workflow).closeRejectedMR)},
			waiting: "bindery to close {mr}", does: "legacy, rejected or withdrawn: close the request's MR (a cleanup: nothing to fail)"},
		{Step: es{Name: stepRenewTicket, Lane: first, Attempts: ticketAttempts, Backoff: ticketBackoff, Run: w.run((*Workflow).openRenewalTicket)},
			does: "in effect, a renewal asked (renewal: approval): send its ticket to the approval system (the binding stays in effect; nothing to fail)"},
		{Step: es{Name: stepRenewPoll, Lane: bg, Polls: true, Run: w.run((*Workflow).pollRenewalTicket)},
			does: "in effect, a renewal waits for its decision: every `approval.pollAfter`, read its ticket; a decision found is applied as its callback would be (no renewal waits for ever)"},
		{Step: es{Name: stepRenewFile, Lane: bg, Polls: true, Run: w.run((*Workflow).admitRenewFile)},
			does: "in effect, renewed while another write of its file was on its way (a restore, an earlier renewal's file in a batch): admit the file with the new expiry once that has ended (one look per pipeline poll)"},
	}
}

// mergeStep is the row of the merge phase st names (change.Phases): one merge action of the legacy MR per
// run, HANDLE_FAILED / HANDLE_MERGE_FAILED when it fails without deciding a failure itself.
func (w *Workflow) mergeStep(st engine.Step[reqMemo, Step], does string, resumes ...state.Step) stepRow {
	i := slices.IndexFunc(change.Phases, func(p change.PhaseRow) bool { return Step(p.Phase) == st.Name })
	p := change.Phases[i]
	row := stepRow{Step: engine.Step[reqMemo, Step]{Name: st.Name, Lane: engine.LaneBackground, Polls: p.Polls, Run: w.run((*Workflow).mergeMR)},
		failTo: state.StatusHandleFailed, failStep: state.StepHandleMergeFailed, waiting: p.Waiting, resumes: resumes, does: does}
	if !p.Polls {
		row.Attempts = mrAttempts
	}
	return row
}

// StepDocs is the request kind's step table for docs/states.md.
func StepDocs() []engine.StepDoc {
	var out []engine.StepDoc
	for _, r := range (&Workflow{}).steps() {
		d := engine.DocOf(r.Step)
		d.Does, d.Waiting = r.does, r.waiting
		if r.failTo != "" {
			d.Fails = fmt.Sprintf("%s / %s", r.failTo, r.failStep)
		}
		for _, s := range r.resumes {
			d.Resumes = append(d.Resumes, s.String())
		}
		out = append(out, d)
	}
	return out
}

// def is the request kind as the engine runs it.
func (w *Workflow) def() engine.Def[reqMemo, Step] {
	d := engine.Def[reqMemo, Step]{
		Name: state.TaskRequest, Fail: w.failRequest,
		Short:   func() time.Duration { return w.mr.Stages().Short },
		Long:    func() time.Duration { return w.mr.Stages().Long },
		Timeout: func() time.Duration { return w.mr.Stages().Timeout },
		Lease:   func() time.Duration { return w.cfg.Current().StepLeaseTTL() },
	}
	for _, r := range w.rows {
		d.Steps = append(d.Steps, r.Step)
	}
	return d
}

// row is the table's row of step (ok false: not in it).
func (w *Workflow) row(step Step) (stepRow, bool) {
	i := slices.IndexFunc(w.rows, func(r stepRow) bool { return r.Name == step })
	if i < 0 {
		return stepRow{}, false
	}
	return w.rows[i], true
}

// resumeAt is the step an operator's retry of a request stopped at the pending step s runs
// ("": none in the table).
func (w *Workflow) resumeAt(s state.Step) Step {
	for _, r := range w.rows {
		if slices.Contains(r.resumes, s) {
			return r.Name
		}
	}
	return ""
}

// requestTask is the task of a request's step, due in `in`.
func (w *Workflow) requestTask(operationID string, step Step, in time.Duration, m reqMemo) store.TaskSpec {
	return w.def().Spec(operationID, step, in, m)
}

// reqRun is one run of a request's task: the request as this run last wrote it, so that every
// write — the failure included — is guarded on the version this run knows.
type reqRun struct {
	*reqJob
	req store.Request
	row stepRow
}

// run wraps a step's action: the request read afresh (gone or replaced: the task ends), then the
// action.
func (w *Workflow) run(action func(*Workflow, context.Context, *reqRun) error) func(context.Context, *reqJob) error {
	return func(ctx context.Context, j *reqJob) error {
		req, err := w.db.Request(ctx, j.Task.Ref)
		switch {
		case errors.Is(err, store.ErrNotFound):
			return j.Finish(ctx, nil)
		case err != nil:
			return engine.Unavailable(err)
		case !req.Current():
			return j.Finish(ctx, nil) // replaced by a re-application: nothing of it runs any more
		}
		row, _ := w.row(j.Step.Name)
		r := &reqRun{reqJob: j, req: req, row: row}
		j.State = r
		return action(w, ctx, r)
	}
}

// failRequest writes the step's declared failure (or the specific one it recognised), guarded on
// the version the run last wrote, and ends the task.
func (w *Workflow) failRequest(ctx context.Context, j *reqJob, err error) error {
	r, ok := j.State.(*reqRun)
	if ok && (r.row.Name == stepRenewTicket || r.row.Name == stepRenewPoll) {
		// The approval system did not take a renewal's ticket, or its decision could not be
		// read: the renewal ends (the binding keeps its expiry), so that it can be asked again.
		return j.Finish(ctx, func(tx *store.Tx) error {
			rn, err := tx.RenewalPendingOf(ctx, r.req.Operation.OperationID)
			if errors.Is(err, store.ErrNotFound) {
				return nil
			}
			if err == nil {
				_, err = tx.DecideRenewal(ctx, rn.RenewalID, store.RenewalCancelled, "", nil)
			}
			return err
		})
	}
	if !ok || r.row.failTo == "" {
		return j.Finish(ctx, nil) // nothing to fail: the request could not be read, or a cleanup
	}
	to, step, pipeline := r.row.failTo, r.row.failStep, int64(0)
	var f *change.Failure
	if errors.As(err, &f) { // a failure the step recognised: pipeline failed, rebase conflict, MR closed, …
		to, step = f.Of(r.req.Binding.Status)
		pipeline = f.Pipeline
	}
	return r.finish(ctx, failed(to, step, pipeline, noteFor(err)))
}

// move writes a transition of the request with the task's next state, in one fenced transaction.
func (r *reqRun) move(ctx context.Context, c store.Change, n store.TaskNext) error {
	return r.Next(ctx, n, func(tx *store.Tx) error { return r.transition(ctx, tx, c) })
}

// then goes on to step (due in `in`) with a transition, in one fenced transaction.
func (r *reqRun) then(ctx context.Context, step Step, in time.Duration, c store.Change) error {
	n := r.To(step)
	n.In = in
	return r.move(ctx, c, n)
}

// finish writes the request's last transition of this task and ends the task.
func (r *reqRun) finish(ctx context.Context, c store.Change) error {
	return r.Finish(ctx, func(tx *store.Tx) error { return r.transition(ctx, tx, c) })
}

func (r *reqRun) transition(ctx context.Context, tx *store.Tx, c store.Change) error {
	next, err := tx.Transition(ctx, r.req, c)
	if err == nil {
		r.req = next
	}
	return err
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
