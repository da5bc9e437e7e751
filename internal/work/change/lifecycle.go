package change

import (
	"context"
	"errors"
	"fmt"
	"time"

	"bindery/internal/platform/config"
	"bindery/internal/remote/gitlab"
	"bindery/internal/work/engine"
	"bindery/store"
)

// The lifecycle of one merge request, the same for a batch's MR and a legacy request's own: open
// (branch, commit, MR) → pipeline (flaky retries, a hung pipeline replaced once) → the reviewer
// accounts' approvals → the merge phases (rebase, regenerate, the new head's pipeline, a person's
// blocker) → merged, or a decided failure the owner settles. Each call is one bounded action: it
// reads the remote state first, acts once, and returns a typed Outcome. What a merge outcome means
// to the requests — the failure class, where they wait for a person — is one table
// (MergeMeaning, phases.go); carrying it out is the business of the kind that drives the MR
// (docs/architecture.md, "One merge-request lifecycle").

// Memo is what the lifecycle remembers between its actions; the kind that drives the MR keeps it
// in its task's memo (the JSON names are stored).
type Memo struct {
	Flaky   int  `json:"flaky,omitempty"`   // flaky retries used on the current branch
	Restart bool `json:"restart,omitempty"` // an operator's resume: replace a pipeline still running
	Hung    int  `json:"hung,omitempty"`    // pipelines replaced because they gave no answer in time
	Regen   bool `json:"regen,omitempty"`   // the merge regenerated the branch once already
	Refused int  `json:"refused,omitempty"` // merges GitLab refused in a row
	// Tested: the head whose pipeline passed (the only SHA merged); Approved: the head the
	// reviewer accounts approved.
	Tested   string `json:"tested,omitempty"`
	Approved string `json:"approved,omitempty"`
	// Behind: the target moved since the head was built; the merge rebases first (MergeState).
	Behind bool `json:"behind,omitempty"`
	// On: the target head the branch was found built on; the merge reads the target again
	// right before it asks for the merge (MergeState.On; "" : no such look).
	On    string `json:"on,omitempty"`
	CI    int64  `json:"ci,omitempty"`    // when the current pipeline wait started (unix ms, for the metrics)
	Merge int64  `json:"merge,omitempty"` // when the merge phase started (unix ms)
}

// Result is what one action of the lifecycle came to.
type Result int

const (
	// Waiting: nothing decided yet; Outcome.Next is the same wait's next look.
	Waiting Result = iota
	// Opened: the MR exists and its branch carries the spec; the pipeline wait starts.
	Opened
	// Restarted: an operator resumed the work and a new pipeline replaces one still running.
	Restarted
	// Retried: the pipeline failed and runs again on the same commit (batch.flakyRetries).
	Retried
	// Replaced: the pipeline gave no answer within poll.timeout; a new one runs on the same commit.
	Replaced
	// Passed: the head's pipeline passed (Memo.Tested is that head).
	Passed
	// Approved: the reviewer accounts approved the head; the merge is next.
	Approved
	// Moved: the merge went on to Outcome.Phase (Outcome.Next says when), with Event worth recording.
	Moved
	// Merged: the MR is merged (Outcome.MR as GitLab gave it).
	Merged
	// Blocked: something only a person can clear keeps GitLab from merging (Outcome.Reason).
	Blocked
	// Unblocked: the MR was blocked and no longer is; the merge goes on (Outcome.Phase).
	Unblocked
	// Expired: blocked for longer than batch.blockedTimeout (Outcome.Reason says by what).
	Expired
	// Stuck: GitLab gave no answer within poll.timeout — a rebase, or a pipeline even after it was
	// replaced (Outcome.Phase is the wait); the same MR can be resumed by an operator.
	Stuck
	// Failed: deterministic — the same MR will not do better (Outcome.Cause).
	Failed
	// Closed: the MR was closed outside bindery.
	Closed
	// Absent: nothing to change (the only change deletes a file that is already gone).
	Absent
)

