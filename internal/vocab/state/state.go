// Package state is bindery's vocabulary: the statuses of a binding and their one transition
// table, the operation's step codes, what a client is told to do next, the statuses of a batch,
// the flows, the file actions, the kinds of durable work and the outcomes of a round. It imports
// nothing of bindery's, so the store, the workflow, the presentation and the API all speak it
// without depending on one another. Its rules are written up in docs/states.md.
package state

import (
	"fmt"
	"slices"
)

// BindingStatus is the user-visible state of a subject–target relation (docs/states.md).
type BindingStatus string

const (
	StatusApprovalSending BindingStatus = "APPROVAL_SENDING"
	StatusApprovalSent    BindingStatus = "APPROVAL_SENT"
	StatusMRCreating      BindingStatus = "MR_CREATING"
	StatusMRCreated       BindingStatus = "MR_CREATED"
	StatusMerging         BindingStatus = "MERGING"
	StatusMerged          BindingStatus = "MERGED"
	StatusValidated       BindingStatus = "VALIDATED"
	StatusCreateFailed    BindingStatus = "CREATE_FAILED"
	StatusHandleFailed    BindingStatus = "HANDLE_FAILED"
	StatusRejected        BindingStatus = "REJECTED"
	StatusClosed          BindingStatus = "CLOSED"
)

// AllStatuses lists every binding status.
var AllStatuses = []BindingStatus{
	StatusApprovalSending, StatusApprovalSent, StatusMRCreating, StatusMRCreated, StatusMerging,
	StatusMerged, StatusValidated, StatusCreateFailed, StatusHandleFailed, StatusRejected, StatusClosed,
}

// Reappliable is the one definition of "a new application may reset this row in place"
// (REAPPLIABLE = {REJECTED, CLOSED}); the data layer and the API both use it.
func (s BindingStatus) Reappliable() bool {
	return s == StatusRejected || s == StatusClosed
}

// AwaitingApproval is AWAITING_APPROVAL = {APPROVAL_SENDING, APPROVAL_SENT}: SENDING is written
// before the call to the approval system, SENT after, and a callback may arrive in between.
func (s BindingStatus) AwaitingApproval() bool {
	return s == StatusApprovalSending || s == StatusApprovalSent
}

// Failed reports the failure statuses, which wait for an operator (retry) or support.
func (s BindingStatus) Failed() bool {
	return s == StatusCreateFailed || s == StatusHandleFailed
}

// Withdrawable reports whether a request at status and step may be withdrawn by its owner or an
// operator (→ CLOSED): it failed on its way to being in effect. A removal that failed (its
// step CLOSE_FAILED) may not: its file is still in the repository, the binding in effect.
func Withdrawable(status BindingStatus, step Step) bool {
	return status.Failed() && step != StepCloseFailed
}

// InEffect reports a binding whose last change merged and no removal of it is on its way: its
// file must be in the repository as bindery rendered it, and a write of that file (a drift
// restore, a renewal's new expiry) still means something. Once the removal starts (CLOSE_*),
// such a write is moot: the removal deletes the file.
func InEffect(status BindingStatus, step Step) bool {
	switch status {
	case StatusMerged:
		return true
	case StatusValidated:
		return step != StepCloseStarted && step != StepCloseMerged && step != StepCloseFailed
	}
	return false
}

// AwaitsDeploy reports a request whose change merged and waits for the deploy that includes the
// merge: a grant (MERGED) or a removal (VALIDATED at CLOSE_MERGED).
func AwaitsDeploy(status BindingStatus, step Step) bool {
	return status == StatusMerged || (status == StatusValidated && step == StepCloseMerged)
}

