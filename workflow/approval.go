package workflow

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"bindery/api"
	"bindery/batch"
	"bindery/internal/remote/approval"
	"bindery/internal/vocab/state"
	"bindery/internal/work/change"
	"bindery/internal/work/engine"
	"bindery/store"
)

// openTicket is the step that asks the approval system to decide (both flows): the legacy flow
// sends its MR in ext.mrId, so that the callback knows which flow it belongs to. The approval
// system is idempotent by operationId, so a re-run after a crash opens nothing twice, and an
// operator may re-send the ticket of a request that waits for its decision too long.
// APPROVAL_SENDING is written before the call and APPROVAL_SENT after; a callback that arrives
// in between finds the row awaiting approval (SENDING counts) and moves it on — it removes this
// task, so this step's SENT write is fenced out, which is not a failure. One call per run: an
// approval system that does not answer is tried again by the engine (0.1s, 0.2s, 0.4s later),
// then the request fails APPROVAL_SEND_FAILED.
func (w *Workflow) openTicket(ctx context.Context, r *reqRun) error {
	op := r.req.Operation
	switch st := r.req.Binding.Status; {
	case st == state.StatusCreateFailed || st == state.StatusMRCreated:
		// An operator's retry of a failed send, or the legacy flow after its MR passed CI: SENDING
		// first, the call in the next run.
		return r.move(ctx, sendingTicket(), store.TaskNext{})
	case !st.AwaitingApproval():
		return r.Finish(ctx, nil) // a callback or an operator moved it on
	}
	snap := w.cfg.Current()
	title := op.TargetKey
	if t, ok := batch.TargetOf(snap, op); ok {
		title = t.Title
	}
	ticket := approval.Ticket{
		OperationID: op.OperationID, Subject: op.SubjectID, TargetKey: op.TargetKey, Reason: op.Reason,
		Title: fmt.Sprintf("%s requests %s", op.SubjectID, title), CallbackURL: w.callbackURL(),
	}
	if op.Flow == FlowLegacy && op.MRIID > 0 {
		ticket.Ext = map[string]string{"mrId": strconv.FormatInt(op.MRIID, 10)}
	}
	id, err := w.tickets.Open(ctx, ticket)
	if err != nil {
		return err
	}
	// Then the decision is waited for; now and then the ticket is read, in case its callback
	// never gets through. A ticket sent again (an operator's retry) is read at once.
	note, poll := "Ticket "+ticketWords(id), w.cfg.Current().ApprovalPollAfter()
	if r.req.Binding.Status == state.StatusApprovalSent {
		note, poll = note+" sent again.", 0
	}
	r.Memo = reqMemo{Ticket: id}
	shown := id // the request page shows and links only an id that looks like one (ticketWords)
	if !ticketID.MatchString(id) {
		shown = ""
	}
	err = r.then(ctx, stepTicketPoll, poll, ticketSent(note, shown))
	if err != nil && shown != "" {
		// The decision's callback may have moved the request on before this outcome could be
		// written (a quick approval system): the ticket is still a fact the page should link.
		if kerr := w.db.KeepTicket(ctx, op.OperationID, shown); kerr != nil {
			w.log.WarnContext(ctx, "approval ticket not recorded on the request", "operation", op.OperationID, "ticket", shown, "err", kerr)
		}
	}
	return err
}

// pollTicket asks the approval system what became of the ticket of a request still waiting for
// its decision (approval.pollAfter after it was sent, and as often again): a decision whose
// callback never got through — an outage longer than the sender's retries, a secret that did
// not match — is applied exactly as the callback would have been (same guard, same dedupe: under
// the callback's own id, so the callback, should it still come, is a duplicate). A ticket the
// approval system no longer knows is sent again. The approval system not answering only delays
// the next look: the request still waits for its decision.
func (w *Workflow) pollTicket(ctx context.Context, r *reqRun) error {
	op := r.req.Operation
	if r.req.Binding.Status != state.StatusApprovalSent {
		return r.Finish(ctx, nil) // decided, or sent again by another step
	}
	every := w.cfg.Current().ApprovalPollAfter()
	later := func(why string, err error) error {
		w.log.WarnContext(ctx, "could not read the approval ticket; asking again later", "operation", op.OperationID, "ticket", r.Memo.Ticket, "why", why, "error", err)
		return r.Next(ctx, store.TaskNext{In: every, Failures: r.Task.Failures + 1, Note: why}, nil)
	}
	if r.Memo.Ticket == "" {
		return r.then(ctx, stepTicket, 0, ticketSent("Asking the approval system about the ticket.", ""))
	}
	t, err := w.tickets.Get(ctx, r.Memo.Ticket)
	switch {
	case errors.Is(err, approval.ErrNoTicket):
		// Sent again from APPROVAL_SENT (the ticket step re-opens it, idempotent by operationId,
		// and reads it at once).
		return r.then(ctx, stepTicket, 0, ticketSent("The approval system no longer knows ticket "+ticketWords(r.Memo.Ticket)+"; sending it again.", ""))
	case err != nil:
		return later("the approval system did not answer about the ticket: "+engine.Public(err), err)
	case t.OperationID != "" && t.OperationID != op.OperationID:
		return later("the approval system answered for another request's ticket", nil)
	case t.Status == approval.StatusPending:
		return r.Next(ctx, store.TaskNext{In: every, Note: "ticket " + t.TicketID + " is still waiting for a decision"}, nil)
	}
	cb := api.ApprovalCallback{CallbackID: t.RequestID, OperationID: op.OperationID, Result: t.Status, Ext: t.Ext, DecidedBy: t.DecidedBy, Comment: t.Comment}
	if cb.CallbackID == "" {
		cb.CallbackID = "ticket-" + t.TicketID // the system gives no callback id: one per ticket
	}
	res, err := w.ApprovalCallback(ctx, cb)
	if err != nil {
		return err
	}
	w.log.InfoContext(ctx, "approval decision read from the ticket (its callback did not come)", "operation", op.OperationID, "ticket", t.TicketID, "result", t.Status, "answer", res.Code)
	if res.Code == api.CallbackAccepted {
		r.HandedOver() // the decision's transaction replaced or ended this task
		return nil
	}
	// DUPLICATE or IGNORED_STALE: the decision was seen before and changed nothing here (a
	// stale one, a ticket of another flow). The request still waits for a decision: keep
	// asking, never leave it without its task.
	return r.Next(ctx, store.TaskNext{In: every, Note: "ticket " + t.TicketID + " answered " + strings.ToLower(t.Status) + ", which did not decide this request"}, nil)
}

