package change

import (
	"errors"
	"fmt"

	"bindery/internal/vocab/state"
)

// The merge phases as steps of the kind that drives the MR, and what an outcome of them means to
// the MR's requests: one table each, so that the request kind (workflow, the legacy flow's own
// MR) and the batch kind (batch) say the same thing. How a kind carries a meaning out — one
// request's transition, or the moves of a batch's members, a bisection instead of a failure — is
// the kind's.

// PhaseRow is one merge phase as a step of a kind: whether it waits by the staged schedule, and
// what the MR's requests wait for while the task is at it ({mr}: the merge request; "": the kind
// says it in its own words).
type PhaseRow struct {
	Phase   MergePhase
	Polls   bool
	Waiting string
}

// Phases is the merge phases, in the order the kinds' step tables list them (docs/states.md).
var Phases = []PhaseRow{
	{Phase: MergeAttempt},
	{Phase: MergeRebasing, Polls: true, Waiting: "GitLab to rebase {mr} onto the target branch"},
	{Phase: MergePipeline, Polls: true, Waiting: "the pipeline of the new head of {mr} to pass"},
	{Phase: MergeChecking, Polls: true, Waiting: "GitLab to work out whether {mr} can be merged"},
	{Phase: MergeBlocked, Polls: true},
}

// Steps is the step an MR's requests record, by where they stand: Create for a request whose MR
// is still being created (MR_CREATING), Handle for one past it (MR_CREATED, MERGING).
type Steps struct{ Create, Handle state.Step }

// Of is the status and step a request at status goes to when it fails with these steps: still
// being created → CREATE_FAILED, else HANDLE_FAILED.
func (s Steps) Of(status state.BindingStatus) (state.BindingStatus, state.Step) {
	if status == state.StatusMRCreating {
		return state.StatusCreateFailed, s.Create
	}
	return state.StatusHandleFailed, s.Handle
}

// Failure is a failure decided for an MR's requests: its steps, why in words people read (Note),
// the error that caused it (Cause) and the pipeline that failed (0: none), recorded with it. A
// step returns it as an error (the engine then has it written instead of the step's declared
// failure); a batch records it on the batch before it is carried out (merge_batch.failing).
type Failure struct {
	Steps
	Note     string
	Cause    error
	Pipeline int64
}

func (f *Failure) Error() string {
	if f.Cause == nil {
		return fmt.Sprintf("%s: %s", f.Handle, f.Note)
	}
	return fmt.Sprintf("%s: %v", f.Handle, f.Cause)
}

func (f *Failure) Unwrap() error { return f.Cause }

// With is the failure with note as its words.
func (f Failure) With(note string) Failure { f.Note = note; return f }

// Because is the failure as an error, caused by err.
func (f Failure) Because(err error) error { f.Cause = err; return &f }

// The failure classes: what the requests of an MR record when its work fails.
var (
	FailedCreate   = Failure{Steps: Steps{state.StepCreateFailed, state.StepHandleFailed}}
	FailedInvalid  = Failure{Steps: Steps{state.StepCreateInvalid, state.StepHandleFailed}}
	FailedPipeline = Failure{Steps: Steps{state.StepCreatePipelineFailed, state.StepHandlePipelineFailed}}
	FailedMRClosed = Failure{Steps: Steps{state.StepHandleMRClosed, state.StepHandleMRClosed}}
	FailedApprove  = Failure{Steps: Steps{state.StepCreateFailed, state.StepHandleApproveFailed}}
	FailedMerge    = Failure{Steps: Steps{state.StepCreateFailed, state.StepHandleMergeFailed}}
	FailedConflict = Failure{Steps: Steps{state.StepHandleRebaseConflict, state.StepHandleRebaseConflict}}
)

// Where the requests of an MR wait for a person: the pipeline or the rebase gave no answer in
// time (an operator resumes the same MR), or something on the MR only a person can clear.
var (
	PipelineStuck = Steps{state.StepCreatePipelinePending, state.StepHandlePipelinePending}
	RebaseStuck   = Steps{state.StepCreatePipelinePending, state.StepHandleRebasePending}
	MRBlocked     = Steps{state.StepHandleMRBlocked, state.StepHandleMRBlocked}
	MergeGoesOn   = Steps{state.StepCreateStarted, state.StepHandleStarted}
)

// MergeClass is what an outcome of the merge phases asks of the kind that drives the MR.
type MergeClass int

const (
	// MergeNext (Waiting, Moved): the task's next look or phase, Outcome.Next.
	MergeNext MergeClass = iota
	// MergeAgain (Retried, Replaced): a new pipeline on the same head; the task goes to
	// Outcome.Phase, with Outcome.Note.
	MergeAgain
	// MergeLanded (Merged): the MR is merged; the kind records where it landed.
	MergeLanded
	// MergeFails (Closed, Failed, Expired): Meaning.Failure is decided, with the outcome's Cause.
	MergeFails
	// MergeBlocks (Blocked): a person must clear the MR; the requests wait at Meaning.Steps with
	// Outcome.Reason, and the task keeps looking at MergeBlocked.
	MergeBlocks
	// MergeHolds (Stuck): GitLab gave no answer in time; the requests wait at Meaning.Steps until
	// an operator resumes the same MR.
	MergeHolds
	// MergeResumes (Unblocked): the MR no longer needs a person; the requests are back at
	// Meaning.Steps and the merge goes on at Outcome.Phase.
	MergeResumes
)

// Meaning is what one outcome of the merge phases means to the MR's requests.
type Meaning struct {
	Class   MergeClass
	Failure Failure // MergeFails
	Steps   Steps   // MergeBlocks, MergeHolds, MergeResumes
}

// mergeMeanings is the one table from a merge outcome to what it means; a failed outcome's class
// depends on its cause, a stuck one's on the wait that gave no answer (MergeMeaning).
var mergeMeanings = map[Result]Meaning{
	Waiting:   {Class: MergeNext},
	Moved:     {Class: MergeNext},
	Retried:   {Class: MergeAgain},
	Replaced:  {Class: MergeAgain},
	Merged:    {Class: MergeLanded},
	Closed:    {Class: MergeFails, Failure: FailedMRClosed},
	Failed:    {Class: MergeFails, Failure: FailedPipeline}, // ErrConflict: FailedConflict
	Expired:   {Class: MergeFails, Failure: FailedMerge},
	Blocked:   {Class: MergeBlocks, Steps: MRBlocked},
	Stuck:     {Class: MergeHolds, Steps: PipelineStuck}, // the rebase's wait: RebaseStuck
	Unblocked: {Class: MergeResumes, Steps: MergeGoesOn},
}

// MergeMeaning is what o, an outcome of Merge, means to the MR's requests.
func MergeMeaning(o Outcome) Meaning {
	m := mergeMeanings[o.Result]
	switch {
	case o.Result == Failed && errors.Is(o.Cause, ErrConflict):
		m.Failure = FailedConflict
	case o.Result == Stuck && o.Phase == MergeRebasing:
		m.Steps = RebaseStuck
	case o.Result == Closed:
		m.Failure.Cause = ErrMRClosed
	}
	if m.Class == MergeFails && m.Failure.Cause == nil {
		m.Failure.Cause = o.Cause
	}
	return m
}
