package api

import "time"

// Access reviews (docs/workflow.md, 'Access reviews'): a target's owners or an operator keep or
// remove each binding of the target in effect; completing the review sends the removals through
// the batch path as revocations.

// ReviewStart is the body of POST /api/reviews.
type ReviewStart struct {
	OperationID string `json:"operationId"`
	TargetKey   string `json:"targetKey"`
	// Due is when the reviewers should be done (RFC 3339, in the future).
	Due time.Time `json:"due"`
}

// ReviewStarted is the answer of POST /api/reviews.
type ReviewStarted struct {
	ID    int64 `json:"id"`
	Items int   `json:"items"`
}

// ReviewDecide is the body of POST /api/reviews/{id}/items/{itemId}/decide.
type ReviewDecide struct {
	OperationID string `json:"operationId"`
	Decision    string `json:"decision"` // keep or remove
	Comment     string `json:"comment,omitempty"`
}

// ReviewComplete is the body of POST /api/reviews/{id}/complete.
type ReviewComplete struct {
	OperationID string `json:"operationId"`
}

// ReviewView is one review with its items (GET /api/reviews/{id}).
type ReviewView struct {
	ID          int64        `json:"id"`
	TargetKey   string       `json:"targetKey"`
	TargetTitle string       `json:"targetTitle"`
	Status      string       `json:"status"` // OPEN or COMPLETED
	StartedBy   string       `json:"startedBy"`
	StartedAt   time.Time    `json:"startedAt"`
	Due         time.Time    `json:"due"`
	Overdue     bool         `json:"overdue,omitempty"`
	CompletedBy string       `json:"completedBy,omitempty"`
	CompletedAt *time.Time   `json:"completedAt,omitempty"`
	Items       []ReviewItem `json:"items"`
	// Undecided counts the items nobody decided yet (completing keeps them).
	Undecided int `json:"undecided"`
}

// ReviewItem is one binding under review.
type ReviewItem struct {
	ID          int64      `json:"id"`
	OperationID string     `json:"operationId"` // the request that drives the binding
	Subject     string     `json:"subject"`     // its holder
	Decision    string     `json:"decision"`    // "", keep or remove
	Comment     string     `json:"comment"`
	DecidedBy   string     `json:"decidedBy"`
	DecidedAt   *time.Time `json:"decidedAt"`
	// Since is when the binding came into effect; ApprovedBy who approved it; RenewedAt and
	// ExpiresAt its last renewal and its expiry.
	Since      *time.Time `json:"since,omitempty"`
	ApprovedBy string     `json:"approvedBy,omitempty"`
	RenewedAt  *time.Time `json:"renewedAt,omitempty"`
	ExpiresAt  *time.Time `json:"expiresAt,omitempty"`
	// InEffect: the binding is still in effect by this request; Note says otherwise what
	// became of it (closed on its own while under review, removal on its way, removed).
	InEffect bool   `json:"inEffect"`
	Note     string `json:"note,omitempty"`
	// Removal is what completing did with a removal (STARTED, SKIPPED); RemovalStartedAt when,
	// RemovedAt when its deploy took it out of effect.
	Removal          string     `json:"removal,omitempty"`
	RemovalStartedAt *time.Time `json:"removalStartedAt,omitempty"`
	RemovedAt        *time.Time `json:"removedAt,omitempty"`
}

// ReviewSummary is one row of GET /api/reviews.
type ReviewSummary struct {
	ID          int64      `json:"id"`
	TargetKey   string     `json:"targetKey"`
	Status      string     `json:"status"`
	StartedBy   string     `json:"startedBy"`
	StartedAt   time.Time  `json:"startedAt"`
	Due         time.Time  `json:"due"`
	Overdue     bool       `json:"overdue,omitempty"`
	CompletedAt *time.Time `json:"completedAt,omitempty"`
}

// ReviewRecord is one row of a review's export (GET /api/reviews/{id}/export): one item, who
// decided what and when, and when its removal took effect.
type ReviewRecord struct {
	Review     int64      `json:"review"`
	Target     string     `json:"target"`
	Item       int64      `json:"item"`
	Request    string     `json:"request"`
	Subject    string     `json:"subject"`
	Since      *time.Time `json:"since,omitempty"`
	ApprovedBy string     `json:"approvedBy,omitempty"`
	Decision   string     `json:"decision"`
	Comment    string     `json:"comment,omitempty"`
	DecidedBy  string     `json:"decidedBy,omitempty"`
	DecidedAt  *time.Time `json:"decidedAt,omitempty"`
	Removal    string     `json:"removal,omitempty"`
	RemovedAt  *time.Time `json:"removedAt,omitempty"`
}
