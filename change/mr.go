package change

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

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

// PipelineResult is what polling the MR's pipeline found.
type PipelineResult struct {
	Outcome  Outcome
	Pipeline *gitlab.Pipeline // the head's pipeline, when there is one
	MR       gitlab.MergeRequest
}

// WaitPipeline polls the MR's head pipeline in stages until it passes, fails or the stages time
// out. A merged MR counts as passed (someone merged it: nothing left to wait for); a closed one
// is ErrMRClosed.
func (r *Runner) WaitPipeline(ctx context.Context, project string, iid int64, st Stages, wake <-chan struct{}) (PipelineResult, error) {
	var res PipelineResult
	out, err := Poll(ctx, st, wake, func(ctx context.Context) (Outcome, error) {
		mr, err := r.GitLab.GetMergeRequest(ctx, project, iid)
		if err != nil {
			return Pending, err
		}
		res.MR = mr
		switch {
		case mr.Merged():
			return Passed, nil
		case mr.Closed():
			// Decided, not a read error (Poll would keep polling an error until its timeout):
			// reported as ErrMRClosed below.
			return Failed, nil
		}
		pl, err := r.headPipeline(ctx, project, mr)
		if err != nil || pl == nil {
			return Pending, err
		}
		res.Pipeline = pl
		switch pl.Outcome() {
		case gitlab.Passed:
			return Passed, nil
		case gitlab.Failed:
			return Failed, nil
		}
		return Pending, nil
	})
	res.Outcome = out
	if out != Passed && res.MR.Closed() {
		return res, ErrMRClosed
	}
	if out == TimedOut {
		err = nil // the last read error is only a detail of "no answer in time"
	}
	return res, err
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

// Event reports progress inside Merge so the caller can record it (rebase pending, …).
type Event string

const (
	EventRebasing     Event = "rebasing"
	EventRegenerating Event = "regenerating"
	EventPipeline     Event = "pipeline" // a new head needs its pipeline to pass again
)

// MergeInput is what Merge needs beyond the MR: the spec to regenerate the branch from on a
// conflict, the polling stages for rebase and pipeline, and where to report progress.
type MergeInput struct {
	Spec     Spec
	IID      int64
	Stages   Stages
	Wake     <-chan struct{}
	Progress func(Event)
}

// maxMergeAttempts bounds the read/act/merge loop; beyond it the MR needs a person.
const maxMergeAttempts = 8

// ErrPipelineFailed: the pipeline of a head produced by a rebase or regeneration failed.
var ErrPipelineFailed = errors.New("pipeline failed after the branch moved")

// ErrPending: a rebase or pipeline gave no answer in time; the same MR can be retried later.
var ErrPending = errors.New("no answer in time; the same MR can be retried")

// Merge merges the MR. Each attempt reads the MR first and acts on what it says: merged →
// done; closed → ErrMRClosed; needs a rebase → rebase, wait for the new head's pipeline and
// re-approve (a push may reset approvals); a rebase conflict → regenerate the branch from the
// target head, once (a conflict after that is ErrConflict); not approved → approve; CI running
// → wait for it. Then merge with the head SHA; a moved head or a refused merge reads again.
func (r *Runner) Merge(ctx context.Context, in MergeInput) (gitlab.MergeRequest, error) {
	project := in.Spec.Project
	if in.Progress == nil {
		in.Progress = func(Event) {}
	}
	regenerated := false
	var lastErr error
	for attempt := range maxMergeAttempts {
		if attempt > 0 && !sleep(ctx, in.Stages.Short) {
			return gitlab.MergeRequest{}, ctx.Err()
		}
		mr, err := r.GitLab.GetMergeRequest(ctx, project, in.IID)
		if err != nil {
			return mr, fmt.Errorf("read MR !%d: %w", in.IID, err)
		}
		switch {
		case mr.Merged():
			return mr, nil
		case mr.Closed():
			return mr, ErrMRClosed
		case mr.NeedsRebase() || mr.HasConflicts || mr.DetailedMergeStatus == "conflict":
			if err := r.rebaseOrRegenerate(ctx, in, mr, &regenerated); err != nil {
				return mr, err
			}
			continue
		case mr.DetailedMergeStatus == "not_approved":
			if _, err := r.Approve(ctx, project, in.IID); err != nil {
				return mr, fmt.Errorf("approve before merge: %w", err)
			}
			continue
		case mr.DetailedMergeStatus == "ci_still_running" || mr.DetailedMergeStatus == "ci_must_pass":
			if err := r.awaitHead(ctx, in); err != nil {
				return mr, err
			}
			continue
		}
		merged, err := r.GitLab.Merge(ctx, project, in.IID, gitlab.MergeOptions{SHA: mr.SHA, RemoveSourceBranch: true})
		switch {
		case err == nil && merged.Merged():
			return merged, nil
		case err == nil, errors.Is(err, gitlab.ErrSHAMismatch),
			errors.Is(err, gitlab.ErrNotMergeable), errors.Is(err, gitlab.ErrMergeFailed):
			// Merging in progress, the head moved, or GitLab refused (405/422): the next read
			// says why, and the loop acts on it.
			lastErr = err
		default:
			return mr, fmt.Errorf("merge MR !%d: %w", in.IID, err)
		}
	}
	return gitlab.MergeRequest{}, fmt.Errorf("merge MR !%d: not merged after %d attempts: %v", in.IID, maxMergeAttempts, lastErr)
}

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// rebaseOrRegenerate brings the MR's branch onto the target head — by a rebase, or, when the
// rebase conflicts, by regenerating the branch from the requests — then waits for the new
// head's pipeline and re-approves.
func (r *Runner) rebaseOrRegenerate(ctx context.Context, in MergeInput, mr gitlab.MergeRequest, regenerated *bool) error {
	project := in.Spec.Project
	conflict := mr.HasConflicts || mr.DetailedMergeStatus == "conflict"
	if !conflict {
		in.Progress(EventRebasing)
		if err := r.GitLab.Rebase(ctx, project, in.IID); err != nil {
			return fmt.Errorf("rebase MR !%d: %w", in.IID, err)
		}
		var after gitlab.MergeRequest
		// A read error during the wait is no answer; only the timeout ends it.
		out, _ := Poll(ctx, in.Stages, nil, func(ctx context.Context) (Outcome, error) {
			m, err := r.GitLab.GetMergeRequest(ctx, project, in.IID)
			if err != nil {
				return Pending, err
			}
			after = m
			switch {
			case m.RebaseInProgress:
				return Pending, nil
			case m.MergeError != "":
				return Failed, nil
			}
			return Passed, nil
		})
		switch {
		case ctx.Err() != nil:
			return ctx.Err()
		case out == TimedOut:
			return fmt.Errorf("rebase MR !%d: %w", in.IID, ErrPending)
		case out == Failed:
			r.Log.InfoContext(ctx, "rebase failed; regenerating the branch", "project", project, "mr", in.IID, "error", after.MergeError)
			conflict = true
		}
	}
	if conflict {
		if *regenerated {
			return ErrConflict
		}
		*regenerated = true
		in.Progress(EventRegenerating)
		if err := r.Regenerate(ctx, in.Spec); err != nil {
			return fmt.Errorf("regenerate MR !%d: %w", in.IID, err)
		}
	}
	return r.awaitHead(ctx, in)
}

// awaitHead waits for the head pipeline of a branch that just moved and re-approves.
func (r *Runner) awaitHead(ctx context.Context, in MergeInput) error {
	in.Progress(EventPipeline)
	res, err := r.WaitPipeline(ctx, in.Spec.Project, in.IID, in.Stages, in.Wake)
	switch {
	case err != nil:
		return err
	case res.Outcome == TimedOut:
		return fmt.Errorf("pipeline of MR !%d: %w", in.IID, ErrPending)
	case res.Outcome == Failed:
		return ErrPipelineFailed
	}
	if _, err := r.Approve(ctx, in.Spec.Project, in.IID); err != nil {
		return fmt.Errorf("re-approve MR !%d: %w", in.IID, err)
	}
	return nil
}

// Close closes the MR if it is still open and reads it again. It reports merged=true when the
// MR turned out merged: a merged MR cannot be closed, so the merge wins the race with the close.
// iid 0 (no MR was ever created) is "not merged".
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
	if mr.Open() {
		if _, err := r.GitLab.CloseMergeRequest(ctx, project, iid); err != nil {
			return false, fmt.Errorf("close MR !%d: %w", iid, err)
		}
		if mr, err = r.GitLab.GetMergeRequest(ctx, project, iid); err != nil {
			return false, fmt.Errorf("re-read MR !%d: %w", iid, err)
		}
	}
	if !mr.Merged() && mr.SourceBranch != "" {
		// Best effort: a leftover branch only costs storage; the next attempt overwrites it.
		_ = r.GitLab.DeleteBranch(ctx, project, mr.SourceBranch)
	}
	return mr.Merged(), nil
}
