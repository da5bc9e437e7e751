// Package api holds the bodies of bindery's HTTP API as they go over the wire: the views of
// requests and batches, the answers of the write routes, and the verified bodies of the callbacks
// that external systems send. The server, the workflow that fills the views and the simulators
// that send the callbacks all use these types; none of them needs another to speak the API.
// The JSON names are the API's (server/openapi.json is the contract).
package api

import (
	"strings"
	"time"

	"bindery/internal/remote/approval"
	"bindery/internal/vocab/state"
)

// Answer codes of a 202 on POST /api/apply.
const (
	CodeAccepted        = "ACCEPTED"
	CodeDuplicateSubmit = "DUPLICATE_SUBMIT"
)

// ApplyResult is the body of the 202 answer to an application (or its replay).
type ApplyResult struct {
	Code        string              `json:"code"` // ACCEPTED or DUPLICATE_SUBMIT
	OperationID string              `json:"operationId"`
	Status      state.BindingStatus `json:"status"`
	NextAction  state.NextAction    `json:"nextAction"`
}

// StepView names a step for people and machines.
type StepView struct {
	Code  int    `json:"code"`
	Name  string `json:"name"`
	Label string `json:"label,omitempty"` // plain words, from the step table
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
	Status   state.BindingStatus `json:"status"`
	At       time.Time           `json:"at"`
	Duration time.Duration       `json:"durationNs"` // until the next entry (or now, for the last)
	// Note is what the requester may read of the step (explain.Told): bindery's own words, or a
	// failure's fixed sentence with its safe details.
	Note string `json:"note,omitempty"`
	// Cause is the note as bindery recorded it, when it says more than Note (a failure's
	// classified cause): operators only (RequestView.ForOperator).
	Cause string `json:"cause,omitempty"`
}

// Waiting answers "why is my request waiting" in plain words (docs/workflow.md, 'What the requester
// is told').
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
	// NextBy is the operator who sent the request into the next car of its project, ahead of the
	// waiting set ("": nobody).
	NextBy string `json:"nextBy,omitempty"`
	// Car is the car of its project's merge train that carries the request (nil: it is in none —
	// waiting in the waiting set, or past the merge).
	Car *Car `json:"car,omitempty"`
	// Estimate is when the request's change is likely to merge, while it waits in the waiting set
	// or rides in a car (nil otherwise).
	Estimate *Estimate `json:"estimate,omitempty"`
	// Blocker is the merge held for a person that holds the request: its own batch's or merge
	// request's, or (Behind) the BLOCKED car of its project it waits behind (nil: none).
	Blocker *Blocker `json:"blocker,omitempty"`
	// HeldUntil is when a batch round takes the request at the latest while the round holds the
	// waiting set for more requests to share a pipeline (batch.maxWait; nil: not held for that).
	HeldUntil *time.Time `json:"heldUntil,omitempty"`
	// ApprovalTakes says how long approvals of the request's target usually take, while it waits
	// for its approval ("approvals of this target usually take about 2 h (median of the last 20)",
	// or that there is no estimate yet).
	ApprovalTakes string `json:"approvalTakes,omitempty"`
}

// Blocker is a merge GitLab holds for something only a person can clear, told the same way on
// the request page, in the ops console and in notifications (explain.MergeBlocked).
type Blocker struct {
	// Text is the whole story: what holds it, who must act and where, when bindery goes on.
	Text    string    `json:"text"`
	Label   string    `json:"label"`             // the badge's words: "Merge blocked: unresolved discussion"
	MR      *Link     `json:"mr,omitempty"`      // the merge request to open
	BatchID int64     `json:"batchId,omitempty"` // the BLOCKED batch (0: a legacy request's own merge request)
	Since   time.Time `json:"since"`
	Behind  bool      `json:"behind,omitempty"` // the request waits behind it, it is not in it
}