// ApprovalCallback handles a verified approval-system callback (docs/workflow.md, 'Approval
// decisions'). In one transaction: the callback is recorded by its own id (a repeat is DUPLICATE),
// the request is found by operationId and must be the relation's current one and awaiting a
// decision (SENDING included, and a send that only looked failed: see awaitingDecision), else
// IGNORED_STALE — 2xx so that the sender stops — with nothing changed. The payload decides the
// flow: ext.mrId present → the legacy MR-first flow (its MR is approved and merged), absent →
// approval-first (validated and admitted to the waiting set). So tickets opened before
// workflow.approvalFirst was switched finish in their own flow.
func (w *Workflow) ApprovalCallback(ctx context.Context, cb api.ApprovalCallback) (api.CallbackResult, error) {
	if id := renewalOf(cb.OperationID); id != "" {
		if _, err := w.db.RenewalByID(ctx, id); err == nil {
			return w.renewalDecision(ctx, cb, id) // a renewal's ticket
		}
	}
	mrID, legacy, err := legacyMR(cb)
	if err != nil {
		w.log.WarnContext(ctx, "approval callback with a malformed ext.mrId; ignored", "operation", cb.OperationID, "err", err)
		return api.CallbackResult{Code: api.CallbackIgnoredStale}, nil
	}
	approved := cb.Result == api.ApprovalApproved
	// Decided before the transaction: rendering reads the catalog, and a collision check reads the
	// relation's other bindings (plain reads; on SQLite the write connection is the transaction's).
	var invalid error
	var adm store.Admission
	if approved && !legacy {
		op, err := w.db.Operation(ctx, cb.OperationID)
		if err == nil {
			if adm, invalid = w.admission(ctx, op, state.ActionAdd); invalid != nil && !errors.Is(invalid, change.ErrInvalidChange) {
				return api.CallbackResult{}, invalid
			}
		} else if !errors.Is(err, store.ErrNotFound) {
			return api.CallbackResult{}, err
		}
	}

	var code string
	var moved store.Request
	err = retryPreempted(ctx, func() error {
		code, moved = api.CallbackAccepted, store.Request{}
		return w.db.InTx(ctx, func(tx *store.Tx) error {
			if fresh, err := freshCallback(ctx, tx, cb, &code); err != nil || !fresh {
				return err
			}
			cur, err := tx.Request(ctx, cb.OperationID)
			if errors.Is(err, store.ErrNotFound) || (err == nil && (!cur.Current() || !awaitingDecision(cur))) {
				code = api.CallbackIgnoredStale // recorded, so a resend is a duplicate; the row is untouched
				return nil
			}
			if err != nil {
				return err
			}
			// The payload must be this request's ticket: the legacy flow's ticket carries its MR,
			// the approval-first flow's carries none. A decision naming an MR for an approval-first
			// request (or another MR, or none for a legacy request that has one) is another
			// ticket's: acting on it would approve and merge an MR that is not this request's.
			if op := cur.Operation; (legacy && op.Flow != FlowLegacy) || (op.Flow == FlowLegacy && op.MRIID != 0 && op.MRIID != mrID) {
				code = api.CallbackIgnoredStale
				return nil
			}
			c := decide(cb, legacy, approved, invalid)
			if c.MRIID == 0 && legacy {
				c.MRIID = mrID
			}
			// The work the decision starts, or none: written first (task before operation, the one
			// lock order), and it fences out a ticket step that may still be running.
			if next := w.decisionTask(cur.Operation, legacy, approved, c.MRIID); next != nil {
				err = tx.PutTask(ctx, *next, false)
			} else {
				err = tx.DeleteTask(ctx, state.TaskRequest, cb.OperationID)
			}
			if err != nil {
				return err
			}
			if moved, err = tx.Transition(ctx, cur, c); err != nil {
				return err
			}
			if approved && !legacy && invalid == nil {
				// Admitted in the same transaction as the state that says so: no approved
				// request is ever left out of the waiting set, none is queued twice (I4).
				_, err = tx.Admit(ctx, adm)
			}
			return err
		})
	})
	if err != nil {
		return api.CallbackResult{}, err
	}
	w.log.InfoContext(ctx, "approval callback", "operation", cb.OperationID, "callback", cb.CallbackID, "result", cb.Result, "legacy", legacy, "answer", code)
	if moved.Operation.ID == 0 {
		return api.CallbackResult{Code: code}, nil
	}

	// After commit: the approval wait; the work the decision started runs on this instance first.
	w.observeApproval(ctx, cb.OperationID)
	if legacy {
		w.engine.Nudge(engine.LaneBackground)
	}
	return api.CallbackResult{Code: code}, nil
}

