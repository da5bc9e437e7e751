package workflow

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"bindery/api"
	"bindery/internal/platform/config"
	"bindery/internal/vocab/apperr"
	"bindery/internal/vocab/explain"
	"bindery/internal/vocab/state"
	"bindery/store"
)

// Access reviews (docs/workflow.md, 'Access reviews'). A target's owners (catalog key owners:
// identities or group:NAME) or an operator start a review of the target; every binding of it in
// effect at that moment becomes an item, which a reviewer keeps or removes with a comment.
// Completing the review sends every removal through the same path as a revocation — the
// binding's delete action admitted to the waiting set, so the next round puts the removals of a
// project into one batch where they fit — and the review's record says who decided what, when,
// and when each removal took effect (the request's CLOSE_SUCCEEDED step, after its deploy).
// A binding that leaves effect on its own while under review (revoked, expired, re-applied) is
// shown so on its item and skipped at completion: nothing is removed twice.

// maxReviewItems bounds the bindings one review takes; a target with more is reviewed in parts
// (the next review takes those not reviewed).
const maxReviewItems = 5000

// Reviewer is who calls a review's action: their identity, the groups their identity provider
// named, and whether they hold the operators' rule (the server knows; the workflow decides).
type Reviewer struct {
	ID       string
	Groups   []string
	Operator bool
}

// may reports whether r may review t's bindings: an operator, or one of its owners.
func (r Reviewer) may(t config.Target) bool { return r.Operator || t.Owned(r.ID, r.Groups) }

// reviewTarget is the target of a review as the catalog in force defines it; one that left the
// catalog keeps its key and no owners (operators only).
func (w *Workflow) reviewTarget(key string) config.Target {
	if t, ok := w.cfg.Current().Target(key); ok {
		return t
	}
	return config.Target{Key: key, Title: key}
}

// StartReview starts a review of targetKey due at due, as r; operationID is the call's own id (a
// repeat answers the same review).
func (w *Workflow) StartReview(ctx context.Context, r Reviewer, operationID, targetKey string, due time.Time) (api.ReviewStarted, error) {
	t, ok := w.cfg.Current().Target(targetKey)
	if !ok {
		return api.ReviewStarted{}, apperr.Invalid("targetKey", "%s", explain.ReviewUnknownTarget)
	}
	if !r.may(t) {
		return api.ReviewStarted{}, apperr.New(apperr.AccessDenied, "%s", explain.ReviewNotReviewer)
	}
	return w.startReview(ctx, t, r.ID, operationID, due)
}

// startReview records the review and its items, and tells its reviewers, in one transaction.
func (w *Workflow) startReview(ctx context.Context, t config.Target, by, operationID string, due time.Time) (api.ReviewStarted, error) {
	var out api.ReviewStarted
	err := retryPreempted(ctx, func() error {
		return w.db.InTx(ctx, func(tx *store.Tx) error {
			if rv, err := tx.ReviewByOperation(ctx, operationID); err == nil {
				items, err := tx.ReviewItems(ctx, rv.ID)
				out = api.ReviewStarted{ID: rv.ID, Items: len(items)}
				return err
			} else if !errors.Is(err, store.ErrNotFound) {
				return err
			}
			bs, err := tx.InEffectOf(ctx, t.Key, maxReviewItems)
			if err != nil {
				return err
			}
			if len(bs) == 0 {
				return apperr.New(apperr.Conflict, "%s", explain.ReviewNoBindings)
			}
			id, err := tx.InsertReview(ctx, store.Review{OperationID: operationID, TargetKey: t.Key, StartedBy: by, DueAt: due}, bs)
			if errors.Is(err, store.ErrReviewOpen) {
				return apperr.New(apperr.Conflict, "%s", explain.ReviewOpenAlready)
			}
			if err != nil {
				return err
			}
			out = api.ReviewStarted{ID: id, Items: len(bs)}
			return tellReviewers(ctx, tx, t, id, state.EventReviewStarted, due, len(bs))
		})
	})
	return out, err
}

// tellReviewers tells each owner of t who is a person (a group has no address of its own: its
// members read the Reviews page) of review id, once per review and event type.
func tellReviewers(ctx context.Context, tx *store.Tx, t config.Target, id int64, typ state.EventType, due time.Time, items int) error {
	for _, o := range t.Owners {
		if strings.HasPrefix(o, config.OwnerGroupPrefix) {
			continue
		}
		if _, err := tx.Tell(ctx, store.ReviewEvent(typ, id, t.Key, o, due, items)); err != nil {
			return err
		}
	}
	return nil
}