// bindingTransitions is the one table of legal binding transitions (from → allowed tos). Every
// binding write checks it; anything else is an ErrIllegalTransition, logged and counted, never
// written. "" is the state of a row that does not exist yet. A write that keeps the status
// (only the step changes) is always legal and is not listed.
//
// Approval-first: APPROVAL_SENDING → APPROVAL_SENT → (approved) MR_CREATING [waiting set, then a
// batch] → MR_CREATED [MR open, pipeline passed] → MERGING → MERGED → VALIDATED.
// Legacy (MR-first): MR_CREATING → MR_CREATED → APPROVAL_SENDING → APPROVAL_SENT → (approved)
// MERGING → MERGED → VALIDATED.
// Close phase (revoke, expiry): VALIDATED stays VALIDATED while the delete is batched and until
// the deploy that includes its merge (steps 10201+: CLOSE_STARTED, CLOSE_MERGED), → CLOSED when
// it is deployed, → HANDLE_FAILED if it fails. A failed request (CREATE_FAILED, HANDLE_FAILED
// but a failed removal) may be withdrawn: → CLOSED (WITHDRAWN).
// Adoption (docs/drift.md): a file already in the config repository that bindery takes over — an
// unknown file an operator accepts, an imported repository's — is a new row in effect at once:
// "" → VALIDATED (CALLED_BACK).
// Failures go to CREATE_FAILED / HANDLE_FAILED; an operator retry moves them back to the
// in-progress status of the step being re-run. Settlement may find the MR merged after all
// ("merge wins"), hence the edges into MERGED from every in-progress and failed status.
var bindingTransitions = map[BindingStatus][]BindingStatus{
	"":                    {StatusApprovalSending, StatusMRCreating, StatusValidated},
	StatusRejected:        {StatusApprovalSending, StatusMRCreating},
	StatusClosed:          {StatusApprovalSending, StatusMRCreating},
	StatusApprovalSending: {StatusApprovalSent, StatusRejected, StatusMRCreating, StatusMerging, StatusCreateFailed, StatusHandleFailed},
	StatusApprovalSent:    {StatusRejected, StatusMRCreating, StatusMerging, StatusMerged, StatusCreateFailed, StatusHandleFailed},
	StatusMRCreating:      {StatusMRCreated, StatusMerging, StatusMerged, StatusCreateFailed, StatusApprovalSending, StatusRejected},
	StatusMRCreated:       {StatusApprovalSending, StatusMerging, StatusMerged, StatusMRCreating, StatusCreateFailed, StatusHandleFailed},
	StatusMerging:         {StatusMerged, StatusHandleFailed, StatusMRCreating},
	StatusMerged:          {StatusValidated},
	StatusValidated:       {StatusClosed, StatusHandleFailed},
	StatusCreateFailed:    {StatusApprovalSending, StatusMRCreating, StatusMRCreated, StatusMerging, StatusMerged, StatusRejected, StatusClosed},
	StatusHandleFailed:    {StatusMRCreating, StatusMerging, StatusMerged, StatusValidated, StatusClosed, StatusRejected},
}

// Allowed lists the statuses from may move to, in the table's order (documentation, tests).
func Allowed(from BindingStatus) []BindingStatus { return slices.Clone(bindingTransitions[from]) }

// CanTransition reports whether from → to is legal. Staying in the same status is legal.
func CanTransition(from, to BindingStatus) bool {
	if from == to && from != "" {
		return true
	}
	return slices.Contains(bindingTransitions[from], to)
}

// ErrIllegalTransition is returned, never written, for a transition outside the table.
type ErrIllegalTransition struct {
	From, To BindingStatus
}

func (e *ErrIllegalTransition) Error() string {
	from := e.From
	if from == "" {
		from = "(none)"
	}
	return fmt.Sprintf("illegal binding transition %s → %s", from, e.To)
}

// Step is the fine-grained step state of an operation, numbered by phase (docs/states.md): create
// 10001+, handle 10101+, close 10201+, callback 10301, pending/unknown outcomes 10501+. Extend
// within the ranges; never renumber (codes are stored and shown).
type Step int

const (
	// create phase: approval, admission, batch, MR creation
	StepCreateStarted        Step = 10001
	StepCreateSucceeded      Step = 10002 // MR open and its pipeline passed
	StepCreateFailed         Step = 10003
	StepCreatePipelineFailed Step = 10004
	// 10005 was CREATE_HANDOFF_REJECTED, written by versions with a worker pool: never reuse it
	StepApprovalSending    Step = 10006
	StepApprovalSent       Step = 10007
	StepApprovalSendFailed Step = 10008
	StepApprovalRejected   Step = 10009
	StepQueued             Step = 10010 // approved, in the waiting set
	StepBatched            Step = 10011 // claimed by a batch
	StepCreateInvalid      Step = 10012 // rendered change failed validation at admission
	// the batch carrying it was settled as failed by an operator or the BLOCKED sweep, with no
	// failure of its own decided: its change did not merge, and nothing tries it again by itself
	StepBatchAbandoned Step = 10013

	// handle phase: approve, rebase, merge
	StepHandleStarted        Step = 10101
	StepHandleApproved       Step = 10102
	StepHandleMerged         Step = 10103
	StepHandleFailed         Step = 10104
	StepHandleRebaseConflict Step = 10105
	StepHandleMergeFailed    Step = 10106
	StepHandlePipelineFailed Step = 10107
	StepHandleApproveFailed  Step = 10108
	StepHandleMRClosed       Step = 10109 // the MR was closed outside bindery
	// 10110 was HANDLE_HANDOFF_REJECTED, written by versions with a worker pool: never reuse it

	// close phase: revoke or expiry, and the withdrawal of a failed request
	StepCloseStarted   Step = 10201
	StepCloseSucceeded Step = 10202 // the removal's deploy came: CLOSED
	StepCloseFailed    Step = 10203
	StepCloseMerged    Step = 10204 // the removal merged; still in effect until its deploy
	StepWithdrawn      Step = 10205 // a failed request withdrawn by its owner or an operator: CLOSED

	// callback
	StepCalledBack Step = 10301

	// pending / unknown outcomes: the same MR can be retried
	StepHandlePipelinePending Step = 10501
	StepCreatePipelinePending Step = 10502
	StepHandleRebasePending   Step = 10503
	StepHandleMRBlocked       Step = 10504 // something only a person can clear keeps GitLab from merging
)

