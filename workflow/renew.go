package workflow

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"bindery/api"
	"bindery/batch"
	"bindery/internal/platform/config"
	"bindery/internal/remote/approval"
	"bindery/internal/vocab/apperr"
	"bindery/internal/vocab/explain"
	"bindery/internal/vocab/state"
	"bindery/store"
)

// Renewal (docs/workflow.md, 'Expiry, reminders and renewal'): the holder of a binding in effect
// (or an operator) keeps it for longer without losing it in between. The new expiry is now plus
// the target's ttl, never later than the target's maxTtl after the binding first came into
// effect. A target's renewals are granted at once (renewal: auto) or decided in the approval
// system like an application (approval, the default): the binding stays in effect meanwhile, a
// rejection leaves the old expiry. A renewal is a record and a new expiry on the binding: it
// never interrupts access, and the expiry cron reads the new date (startClose checks the expiry
// it read is still the binding's).

// renewTicketPrefix marks a renewal's approval ticket: the approval system knows it by
// "renew-" and the renew call's operationId, so that its decision is told from an application's.
const renewTicketPrefix = "renew-"

// Renew renews operationID's binding as actor, renewalID being the renew call's operationId
// (idempotent by it: the server replays the answer of a repeat).
func (w *Workflow) Renew(ctx context.Context, operationID, actor, renewalID string) (api.RequestView, error) {
	snap := w.cfg.Current()
	err := retryPreempted(ctx, func() error {
		return w.db.InTx(ctx, func(tx *store.Tx) error {
			cur, err := tx.Request(ctx, operationID)
			if err != nil {
				return notFound(err)
			}
			t, renewal, err := w.renewable(ctx, tx, snap, cur)
			if err != nil {
				return err
			}
			r := store.Renewal{RenewalID: renewalID, OperationID: operationID, Mode: t.RenewalMode(), RequestedBy: actor, OldExpiresAt: *cur.Binding.ExpiresAt}
			if r.Mode == config.RenewalAuto {
				r.Status, r.NewExpiresAt, r.DecidedBy = store.RenewalRenewed, &renewal, actor
				if err := tx.InsertRenewal(ctx, r); err != nil {
					return renewRefused(err)
				}
				return w.grantRenewal(ctx, tx, snap, cur, renewedChange(renewal, actor, ""))
			}
			r.Status = store.RenewalPending
			if err := tx.InsertRenewal(ctx, r); err != nil {
				return renewRefused(err)
			}
			// The ticket is the request's own step: the binding has no task while in effect.
			return tx.PutTask(ctx, w.requestTask(operationID, stepRenewTicket, 0, reqMemo{}), false)
		})
	})
	if err != nil {
		return api.RequestView{}, err
	}
	return w.Request(ctx, operationID)
}

// renewAgainAfter is how long a renewal stands before the binding can be renewed again: a
// second click (or a second tab) within it is "just renewed", not a renewal moving the expiry by
// the seconds in between. It counts from the latest renewal, not from the grant, so that a binding
// granted seconds ago can be renewed from its reminder at once.
const renewAgainAfter = time.Minute

// renewable checks that cur's binding may be renewed now and returns its target and the expiry
// a renewal gives it.
func (w *Workflow) renewable(ctx context.Context, tx *store.Tx, snap *config.Snapshot, cur store.Request) (config.Target, time.Time, error) {
	b := cur.Binding
	if !cur.Current() || b.Status != state.StatusValidated || cur.Operation.Step != state.StepCalledBack || b.ExpiresAt == nil {
		return config.Target{}, time.Time{}, apperr.New(apperr.Conflict, "%s", explain.NotRenewable)
	}
	t, ok := snap.Target(cur.Operation.TargetKey) // the renewal policy in force
	if !ok {
		t, _ = batch.TargetOf(snap, cur.Operation)
	}
	first, now, err := tx.FirstGrant(ctx, cur.Operation.OperationID)
	if err != nil {
		return config.Target{}, time.Time{}, err
	}
	ttl := t.TTL
	if ttl <= 0 {
		return config.Target{}, time.Time{}, apperr.New(apperr.Conflict, "%s", explain.NotRenewable)
	}
	last, err := tx.LastRenewed(ctx, cur.Operation.OperationID)
	if err == nil && now.Sub(last) < renewAgainAfter {
		return config.Target{}, time.Time{}, apperr.New(apperr.Conflict, "%s", explain.RenewedAlready)
	} else if err != nil && !errors.Is(err, store.ErrNotFound) {
		return config.Target{}, time.Time{}, err
	}
	next, capped := renewedExpiry(now, first, ttl, t.MaxTTL)
	if !next.After(*b.ExpiresAt) {
		if capped {
			return config.Target{}, time.Time{}, apperr.New(apperr.Conflict, "%s", explain.PastMaxTTL(config.DurationWords(t.MaxTTL), first.Add(t.MaxTTL)))
		}
		return config.Target{}, time.Time{}, apperr.New(apperr.Conflict, "%s", explain.RenewedAlready)
	}
	return t, next, nil
}

