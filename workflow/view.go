// Package workflow runs the request lifecycle: apply, approval, batching, MR creation, merge,
// validation, close, recovery. This file is the contract the HTTP layer and the SPA rely on:
// the inputs and the views of every operation the API exposes. The JSON names are the API's.
package workflow

import (
	"time"

	"bindery/approval"
	"bindery/store"
)

// ApplyInput is a validated application: the subject is the caller's canonical identity, never
// a client-supplied value.
type ApplyInput struct {
	OperationID string `json:"operationId"`
	TargetKey   string `json:"targetKey"`
	Reason      string `json:"reason"`
	Subject     string `json:"-"`
	// Idempotency, when set, is the request's idempotency record (its Body is filled here with
	// the ApplyResult as JSON): it is written in the application's own transaction, so the
	// application and its answer are one commit.
	Idempotency *store.Answer `json:"-"`
}

// Answer codes of a 202 on POST /api/apply.
const (
	CodeAccepted        = "ACCEPTED"
	CodeDuplicateSubmit = "DUPLICATE_SUBMIT"
)

// ApplyResult is the body of the 202 answer to an application (or its replay).
type ApplyResult struct {
	Code        string              `json:"code"` // ACCEPTED or DUPLICATE_SUBMIT
	OperationID string              `json:"operationId"`
	Status      store.BindingStatus `json:"status"`
	NextAction  store.NextAction    `json:"nextAction"`
}

// StepView names a step for people and machines.
type StepView struct {
	Code  int    `json:"code"`
	Name  string `json:"name"`
	Label string `json:"label,omitempty"` // plain words, from the step table
}

// StepOf is the view of a step.
func StepOf(s store.Step) StepView {
	i := s.Info()
	return StepView{Code: int(s), Name: i.Name, Label: i.Label}
}

// Link is an external link (MR, pipeline) with its number.
type Link struct {
	ID  int64  `json:"id"`
	URL string `json:"url"`
}

// JobLink is a CI job with its name; URL is GitLab's web address of it ("" : GitLab gave none
// bindery keeps).
type JobLink struct {
	ID   int64  `json:"id"`
	Name string `json:"name"`
	URL  string `json:"url,omitempty"`
}

// TicketLink is the approval ticket a request was sent with; URL is empty when no address can
// be built (approval.ticketURL not set).
type TicketLink struct {
	ID  string `json:"id"`
	URL string `json:"url,omitempty"`
}

// TimelineEntry is one step the request went through.
type TimelineEntry struct {
	Step     StepView            `json:"step"`
	Status   store.BindingStatus `json:"status"`
	At       time.Time           `json:"at"`
	Duration time.Duration       `json:"durationNs"` // until the next entry (or now, for the last)
	// Note is what the requester may read of the step (store.Told): bindery's own words, or a
	// failure's fixed sentence with its safe details.
	Note string `json:"note,omitempty"`
	// Cause is the note as bindery recorded it, when it says more than Note (a failure's
	// classified cause): operators only (RequestView.ForOperator).
	Cause string `json:"cause,omitempty"`
}

// Waiting answers "why is my request waiting" in plain words (SPEC §12.2).
type Waiting struct {
	Stage      string    `json:"stage"`              // approval, batch, ci, merge, deploy, …
	WaitingFor string    `json:"waitingFor"`         // plain words: "the approvers in the approval system"
	Since      time.Time `json:"since"`              // when this wait began
	BatchID    int64     `json:"batchId,omitempty"`  // the batch carrying the request
	Position   int       `json:"position,omitempty"` // 1-based place in the partition's waiting set
	Ahead      int       `json:"ahead,omitempty"`    // requests ahead of it in the waiting set
	// The work that drives the request, when bindery itself is to act: its next step is due but
	// waits for a free worker behind QueuedBehind tasks of its lane ("first" steps, "background"
	// checks), runs right now, or is due at NextCheckAt (the next look at a pipeline or rebase).
	Lane         string `json:"lane,omitempty"`
	QueuedBehind int    `json:"queuedBehind,omitempty"`
	// QueuedBehindMore: more tasks than QueuedBehind are ahead (a status read counts only so far).
	QueuedBehindMore bool       `json:"queuedBehindMore,omitempty"`
	Running          bool       `json:"running,omitempty"`
	NextCheckAt      *time.Time `json:"nextCheckAt,omitempty"`
}

