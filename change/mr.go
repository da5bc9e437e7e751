package change

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"bindery/gitlab"
)

// Spec is what one MR carries: where it goes and the file actions of every member.
type Spec struct {
	Project      string
	TargetBranch string
	SourceBranch string // e.g. bindery/batch-42, bindery/op-<operationId>
	Title        string
	Description  string
	Actions      []FileAction
}

// Runner drives MRs through GitLab. Every method reads the remote state first, so calling it
// again after a crash, a lost answer or an operator retry is safe.
type Runner struct {
	GitLab gitlab.API
	Log    *slog.Logger
}

// Errors a caller maps to step states. They are deterministic: the same MR will not do better.
var (
	// ErrMRClosed: the MR was closed outside bindery.
	ErrMRClosed = errors.New("merge request closed outside bindery")
	// ErrConflict: a rebase conflicts even after the branch was regenerated from the target head.
	ErrConflict = errors.New("rebase conflict persists after regenerating the branch")
)

// Open makes sure the branch, its one commit with every action and an open MR exist, and
// returns the MR. knownIID is the MR recorded by an earlier attempt (0: none): when it exists it
// is returned as it is (the commit came before the MR). Otherwise the branch is written from the
// target head (force: a half-done earlier attempt is overwritten, never built upon) and the MR
// is created; a 409 for an MR that already exists on the branch returns that MR.
func (r *Runner) Open(ctx context.Context, s Spec, knownIID int64) (gitlab.MergeRequest, error) {
	if knownIID > 0 {
		mr, err := r.GitLab.GetMergeRequest(ctx, s.Project, knownIID)
		if err == nil {
			return mr, nil
		}
		if !errors.Is(err, gitlab.ErrNotFound) {
			return gitlab.MergeRequest{}, fmt.Errorf("read MR !%d: %w", knownIID, err)
		}
	}
	if err := r.commit(ctx, s); err != nil {
		return gitlab.MergeRequest{}, err
	}
	mr, err := r.GitLab.CreateMergeRequest(ctx, s.Project, gitlab.MergeRequestRequest{
		SourceBranch: s.SourceBranch, TargetBranch: s.TargetBranch, Title: s.Title,
		Description: s.Description, RemoveSourceBranch: true,
	})
	if iid, exists := gitlab.ExistingMergeRequest(err); exists {
		return r.GitLab.GetMergeRequest(ctx, s.Project, iid)
	}
	if err != nil {
		return gitlab.MergeRequest{}, fmt.Errorf("create MR: %w", err)
	}
	return mr, nil
}

// Regenerate rewrites the MR's branch from the current target head with the given actions: the
// answer to a rebase conflict when the files are generated from requests (SPEC §12.4), and the
// way a bisected batch drops half its members. GitLab starts a new pipeline for the new head.
func (r *Runner) Regenerate(ctx context.Context, s Spec) error {
	return r.commit(ctx, s)
}

// commit writes one commit with every action on SourceBranch, started from TargetBranch's head.
// A file that already exists (a create) or is already gone (a delete) is not worth failing a
// whole batch for when it is the only action: it is retried as an update, or dropped.
func (r *Runner) commit(ctx context.Context, s Spec) error {
	if err := ValidateBatch(s.Actions); err != nil {
		return err
	}
	actions := toGitLab(s.Actions)
	req := gitlab.CommitRequest{
		Branch: s.SourceBranch, StartBranch: s.TargetBranch, Force: true,
		Message: s.Title, Actions: actions,
	}
	_, err := r.GitLab.CreateCommit(ctx, s.Project, req)
	if err == nil {
		return nil
	}
	if len(actions) == 1 {
		switch {
		case errors.Is(err, gitlab.ErrFileExists) && actions[0].Action == gitlab.ActionCreate:
			req.Actions[0].Action = gitlab.ActionUpdate
			_, err = r.GitLab.CreateCommit(ctx, s.Project, req)
		case errors.Is(err, gitlab.ErrFileMissing) && actions[0].Action == gitlab.ActionUpdate:
			req.Actions[0].Action = gitlab.ActionCreate
			_, err = r.GitLab.CreateCommit(ctx, s.Project, req)
		case errors.Is(err, gitlab.ErrFileMissing) && actions[0].Action == gitlab.ActionDelete:
			// Already gone, so the change is in effect — but an MR without changes cannot be
			// opened. The caller finishes the member without an MR.
			return ErrNothingToChange
		}
	}
	if err != nil {
		return fmt.Errorf("commit to %s: %w", s.SourceBranch, err)
	}
	return nil
}