// OverdueReviews counts the open reviews past their due date, up to limit (the operators'
// attention count).
func (w *Workflow) OverdueReviews(ctx context.Context, limit int) (int, error) {
	return w.db.OverdueReviews(ctx, limit)
}

// Reviews lists the reviews of the targets r may review, open ones first.
func (w *Workflow) Reviews(ctx context.Context, r Reviewer) ([]api.ReviewSummary, error) {
	rs, err := w.db.Reviews(ctx, 200)
	if err != nil {
		return nil, err
	}
	now, err := w.db.Now(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]api.ReviewSummary, 0, len(rs))
	for _, rv := range rs {
		if !r.may(w.reviewTarget(rv.TargetKey)) {
			continue
		}
		out = append(out, api.ReviewSummary{ID: rv.ID, TargetKey: rv.TargetKey, Status: rv.Status, StartedBy: rv.StartedBy, StartedAt: rv.CreatedAt,
			Due: rv.DueAt, Overdue: rv.Status == store.ReviewOpen && now.After(rv.DueAt), CompletedAt: rv.CompletedAt})
	}
	return out, nil
}

// reviewOf reads review id and checks that r may review it (NOT_FOUND, ACCESS_DENIED).
func (w *Workflow) reviewOf(ctx context.Context, r Reviewer, id int64) (store.Review, error) {
	rv, err := w.db.ReviewByID(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return rv, apperr.Wrap(err, apperr.NotFound, "No such review.")
	}
	if err != nil {
		return rv, err
	}
	if !r.may(w.reviewTarget(rv.TargetKey)) {
		return rv, apperr.New(apperr.AccessDenied, "%s", explain.ReviewNotReviewer)
	}
	return rv, nil
}

// Review is review id with its items, as r reads it.
func (w *Workflow) Review(ctx context.Context, r Reviewer, id int64) (api.ReviewView, error) {
	rv, err := w.reviewOf(ctx, r, id)
	if err != nil {
		return api.ReviewView{}, err
	}
	return w.reviewView(ctx, rv)
}

// reviewView is rv with its items: each with its holder, since when it is in effect, who
// approved it, its last renewal, and what became of it.
func (w *Workflow) reviewView(ctx context.Context, rv store.Review) (api.ReviewView, error) {
	items, err := w.db.ReviewItems(ctx, rv.ID)
	if err != nil {
		return api.ReviewView{}, err
	}
	ops := make([]string, len(items))
	for i, it := range items {
		ops[i] = it.OperationID
	}
	facts, err := w.db.FactsOf(ctx, ops)
	if err != nil {
		return api.ReviewView{}, err
	}
	closed, err := w.db.ClosedAt(ctx, ops)
	if err != nil {
		return api.ReviewView{}, err
	}
	expiries, now, err := w.db.Expiries(ctx, ops)
	if err != nil {
		return api.ReviewView{}, err
	}
	rf, err := w.db.ReviewFactsOf(ctx, ops)
	if err != nil {
		return api.ReviewView{}, err
	}
	v := api.ReviewView{ID: rv.ID, TargetKey: rv.TargetKey, TargetTitle: w.reviewTarget(rv.TargetKey).Title, Status: rv.Status, StartedBy: rv.StartedBy,
		StartedAt: rv.CreatedAt, Due: rv.DueAt, Overdue: rv.Status == store.ReviewOpen && now.After(rv.DueAt), CompletedBy: rv.CompletedBy,
		CompletedAt: rv.CompletedAt, Items: make([]api.ReviewItem, 0, len(items))}
	for _, it := range items {
		f := facts[it.OperationID]
		item := api.ReviewItem{ID: it.ID, OperationID: it.OperationID, Subject: it.SubjectID, Decision: it.Decision, Comment: it.Comment,
			DecidedBy: it.DecidedBy, DecidedAt: it.DecidedAt, Since: f.DeployedAt, ApprovedBy: f.DecidedBy, Removal: it.Removal, RemovalStartedAt: it.RemovalAt}
		if e, ok := expiries[it.OperationID]; ok {
			item.ExpiresAt = &e
		}
		if at, ok := rf.RenewedAt[it.OperationID]; ok {
			item.RenewedAt = &at
		}
		item.InEffect = rf.InEffect[it.OperationID]
		switch at, gone := closed[it.OperationID]; {
		case it.Removal == store.RemovalSkipped:
			item.Note = explain.ReviewItemSkipped
		case it.Removal == store.RemovalStarted && gone:
			item.RemovedAt, item.Note = &at, explain.ReviewItemRemoved
		case it.Removal == store.RemovalStarted:
			item.Note = explain.ReviewItemRemoving
		case !item.InEffect:
			item.Note = explain.ReviewItemClosed
		}
		if it.Decision == "" {
			v.Undecided++
		}
		v.Items = append(v.Items, item)
	}
	return v, nil
}