// StageDuration is how long one stage took (approval wait, batch wait, CI, merge, deploy).
type StageDuration struct {
	Stage    string        `json:"stage"`
	Duration time.Duration `json:"durationNs"`
	Done     bool          `json:"done"` // false: still running, duration so far
}

// RequestView is GET /api/requests/:operationId.
type RequestView struct {
	OperationID string              `json:"operationId"`
	Subject     string              `json:"subject"`
	TargetKey   string              `json:"targetKey"`
	TargetTitle string              `json:"targetTitle"`
	Project     string              `json:"project"`
	Reason      string              `json:"reason"`
	Flow        string              `json:"flow"` // "approval-first" or "legacy"
	Status      store.BindingStatus `json:"status"`
	Step        StepView            `json:"step"`
	// Stage is where the request is on its way, for the stage view (CurrentStage): a stage of
	// the step table's, or effect (in effect) or revoked (removed again).
	Stage          string           `json:"stage"`
	NextAction     store.NextAction `json:"nextAction"`
	NextActionText string           `json:"nextActionText"`
	MR             *Link            `json:"mr,omitempty"`
	Pipeline       *Link            `json:"pipeline,omitempty"`
	// FailedJob is the pipeline's failed job once the request failed with it (nil: none known).
	FailedJob *JobLink `json:"failedJob,omitempty"`
	// Ticket is the approval ticket the request was sent with (nil: none yet).
	Ticket    *TicketLink     `json:"ticket,omitempty"`
	BatchID   int64           `json:"batchId,omitempty"`
	Waiting   *Waiting        `json:"waiting,omitempty"`
	Stages    []StageDuration `json:"stages"`
	Timeline  []TimelineEntry `json:"timeline"`
	CreatedAt time.Time       `json:"createdAt"`
	UpdatedAt time.Time       `json:"updatedAt"`
	ExpiresAt *time.Time      `json:"expiresAt,omitempty"`

	causes []string // the timeline's notes as recorded, for ForOperator
}

// ForOperator is the view an operator reads: each timeline entry also carries the cause bindery
// recorded where it says more than what the requester reads. The view without it is the
// requester's: nothing but ForOperator puts a recorded cause into an answer.
func (v RequestView) ForOperator() RequestView {
	tl := make([]TimelineEntry, len(v.Timeline))
	for i, e := range v.Timeline {
		if i < len(v.causes) && v.causes[i] != e.Note {
			e.Cause = v.causes[i]
		}
		tl[i] = e
	}
	v.Timeline = tl
	return v
}

// RequestSummary is one row of GET /api/my/requests and of the ops stuck list.
type RequestSummary struct {
	OperationID string              `json:"operationId"`
	Subject     string              `json:"subject"`
	TargetKey   string              `json:"targetKey"`
	Flow        string              `json:"flow,omitempty"` // an operator's retry of a failure: a new MR (approval-first) or its own again (legacy)
	Status      store.BindingStatus `json:"status"`
	Step        StepView            `json:"step"`
	NextAction  store.NextAction    `json:"nextAction"`
	MR          *Link               `json:"mr,omitempty"`
	UpdatedAt   time.Time           `json:"updatedAt"`
	CreatedAt   time.Time           `json:"createdAt"`
}

// Page is a cursor-paginated list; NextCursor is empty on the last page.
type Page[T any] struct {
	Items      []T    `json:"items"`
	NextCursor string `json:"nextCursor,omitempty"`
}

// BatchView is one batch in the ops console.
type BatchView struct {
	ID        int64            `json:"id"`
	Partition string           `json:"partition"` // the GitLab project
	Status    string           `json:"status"`    // RUNNING, BLOCKED, SUCCEEDED, FAILED
	MR        *Link            `json:"mr,omitempty"`
	Pipeline  *Link            `json:"pipeline,omitempty"`
	Members   []RequestSummary `json:"members"`
	Note      string           `json:"note,omitempty"`
	// Failing is the failure decided for an active batch whose settlement has not gone through
	// yet (GitLab or the database failed while settling); LastError says why. The sweep retries
	// the settlement; an operator may settle or resume the batch.
	Failing   string `json:"failing,omitempty"`
	LastError string `json:"lastError,omitempty"`
	// Bisection is set for a batch that took part in isolating a failing change: one that was
	// bisected, or was claimed from the half a bisection returned.
	Bisection *BisectionView `json:"bisection,omitempty"`
	CreatedAt time.Time      `json:"createdAt"`
	UpdatedAt time.Time      `json:"updatedAt"`
}