// Car is a request's place in its project's merge train (docs/workflow.md, 'The merge train').
type Car struct {
	BatchID  int64      `json:"batchId"`
	Position int        `json:"position"` // 1 merges next
	Of       int        `json:"of"`       // cars in the train
	Ahead    []CarAhead `json:"ahead"`    // the cars ahead of it, the first one first
}

// CarAhead is a car ahead of a request's, with what its pipeline does.
type CarAhead struct {
	BatchID int64 `json:"batchId"`
	MR      *Link `json:"mr,omitempty"`
	// Pipeline is what the car's pipeline does: building (its branch is being written, no
	// pipeline yet), running, passed, failed (decided, or held until the cars ahead passed) or
	// blocked (the car waits for a person or an operator); batch.CarState decides it.
	Pipeline string `json:"pipeline"`
}

// Estimate is when a request is likely to merge. MergeAt is absent when there is no estimate:
// then Words says "no estimate yet" and Basis why — a number is never made up.
type Estimate struct {
	MergeAt *time.Time `json:"mergeAt,omitempty"`
	Words   string     `json:"words"` // "about 14 min", "no estimate yet"
	Basis   string     `json:"basis"` // "median of the last 8 pipelines of infra/access-config: 9 min"
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
	Status      state.BindingStatus `json:"status"`
	Step        StepView            `json:"step"`
	// Stage is where the request is on its way, for the stage view (CurrentStage): a stage of
	// the step table's, or effect (in effect) or revoked (removed again).
	Stage string `json:"stage"`
	// Label names the state for its requester, the same words wherever it is shown (the sentence
	// table of docs/states.md); Status and Step keep the codes, for operators.
	Label          string           `json:"label"`
	NextAction     state.NextAction `json:"nextAction"`
	NextActionText string           `json:"nextActionText"`
	MR             *Link            `json:"mr,omitempty"`
	Pipeline       *Link            `json:"pipeline,omitempty"`
	// FailedJob is the pipeline's failed job once the request failed with it (nil: none known).
	FailedJob *JobLink `json:"failedJob,omitempty"`
	// Ticket is the approval ticket the request was sent with (nil: none yet).
	Ticket *TicketLink `json:"ticket,omitempty"`
	// DecidedBy is who decided its approval (approved or rejected), as the approval system named
	// them ("": not named, or not decided yet).
	DecidedBy string          `json:"decidedBy,omitempty"`
	BatchID   int64           `json:"batchId,omitempty"`
	Waiting   *Waiting        `json:"waiting,omitempty"`
	Stages    []StageDuration `json:"stages"`
	Timeline  []TimelineEntry `json:"timeline"`
	CreatedAt time.Time       `json:"createdAt"`
	UpdatedAt time.Time       `json:"updatedAt"`
	ExpiresAt *time.Time      `json:"expiresAt,omitempty"`
	// ExpiresIn is how long it has left in words ("expires in 6 days"), while it is in effect
	// with an expiry and no removal runs: the page shows it beside Renew.
	ExpiresIn string `json:"expiresIn,omitempty"`
	// Renewable: in effect with an expiry and no renewal waiting for its decision; its owner or
	// an operator may renew it (POST /api/requests/{operationId}/renew).
	Renewable bool `json:"renewable,omitempty"`
	// Renewal is its latest renewal (nil: never renewed).
	Renewal *RenewalView `json:"renewal,omitempty"`
	// Withdrawable: the request failed on its way to being in effect; its owner or an operator
	// may withdraw it (POST /api/requests/{operationId}/withdraw), and then apply again.
	Withdrawable bool `json:"withdrawable,omitempty"`
	// Drift is what the drift check found of this binding's file in the config repository while
	// the finding is open (nil: nothing), in the requester's words (docs/drift.md).
	Drift *RequestDrift `json:"drift,omitempty"`

	// Causes are the timeline's notes as recorded, for ForOperator only.
	Causes []string `json:"-"`
	// OperatorText is NextActionText in an operator's words ("": the same), for ForOperator only.
	OperatorText string `json:"-"`
}