// DecideReviewItem records r's decision (keep or remove, with a comment) of item itemID of
// review id; operationID is the call's own id. A decision is final: a repeat of the call answers
// the review again, another call deciding the item otherwise is a conflict (the same decision
// again changes nothing). A completed review's decisions no longer change.
func (w *Workflow) DecideReviewItem(ctx context.Context, r Reviewer, id, itemID int64, operationID, decision, comment string) (api.ReviewView, error) {
	if decision != store.DecisionKeep && decision != store.DecisionRemove {
		return api.ReviewView{}, apperr.Invalid("decision", "must be keep or remove")
	}
	rv, err := w.reviewOf(ctx, r, id)
	if err != nil {
		return api.ReviewView{}, err
	}
	err = retryPreempted(ctx, func() error {
		return w.db.InTx(ctx, func(tx *store.Tx) error {
			it, err := tx.ReviewItem(ctx, id, itemID)
			if errors.Is(err, store.ErrNotFound) {
				return apperr.Wrap(err, apperr.NotFound, "No such item in this review.")
			}
			if err != nil {
				return err
			}
			if it.DecidedOp != "" {
				if it.DecidedOp == operationID || it.Decision == decision {
					return nil
				}
				return apperr.New(apperr.Conflict, "%s", explain.ReviewItemDecided)
			}
			cur, err := tx.ReviewByID(ctx, id)
			if err != nil {
				return err
			}
			if cur.Status != store.ReviewOpen {
				return apperr.New(apperr.Conflict, "%s", explain.ReviewCompleted)
			}
			if ok, err := tx.DecideReviewItem(ctx, itemID, decision, oneLine(comment, maxComment), r.ID, operationID); err != nil || ok {
				return err
			}
			return store.ErrPreempted // decided meanwhile: read it again
		})
	})
	if err != nil {
		return api.ReviewView{}, err
	}
	return w.reviewView(ctx, rv)
}

// CompleteReview completes review id as r; operationID is the call's own id (a repeat answers
// the review again; completing a completed review otherwise is a conflict). Every item to remove
// whose binding is still in effect by the reviewed request starts its close phase — the delete
// action admitted like a revocation's, with the review's note — and the others are skipped; the
// items nobody decided are kept. All in one transaction, so a review is completed with all its
// removals started or not at all.
func (w *Workflow) CompleteReview(ctx context.Context, r Reviewer, id int64, operationID string) (api.ReviewView, error) {
	rv, err := w.reviewOf(ctx, r, id)
	if err != nil {
		return api.ReviewView{}, err
	}
	err = retryPreempted(ctx, func() error {
		return w.db.InTx(ctx, func(tx *store.Tx) error {
			cur, err := tx.ReviewByID(ctx, id)
			if err != nil {
				return err
			}
			if cur.Status != store.ReviewOpen {
				if cur.CompletedOp == operationID {
					return nil
				}
				return apperr.New(apperr.Conflict, "%s", explain.ReviewCompletedOnce)
			}
			// The review's guarded write first: a concurrent completion waits on its row, then
			// finds it completed and starts nothing.
			if ok, err := tx.CompleteReview(ctx, id, operationID, r.ID); err != nil || !ok {
				if err == nil {
					err = store.ErrPreempted
				}
				return err
			}
			items, err := tx.ReviewItems(ctx, id)
			if err != nil {
				return err
			}
			for _, it := range items {
				if it.Decision != store.DecisionRemove {
					continue
				}
				started, err := w.removeReviewed(ctx, tx, id, it)
				if err != nil {
					return err
				}
				removal := store.RemovalSkipped
				if started {
					removal = store.RemovalStarted
				}
				if err := tx.SetReviewRemoval(ctx, it.ID, removal); err != nil {
					return err
				}
			}
			return nil
		})
	})
	if err != nil {
		return api.ReviewView{}, err
	}
	rv, err = w.db.ReviewByID(ctx, id)
	if err != nil {
		return api.ReviewView{}, err
	}
	return w.reviewView(ctx, rv)
}

