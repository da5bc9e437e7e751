package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"bindery/internal/vocab/state"
)

// Access reviews (tables review and review_item; docs/workflow.md, 'Access reviews'). The store
// records a review, its items and their decisions with guarded writes; which bindings become
// items, who may decide and what completing does are the workflow's.

// Review statuses.
const (
	ReviewOpen      = "OPEN"
	ReviewCompleted = "COMPLETED"
)

// Item decisions ("" : not decided yet).
const (
	DecisionKeep   = "keep"
	DecisionRemove = "remove"
)

// What completing a review did with an item to remove (ReviewItem.Removal).
const (
	RemovalStarted = "STARTED" // its revocation went to the batch path
	RemovalSkipped = "SKIPPED" // the binding had left effect on its own meanwhile
)

// Review is one access review of a target.
type Review struct {
	ID          int64
	OperationID string // the operationId of the call (or the cron's key) that started it
	TargetKey   string
	Status      string
	StartedBy   string
	DueAt       time.Time
	RemindedAt  *time.Time
	CompletedOp string
	CompletedBy string
	CompletedAt *time.Time
	CreatedAt   time.Time
}

// ReviewItem is one binding under review and what became of it.
type ReviewItem struct {
	ID          int64
	ReviewID    int64
	OperationID string // the request that drove the binding when the review started
	SubjectID   string
	Decision    string
	Comment     string
	DecidedBy   string
	DecidedOp   string
	DecidedAt   *time.Time
	Removal     string
	RemovalAt   *time.Time
}

// ErrReviewOpen is InsertReview's answer when the target has an open review already (one at a
// time per target).
var ErrReviewOpen = errors.New("the target has an open review already")

const reviewColumns = "id, operation_id, target_key, status, started_by, due_at, reminded_at, completed_op, completed_by, completed_at, created_at"

func scanReview(s scanner) (Review, error) {
	var r Review
	var due, reminded, completed, created dbTime
	var op nullString
	if err := s.Scan(&r.ID, &r.OperationID, &r.TargetKey, &r.Status, &r.StartedBy, &due, &reminded, &op, &r.CompletedBy, &completed, &created); err != nil {
		return Review{}, translate(err)
	}
	r.DueAt, r.RemindedAt, r.CompletedOp, r.CompletedAt, r.CreatedAt = due.T, reminded.ptr(), string(op), completed.ptr(), created.T
	return r, nil
}

const reviewItemColumns = "id, review_id, operation_id, subject_id, decision, comment, decided_by, decided_op, decided_at, removal, removal_at"

func scanReviewItem(s scanner) (ReviewItem, error) {
	var it ReviewItem
	var decided, removal dbTime
	var op nullString
	if err := s.Scan(&it.ID, &it.ReviewID, &it.OperationID, &it.SubjectID, &it.Decision, &it.Comment, &it.DecidedBy, &op, &decided, &it.Removal, &removal); err != nil {
		return ReviewItem{}, translate(err)
	}
	it.DecidedOp, it.DecidedAt, it.RemovalAt = string(op), decided.ptr(), removal.ptr()
	return it, nil
}

// InEffect is a binding in effect: the request that drives it and its holder.
type InEffect struct {
	OperationID string
	SubjectID   string
}

// InEffectOf lists the bindings of targetKey in effect — VALIDATED at CALLED_BACK (one whose
// removal runs already is not reviewed) — up to limit, oldest grant first.
func (tx *Tx) InEffectOf(ctx context.Context, targetKey string, limit int) ([]InEffect, error) {
	rows, err := tx.tx.QueryContext(ctx, "SELECT o.operation_id, o.subject_id FROM "+tx.db.hinted("binding", "idx_binding_target_status")+
		" JOIN operation o ON o.operation_id = binding.operation_id WHERE binding.target_key = ? AND binding.status = ? AND o.step = ?"+
		" ORDER BY binding.created_at, binding.id LIMIT ?", targetKey, state.StatusValidated, state.StepCalledBack, limit)
	out, err := collect(rows, err, func(s scanner) (InEffect, error) {
		var b InEffect
		return b, s.Scan(&b.OperationID, &b.SubjectID)
	})
	if err != nil {
		return nil, fmt.Errorf("bindings of %s in effect: %w", targetKey, err)
	}
	return out, nil
}