// ForOperator is the view an operator reads: each timeline entry also carries the cause bindery
// recorded where it says more than what the requester reads, and the next action is in an
// operator's words (a failure offers retry and withdraw, never "contact support"). The view without it is the
// requester's: nothing but ForOperator puts a recorded cause into an answer.
func (v RequestView) ForOperator() RequestView {
	tl := make([]TimelineEntry, len(v.Timeline))
	for i, e := range v.Timeline {
		if i < len(v.Causes) && v.Causes[i] != e.Note {
			e.Cause = v.Causes[i]
		}
		tl[i] = e
	}
	v.Timeline = tl
	if v.OperatorText != "" {
		v.NextActionText = v.OperatorText
	}
	return v
}

// RenewalView is a renewal of a binding in effect (docs/workflow.md, 'Expiry, reminders and
// renewal').
type RenewalView struct {
	ID          string      `json:"id"`     // the renew call's operationId
	Status      string      `json:"status"` // PENDING, RENEWED, REJECTED, CANCELLED
	Mode        string      `json:"mode"`   // auto or approval
	RequestedBy string      `json:"requestedBy"`
	RequestedAt time.Time   `json:"requestedAt"`
	DecidedBy   string      `json:"decidedBy,omitempty"`
	DecidedAt   *time.Time  `json:"decidedAt,omitempty"`
	ExpiresAt   *time.Time  `json:"expiresAt,omitempty"` // the expiry it gave (RENEWED)
	Ticket      *TicketLink `json:"ticket,omitempty"`
	Words       string      `json:"words,omitempty"` // what the page says of it while it waits
	// File is where the file rewritten with the new expiry stands (RENEWED, when the target's
	// file carries the expiry): through a batch, the train and CI like any change.
	File *RenewalFile `json:"file,omitempty"`
}

// RenewalFile is where a renewal's rewrite of the binding's file stands.
type RenewalFile struct {
	State   string `json:"state"` // waiting, batched, merged, failed, done
	BatchID int64  `json:"batchId,omitempty"`
	MRIID   int64  `json:"mrIid,omitempty"`
	Text    string `json:"text"`
}

// AuditRecord is one row of the audit export (GET /api/ops/audit/export): an application or an
// audited action, with the request it concerned.
type AuditRecord struct {
	At      time.Time `json:"at"`
	Kind    string    `json:"kind"`   // application or action
	Actor   string    `json:"actor"`  // who: the applicant, or who acted
	Action  string    `json:"action"` // what: apply, revoke, renew, ops.retry, …
	Request string    `json:"request,omitempty"`
	Subject string    `json:"subject,omitempty"`
	Target  string    `json:"target,omitempty"`
	Ticket  string    `json:"ticket,omitempty"`
	// Approver is who decided the request's approval, as the approval system named them.
	Approver string `json:"approver,omitempty"`
	Project  string `json:"project,omitempty"`
	MR       int64  `json:"mr,omitempty"`
	// InEffectAt is when the request's deploy put it in effect (nil: never).
	InEffectAt *time.Time `json:"inEffectAt,omitempty"`
	Params     string     `json:"params,omitempty"` // an action's parameters as audited (JSON)
}