// Outcome is what one action of the lifecycle did.
type Outcome struct {
	Result   Result
	MR       gitlab.MergeRequest
	Pipeline *gitlab.Pipeline // the pipeline looked at (nil: none known)
	// Phase: the merge phase to go to (Moved, Unblocked), or the wait that gave no answer (Stuck:
	// MergeRebasing, or "" for the first pipeline wait).
	Phase MergePhase
	// Next is the task's next look (Waiting), or when the next phase runs (Moved).
	Next  store.TaskNext
	Event Event // progress worth a step in the requests' timelines, or ""
	// Note says what happened in bindery's words (shown to people as written); Reason what keeps
	// the MR from merging (Blocked, Expired, Stuck).
	Note, Reason string
	// Cause of a Failed outcome: a deterministic error (ErrPipelineFailed, ErrConflict, a commit
	// GitLab refused for its contents).
	Cause error
	// New (Opened): a new MR, or its branch rewritten — the pipeline wait starts afresh. Head is
	// the commit the branch carries; Base, when New, the commit it was built on.
	New        bool
	Head, Base string
}

// Lifecycle drives merge requests through their lifecycle. Safe for concurrent use.
type Lifecycle struct {
	*Runner
	Config *config.Source
}

// Stages is the polling schedule in force.
func (l *Lifecycle) Stages() engine.Stages {
	short, n, long, timeout := l.Config.Current().PollStages()
	return engine.Stages{Short: short, ShortCount: n, Long: long, Timeout: timeout}
}

// Open makes sure the MR of spec exists and its branch carries exactly spec's changes: no MR yet
// (knownIID 0) → branch, one commit and the MR; rewrite → the branch regenerated (the set of
// changes moved on since it was written); otherwise the MR is read as it is. An operator's resume
// (Memo.Restart) of an MR whose branch stays replaces a pipeline still running.
func (l *Lifecycle) Open(ctx context.Context, spec Spec, knownIID int64, rewrite bool, m *Memo) (Outcome, error) {
	mr, written, err := l.open(ctx, spec, knownIID)
	if err == nil && knownIID != 0 && rewrite && mr.Open() && written.ID == "" {
		written, err = l.commit(ctx, spec)
	}
	switch {
	case errors.Is(err, ErrNothingToChange):
		return Outcome{Result: Absent}, nil
	case err != nil && CommitRefused(err):
		return Outcome{Result: Failed, Cause: err}, nil
	case err != nil:
		return Outcome{}, err
	}
	now := time.Now().UnixMilli()
	restart := m.Restart && !rewrite
	m.Restart = false
	if restart {
		started, err := l.RestartStuckPipeline(ctx, spec.Project, mr.IID)
		if err != nil {
			m.Restart = true // still to do when the action is tried again
			return Outcome{}, err
		}
		if started {
			m.CI = now
			return Outcome{Result: Restarted, MR: mr,
				Note: fmt.Sprintf("resumed: MR !%d's pipeline was still running; a new pipeline was started on the same commit", mr.IID)}, nil
		}
	}
	if rewrite {
		m.Flaky, m.Hung, m.CI = 0, 0, now
	}
	if m.CI == 0 {
		m.CI = now
	}
	o := Outcome{Result: Opened, MR: mr, New: rewrite || mr.IID != knownIID, Head: mr.SHA}
	if written.ID != "" {
		o.Head = written.ID
		if len(written.ParentIDs) > 0 {
			o.Base = written.ParentIDs[0]
		}
	}
	return o, nil
}

// CommitRefused: GitLab refused the commit for what it contains (a file to create exists, one to
// delete is gone, two changes touch one path) — a property of the set of changes, not of the
// moment.
func CommitRefused(err error) bool {
	return errors.Is(err, ErrInvalidChange) || errors.Is(err, gitlab.ErrFileExists) ||
		errors.Is(err, gitlab.ErrFileMissing) || errors.Is(err, gitlab.ErrFileChanged)
}