// renewedExpiry is now + ttl, never later than first + maxTTL (0: no bound); capped says the
// bound decided it.
func renewedExpiry(now, first time.Time, ttl, maxTTL time.Duration) (time.Time, bool) {
	next := now.Add(ttl)
	if maxTTL > 0 && next.After(first.Add(maxTTL)) {
		return first.Add(maxTTL), true
	}
	return next, false
}

// renewRefused words a renewal's record refused: one at a time.
func renewRefused(err error) error {
	if errors.Is(err, store.ErrRenewalPending) {
		return apperr.New(apperr.Conflict, "%s", explain.RenewalPending)
	}
	return err
}

// renewedChange is the binding's new expiry, a step of its history at CALLED_BACK (it stays in
// effect: no status, no event but the record's).
func renewedChange(at time.Time, by, comment string) store.Change {
	note := explain.Renewed(at, by)
	if comment != "" {
		note = strings.TrimSuffix(note, ".") + ": " + comment
	}
	return renewed(note, at)
}

// grantRenewal writes a renewal granted (c, renewedChange) on cur's binding. When its file carries
// the expiry (its target, as the request was accepted, has a ttl), the file is rewritten with the
// new expiry through the waiting set, a batch, the train and CI like any change — action RENEW,
// no approval, the binding in effect meanwhile: admitted in this transaction, or, while another
// write of the file is on its way (a drift restore, an earlier renewal's file in a batch), by the
// step renew_file once that has ended. Otherwise the renewal is a record.
func (w *Workflow) grantRenewal(ctx context.Context, tx *store.Tx, snap *config.Snapshot, cur store.Request, c store.Change) error {
	if t, ok := batch.TargetOf(snap, cur.Operation); ok && t.TTL > 0 {
		c.FileExpiresAt = c.ExpiresAt
	}
	next, err := tx.Transition(ctx, cur, c)
	if err != nil || c.FileExpiresAt == nil {
		return err
	}
	if err := w.admitRenewal(ctx, tx, snap, next.Operation); !errors.Is(err, store.ErrRestoring) {
		return err
	}
	short, _, _, _ := snap.PollStages()
	return tx.PutTask(ctx, w.requestTask(cur.Operation.OperationID, stepRenewFile, short, reqMemo{}), false)
}

// admitRenewal puts op's file with its renewed expiry into the waiting set in tx
// (store.ErrRestoring: another write of the file is on its way). A file that no longer renders
// is not admitted: it rendered at the grant, so the catalog changed under it, and the drift round
// reports the file's old expiry as a change for an operator to decide.
func (w *Workflow) admitRenewal(ctx context.Context, tx *store.Tx, snap *config.Snapshot, op store.Operation) error {
	t, ok := batch.TargetOf(snap, op)
	if !ok {
		return nil
	}
	adm, err := batch.Admission(t, op, state.ActionRenew)
	if err != nil {
		w.log.WarnContext(ctx, "a renewal's file cannot be rendered", "operation", op.OperationID, "error", err)
		return nil
	}
	return tx.AdmitRenewal(ctx, adm)
}

// admitRenewFile is the step renew_file: a renewed binding's file, with its new expiry, waited for
// an earlier write of the file to end; it goes into the waiting set now, or looks again a pipeline
// poll later. A binding that left effect meanwhile needs no file (its close removes it).
func (w *Workflow) admitRenewFile(ctx context.Context, r *reqRun) error {
	op := r.req.Operation
	if !r.req.Current() || !inEffect(op) || op.FileExpiresAt == nil {
		return r.Finish(ctx, nil)
	}
	snap := w.cfg.Current()
	err := r.Finish(ctx, func(tx *store.Tx) error { return w.admitRenewal(ctx, tx, snap, op) })
	if !errors.Is(err, store.ErrRestoring) {
		return err
	}
	short, _, _, _ := snap.PollStages()
	return r.Next(ctx, store.TaskNext{In: short, Note: "the renewal's file waits for an earlier change of the file to end"}, nil)
}