// RequestSummary is one row of GET /api/my/requests and of the ops stuck list.
type RequestSummary struct {
	OperationID string              `json:"operationId"`
	Subject     string              `json:"subject"`
	TargetKey   string              `json:"targetKey"`
	Flow        string              `json:"flow,omitempty"` // an operator's retry of a failure: a new MR (approval-first) or its own again (legacy)
	Status      state.BindingStatus `json:"status"`
	Step        StepView            `json:"step"`
	Label       string              `json:"label"` // the state in its requester's words (RequestView.Label)
	NextAction  state.NextAction    `json:"nextAction"`
	MR          *Link               `json:"mr,omitempty"`
	UpdatedAt   time.Time           `json:"updatedAt"`
	CreatedAt   time.Time           `json:"createdAt"`
	// Withdrawable: it failed on its way; its owner or an operator may withdraw it.
	Withdrawable bool `json:"withdrawable,omitempty"`
	// Blocker: its merge is held for a person (HANDLE_MR_BLOCKED) — what helps is that person or
	// settling its batch, not a retry — or (Behind) it waits behind a blocked batch of its project.
	Blocker *Blocker `json:"blocker,omitempty"`
	// Paused: an operator paused its project's queue while it waits in it ("My requests" only).
	Paused *TrainPause `json:"paused,omitempty"`
	// NextActionText is what its request page says of it when a hold says more than the sentence
	// table of its state (a pause, a blocked batch, a merge held for a person): the same words
	// ("My requests" only; "": the label says it).
	NextActionText string `json:"nextActionText,omitempty"`
	// ExpiresAt and ExpiresIn: while it is in effect with an expiry, when, and how long it has
	// left in words ("expires in 6 days"); "My requests" shows it beside Renew.
	ExpiresAt *time.Time `json:"expiresAt,omitempty"`
	ExpiresIn string     `json:"expiresIn,omitempty"`
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
	// Blocker: a BLOCKED batch whose merge request is held for a person, told as its members are.
	Blocker *Blocker `json:"blocker,omitempty"`
	// Moved lists the members that left the batch with their change (a bisection's half, a
	// failure retried later): their status is no longer this batch's outcome.
	Moved     []MovedMember `json:"moved,omitempty"`
	CreatedAt time.Time     `json:"createdAt"`
	UpdatedAt time.Time     `json:"updatedAt"`
}

// MovedMember is a member that left a batch: BatchID is the batch that took its change last
// (0: it waits in the waiting set again).
type MovedMember struct {
	OperationID string `json:"operationId"`
	BatchID     int64  `json:"batchId,omitempty"`
}

// BisectionView is a batch's part in a bisection (docs/workflow.md, 'Bisection').
type BisectionView struct {
	Of      int64  `json:"of"`                // the batch whose failure started the bisection (this one, when it did)
	Rounds  int    `json:"rounds"`            // bisections run up to and in this batch
	Culprit string `json:"culprit,omitempty"` // the member this batch isolated and failed alone
}

// Train is one project's merge train in the ops console (GET /api/ops/trains): its cars in order,
// what waits for a car, and what holds it — an operator's pause, a BLOCKED car.
type Train struct {
	Project string     `json:"project"`
	Length  int        `json:"length"` // batch.train in force: how many cars may be in CI at once
	Cars    []TrainCar `json:"cars"`
	// Waiting counts the project's requests in the waiting set; MergeNext how many of them an
	// operator sent into the next car. Queue is the first of them, in the order cars take them.
	Waiting   int             `json:"waiting"`
	MergeNext int             `json:"mergeNext"`
	Queue     []QueuedRequest `json:"queue"`
	Paused    *TrainPause     `json:"paused,omitempty"`
	Blocked   *TrainBlock     `json:"blocked,omitempty"`
	// Failed is the project's newest batch when it FAILED: its requests just failed, although
	// nothing of the project is in CI any more (nil: the newest batch did not fail).
	Failed *TrainBlock `json:"failed,omitempty"`
	// Pipelines is the basis of the project's estimates ("median of the last 8 pipelines of …").
	Pipelines string `json:"pipelines,omitempty"`
}

// TrainCar is one car of a train.
type TrainCar struct {
	BatchID       int64            `json:"batchId"`
	Position      int              `json:"position"` // 1 merges next
	Status        string           `json:"status"`   // RUNNING or BLOCKED
	MR            *Link            `json:"mr,omitempty"`
	Pipeline      *Link            `json:"pipeline,omitempty"`
	PipelineState string           `json:"pipelineState"` // as CarAhead.Pipeline
	Members       []RequestSummary `json:"members"`
	Since         time.Time        `json:"since"`             // claimed at
	CISince       *time.Time       `json:"ciSince,omitempty"` // its current pipeline wait began
	// WaitingFor says what the car waits for now, in bindery's words ("waiting for car 12 ahead
	// of it to merge", "blocked: …").
	WaitingFor string    `json:"waitingFor,omitempty"`
	Estimate   *Estimate `json:"estimate,omitempty"`
}