// InsertReview records an open review with one item per binding and returns its id. A repeat of
// its operationId is ErrDuplicate; a target with an open review already is ErrReviewOpen.
func (tx *Tx) InsertReview(ctx context.Context, r Review, items []InEffect) (int64, error) {
	res, err := tx.tx.ExecContext(ctx, "INSERT INTO review (operation_id, target_key, open_target, status, started_by, due_at) VALUES (?, ?, ?, ?, ?, ?)",
		clipText(r.OperationID, 64), r.TargetKey, r.TargetKey, ReviewOpen, clipText(r.StartedBy, 254), tx.db.timeArg(r.DueAt))
	if err = translate(err); errors.Is(err, ErrDuplicate) {
		if _, perr := reviewWhere(ctx, tx.tx, "operation_id = ?", r.OperationID); errors.Is(perr, ErrNotFound) {
			return 0, ErrReviewOpen // the target's slot, not the id, was taken
		}
	}
	if err != nil {
		return 0, fmt.Errorf("record review of %s: %w", r.TargetKey, err)
	}
	id, err := res.LastInsertId()
	if err != nil {
		return 0, fmt.Errorf("record review of %s: %w", r.TargetKey, err)
	}
	for _, it := range items {
		if _, err := tx.tx.ExecContext(ctx, "INSERT INTO review_item (review_id, operation_id, subject_id) VALUES (?, ?, ?)", id, it.OperationID, it.SubjectID); err != nil {
			return 0, fmt.Errorf("record item %s of review %d: %w", it.OperationID, id, translate(err))
		}
	}
	return id, nil
}

// ReviewByID reads review id (ErrNotFound when unknown).
func (ex executor) ReviewByID(ctx context.Context, id int64) (Review, error) {
	return reviewWhere(ctx, ex.q(), "id = ?", id)
}

// ReviewByOperation reads the review the call operationID started (ErrNotFound: none).
func (ex executor) ReviewByOperation(ctx context.Context, operationID string) (Review, error) {
	return reviewWhere(ctx, ex.q(), "operation_id = ?", operationID)
}

func reviewWhere(ctx context.Context, q queryer, where string, arg any) (Review, error) {
	r, err := scanReview(q.QueryRowContext(ctx, "SELECT "+reviewColumns+" FROM review WHERE "+where, arg))
	if err != nil {
		return Review{}, fmt.Errorf("review %v: %w", arg, err)
	}
	return r, nil
}

// Reviews lists up to limit reviews, open ones first, then newest first.
func (db *DB) Reviews(ctx context.Context, limit int) ([]Review, error) {
	rows, err := db.ro.QueryContext(ctx, "SELECT "+reviewColumns+" FROM review ORDER BY CASE WHEN status = ? THEN 0 ELSE 1 END, created_at DESC, id DESC LIMIT ?", ReviewOpen, limit)
	return collect(rows, err, scanReview)
}

// ReviewItems lists the items of review id, in the order they were recorded.
func (ex executor) ReviewItems(ctx context.Context, id int64) ([]ReviewItem, error) {
	rows, err := ex.q().QueryContext(ctx, "SELECT "+reviewItemColumns+" FROM review_item WHERE review_id = ? ORDER BY created_at, id", id)
	out, err := collect(rows, err, scanReviewItem)
	if err != nil {
		return nil, fmt.Errorf("items of review %d: %w", id, err)
	}
	return out, nil
}

