package server

import (
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"bindery/api"
	"bindery/internal/vocab/apperr"
	"bindery/workflow"
)

// Access reviews (docs/api.md, 'Access reviews'): a target's owners or an operator start a
// review, keep or remove each binding of it, and complete it; its record is exported like the
// audit log. Whether the caller may review a target is the workflow's decision (owners are in
// the catalog); the server says who the caller is and whether they are an operator.

// maxReviewComment bounds a decision's comment.
const maxReviewComment = 1000

// reviewer is the caller of r as the workflow's reviews know them.
func (s *Server) reviewer(r *http.Request) workflow.Reviewer {
	c := infoOf(r).caller
	return workflow.Reviewer{ID: c.ID, Groups: c.Groups, Operator: s.isOperator(r.Context(), c)}
}

// reviewID reads the {id} of a review's path.
func reviewID(r *http.Request) (int64, error) {
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil || id <= 0 {
		return 0, apperr.Invalid("id", "must be a review's id (a positive integer)")
	}
	return id, nil
}

// reviews is GET /api/reviews: the reviews of the targets the caller may review, open first.
func (s *Server) reviews(w http.ResponseWriter, r *http.Request) (int, any, error) {
	items, err := s.deps.Workflow.Reviews(r.Context(), s.reviewer(r))
	if items == nil {
		items = []api.ReviewSummary{}
	}
	return http.StatusOK, map[string]any{"items": items}, err
}

// startReview is POST /api/reviews {operationId, targetKey, due}: 201 with the review's id; 403
// for a caller who is neither an owner of the target nor an operator; 409 when the target has no
// binding in effect or an open review already. Idempotent, audited.
func (s *Server) startReview(w http.ResponseWriter, r *http.Request) (int, any, error) {
	var b api.ReviewStart
	if err := bindJSON(r, &b, true); err != nil {
		return 0, nil, err
	}
	if err := checkOperationID("operationId", b.OperationID); err != nil {
		return 0, nil, err
	}
	switch b.TargetKey = strings.TrimSpace(b.TargetKey); {
	case b.TargetKey == "":
		return 0, nil, apperr.Invalid("targetKey", "is required")
	case !s.inCatalog(b.TargetKey):
		return 0, nil, apperr.Invalid("targetKey", "is not in the catalog")
	}
	if b.Due.IsZero() || !b.Due.After(s.now()) {
		return 0, nil, apperr.Invalid("due", "must be a time in the future (RFC 3339)")
	}
	rv := s.reviewer(r)
	params := map[string]any{"target": b.TargetKey, "due": b.Due.UTC().Format(time.RFC3339)}
	return s.idempotent(w, r, "review.start", b.OperationID, params, func() (int, any, error) {
		if err := s.audit(r, "review.start", b.OperationID, params); err != nil {
			return 0, nil, err
		}
		out, err := s.deps.Workflow.StartReview(r.Context(), rv, b.OperationID, b.TargetKey, b.Due.UTC())
		return http.StatusCreated, out, err
	}, replayStored)
}

// inCatalog reports whether key is a target of the catalog in force.
func (s *Server) inCatalog(key string) bool {
	_, ok := s.deps.Config.Current().Target(key)
	return ok
}

// review is GET /api/reviews/{id}: the review with its items (owners of its target, operators).
func (s *Server) review(w http.ResponseWriter, r *http.Request) (int, any, error) {
	id, err := reviewID(r)
	if err != nil {
		return 0, nil, err
	}
	v, err := s.deps.Workflow.Review(r.Context(), s.reviewer(r), id)
	return http.StatusOK, v, err
}