// removeReviewed starts the close phase of an item's binding in tx, as a revocation does, when
// the reviewed request still holds it in effect (false otherwise: it left effect on its own, or
// its removal runs already — nothing is removed twice).
func (w *Workflow) removeReviewed(ctx context.Context, tx *store.Tx, review int64, it store.ReviewItem) (bool, error) {
	cur, err := tx.Request(ctx, it.OperationID)
	if errors.Is(err, store.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if !cur.Current() || cur.Binding.Status != state.StatusValidated || cur.Operation.Step != state.StepCalledBack {
		return false, nil
	}
	return w.beginClose(ctx, tx, cur, explain.ReviewRemoval(review, it.DecidedBy, it.Comment))
}

// ReviewRecords calls row for each item of review id, as r reads it: the review's record for an
// export.
func (w *Workflow) ReviewRecords(ctx context.Context, r Reviewer, id int64, row func(api.ReviewRecord) error) error {
	v, err := w.Review(ctx, r, id)
	if err != nil {
		return err
	}
	for _, it := range v.Items {
		if err := row(api.ReviewRecord{Review: v.ID, Target: v.TargetKey, Item: it.ID, Request: it.OperationID, Subject: it.Subject, Since: it.Since,
			ApprovedBy: it.ApprovedBy, Decision: it.Decision, Comment: it.Comment, DecidedBy: it.DecidedBy, DecidedAt: it.DecidedAt,
			Removal: it.Removal, RemovedAt: it.RemovedAt}); err != nil {
			return err
		}
	}
	return nil
}

// reviewReminder is how long before its due date an open review's reviewers are reminded.
const reviewReminder = 24 * time.Hour

// reviewPage bounds one pass of the review job; the next pass takes the rest.
const reviewPage = 100

// RunReviews is the review job's pass: it starts a review of each target whose reviews.every
// passed since its last one (or that was never reviewed), and reminds the reviewers of each open
// review due within reviewReminder, once. Safe on every instance at once: a target has one open
// review (its unique slot) and a review's key is the target and the day, and the reminder's
// guarded write lets one instance tell it.
func (w *Workflow) RunReviews(ctx context.Context) (int, error) {
	n := 0
	for _, t := range w.cfg.Current().Targets() {
		if t.ReviewEvery <= 0 {
			continue
		}
		last, now, ok, err := w.db.LastReviewStarted(ctx, t.Key)
		if err != nil {
			return n, err
		}
		if ok && now.Sub(last) < t.ReviewEvery {
			continue
		}
		key := fmt.Sprintf("every-%s-%s", t.Key, now.UTC().Format("20060102"))
		// A conflict is an open review already, or nothing in effect to review: none to start.
		if _, err = w.startReview(ctx, t, "bindery", key, now.Add(t.ReviewDue)); err == nil {
			n++
		} else if apperr.CodeOf(err) != apperr.Conflict {
			return n, err
		}
	}
	due, err := w.db.ReviewsDueWithin(ctx, reviewReminder, reviewPage)
	if err != nil {
		return n, err
	}
	for _, rv := range due {
		err := w.db.InTx(ctx, func(tx *store.Tx) error {
			if ok, err := tx.MarkReviewReminded(ctx, rv.ID); err != nil || !ok {
				return err
			}
			items, err := tx.ReviewItems(ctx, rv.ID)
			if err != nil {
				return err
			}
			undecided := 0
			for _, it := range items {
				if it.Decision == "" {
					undecided++
				}
			}
			n++
			return tellReviewers(ctx, tx, w.reviewTarget(rv.TargetKey), rv.ID, state.EventReviewDue, rv.DueAt, undecided)
		})
		if err != nil {
			return n, err
		}
	}
	return n, nil
}