// freshCallback records cb by its own id in tx; a repeat sets code DUPLICATE (false).
func freshCallback(ctx context.Context, tx *store.Tx, cb api.ApprovalCallback, code *string) (bool, error) {
	fresh, err := tx.RecordApprovalCallback(ctx, cb.CallbackID, cb.OperationID, cb.Result)
	if err == nil && !fresh {
		*code = api.CallbackDuplicate
	}
	return fresh, err
}

// decisionTask is the work a fresh decision starts: the legacy flow's approved MR is approved
// and merged, a rejected one's MR closed; nil when the decision ends the request's own work (the
// approval-first flow goes on in the waiting set).
func (w *Workflow) decisionTask(op store.Operation, legacy, approved bool, mrIID int64) *store.TaskSpec {
	switch {
	case legacy && approved:
		t := w.requestTask(op.OperationID, stepApprove, 0, reqMemo{})
		return &t
	case legacy && mrIID > 0:
		t := w.requestTask(op.OperationID, stepCloseMR, 0, reqMemo{})
		return &t
	}
	return nil
}

// awaitingDecision reports whether a decision of the request's ticket is still expected: awaiting
// approval (SENDING included), or APPROVAL_SEND_FAILED — a send that only looked failed (the
// answer was dropped, or a 5xx came after the ticket was created) leaves a real ticket that people
// decide. Their decision is accepted as if the request were awaiting it, so it is not lost and the
// request does not wait for an operator for nothing. The approval system opens one ticket per
// operationId, so a retried send cannot open a second one whose decision comes later; and once
// decided, the row no longer awaits anything, so a second decision is stale. A request that failed
// for another reason (hand-off refused before any send, an invalid change after the decision) has
// no decision pending.
func awaitingDecision(cur store.Request) bool {
	st := cur.Binding.Status
	return st.AwaitingApproval() || (st == state.StatusCreateFailed && cur.Operation.Step == state.StepApprovalSendFailed)
}

// decide is the transition a fresh, current callback makes.
// Who decided is kept on the operation either way (the audit export reads it).
func decide(cb api.ApprovalCallback, legacy, approved bool, invalid error) store.Change {
	by := oneLine(cb.DecidedBy, maxDecidedBy)
	switch {
	case !approved:
		return approvalRejected(rejectionNote(cb), by)
	case legacy:
		return approvedToMerge(approvalNote(cb), by)
	case invalid != nil:
		return approvedInvalid(noteFor(invalid), by)
	}
	return queued(approvalNote(cb)+" Waiting for a batch.", by)
}

// legacyMR reads ext.mrId: present → the legacy flow.
func legacyMR(cb api.ApprovalCallback) (int64, bool, error) {
	raw, ok := cb.Ext["mrId"]
	if raw = strings.TrimSpace(raw); !ok || raw == "" {
		return 0, false, nil
	}
	id, err := strconv.ParseInt(raw, 10, 64)
	if err != nil || id <= 0 {
		return 0, true, fmt.Errorf("ext.mrId %q is not an MR number", raw)
	}
	return id, true, nil
}

// retryPreempted re-runs fn when it lost a race (a guarded write preempted by a concurrent
// writer, a deadlock): each attempt reads afresh, so the second one decides on the new state.
func retryPreempted(ctx context.Context, fn func() error) error {
	var err error
	for attempt := range 4 {
		if err = fn(); err == nil || !(errors.Is(err, store.ErrPreempted) || errors.Is(err, store.ErrRetry)) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(time.Duration(attempt+1) * 5 * time.Millisecond):
		}
	}
	return err
}

// ticketWords is a ticket id as the request's timeline shows it: the approval system chooses
// the id, and the requester reads the timeline, so an id that does not look like one is not
// repeated there (operators find the ticket by the request id).
func ticketWords(id string) string {
	if ticketID.MatchString(id) {
		return id
	}
	return "(an id bindery does not show)"
}

var ticketID = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:-]{0,63}$`)