// ErrNothingToChange: the only action is a delete of a file that is already gone.
var ErrNothingToChange = errors.New("nothing to change: the file is already absent")

func toGitLab(in []FileAction) []gitlab.FileAction {
	out := make([]gitlab.FileAction, len(in))
	for i, a := range in {
		out[i] = gitlab.FileAction{Action: a.Action, Path: a.Path, Content: a.Content}
	}
	return out
}

// Outcome of one look at a pipeline.
type Outcome int

const (
	Pending Outcome = iota // no answer yet: look again later
	Passed                 // it succeeded (or the MR is merged: nothing left to wait for)
	Failed                 // it failed: deterministic, the same commit gives the same result
)

func (o Outcome) String() string {
	return [...]string{"pending", "passed", "failed"}[o]
}

// PipelineResult is what one look at the MR's head pipeline found.
type PipelineResult struct {
	Outcome  Outcome
	Pipeline *gitlab.Pipeline // the head's pipeline, when there is one
	MR       gitlab.MergeRequest
}

// CheckPipeline looks once at the MR and its head's pipeline: no waiting here — the caller's
// task is due again for the next look (waiting is data). A merged MR counts as passed (someone
// merged it); a closed one is ErrMRClosed.
func (r *Runner) CheckPipeline(ctx context.Context, project string, iid int64) (PipelineResult, error) {
	mr, err := r.GitLab.GetMergeRequest(ctx, project, iid)
	if err != nil {
		return PipelineResult{}, fmt.Errorf("read MR !%d: %w", iid, err)
	}
	res := PipelineResult{MR: mr}
	switch {
	case mr.Merged():
		res.Outcome = Passed
		return res, nil
	case mr.Closed():
		return res, ErrMRClosed
	}
	pl, err := r.headPipeline(ctx, project, mr)
	if err != nil || pl == nil {
		return res, err
	}
	res.Pipeline = pl
	switch pl.Outcome() {
	case gitlab.Passed:
		res.Outcome = Passed
	case gitlab.Failed:
		res.Outcome = Failed
	}
	return res, nil
}

// PipelineLook is one check of a pipeline wait with the flaky allowance: a failed pipeline gets
// new runs on the same commit while retries remain.
type PipelineLook struct {
	PipelineResult
	// Retried: the pipeline failed and a new one was started on the same commit (one retry of
	// the allowance used); the wait starts over.
	Retried bool
}

// LookAtPipeline is CheckPipeline, then — for a failed pipeline with retriesLeft > 0 — a new
// pipeline on the same commit (a flaky failure gets another chance before it counts).
func (r *Runner) LookAtPipeline(ctx context.Context, project string, iid int64, retriesLeft int) (PipelineLook, error) {
	res, err := r.CheckPipeline(ctx, project, iid)
	if err != nil || res.Outcome != Failed || retriesLeft <= 0 {
		return PipelineLook{PipelineResult: res}, err
	}
	if err := r.RetryPipeline(ctx, project, iid); err != nil {
		return PipelineLook{PipelineResult: res}, err
	}
	r.Log.InfoContext(ctx, "pipeline failed; a new run on the same commit (flaky retry)", "project", project, "mr", iid)
	res.Outcome = Pending
	return PipelineLook{PipelineResult: res, Retried: true}, nil
}