// Pipeline is one look at the pipeline of the MR's head: pending → the next look by the staged
// schedule (after poll.timeout: a new pipeline once, then Stuck); passed → Passed; failed → a new
// run on the same commit while batch.flakyRetries allow (retry), then Failed. Without retry a
// failure is Failed at once: it may not be this MR's own (a car of a merge train whose cars
// ahead are still tested), or it was confirmed already (a bisection's half of a set whose failure
// outlived its flaky retries).
func (l *Lifecycle) Pipeline(ctx context.Context, r *engine.Run, project string, iid int64, m *Memo, retry bool) (Outcome, error) {
	retries := l.Config.Current().BatchFlakyRetries() - m.Flaky
	if !retry {
		retries = 0
	}
	look, err := l.LookAtPipeline(ctx, project, iid, retries)
	switch {
	case errors.Is(err, ErrMRClosed):
		return Outcome{Result: Closed}, nil
	case err != nil:
		return Outcome{}, err
	}
	o := Outcome{MR: look.MR, Pipeline: look.Pipeline}
	link := PipelineWords(look.Pipeline)
	switch {
	case look.Retried:
		m.Flaky++
		m.CI = time.Now().UnixMilli()
		o.Result, o.Note = Retried, fmt.Sprintf("%s failed; new run %d on the same commit (batch.flakyRetries)", link, m.Flaky)
		return o, nil
	case look.Outcome == PipelinePassed && look.MR.Merged():
		o.Result = Merged
		return o, nil
	case look.Outcome == PipelinePassed:
		m.Tested = look.MR.SHA
		o.Result, o.Note = Passed, link+" passed"
		return o, nil
	case look.Outcome == PipelineFailed:
		o.Result, o.Note, o.Cause = Failed, link+" failed", ErrPipelineFailed
		return o, nil
	}
	next, timedOut := r.Poll(l.Stages(), "waiting for "+link)
	if !timedOut {
		o.Result, o.Next = Waiting, next
		return o, nil
	}
	return l.hung(ctx, project, iid, m, o, "", link)
}

// PipelineWords names a pipeline for people: "pipeline 12 (its address)", or "the pipeline".
func PipelineWords(p *gitlab.Pipeline) string {
	if p == nil {
		return "the pipeline"
	}
	return fmt.Sprintf("pipeline %d (%s)", p.ID, p.WebURL)
}

// maxHungRestarts is how many pipelines that gave no answer are replaced before the wait is Stuck.
const maxHungRestarts = 1

// hung: the pipeline gave no answer within poll.timeout. A hung runner or a job waiting for
// nobody is specific to that pipeline, so the first time a new pipeline is started on the same
// commit and waited for; a second silence means the project's CI is not answering (Stuck).
func (l *Lifecycle) hung(ctx context.Context, project string, iid int64, m *Memo, o Outcome, phase MergePhase, link string) (Outcome, error) {
	o.Phase = phase
	if m.Hung >= maxHungRestarts {
		o.Result, o.Reason = Stuck, link+" gave no answer within poll.timeout, nor did a new one"
		return o, nil
	}
	started, err := l.RestartStuckPipeline(ctx, project, iid)
	if err != nil {
		return Outcome{}, err
	}
	m.CI = time.Now().UnixMilli()
	if !started {
		// It finished meanwhile (or a rebase moved the head): look again at once.
		o.Result, o.Next = Waiting, store.TaskNext{Wait: store.WaitStart}
		return o, nil
	}
	m.Hung++
	o.Result, o.Note = Replaced, link+" gave no answer within poll.timeout; a new pipeline was started on the same commit"
	return o, nil
}

// Approve has both reviewer accounts approve the MR's head; the merge phase starts.
func (l *Lifecycle) Approve(ctx context.Context, project string, iid int64, m *Memo) (Outcome, error) {
	mr, err := l.Runner.Approve(ctx, project, iid)
	switch {
	case errors.Is(err, ErrMRClosed):
		return Outcome{Result: Closed, MR: mr}, nil
	case err != nil:
		return Outcome{}, err
	case mr.Merged(): // remote state first: someone merged it
		return Outcome{Result: Merged, MR: mr}, nil
	}
	m.Merge, m.Regen, m.Refused, m.Approved = time.Now().UnixMilli(), false, 0, mr.SHA
	return Outcome{Result: Approved, MR: mr, Note: fmt.Sprintf("MR !%d approved by the reviewer accounts", iid)}, nil
}

