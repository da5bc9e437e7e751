package server

import (
	"context"
	"log/slog"
	"time"

	"bindery/api"
	"bindery/internal/vocab/state"
	"bindery/store"
	"bindery/workflow"
)

// The seams the HTTP layer calls, defined here where they are used. Package workflow implements
// Workflow, package permission implements Permissions, *store.DB implements Store.

// Workflow is the request lifecycle as the API exposes it. Errors are *apperr.Error where the
// cause is known — NOT_FOUND (no such request or batch), APPLY_IN_PROGRESS (the relation has an
// active request), CONFLICT (e.g. revoking a request that is not VALIDATED), UNAVAILABLE (a
// dependency needed for the answer is down); anything else is answered as a generic 500.
type Workflow interface {
	// Apply does the synchronous part of an application and hands the rest to the workers.
	// in.Subject is the caller's canonical identity; the access mode, the target's permission
	// and idempotency were checked by the HTTP layer.
	Apply(ctx context.Context, in workflow.ApplyInput) (api.ApplyResult, error)
	// Request is the full view of one request; its Subject names the owner.
	Request(ctx context.Context, operationID string) (api.RequestView, error)
	// MyRequests lists subject's requests, newest first.
	MyRequests(ctx context.Context, subject, cursor string, limit int) (api.Page[api.RequestSummary], error)
	// Revoke starts the close phase of a VALIDATED request (CONFLICT otherwise).
	Revoke(ctx context.Context, operationID, actor string) (api.RequestView, error)
	// Renew renews the binding of a request in effect as actor; renewalID is the call's own
	// operationId (CONFLICT when it cannot be renewed now).
	Renew(ctx context.Context, operationID, actor, renewalID string) (api.RequestView, error)
	// Withdraw closes a request that failed on its way (CONFLICT otherwise); idempotent.
	Withdraw(ctx context.Context, operationID, actor string) (api.RequestView, error)
	// Preview renders the file a request of subject for targetKey would change. Read-only.
	Preview(ctx context.Context, targetKey, subject string) (api.Preview, error)

	// Batches lists batches, newest first.
	Batches(ctx context.Context, cursor string, limit int, status state.BatchStatus) (api.Page[api.BatchView], error)
	// RunRound runs one batch round now: the same code as the cron round.
	RunRound(ctx context.Context) (api.RoundResult, error)
	// SettleBatch settles a RUNNING or BLOCKED batch (close, re-read, merged wins).
	SettleBatch(ctx context.Context, batchID int64, actor string) (api.BatchView, error)
	// StuckRequests lists requests waiting for an operator or support.
	StuckRequests(ctx context.Context, f workflow.StuckFilter) (api.Page[api.RequestSummary], error)
	// Retry re-runs the request's current step.
	Retry(ctx context.Context, operationID, actor string) (api.RequestView, error)
	// Reconcile runs the reconciliation of merged requests now.
	Reconcile(ctx context.Context) (api.ReconcileResult, error)
	// Trains is each project's merge train, BLOCKED, failed and paused projects first.
	Trains(ctx context.Context) (api.Page[api.Train], error)
	// RemovedTargets lists the targets bindings still use that the catalog in force lacks.
	RemovedTargets(ctx context.Context) ([]api.TargetUse, error)
	// PauseTrain pauses a project's queue (NOT_FOUND: a project bindery knows nothing of).
	PauseTrain(ctx context.Context, project, reason, actor string) (api.Train, error)
	// ResumeTrain resumes a project's queue and wakes its cars.
	ResumeTrain(ctx context.Context, project, actor string) (api.Train, error)
	// MergeNext sends a waiting request into the next car of its project (CONFLICT: it is not
	// in a waiting set).
	MergeNext(ctx context.Context, operationID, actor string) (api.RequestView, error)

	// DriftFindings lists the drift check's findings (docs/drift.md), newest first.
	DriftFindings(ctx context.Context) (api.DriftList, error)
	// OpenDrift counts the open drift findings, up to limit.
	OpenDrift(ctx context.Context, limit int) (int, error)
	// AcceptDrift makes the repository win over an open finding (NOT_FOUND, CONFLICT).
	AcceptDrift(ctx context.Context, id int64, actor string) (api.DriftFinding, error)
	// ImportRepository adopts the files already in the config repository (dryRun: lists them).
	ImportRepository(ctx context.Context, dryRun bool, actor string) (api.ImportResult, error)
	// RestoreDrift has bindery write an open finding's file again, through a batch (NOT_FOUND,
	// CONFLICT).
	RestoreDrift(ctx context.Context, id int64, actor string) (api.DriftFinding, error)
	// IgnoreDrift ignores an open finding for reason until its file changes (NOT_FOUND, CONFLICT).
	IgnoreDrift(ctx context.Context, id int64, reason, actor string) (api.DriftFinding, error)

	// Reviews lists the access reviews r may read, open ones first.
	Reviews(ctx context.Context, r workflow.Reviewer) ([]api.ReviewSummary, error)
	// StartReview starts an access review of targetKey (ACCESS_DENIED: r is neither an owner
	// nor an operator; CONFLICT: nothing in effect, or an open review already).
	StartReview(ctx context.Context, r workflow.Reviewer, operationID, targetKey string, due time.Time) (api.ReviewStarted, error)
	// Review is a review with its items (NOT_FOUND, ACCESS_DENIED).
	Review(ctx context.Context, r workflow.Reviewer, id int64) (api.ReviewView, error)
	// DecideReviewItem keeps or removes one item (CONFLICT: decided otherwise, or completed).
	DecideReviewItem(ctx context.Context, r workflow.Reviewer, id, itemID int64, operationID, decision, comment string) (api.ReviewView, error)
	// CompleteReview starts every removal through the batch path (CONFLICT: completed by
	// another call).
	CompleteReview(ctx context.Context, r workflow.Reviewer, id int64, operationID string) (api.ReviewView, error)
	// ReviewRecords calls row for each item of a review (its export).
	ReviewRecords(ctx context.Context, r workflow.Reviewer, id int64, row func(api.ReviewRecord) error) error
	// OverdueReviews counts the open reviews past due, up to limit.
	OverdueReviews(ctx context.Context, limit int) (int, error)

	// ApprovalCallback handles a verified approval-system callback.
	ApprovalCallback(ctx context.Context, cb api.ApprovalCallback) (api.CallbackResult, error)
	// DeployCallback handles a verified deploy-pipeline callback.
	DeployCallback(ctx context.Context, cb api.DeployCallback) (api.CallbackResult, error)
	// GitLabEvent takes a verified GitLab webhook as a hint to poll now.
	GitLabEvent(ctx context.Context, ev workflow.GitLabEvent) (api.CallbackResult, error)
}