// ReviewItem reads item itemID of review reviewID (ErrNotFound when it is not one of its items).
func (ex executor) ReviewItem(ctx context.Context, reviewID, itemID int64) (ReviewItem, error) {
	it, err := scanReviewItem(ex.q().QueryRowContext(ctx, "SELECT "+reviewItemColumns+" FROM review_item WHERE id = ? AND review_id = ?", itemID, reviewID))
	if err != nil {
		return ReviewItem{}, fmt.Errorf("item %d of review %d: %w", itemID, reviewID, err)
	}
	return it, nil
}

// DecideReviewItem records an item's decision once: false when it was decided before.
func (tx *Tx) DecideReviewItem(ctx context.Context, itemID int64, decision, comment, by, op string) (bool, error) {
	res, err := tx.tx.ExecContext(ctx, "UPDATE review_item SET decision = ?, comment = ?, decided_by = ?, decided_op = ?, decided_at = "+tx.db.now()+" WHERE id = ? AND decided_op IS NULL",
		decision, clipText(comment, 1000), clipText(by, 254), clipText(op, 64), itemID)
	n, err := affectedOr(res, translate(err))
	if err != nil {
		return false, fmt.Errorf("decide review item %d: %w", itemID, err)
	}
	return n == 1, nil
}

// CompleteReview ends the open review id as completed by the call op: false when it was not
// open (completed before). It frees the target's open slot.
func (tx *Tx) CompleteReview(ctx context.Context, id int64, op, by string) (bool, error) {
	res, err := tx.tx.ExecContext(ctx, "UPDATE review SET status = ?, open_target = NULL, completed_op = ?, completed_by = ?, completed_at = "+tx.db.now()+" WHERE id = ? AND status = ?",
		ReviewCompleted, clipText(op, 64), clipText(by, 254), id, ReviewOpen)
	n, err := affectedOr(res, translate(err))
	if err != nil {
		return false, fmt.Errorf("complete review %d: %w", id, err)
	}
	return n == 1, nil
}

// SetReviewRemoval records what completing the review did with an item to remove.
func (tx *Tx) SetReviewRemoval(ctx context.Context, itemID int64, removal string) error {
	_, err := tx.tx.ExecContext(ctx, "UPDATE review_item SET removal = ?, removal_at = "+tx.db.now()+" WHERE id = ?", removal, itemID)
	if err != nil {
		return fmt.Errorf("removal of review item %d: %w", itemID, translate(err))
	}
	return nil
}

// ClosedAt reads when each of the given requests' bindings was removed (its CLOSE_SUCCEEDED
// step: the removal's deploy came), for those that were.
func (db *DB) ClosedAt(ctx context.Context, operationIDs []string) (map[string]time.Time, error) {
	out := map[string]time.Time{}
	for _, chunk := range chunks(operationIDs, maxInList) {
		rows, err := db.ro.QueryContext(ctx, "SELECT operation_id, MIN(at) FROM operation_step WHERE step = ? AND operation_id IN "+inList(len(chunk))+" GROUP BY operation_id",
			append([]any{state.StepCloseSucceeded}, anys(chunk)...)...)
		type pair struct {
			op string
			at dbTime
		}
		got, err := collect(rows, err, func(s scanner) (pair, error) {
			var p pair
			return p, s.Scan(&p.op, &p.at)
		})
		if err != nil {
			return nil, fmt.Errorf("removals of %d requests: %w", len(chunk), err)
		}
		for _, p := range got {
			out[p.op] = p.at.T
		}
	}
	return out, nil
}

// OverdueReviews counts the open reviews past their due date by the database clock, up to limit.
func (db *DB) OverdueReviews(ctx context.Context, limit int) (int, error) {
	var n int
	err := db.ro.QueryRowContext(ctx, "SELECT COUNT(*) FROM (SELECT id FROM review WHERE status = ? AND due_at < "+db.now()+" LIMIT ?) x", ReviewOpen, limit).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("overdue reviews: %w", translate(err))
	}
	return n, nil
}