// openRenewalTicket is the step that sends a pending renewal to the approval system, as an
// application's ticket (idempotent by its id: a re-run opens nothing twice). Its decision comes
// by the approval callback (renewalDecision).
func (w *Workflow) openRenewalTicket(ctx context.Context, r *reqRun) error {
	op := r.req.Operation
	rn, err := w.db.RenewalPendingOf(ctx, op.OperationID)
	if errors.Is(err, store.ErrNotFound) {
		return r.Finish(ctx, nil) // decided, or never asked
	}
	if err != nil {
		return err
	}
	title := op.TargetKey
	if t, ok := batch.TargetOf(w.cfg.Current(), op); ok {
		title = t.Title
	}
	id, err := w.tickets.Open(ctx, approval.Ticket{
		OperationID: renewTicketPrefix + rn.RenewalID, Subject: op.SubjectID, TargetKey: op.TargetKey,
		Reason: fmt.Sprintf("Renewal of request %s (expires %s), asked by %s. %s", op.OperationID, explain.ExpiryTime(rn.OldExpiresAt), rn.RequestedBy, op.Reason),
		Title:  fmt.Sprintf("%s renews %s", op.SubjectID, title), CallbackURL: w.callbackURL(),
	})
	if err != nil {
		return err
	}
	// Then the decision is waited for, as an application's: now and then the ticket is read, in
	// case its callback never gets through (pollRenewalTicket).
	r.Memo = reqMemo{Ticket: id}
	n := r.To(stepRenewPoll)
	n.In = w.cfg.Current().ApprovalPollAfter()
	return r.Next(ctx, n, func(tx *store.Tx) error { return tx.SetRenewalTicket(ctx, rn.RenewalID, id) })
}

// pollRenewalTicket asks the approval system what became of a pending renewal's ticket
// (approval.pollAfter after it was sent, and as often again): a decision whose callback never got
// through is applied exactly as the callback would have been (renewalDecision, deduplicated under
// the callback's own id), so that no renewal waits for ever. A renewal decided meanwhile ends the
// task; a ticket the approval system no longer knows is sent again; no answer only delays the
// next look.
func (w *Workflow) pollRenewalTicket(ctx context.Context, r *reqRun) error {
	op := r.req.Operation
	rn, err := w.db.RenewalPendingOf(ctx, op.OperationID)
	if errors.Is(err, store.ErrNotFound) {
		return r.Finish(ctx, nil) // decided (its callback came), or cancelled
	}
	if err != nil {
		return err
	}
	every := w.cfg.Current().ApprovalPollAfter()
	if r.Memo.Ticket == "" {
		n := r.To(stepRenewTicket)
		return r.Next(ctx, n, nil)
	}
	t, err := w.tickets.Get(ctx, r.Memo.Ticket)
	switch {
	case errors.Is(err, approval.ErrNoTicket):
		n := r.To(stepRenewTicket) // opened again, idempotent by the renewal's id
		n.Note = "the approval system no longer knows the renewal's ticket; sending it again"
		return r.Next(ctx, n, nil)
	case err != nil:
		return r.Next(ctx, store.TaskNext{In: every, Failures: r.Task.Failures + 1, Note: "the approval system did not answer about the renewal's ticket"}, nil)
	case t.Status == approval.StatusPending:
		return r.Next(ctx, store.TaskNext{In: every, Note: "the renewal's ticket " + t.TicketID + " is still waiting for a decision"}, nil)
	}
	cb := api.ApprovalCallback{CallbackID: t.RequestID, OperationID: renewTicketPrefix + rn.RenewalID, Result: t.Status, DecidedBy: t.DecidedBy, Comment: t.Comment}
	if cb.CallbackID == "" {
		cb.CallbackID = "ticket-" + t.TicketID
	}
	if _, err := w.renewalDecision(ctx, cb, rn.RenewalID); err != nil {
		return err
	}
	w.log.InfoContext(ctx, "renewal decision read from its ticket (its callback did not come)", "operation", op.OperationID, "renewal", rn.RenewalID, "result", t.Status)
	return r.Finish(ctx, nil)
}