// headPipeline is the pipeline of the MR's current head: head_pipeline when it is for the head
// SHA (it can lag behind), else the newest listed pipeline for that SHA, else none yet.
func (r *Runner) headPipeline(ctx context.Context, project string, mr gitlab.MergeRequest) (*gitlab.Pipeline, error) {
	if p := mr.HeadPipeline; p != nil && p.SHA == mr.SHA {
		return p, nil
	}
	list, err := r.GitLab.MergeRequestPipelines(ctx, project, mr.IID)
	if err != nil {
		return nil, err
	}
	for i := range list { // newest first
		if list[i].SHA == mr.SHA {
			return &list[i], nil
		}
	}
	return nil, nil
}

// RetryPipeline starts a new pipeline for the MR's head (one retry of a flaky failure).
func (r *Runner) RetryPipeline(ctx context.Context, project string, iid int64) error {
	_, err := r.GitLab.CreateMergeRequestPipeline(ctx, project, iid)
	return err
}

// RestartStuckPipeline is an operator's resume of work whose pipeline gave no answer in time: a
// head pipeline that finished meanwhile is taken as it is; one still running gets a new pipeline
// on the same commit, because waiting on it again may wait forever (a hung runner). A rebase in
// progress is left to finish. It reports whether a new pipeline was started.
func (r *Runner) RestartStuckPipeline(ctx context.Context, project string, iid int64) (bool, error) {
	mr, err := r.GitLab.GetMergeRequest(ctx, project, iid)
	if err != nil || mr.RebaseInProgress || !mr.Open() {
		return false, err
	}
	if p := mr.HeadPipeline; p != nil && p.SHA == mr.SHA && p.Outcome() != gitlab.Running {
		return false, nil
	}
	r.Log.InfoContext(ctx, "resume: a new pipeline in place of one that gave no answer", "project", project, "mr", iid)
	return true, r.RetryPipeline(ctx, project, iid)
}

// Approve approves the MR's head with every reviewer account (each retried separately by the
// approve component). A merged MR needs no approval; a closed one is ErrMRClosed.
func (r *Runner) Approve(ctx context.Context, project string, iid int64) (gitlab.MergeRequest, error) {
	mr, err := r.GitLab.GetMergeRequest(ctx, project, iid)
	if err != nil {
		return mr, fmt.Errorf("read MR !%d: %w", iid, err)
	}
	switch {
	case mr.Merged():
		return mr, nil
	case mr.Closed():
		return mr, ErrMRClosed
	}
	return mr, r.GitLab.Approve(ctx, project, iid, mr.SHA)
}

// Event is progress of a merge worth recording (the request view shows it).
type Event string

const (
	EventRebasing     Event = "rebasing"
	EventRegenerating Event = "regenerating"
	EventPipeline     Event = "pipeline" // a new head needs its pipeline to pass again
)

// MergePhase is where a merge stands between two of its actions. The phase names are stored (a
// task's step): never rename one.
type MergePhase string

const (
	// MergeAttempt reads the MR and acts on what it says: merge, rebase, regenerate, approve.
	MergeAttempt MergePhase = "merge"
	// MergeRebasing waits for a rebase GitLab runs asynchronously.
	MergeRebasing MergePhase = "merge_rebase"
	// MergePipeline waits for the pipeline of a head that just moved, then re-approves.
	MergePipeline MergePhase = "merge_pipeline"
)

// Polls reports the phases that wait for GitLab (a poll by the staged schedule).
func (p MergePhase) Polls() bool { return p == MergeRebasing || p == MergePipeline }

// MergeState is what a merge remembers between its actions.
type MergeState struct {
	Phase MergePhase
	// Regenerated: the branch was regenerated from the target head once already; a conflict
	// after that is final (ErrConflict).
	Regenerated bool
	// Refused counts merges GitLab refused in a row (405/409/422); after maxRefusals the MR
	// needs a person.
	Refused int
}

// MergeResult is what one merge action did.
type MergeResult struct {
	State  MergeState // what to do next
	Merged bool       // the MR is merged: done
	// Wait: nothing decided yet in a polling phase; look again by the staged schedule (the
	// same wait). Otherwise the state moved on: run the next action now — or, with Pause, after
	// a short pause (GitLab is merging, or refused the merge and may accept it in a moment).
	Wait  bool
	Pause bool
	Event Event // progress to record, or ""
	MR    gitlab.MergeRequest
}