// BisectionView is a batch's part in a bisection (SPEC §11.17).
type BisectionView struct {
	Of      int64  `json:"of"`                // the batch whose failure started the bisection (this one, when it did)
	Rounds  int    `json:"rounds"`            // bisections run up to and in this batch
	Culprit string `json:"culprit,omitempty"` // the member this batch isolated and failed alone
}

// RoundResult is the answer of a batch round (cron or POST /api/ops/batches/run).
type RoundResult struct {
	Partitions []PartitionRound `json:"partitions"`
}

// PartitionRound is what one partition's round did.
type PartitionRound struct {
	Partition string `json:"partition"`
	Outcome   string `json:"outcome"` // one of RoundOutcomes
	BatchID   int64  `json:"batchId,omitempty"`
	Claimed   int    `json:"claimed,omitempty"`
}

// RoundError is the outcome of a partition whose round failed (the log has the cause).
const RoundError = "ERROR"

// RoundOutcomes lists every outcome a partition's round answers; the page has words for each.
var RoundOutcomes = []string{string(store.RoundClaimed), string(store.RoundSlotOccupied), string(store.RoundNothingWaiting), string(store.RoundNotDue), RoundError}

// ReconcileResult is the answer of a reconciliation run.
type ReconcileResult struct {
	Scanned   int `json:"scanned"`
	Validated int `json:"validated"`
}

// Approval callback results.
const (
	ApprovalApproved  = approval.StatusApproved
	ApprovalRejected  = approval.StatusRejected
	ApprovalWithdrawn = approval.StatusWithdrawn
)

// ApprovalCallback is the verified body of POST /hooks/approval.
type ApprovalCallback struct {
	CallbackID  string            `json:"requestId"` // the callback's own id, for deduplication
	OperationID string            `json:"operationId"`
	Result      string            `json:"result"`
	Ext         map[string]string `json:"ext,omitempty"` // ext.mrId present → legacy flow
}

// Callback answer codes (always 2xx so the sender stops retrying).
const (
	CallbackAccepted     = "ACCEPTED"
	CallbackDuplicate    = "DUPLICATE"
	CallbackIgnoredStale = "IGNORED_STALE"
)

// CallbackResult is the body of the 2xx answer to a callback.
type CallbackResult struct {
	Code string `json:"code"`
	// Refused (deploy callbacks): listed operationIds that are not requests of the MR named;
	// they are not validated by it.
	Refused []string `json:"refused,omitempty"`
}

// DeployCallback is the verified body of POST /hooks/deploy.
type DeployCallback struct {
	Project      string   `json:"project"`
	MRIID        int64    `json:"mrIid,omitempty"`
	SHA          string   `json:"sha,omitempty"`          // the deployed commit (optional with mrIid)
	OperationIDs []string `json:"operationIds,omitempty"` // present → exact match, no inference
}

// CallbackIgnored answers an event bindery does not act on (e.g. a GitLab event of another
// kind), still 2xx so that the sender does not retry or disable the hook.
const CallbackIgnored = "IGNORED"

// Preview is GET /api/preview: the file a request for the target would change. The zero value
// (serialised as {}) is the answer on any failure: a preview never blocks applying.
type Preview struct {
	Path    string `json:"path,omitempty"`
	Content string `json:"content,omitempty"`
}

// StuckFilter narrows GET /api/ops/requests (both optional) and pages it.
type StuckFilter struct {
	Status store.BindingStatus // "" → any
	Step   store.Step          // 0 → any
	Cursor string
	Limit  int
}

// GitLab event kinds bindery reads from POST /hooks/gitlab.
const (
	GitLabMergeRequest = "merge_request"
	GitLabPipeline     = "pipeline"
)

// GitLabEvent is the part of a verified GitLab webhook the workflow may use to shortcut polling.
// It is a hint: the workflow still reads the remote state before acting.
type GitLabEvent struct {
	Kind       string // GitLabMergeRequest or GitLabPipeline
	EventID    string // Idempotency-Key (stable across resends) or X-Gitlab-Event-UUID
	Project    string // path_with_namespace
	MRIID      int64  // the MR (0 when the pipeline is not an MR pipeline)
	Ref        string // pipeline events: the branch or ref it ran for (a branch pipeline's MR is found by it)
	PipelineID int64  // pipeline events
	Status     string // pipeline status (success, failed, …) or MR state (opened, merged, closed)
	Action     string // MR action (open, merge, close, approved, …)
}