// Stages a step's time counts for (the request view's per-stage durations and metrics).
const (
	StageApproval = "approval"
	StageBatch    = "batch"
	StageCI       = "ci"
	StageMerge    = "merge"
	StageDeploy   = "deploy"
	StageClose    = "close"
)

// StepInfo is what bindery knows about a step. The steps table is the one place of it: the
// names, nextAction, the stage durations and the ops retry plan are derived from it; what people
// read of a step (its label, what it waits for, the sentence of a failure) is the presentation's
// (package explain), keyed by the same codes.
type StepInfo struct {
	Name  string // stable name, e.g. HANDLE_PIPELINE_PENDING (stored codes are shown by name)
	Stage string // the stage the time spent at this step counts for ("": an instant or an end)
	// Deterministic: a failure that waiting or retrying the same MR will not fix — a property
	// of the change, not of the moment ("contact support").
	Deterministic bool
	// Pending: the outcome is unknown and the same MR can be retried (an operator's retry).
	Pending bool
	// Person: the request waits for a person to act outside bindery, not for an operator's
	// retry; it goes on by itself once that is done.
	Person bool
}

var steps = map[Step]StepInfo{
	StepCreateStarted:         {Name: "CREATE_STARTED", Stage: StageCI},
	StepCreateSucceeded:       {Name: "CREATE_SUCCEEDED"},
	StepCreateFailed:          {Name: "CREATE_FAILED"},
	StepCreatePipelineFailed:  {Name: "CREATE_PIPELINE_FAILED", Deterministic: true},
	StepApprovalSending:       {Name: "APPROVAL_SENDING", Stage: StageApproval},
	StepApprovalSent:          {Name: "APPROVAL_SENT", Stage: StageApproval},
	StepApprovalSendFailed:    {Name: "APPROVAL_SEND_FAILED"},
	StepApprovalRejected:      {Name: "APPROVAL_REJECTED"},
	StepQueued:                {Name: "QUEUED", Stage: StageBatch},
	StepBatched:               {Name: "BATCHED", Stage: StageCI},
	StepCreateInvalid:         {Name: "CREATE_INVALID", Deterministic: true},
	StepBatchAbandoned:        {Name: "BATCH_ABANDONED"},
	StepHandleStarted:         {Name: "HANDLE_STARTED", Stage: StageMerge},
	StepHandleApproved:        {Name: "HANDLE_APPROVED", Stage: StageMerge},
	StepHandleMerged:          {Name: "HANDLE_MERGED", Stage: StageDeploy},
	StepHandleFailed:          {Name: "HANDLE_FAILED"},
	StepHandleRebaseConflict:  {Name: "HANDLE_REBASE_CONFLICT", Deterministic: true},
	StepHandleMergeFailed:     {Name: "HANDLE_MERGE_FAILED"},
	StepHandlePipelineFailed:  {Name: "HANDLE_PIPELINE_FAILED", Deterministic: true},
	StepHandleApproveFailed:   {Name: "HANDLE_APPROVE_FAILED"},
	StepHandleMRClosed:        {Name: "HANDLE_MR_CLOSED", Deterministic: true},
	StepCloseStarted:          {Name: "CLOSE_STARTED", Stage: StageClose},
	StepCloseSucceeded:        {Name: "CLOSE_SUCCEEDED"},
	StepCloseFailed:           {Name: "CLOSE_FAILED"},
	StepCloseMerged:           {Name: "CLOSE_MERGED", Stage: StageClose},
	StepWithdrawn:             {Name: "WITHDRAWN"},
	StepCalledBack:            {Name: "CALLED_BACK"},
	StepHandlePipelinePending: {Name: "HANDLE_PIPELINE_PENDING", Stage: StageMerge, Pending: true},
	StepCreatePipelinePending: {Name: "CREATE_PIPELINE_PENDING", Stage: StageCI, Pending: true},
	StepHandleRebasePending:   {Name: "HANDLE_REBASE_PENDING", Stage: StageMerge, Pending: true},
	StepHandleMRBlocked:       {Name: "HANDLE_MR_BLOCKED", Stage: StageMerge, Pending: true, Person: true},
}