// ReviewsDueWithin lists up to limit open reviews not reminded yet whose due date is at most
// within from now by the database clock.
func (db *DB) ReviewsDueWithin(ctx context.Context, within time.Duration, limit int) ([]Review, error) {
	rows, err := db.ro.QueryContext(ctx, "SELECT "+reviewColumns+" FROM review WHERE status = ? AND reminded_at IS NULL AND due_at <= "+db.nowPlus()+" ORDER BY due_at, id LIMIT ?",
		ReviewOpen, micros(within), limit)
	out, err := collect(rows, err, scanReview)
	if err != nil {
		return nil, fmt.Errorf("reviews due within %s: %w", within, err)
	}
	return out, nil
}

// MarkReviewReminded records that review id's reviewers were reminded: false when they were
// already (another instance did).
func (tx *Tx) MarkReviewReminded(ctx context.Context, id int64) (bool, error) {
	res, err := tx.tx.ExecContext(ctx, "UPDATE review SET reminded_at = "+tx.db.now()+" WHERE id = ? AND reminded_at IS NULL", id)
	n, err := affectedOr(res, translate(err))
	if err != nil {
		return false, fmt.Errorf("remind review %d: %w", id, err)
	}
	return n == 1, nil
}

// LastReviewStarted is when the newest review of targetKey started, and the database clock
// (ok false: never reviewed).
func (db *DB) LastReviewStarted(ctx context.Context, targetKey string) (last, now time.Time, ok bool, err error) {
	var at, clock dbTime
	err = db.ro.QueryRowContext(ctx, "SELECT MAX(created_at), "+db.now()+" FROM review WHERE target_key = ?", targetKey).Scan(&at, &clock)
	if err != nil {
		return time.Time{}, time.Time{}, false, fmt.Errorf("last review of %s: %w", targetKey, translate(err))
	}
	return at.T, clock.T, at.Valid, nil
}

// ReviewFacts are what a review's page reads of its items' bindings, in a few reads per chunk
// of requests however many items it has: which are still in effect by the reviewed request
// (VALIDATED at CALLED_BACK), and when each was last renewed.
type ReviewFacts struct {
	InEffect  map[string]bool
	RenewedAt map[string]time.Time
}

// ReviewFactsOf reads the ReviewFacts of the given requests.
func (db *DB) ReviewFactsOf(ctx context.Context, operationIDs []string) (ReviewFacts, error) {
	out := ReviewFacts{InEffect: map[string]bool{}, RenewedAt: map[string]time.Time{}}
	for _, chunk := range chunks(operationIDs, maxInList) {
		rows, err := db.ro.QueryContext(ctx, "SELECT b.operation_id FROM binding b JOIN operation o ON o.operation_id = b.operation_id"+
			" WHERE b.operation_id IN "+inList(len(chunk))+" AND b.status = ? AND o.step = ?",
			append(anys(chunk), state.StatusValidated, state.StepCalledBack)...)
		ops, err := collect(rows, err, func(s scanner) (string, error) { var op string; return op, s.Scan(&op) })
		if err != nil {
			return out, fmt.Errorf("bindings in effect among %d requests: %w", len(chunk), err)
		}
		for _, op := range ops {
			out.InEffect[op] = true
		}
		rows, err = db.ro.QueryContext(ctx, "SELECT operation_id, MAX(decided_at) FROM renewal WHERE status = ? AND operation_id IN "+inList(len(chunk))+" GROUP BY operation_id",
			append([]any{RenewalRenewed}, anys(chunk)...)...)
		type pair struct {
			op string
			at dbTime
		}
		got, err := collect(rows, err, func(s scanner) (pair, error) { var p pair; return p, s.Scan(&p.op, &p.at) })
		if err != nil {
			return out, fmt.Errorf("renewals of %d requests: %w", len(chunk), err)
		}
		for _, p := range got {
			if p.at.Valid {
				out.RenewedAt[p.op] = p.at.T
			}
		}
	}
	return out, nil
}