// decideReview is POST /api/reviews/{id}/items/{itemId}/decide {operationId, decision, comment}:
// the review again; 409 when the item was decided otherwise or the review is completed.
func (s *Server) decideReview(w http.ResponseWriter, r *http.Request) (int, any, error) {
	id, err := reviewID(r)
	if err != nil {
		return 0, nil, err
	}
	item, err := strconv.ParseInt(r.PathValue("itemId"), 10, 64)
	if err != nil || item <= 0 {
		return 0, nil, apperr.Invalid("itemId", "must be an item's id (a positive integer)")
	}
	var b api.ReviewDecide
	if err := bindJSON(r, &b, true); err != nil {
		return 0, nil, err
	}
	if err := checkOperationID("operationId", b.OperationID); err != nil {
		return 0, nil, err
	}
	if b.Decision != "keep" && b.Decision != "remove" {
		return 0, nil, apperr.Invalid("decision", "must be keep or remove")
	}
	if utf8.RuneCountInString(b.Comment) > maxReviewComment {
		return 0, nil, apperr.Invalid("comment", "must be at most %d characters", maxReviewComment)
	}
	rv := s.reviewer(r)
	params := map[string]any{"review": id, "item": item, "decision": b.Decision, "comment": b.Comment}
	return s.idempotent(w, r, "review.decide", b.OperationID, params, func() (int, any, error) {
		if err := s.audit(r, "review.decide", b.OperationID, params); err != nil {
			return 0, nil, err
		}
		v, err := s.deps.Workflow.DecideReviewItem(r.Context(), rv, id, item, b.OperationID, b.Decision, b.Comment)
		return http.StatusOK, v, err
	}, replayStored)
}

// completeReview is POST /api/reviews/{id}/complete {operationId}: every removal starts through
// the batch path; the review again. 409 when another call completed it.
func (s *Server) completeReview(w http.ResponseWriter, r *http.Request) (int, any, error) {
	id, err := reviewID(r)
	if err != nil {
		return 0, nil, err
	}
	var b api.ReviewComplete
	if err := bindJSON(r, &b, true); err != nil {
		return 0, nil, err
	}
	if err := checkOperationID("operationId", b.OperationID); err != nil {
		return 0, nil, err
	}
	rv := s.reviewer(r)
	params := map[string]any{"review": id}
	return s.idempotent(w, r, "review.complete", b.OperationID, params, func() (int, any, error) {
		if err := s.audit(r, "review.complete", b.OperationID, params); err != nil {
			return 0, nil, err
		}
		v, err := s.deps.Workflow.CompleteReview(r.Context(), rv, id, b.OperationID)
		return http.StatusOK, v, err
	}, replayStored)
}

// reviewColumns are the columns of a review's export, in order (and the NDJSON's fields).
var reviewColumns = []string{"review", "target", "item", "request", "subject", "since", "approvedBy", "decision", "comment", "decidedBy", "decidedAt", "removal", "removedAt"}

// reviewExport is GET /api/reviews/{id}/export?format=csv|ndjson: the review's record, one row
// per item, written like the audit export (the same spreadsheet-safe CSV).
func (s *Server) reviewExport(w http.ResponseWriter, r *http.Request) (int, any, error) {
	id, err := reviewID(r)
	if err != nil {
		return 0, nil, err
	}
	format := r.URL.Query().Get("format")
	switch {
	case !r.URL.Query().Has("format"):
		format = "csv"
	case format == "csv", format == "ndjson":
	default:
		return 0, nil, apperr.Invalid("format", "must be csv or ndjson")
	}
	rv := s.reviewer(r)
	// The review is read (and the caller checked) before the first byte: a refusal is still a
	// proper error answer.
	if _, err := s.deps.Workflow.Review(r.Context(), rv, id); err != nil {
		return 0, nil, err
	}
	out := newExportWriter(w, format, "bindery-review-"+strconv.FormatInt(id, 10), reviewColumns)
	err = s.deps.Workflow.ReviewRecords(r.Context(), rv, id, func(rec api.ReviewRecord) error {
		return out.row(rec, reviewCells(rec))
	})
	if err == nil {
		err = out.flush()
	}
	if err != nil {
		s.deps.Log.WarnContext(r.Context(), "review export ended early", "review", id, "err", err)
	}
	return 0, nil, nil
}

// reviewCells is rec as CSV cells, each safe to open in a spreadsheet.
func reviewCells(rec api.ReviewRecord) []string {
	at := func(t *time.Time) string {
		if t == nil {
			return ""
		}
		return t.UTC().Format(time.RFC3339Nano)
	}
	cells := []string{strconv.FormatInt(rec.Review, 10), rec.Target, strconv.FormatInt(rec.Item, 10), rec.Request, rec.Subject, at(rec.Since),
		rec.ApprovedBy, rec.Decision, rec.Comment, rec.DecidedBy, at(rec.DecidedAt), rec.Removal, at(rec.RemovedAt)}
	for i, c := range cells {
		cells[i] = spreadsheetSafe(c)
	}
	return cells
}