// maxRefusals bounds the merges GitLab may refuse in a row; beyond it the MR needs a person.
const maxRefusals = 8

// ErrPipelineFailed: the pipeline of a head produced by a rebase or regeneration failed.
var ErrPipelineFailed = errors.New("pipeline failed after the branch moved")

// MergeStep does one action of a merge (no waiting in between: the caller's task is due again).
// In MergeAttempt it reads the MR first and acts on what it says: merged → done; closed →
// ErrMRClosed; locked (GitLab is merging right now) → undecided, look again shortly; needs a
// rebase → ask for one (MergeRebasing); a conflict → regenerate the branch from the target head
// once (MergePipeline; a second conflict is ErrConflict); not approved → approve; CI running →
// MergePipeline; else merge at the head SHA — a moved head or a refused merge is read again.
func (r *Runner) MergeStep(ctx context.Context, spec Spec, iid int64, st MergeState) (MergeResult, error) {
	switch st.Phase {
	case MergeRebasing:
		return r.rebaseLook(ctx, spec, iid, st)
	case MergePipeline:
		return r.pipelineLook(ctx, spec, iid, st)
	}
	st.Phase = MergeAttempt
	project := spec.Project
	mr, err := r.GitLab.GetMergeRequest(ctx, project, iid)
	if err != nil {
		return MergeResult{State: st}, fmt.Errorf("read MR !%d: %w", iid, err)
	}
	res := MergeResult{State: st, MR: mr}
	switch {
	case mr.Merged():
		res.Merged = true
		return res, nil
	case mr.Closed():
		return res, ErrMRClosed
	case mr.State == gitlab.StateLocked:
		res.Pause = true // GitLab is merging it right now: not merged, not refused either
		return res, nil
	case mr.HasConflicts || mr.DetailedMergeStatus == "conflict":
		return r.regenerate(ctx, spec, iid, res)
	case mr.NeedsRebase():
		if err := r.GitLab.Rebase(ctx, project, iid); err != nil {
			return res, fmt.Errorf("rebase MR !%d: %w", iid, err)
		}
		res.State.Phase, res.Event = MergeRebasing, EventRebasing
		return res, nil
	case mr.DetailedMergeStatus == "not_approved":
		if _, err := r.Approve(ctx, project, iid); err != nil {
			return res, fmt.Errorf("approve before merge: %w", err)
		}
		return res, nil
	case mr.DetailedMergeStatus == "ci_still_running" || mr.DetailedMergeStatus == "ci_must_pass":
		res.State.Phase, res.Event = MergePipeline, EventPipeline
		return res, nil
	}
	merged, err := r.GitLab.Merge(ctx, project, iid, gitlab.MergeOptions{SHA: mr.SHA, RemoveSourceBranch: true})
	switch {
	case err == nil && merged.Merged():
		res.Merged, res.MR = true, merged
		return res, nil
	case err == nil:
		res.Pause, res.MR = true, merged // accepted, still merging (locked): the next read says
		return res, nil
	case errors.Is(err, gitlab.ErrSHAMismatch), errors.Is(err, gitlab.ErrNotMergeable), errors.Is(err, gitlab.ErrMergeFailed):
		// The head moved, or GitLab refused (405/422): the next read says why and acts on it.
		res.State.Refused++
		if res.State.Refused >= maxRefusals {
			return res, fmt.Errorf("merge MR !%d: refused %d times in a row: %w", iid, res.State.Refused, err)
		}
		res.Pause = true
		return res, nil
	}
	return res, fmt.Errorf("merge MR !%d: %w", iid, err)
}