// QueuedRequest is a request in a project's waiting set; NextBy names the operator who sent it
// into the next car ("": nobody).
type QueuedRequest struct {
	RequestSummary
	Since  time.Time `json:"since"` // admitted at
	NextBy string    `json:"nextBy,omitempty"`
}

// TrainPause is an operator's pause of a project's queue: no car is claimed and none merges.
type TrainPause struct {
	By     string    `json:"by"`
	Reason string    `json:"reason"`
	Since  time.Time `json:"since"`
}

// TrainBlock is the first BLOCKED car of a train: the cars behind it cannot merge before it.
type TrainBlock struct {
	BatchID int64     `json:"batchId"`
	Since   time.Time `json:"since"`
	Why     string    `json:"why"`
}

// Attention is what waits for an operator (GET /api/ops/attention), for the count every page's
// navigation shows: the requests of the ops stuck list and the BLOCKED batches, each counted up
// to AttentionCap (More: there are more than that).
type Attention struct {
	Requests       int  `json:"requests"`
	BlockedBatches int  `json:"blockedBatches"`
	Drift          int  `json:"drift"`   // open drift findings (GET /api/ops/drift)
	Reviews        int  `json:"reviews"` // open access reviews past their due date
	Total          int  `json:"total"`
	More           bool `json:"more,omitempty"`
}

// DriftFinding is one finding of the drift check (GET /api/ops/drift, docs/drift.md): a file of
// the config repository that differs from the bindings bindery holds.
type DriftFinding struct {
	ID          int64  `json:"id"`
	Kind        string `json:"kind"`  // missing, changed, unknown
	State       string `json:"state"` // open, closed, ignored
	TargetKey   string `json:"targetKey"`
	Subject     string `json:"subject"`
	Project     string `json:"project"`
	Path        string `json:"path"`
	OperationID string `json:"operationId,omitempty"` // the binding that owns the file
	// Commit and Author: the commit that removed a missing file, when the repository says.
	Commit       string     `json:"commit,omitempty"`
	Author       string     `json:"author,omitempty"`
	CommittedAt  *time.Time `json:"committedAt,omitempty"`
	FirstSeen    time.Time  `json:"firstSeen"`
	LastSeen     time.Time  `json:"lastSeen"`
	ClosedAt     *time.Time `json:"closedAt,omitempty"`
	IgnoreReason string     `json:"ignoreReason,omitempty"`
	Text         string     `json:"text"` // the finding in words
	// Restore is an operator's restore of the file, when one was asked since the finding opened.
	Restore *DriftRestore `json:"restore,omitempty"`
}

// RequestDrift is an open drift finding of a request's binding, as its page shows it.
type RequestDrift struct {
	Kind        string     `json:"kind"` // missing, changed
	Commit      string     `json:"commit,omitempty"`
	Author      string     `json:"author,omitempty"`
	CommittedAt *time.Time `json:"committedAt,omitempty"`
	FirstSeen   time.Time  `json:"firstSeen"`
	Text        string     `json:"text"`
	// Restoring: an operator asked bindery to write the file again, and it is on its way.
	Restoring bool `json:"restoring,omitempty"`
}

// DriftRestore is where a finding's restore stands (docs/drift.md, 'Repairs').
type DriftRestore struct {
	State   string    `json:"state"` // waiting, batched, merged, failed, done
	By      string    `json:"by"`
	At      time.Time `json:"at"`
	BatchID int64     `json:"batchId,omitempty"`
	MRIID   int64     `json:"mrIid,omitempty"`
	Text    string    `json:"text"`
}

