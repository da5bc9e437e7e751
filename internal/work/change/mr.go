package change

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"bindery/internal/remote/gitlab"
	"bindery/store"
)

// Spec is what one MR carries: where it goes and the file actions of every member.
type Spec struct {
	Project      string
	TargetBranch string
	SourceBranch string // e.g. bindery/batch-42, bindery/op-<operationId>
	// Base is the commit the branch is built on ("": the target branch's head): a car of a merge
	// train is built on the head of the car ahead of it.
	Base        string
	Title       string
	Description string
	Actions     []FileAction
}

// Runner drives MRs through GitLab. Every method reads the remote state first, so calling it
// again after a crash, a lost answer or an operator retry is safe.
type Runner struct {
	GitLab gitlab.API
	Log    *slog.Logger

	parents parentCache // merge commits of merged-results pipelines → their parents
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
	mr, _, err := r.open(ctx, s, knownIID)
	return mr, err
}

// open is Open, also returning the commit it wrote (zero: it wrote none).
func (r *Runner) open(ctx context.Context, s Spec, knownIID int64) (gitlab.MergeRequest, gitlab.Commit, error) {
	if knownIID > 0 {
		mr, err := r.GitLab.GetMergeRequest(ctx, s.Project, knownIID)
		if err == nil {
			return mr, gitlab.Commit{}, nil
		}
		if !errors.Is(err, gitlab.ErrNotFound) {
			return gitlab.MergeRequest{}, gitlab.Commit{}, fmt.Errorf("read MR !%d: %w", knownIID, err)
		}
	}
	c, err := r.commit(ctx, s)
	if err != nil {
		return gitlab.MergeRequest{}, gitlab.Commit{}, err
	}
	mr, err := r.GitLab.CreateMergeRequest(ctx, s.Project, gitlab.MergeRequestRequest{
		SourceBranch: s.SourceBranch, TargetBranch: s.TargetBranch, Title: s.Title,
		Description: s.Description, RemoveSourceBranch: true,
	})
	if iid, exists := gitlab.ExistingMergeRequest(err); exists {
		mr, err = r.GitLab.GetMergeRequest(ctx, s.Project, iid)
		return mr, c, err
	}
	if err != nil {
		return gitlab.MergeRequest{}, gitlab.Commit{}, fmt.Errorf("create MR: %w", err)
	}
	return mr, c, nil
}

// Regenerate rewrites the MR's branch from the current target head with the given actions: the
// answer to a rebase conflict (docs/workflow.md, 'Regenerate instead of rebase'), and the
// way a bisected batch drops half its members. GitLab starts a new pipeline for the new head.
func (r *Runner) Regenerate(ctx context.Context, s Spec) error {
	_, err := r.commit(ctx, s)
	return err
}

// commit writes one commit with every action on SourceBranch, started from Base (or
// TargetBranch's head), and returns it. A file that already exists (a create) or is already gone
// (a delete) is not worth failing a whole batch for when it is the only action: it is retried as
// an update, or dropped.
func (r *Runner) commit(ctx context.Context, s Spec) (gitlab.Commit, error) {
	if err := ValidateBatch(s.Actions); err != nil {
		return gitlab.Commit{}, err
	}
	actions := toGitLab(s.Actions)
	req := gitlab.CommitRequest{Branch: s.SourceBranch, StartBranch: s.TargetBranch, Force: true, Message: s.Title, Actions: actions}
	if s.Base != "" {
		req.StartBranch, req.StartSHA = "", s.Base
	}
	c, err := r.GitLab.CreateCommit(ctx, s.Project, req)
	if err == nil {
		return c, nil
	}
	if len(actions) == 1 {
		switch {
		case errors.Is(err, gitlab.ErrFileExists) && actions[0].Action == gitlab.ActionCreate:
			req.Actions[0].Action = gitlab.ActionUpdate
			c, err = r.GitLab.CreateCommit(ctx, s.Project, req)
		case errors.Is(err, gitlab.ErrFileMissing) && actions[0].Action == gitlab.ActionUpdate:
			req.Actions[0].Action = gitlab.ActionCreate
			c, err = r.GitLab.CreateCommit(ctx, s.Project, req)
		case errors.Is(err, gitlab.ErrFileMissing) && actions[0].Action == gitlab.ActionDelete:
			// Already gone, so the change is in effect — but an MR without changes cannot be
			// opened. The caller finishes the member without an MR.
			return gitlab.Commit{}, ErrNothingToChange
		}
	}
	if err != nil {
		return gitlab.Commit{}, fmt.Errorf("commit to %s: %w", s.SourceBranch, err)
	}
	return c, nil
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

// Landed is where a merged MR landed, for the project's merge order (the transaction that
// records its requests MERGED records it): its target branch, the commit it put there and
// GitLab's time of the merge.
func Landed(project string, mr gitlab.MergeRequest) *store.MergeRecord {
	return &store.MergeRecord{Project: project, MRIID: mr.IID, Branch: mr.TargetBranch, SHA: mr.LandedSHA(), MergedAt: mr.MergedAt}
}