// Merge is one action of the merge in phase (MergeStep): merged; a phase that found nothing
// decided yet looks again by the staged schedule (GitLab's own work up to poll.timeout, a person
// up to batch.blockedTimeout); a new head's pipeline that failed gets the flaky allowance; a
// conflict that survives regeneration, or a pipeline failing for good, is Failed.
func (l *Lifecycle) Merge(ctx context.Context, r *engine.Run, spec Spec, iid int64, phase MergePhase, m *Memo) (Outcome, error) {
	if m.Restart { // an operator's resume of a pipeline that gave no answer in time
		if _, err := l.RestartStuckPipeline(ctx, spec.Project, iid); err != nil {
			return Outcome{}, err
		}
		m.Restart = false
	}
	res, err := l.MergeStep(ctx, spec, iid, MergeState{Phase: phase, Regenerated: m.Regen, Refused: m.Refused, Tested: m.Tested, Approved: m.Approved, Behind: m.Behind, On: m.On})
	m.Regen, m.Refused, m.Tested, m.Approved, m.Behind, m.On = res.State.Regenerated, res.State.Refused, res.State.Tested, res.State.Approved, res.State.Behind, res.State.On
	o := Outcome{MR: res.MR, Pipeline: res.Pipeline, Phase: res.State.Phase}
	switch {
	case err == nil && res.Merged:
		o.Result = Merged
		return o, nil
	case errors.Is(err, ErrMRClosed):
		o.Result = Closed
		return o, nil
	case errors.Is(err, ErrConflict):
		o.Result, o.Cause, o.Note = Failed, err, "the rebase conflicts even after regenerating the branch from the target head"
		return o, nil
	case errors.Is(err, ErrPipelineFailed):
		if m.Flaky < l.Config.Current().BatchFlakyRetries() {
			if err := l.RetryPipeline(ctx, spec.Project, res.MR, res.Pipeline); err != nil {
				return Outcome{}, err
			}
			m.Flaky++
			o.Result, o.Phase = Retried, MergePipeline
			o.Note = fmt.Sprintf("the pipeline of the rebased head failed; new run %d on the same commit (batch.flakyRetries)", m.Flaky)
			return o, nil
		}
		o.Result, o.Cause, o.Note = Failed, err, "the pipeline of the rebased head failed"
		return o, nil
	case err != nil:
		return Outcome{}, err
	case res.Wait:
		return l.mergeWait(ctx, r, spec.Project, iid, phase, res, m, o)
	case res.State.Phase == MergeBlocked:
		o.Result, o.Reason = Blocked, res.Blocked
		return o, nil
	case res.Unblocked:
		o.Result, o.Note = Unblocked, fmt.Sprintf("MR !%d is no longer blocked; the merge goes on", iid)
		return o, nil
	}
	o.Result, o.Event, o.Note = Moved, res.Event, EventNotes[res.Event]
	o.Next = store.TaskNext{Step: string(res.State.Phase)}
	switch {
	case res.State.Phase.Polls() && res.State.Phase != phase:
		o.Next.Wait = store.WaitStart // a new wait, its first look at once
	case res.Pause:
		o.Next.In = l.Stages().Short
	}
	return o, nil
}

// mergeWait is a merge phase that found nothing decided yet: the same wait's next look, up to its
// limit — poll.timeout for GitLab's own work, batch.blockedTimeout for a person to clear the MR.
func (l *Lifecycle) mergeWait(ctx context.Context, r *engine.Run, project string, iid int64, phase MergePhase, res MergeResult, m *Memo, o Outcome) (Outcome, error) {
	st := l.Stages()
	if phase == MergeBlocked {
		st.Timeout = l.Config.Current().BatchBlockedTimeout()
	}
	next, timedOut := r.Poll(st, WaitNotes[phase])
	o.Phase = phase
	switch {
	case !timedOut:
		o.Result, o.Next = Waiting, next
		return o, nil
	case phase == MergeRebasing:
		o.Result, o.Reason = Stuck, "the rebase gave no answer within poll.timeout"
		return o, nil
	case phase == MergeChecking:
		o.Result, o.Reason = Blocked, BlockerReason("checking", iid) // longer than poll.timeout
		return o, nil
	case phase == MergeBlocked:
		o.Result, o.Reason = Expired, res.Blocked
		return o, nil
	}
	return l.hung(ctx, project, iid, m, o, MergePipeline, "the new head's pipeline")
}

// EventNotes say what each kind of merge progress is, in bindery's words.
var EventNotes = map[Event]string{
	EventRebasing:     "rebasing onto the target branch",
	EventRegenerating: "the rebase conflicts: regenerating the branch from the target head",
	EventPipeline:     "the branch moved: waiting for the new head's pipeline",
}

// WaitNotes say what each merge phase waits for.
var WaitNotes = map[MergePhase]string{
	MergeRebasing: EventNotes[EventRebasing],
	MergePipeline: EventNotes[EventPipeline],
	MergeChecking: "GitLab is computing whether the MR can be merged",
	MergeBlocked:  "waiting for a person to clear the MR in GitLab",
}