// Notifications is what people see of bindery telling them (package notify's *Notifier).
// Errors are *apperr.Error where the cause is known: INVALID_ARGUMENT (an event type a person
// cannot choose), NOT_FOUND (no such delivery), CONFLICT (a delivery not failed, a receiver not
// disabled).
type Notifications interface {
	// EmailPrefs is subject's settings page: the events that email them.
	EmailPrefs(ctx context.Context, subject string) (api.EmailPrefs, error)
	// SetEmailPrefs records subject's choice.
	SetEmailPrefs(ctx context.Context, subject string, events []state.EventType) (api.EmailPrefs, error)
	// Sent lists what was sent about a request: its requester's emails, every delivery with all.
	Sent(ctx context.Context, operationID string, all bool) ([]api.Sent, error)
	// Endpoints lists every receiver with its health and latest deliveries.
	Endpoints(ctx context.Context) ([]api.NotifyEndpoint, error)
	// Resend sends a failed or skipped delivery again.
	Resend(ctx context.Context, deliveryID int64) (api.DeliveryVw, error)
	// Enable switches a disabled receiver on again.
	Enable(ctx context.Context, endpoint string) (api.NotifyEndpoint, error)
}

// Permissions answers whether identity, or one of its groups (those the identity provider named
// at sign-in), holds at least one of ruleCodes, in one round trip ("ops admin OR target owner").
// Any error means "no" to the caller (403).
type Permissions interface {
	Check(ctx context.Context, identity string, groups, ruleCodes []string) (bool, error)
}

// closedPermissions is the permission service of a server built without one (the UI's tests of
// pages): every check fails closed. It logs at debug only, as /api/me asks on every page load.
type closedPermissions struct{ log *slog.Logger }

func (p closedPermissions) Check(ctx context.Context, identity string, groups, rules []string) (bool, error) {
	p.log.DebugContext(ctx, "permission refused: no permission service wired", "identity", identity, "rules", rules)
	return false, nil
}

// Store is what the HTTP layer keeps itself: readiness, idempotency records, the audit log, and
// who is signed in.
type Store interface {
	Ping(ctx context.Context) error
	// WriteProbe commits one small write: /readyz shows that writes go through.
	WriteProbe(ctx context.Context) error
	ClaimIdempotency(ctx context.Context, scope, key, hash string, ttl, lease time.Duration) (store.Claim, error)
	CompleteIdempotency(ctx context.Context, scope, key string, status int, answer []byte) error
	ReleaseIdempotency(ctx context.Context, scope, key string) error
	IdempotencyRecord(ctx context.Context, scope, key string) (store.IdempotencyRecord, error)
	// AnswerOf reads the record holding a key an application found taken (store.ErrKeyTaken).
	AnswerOf(ctx context.Context, scope, key, hash string) (store.Claim, error)
	RecordAudit(ctx context.Context, ev store.AuditEvent) (bool, error)
	ListAudit(ctx context.Context, beforeID int64, limit int) ([]store.AuditEntry, error)
	// The audit export's pages (docs/api.md, 'The audit export').
	AuditBetween(ctx context.Context, from, to time.Time, c store.ExportCursor, limit int) ([]store.AuditEntry, error)
	ApplicationsBetween(ctx context.Context, from, to time.Time, c store.ExportCursor, limit int) ([]store.RequestFacts, store.ExportCursor, error)
	FactsOf(ctx context.Context, operationIDs []string) (map[string]store.RequestFacts, error)

	// Signing in: sign-ins on their way, sessions, personal API tokens.
	PutSigninAttempt(ctx context.Context, a store.SigninAttempt, ttl time.Duration) error
	TakeSigninAttempt(ctx context.Context, stateHash string) (store.SigninAttempt, error)
	CreateSession(ctx context.Context, s store.Session, replacing string) error
	SessionOf(ctx context.Context, idHash string, lim store.SessionLimits) (store.Session, error)
	EndSession(ctx context.Context, idHash string) (bool, error)
	CreateToken(ctx context.Context, t store.APIToken, ttl time.Duration, max int, ev store.AuditEvent) (store.APIToken, error)
	TokenByLookup(ctx context.Context, lookupKey string) (store.APIToken, error)
	Tokens(ctx context.Context, owner string) ([]store.APIToken, error)
	RevokeToken(ctx context.Context, owner string, id int64, ev store.AuditEvent) (store.APIToken, error)
	UseToken(ctx context.Context, id int64, ev store.AuditEvent) error
}

var _ Store = (*store.DB)(nil)