// renewalDecision applies the approval system's decision of a renewal's ticket: approved → the
// binding's new expiry (computed now, within maxTtl); rejected or withdrawn → the old expiry
// stays. A decision for a binding that left effect meanwhile cancels the renewal. Deduplicated
// by the callback's id like an application's.
func (w *Workflow) renewalDecision(ctx context.Context, cb api.ApprovalCallback, renewalID string) (api.CallbackResult, error) {
	snap := w.cfg.Current()
	code := api.CallbackAccepted
	err := retryPreempted(ctx, func() error {
		code = api.CallbackAccepted
		return w.db.InTx(ctx, func(tx *store.Tx) error {
			if fresh, err := freshCallback(ctx, tx, cb, &code); err != nil || !fresh {
				return err
			}
			rn, err := tx.RenewalByID(ctx, renewalID)
			if err != nil || rn.Status != store.RenewalPending {
				code = api.CallbackIgnoredStale
				return nil
			}
			by := oneLine(cb.DecidedBy, maxDecidedBy)
			if cb.Result != api.ApprovalApproved {
				_, err = tx.DecideRenewal(ctx, renewalID, store.RenewalRejected, by, nil)
				return err
			}
			cur, err := tx.Request(ctx, rn.OperationID)
			if err != nil {
				return err
			}
			_, next, err := w.renewable(ctx, tx, snap, cur)
			var ae *apperr.Error
			if errors.As(err, &ae) && ae.Code == apperr.Conflict {
				_, err = tx.DecideRenewal(ctx, renewalID, store.RenewalCancelled, by, nil)
				return err
			}
			if err != nil {
				return err
			}
			if _, err := tx.DecideRenewal(ctx, renewalID, store.RenewalRenewed, by, &next); err != nil {
				return err
			}
			return w.grantRenewal(ctx, tx, snap, cur, renewedChange(next, by, oneLine(cb.Comment, maxComment)))
		})
	})
	if err != nil {
		return api.CallbackResult{}, err
	}
	w.log.InfoContext(ctx, "renewal decision", "renewal", renewalID, "callback", cb.CallbackID, "result", cb.Result, "answer", code)
	return api.CallbackResult{Code: code}, nil
}

// renewalOf is the renewal id a callback's operationId names ("" : an application's).
func renewalOf(operationID string) string {
	id, ok := strings.CutPrefix(operationID, renewTicketPrefix)
	if !ok {
		return ""
	}
	return id
}

// describeRenewal says on a request in effect whether it may be renewed now and what became of
// its latest renewal — with the rewrite of its file when that renewal gave the file's expiry
// (fileExpiry, store.Operation.FileExpiresAt).
func (w *Workflow) describeRenewal(ctx context.Context, v *api.RequestView, fileExpiry *time.Time) error {
	rs, err := w.db.RenewalsOf(ctx, v.OperationID, 1)
	if err != nil {
		return err
	}
	v.Renewable = true
	if len(rs) == 0 {
		return nil
	}
	r := rs[0]
	v.Renewal = &api.RenewalView{ID: r.RenewalID, Status: r.Status, Mode: r.Mode, RequestedBy: r.RequestedBy, DecidedBy: r.DecidedBy,
		RequestedAt: r.CreatedAt, DecidedAt: r.DecidedAt, ExpiresAt: r.NewExpiresAt, Ticket: w.ticketLink(r.TicketID)}
	if r.Status == store.RenewalPending {
		v.Renewable, v.Renewal.Words = false, explain.RenewalWaiting(r.RequestedBy)
	}
	if r.Status == store.RenewalRenewed && fileExpiry != nil && r.DecidedAt != nil && r.NewExpiresAt != nil && fileExpiry.Equal(*r.NewExpiresAt) {
		// Its file carries the expiry: where the rewrite stands (one read more, only then).
		f, err := w.db.RenewalFileOf(ctx, v.OperationID, *r.DecidedAt)
		if err != nil {
			return err
		}
		v.Renewal.File = &api.RenewalFile{State: f.State, BatchID: f.BatchID, MRIID: f.MRIID, Text: explain.RenewalFile(f.State, f.BatchID, f.MRIID, f.Note)}
	}
	return nil
}