// statusSteps is the steps a request can be at in each status, as the workflow, the batch and
// the store write them (a step written with another status is a bug of the writer). The table of
// what people read of each state walks it (package explain), with the next actions of each pair.
var statusSteps = map[BindingStatus][]Step{
	StatusApprovalSending: {StepApprovalSending},
	StatusApprovalSent:    {StepApprovalSent},
	// the legacy flow's own MR is created and tested here; the batch path's request waits in the
	// waiting set, is claimed, then its batch's MR is opened and tested (stopped: pending, blocked)
	StatusMRCreating: {StepCreateStarted, StepQueued, StepBatched, StepCreatePipelinePending, StepHandleMRBlocked},
	StatusMRCreated:  {StepCreateSucceeded},
	StatusMerging:    {StepHandleStarted, StepHandleApproved, StepHandlePipelinePending, StepHandleRebasePending, StepHandleMRBlocked},
	StatusMerged:     {StepHandleMerged},
	StatusValidated:  {StepCalledBack, StepCloseStarted, StepCloseMerged},
	StatusCreateFailed: {StepCreateFailed, StepCreatePipelineFailed, StepApprovalSendFailed, StepCreateInvalid, StepBatchAbandoned,
		StepHandleMRClosed, StepHandleRebaseConflict},
	StatusHandleFailed: {StepHandleFailed, StepHandleRebaseConflict, StepHandleMergeFailed, StepHandlePipelineFailed,
		StepHandleApproveFailed, StepHandleMRClosed, StepBatchAbandoned, StepCloseFailed},
	StatusRejected: {StepApprovalRejected},
	StatusClosed:   {StepCloseSucceeded, StepWithdrawn},
}

// StepsAt lists the steps a request in status can be at, in code order.
func StepsAt(status BindingStatus) []Step {
	out := slices.Clone(statusSteps[status])
	slices.Sort(out)
	return out
}

// Steps lists every defined step, in code order.
func Steps() []Step {
	out := make([]Step, 0, len(steps))
	for s := range steps {
		out = append(out, s)
	}
	slices.Sort(out)
	return out
}

// Info is the step's row of the step table (a zero row but its code's name for an unknown step).
func (s Step) Info() StepInfo {
	if i, ok := steps[s]; ok {
		return i
	}
	return StepInfo{Name: fmt.Sprintf("STEP_%d", int(s))}
}

// String is the step's stable name, e.g. HANDLE_PIPELINE_PENDING.
func (s Step) String() string { return s.Info().Name }

// Known reports whether s is a defined step.
func (s Step) Known() bool { _, ok := steps[s]; return ok }

// Deterministic reports whether s is a deterministic external failure.
func (s Step) Deterministic() bool { return s.Info().Deterministic }

// Pending reports the "outcome unknown, the same MR can be retried" steps.
func (s Step) Pending() bool { return s.Info().Pending }

// NextAction tells the client what to do next (docs/states.md).
type NextAction string

const (
	NextWait           NextAction = "WAIT"            // normal progress
	NextWaitManual     NextAction = "WAIT_MANUAL"     // stopped at a retryable step; operators will retry
	NextContactSupport NextAction = "CONTACT_SUPPORT" // deterministic failure; waiting will not help
	NextReapply        NextAction = "REAPPLY"         // rejected or closed
	NextNone           NextAction = "NONE"            // validated
)

// NextActionFor derives the client's next action from the binding status and the current step.
func NextActionFor(status BindingStatus, step Step) NextAction {
	switch {
	case status.Reappliable():
		return NextReapply
	case status == StatusValidated:
		if step >= StepCloseStarted && step < StepCalledBack {
			return NextWait // still in effect; its removal is in progress
		}
		return NextNone
	case step.Deterministic():
		return NextContactSupport
	case status.Failed(), step.Pending():
		return NextWaitManual
	}
	return NextWait
}