// DriftList is GET /api/ops/drift: the findings, first seen newest first, at most DriftListCap
// (More: there are more).
type DriftList struct {
	Items []DriftFinding `json:"items"`
	More  bool           `json:"more,omitempty"`
}

// ImportResult is POST /api/ops/import (docs/drift.md, 'Importing a repository'): every file under
// every target's template with what it becomes, and how many bindings were adopted.
type ImportResult struct {
	Items   []ImportItem `json:"items"`
	Adopted int          `json:"adopted"`
	DryRun  bool         `json:"dryRun"`
}

// ImportItem is one file an import looked at: Becomes what it becomes, or Problem why it is
// left out.
type ImportItem struct {
	Path      string     `json:"path"`
	TargetKey string     `json:"targetKey"`
	Subject   string     `json:"subject"`
	ExpiresAt *time.Time `json:"expiresAt,omitempty"`
	Becomes   string     `json:"becomes,omitempty"`
	Problem   string     `json:"problem,omitempty"`
}

// DriftListCap bounds DriftList.
const DriftListCap = 500

// AttentionCap bounds each count of Attention: the navigation shows "100+" beyond it.
const AttentionCap = 100

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
var RoundOutcomes = []string{string(state.RoundClaimed), string(state.RoundSlotOccupied), string(state.RoundNothingWaiting), string(state.RoundNotDue), string(state.RoundPaused), string(state.RoundSpaced), RoundError}

// ReconcileResult is the answer of a reconciliation run.
type ReconcileResult struct {
	Scanned   int `json:"scanned"`
	Validated int `json:"validated"`
	Closed    int `json:"closed"` // removals whose deploy was inferred or replayed: CLOSED
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
	// DecidedBy and Comment are who decided and what they wrote, when the approval system sends
	// them: a rejection keeps them and the request page shows them.
	DecidedBy string `json:"decidedBy,omitempty"`
	Comment   string `json:"comment,omitempty"`
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

// ShortDuration is a duration as the API writes it (a target's ttl): 720h0m0s as 720h, 1h30m0s
// as 1h30m, "" for none.
func ShortDuration(d time.Duration) string {
	if d <= 0 {
		return ""
	}
	out := d.String()
	for _, zero := range []string{"0s", "0m"} {
		if strings.HasSuffix(out, "m"+zero) || strings.HasSuffix(out, "h"+zero) {
			out = strings.TrimSuffix(out, zero)
		}
	}
	return out
}

// Token is a personal API token as its owner sees it (GET /api/tokens, DELETE
// /api/tokens/:id): never its secret, which only the creation's answer carries, once.
type Token struct {
	ID         int64      `json:"id"`
	Name       string     `json:"name"`
	Scopes     []string   `json:"scopes"` // ["read"] or ["read", "apply"]
	CreatedAt  time.Time  `json:"createdAt"`
	ExpiresAt  time.Time  `json:"expiresAt"`
	Expired    bool       `json:"expired"`
	LastUsedAt *time.Time `json:"lastUsedAt,omitempty"`
	RevokedAt  *time.Time `json:"revokedAt,omitempty"`
}

// CreatedToken is the 201 answer of POST /api/tokens: the token's view and the token itself.
type CreatedToken struct {
	Token
	Secret string `json:"token"` // "bdy_" + 32 random bytes, base64url
}

// NewToken is the body of POST /api/tokens: what the token is for, its scopes (["read"] or
// ["read", "apply"]) and its lifetime in days (nil: the default).
type NewToken struct {
	Name          string   `json:"name"`
	Scopes        []string `json:"scopes"`
	ExpiresInDays *int     `json:"expiresInDays"`
}

// SignedOut is the answer of POST /auth/logout.
type SignedOut struct {
	SignedOut bool `json:"signedOut"` // false: there was no session to end
}

// TokenList is GET /api/tokens: the caller's tokens that are not revoked, newest first.
type TokenList struct {
	Items []Token `json:"items"`
	Max   int     `json:"max"` // the most live tokens one person may hold
}