// rebaseLook is one look at a rebase GitLab runs: still running → wait; failed → regenerate;
// done → wait for the new head's pipeline.
func (r *Runner) rebaseLook(ctx context.Context, spec Spec, iid int64, st MergeState) (MergeResult, error) {
	mr, err := r.GitLab.GetMergeRequest(ctx, spec.Project, iid)
	res := MergeResult{State: st, MR: mr}
	switch {
	case err != nil:
		return res, fmt.Errorf("read MR !%d: %w", iid, err)
	case mr.Merged():
		res.Merged = true
		return res, nil
	case mr.Closed():
		return res, ErrMRClosed
	case mr.RebaseInProgress:
		res.Wait = true
		return res, nil
	case mr.MergeError != "":
		r.Log.InfoContext(ctx, "rebase failed; regenerating the branch", "project", spec.Project, "mr", iid, "error", mr.MergeError)
		return r.regenerate(ctx, spec, iid, res)
	}
	res.State.Phase, res.Event = MergePipeline, EventPipeline
	return res, nil
}

// regenerate answers a conflict: the branch rewritten from the target head with the requests'
// files (SPEC §12.4), once; then the new head's pipeline.
func (r *Runner) regenerate(ctx context.Context, spec Spec, iid int64, res MergeResult) (MergeResult, error) {
	if res.State.Regenerated {
		return res, ErrConflict
	}
	if err := r.Regenerate(ctx, spec); err != nil {
		return res, fmt.Errorf("regenerate MR !%d: %w", iid, err)
	}
	res.State.Regenerated, res.State.Phase, res.Event = true, MergePipeline, EventRegenerating
	return res, nil
}

// pipelineLook is one look at the pipeline of a head that moved: running → wait; failed →
// ErrPipelineFailed; passed → re-approve (a push may reset approvals) and merge.
func (r *Runner) pipelineLook(ctx context.Context, spec Spec, iid int64, st MergeState) (MergeResult, error) {
	pl, err := r.CheckPipeline(ctx, spec.Project, iid)
	res := MergeResult{State: st, MR: pl.MR}
	switch {
	case err != nil:
		return res, err
	case pl.MR.Merged():
		res.Merged = true
		return res, nil
	case pl.Outcome == Pending:
		res.Wait = true
		return res, nil
	case pl.Outcome == Failed:
		return res, ErrPipelineFailed
	}
	if _, err := r.Approve(ctx, spec.Project, iid); err != nil {
		return res, fmt.Errorf("re-approve MR !%d: %w", iid, err)
	}
	res.State.Phase = MergeAttempt
	return res, nil
}

// Close closes the MR if it is still open and reads it again. It reports merged=true when the
// MR turned out merged: a merged MR cannot be closed, so the merge wins the race with the close.
// iid 0 (no MR was ever created) is "not merged". A locked MR (GitLab is merging it right now)
// is undecided: ErrLocked, and the caller looks again shortly — it must not call it unmerged.
func (r *Runner) Close(ctx context.Context, project string, iid int64) (merged bool, err error) {
	if iid == 0 {
		return false, nil
	}
	mr, err := r.GitLab.GetMergeRequest(ctx, project, iid)
	if errors.Is(err, gitlab.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("read MR !%d: %w", iid, err)
	}
	if mr.State == gitlab.StateLocked {
		return false, ErrLocked
	}
	if mr.State == gitlab.StateOpened {
		if _, err := r.GitLab.CloseMergeRequest(ctx, project, iid); err != nil {
			return false, fmt.Errorf("close MR !%d: %w", iid, err)
		}
		if mr, err = r.GitLab.GetMergeRequest(ctx, project, iid); err != nil {
			return false, fmt.Errorf("re-read MR !%d: %w", iid, err)
		}
		if mr.State == gitlab.StateLocked {
			return false, ErrLocked
		}
	}
	if !mr.Merged() && mr.SourceBranch != "" {
		// Best effort: a leftover branch only costs storage; the next attempt overwrites it.
		_ = r.GitLab.DeleteBranch(ctx, project, mr.SourceBranch)
	}
	return mr.Merged(), nil
}

// ErrLocked: GitLab is merging the MR right now; whether it merges is not decided yet.
var ErrLocked = errors.New("merge request is locked: GitLab is merging it right now")