// Flows, recorded on the operation at apply: the approval-first, batched flow, and the legacy
// MR-first flow (one MR per request, created before the approval).
const (
	FlowApprovalFirst = "approval-first"
	FlowLegacy        = "legacy"
)

// BatchStatus is the state of a merge batch. RUNNING and BLOCKED are active: they hold their
// partition's slot (I1); SUCCEEDED and FAILED are terminal and release it.
type BatchStatus string

const (
	BatchRunning   BatchStatus = "RUNNING"
	BatchBlocked   BatchStatus = "BLOCKED"
	BatchSucceeded BatchStatus = "SUCCEEDED"
	BatchFailed    BatchStatus = "FAILED"
)

// Active reports the statuses that hold the partition's slot.
func (s BatchStatus) Active() bool { return s == BatchRunning || s == BatchBlocked }

// Known reports whether s is a batch status (the transition table has every one).
func (s BatchStatus) Known() bool { _, ok := batchTransitions[s]; return ok }

// batchTransitions is the one table of legal batch transitions. BLOCKED (rebase conflict that
// regeneration could not solve) goes back to RUNNING when an operator retries it; both active
// statuses settle into SUCCEEDED or FAILED; terminal batches never change again.
var batchTransitions = map[BatchStatus][]BatchStatus{
	BatchRunning:   {BatchBlocked, BatchSucceeded, BatchFailed},
	BatchBlocked:   {BatchRunning, BatchSucceeded, BatchFailed},
	BatchSucceeded: {},
	BatchFailed:    {},
}

// CanTransitionBatch reports whether a batch may go from → to. Staying put is legal for active
// batches (a write that only records the MR or renews the lease).
func CanTransitionBatch(from, to BatchStatus) bool {
	if from == to {
		return from.Active()
	}
	return slices.Contains(batchTransitions[from], to)
}

// ErrIllegalBatchTransition is returned, never written, for a batch transition outside the table.
type ErrIllegalBatchTransition struct {
	From, To BatchStatus
}

func (e *ErrIllegalBatchTransition) Error() string {
	return fmt.Sprintf("illegal batch transition %s → %s", e.From, e.To)
}

// Action is what a batch member changes in the repository: the create phase adds the binding's
// file, the close phase (revoke, expiry) deletes it. One operation can pass through the waiting
// set once per action, hence the waiting set's key (operation_id, action).
type Action string

const (
	ActionAdd    Action = "ADD"
	ActionDelete Action = "DELETE"
	// A drift repair's restore (docs/drift.md, 'Repairs'): the binding's file written again as
	// bindery renders it — created where it went missing (RESTORE), rewritten where it was
	// changed (REWRITE). The binding stays in effect meanwhile: a restore moves no status.
	ActionRestore Action = "RESTORE"
	ActionRewrite Action = "REWRITE"
	// A renewal's new expiry written into the binding's file (docs/workflow.md, 'Expiry,
	// reminders and renewal'), for a target whose file carries the expiry. Like a restore, it
	// moves no status: the binding stays in effect while its file goes through the train.
	ActionRenew Action = "RENEW"
)

// Restores reports a drift repair's actions (RESTORE, REWRITE).
func (a Action) Restores() bool { return a == ActionRestore || a == ActionRewrite }

// InEffect reports the actions that write the file of a binding in effect and move no status:
// a drift repair's and a renewal's.
func (a Action) InEffect() bool { return a.Restores() || a == ActionRenew }

// Task kinds: the durable work of a request's own step (one per operation), of a batch, and of
// telling people (an event's routing, then each of its deliveries).
const (
	TaskRequest = "request"
	TaskBatch   = "batch"
	TaskNotify  = "notify"
)

// RoundOutcome is what one claim round did for a partition; the strings are the API's.
type RoundOutcome string

const (
	RoundClaimed        RoundOutcome = "CLAIMED"
	RoundSlotOccupied   RoundOutcome = "SLOT_OCCUPIED"
	RoundNothingWaiting RoundOutcome = "NOTHING_WAITING"
	// RoundNotDue: requests wait, but fewer than batch.maxRequests and none longer than
	// batch.maxWait (a batch closes by size or by age); decided by the round, not the claim.
	RoundNotDue RoundOutcome = "NOT_DUE"
	// RoundPaused: an operator paused the partition's merge train; nothing is claimed until it is
	// resumed.
	RoundPaused RoundOutcome = "PAUSED"
	// RoundSpaced: the partition's merge train has room, but its newest car started its pipeline
	// less than a share of a pipeline ago; the next car follows at an even spacing.
	RoundSpaced RoundOutcome = "SPACED"
)
