package change

import (
	"context"
	"errors"
	"fmt"

	"bindery/internal/remote/gitlab"
	"bindery/internal/vocab/explain"
)

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
	// MergePipeline waits for the pipeline of the head, then (re-)approves it.
	MergePipeline MergePhase = "merge_pipeline"
	// MergeChecking waits while GitLab (re)computes whether the MR can be merged.
	MergeChecking MergePhase = "merge_checking"
	// MergeBlocked waits for a person to clear what keeps GitLab from merging (an unresolved
	// discussion, a draft, approvals bindery's reviewer accounts cannot give, …).
	MergeBlocked MergePhase = "merge_blocked"
)

// Polls reports the phases that wait for GitLab (a poll by the staged schedule).
func (p MergePhase) Polls() bool {
	return p == MergeRebasing || p == MergePipeline || p == MergeChecking || p == MergeBlocked
}

// MergeState is what a merge remembers between its actions.
type MergeState struct {
	Phase MergePhase
	// Regenerated: the branch was regenerated from the target head once already; a conflict
	// after that is final (ErrConflict).
	Regenerated bool
	// Refused counts merges GitLab refused in a row (405/406/409/422) since the last rebase or
	// passed pipeline; after maxRefusals the MR needs a person.
	Refused int
	// Tested is the head whose pipeline passed: the only SHA a merge is asked for (a head that
	// moved since waits for its own pipeline). Approved is the head the reviewer accounts
	// approved.
	Tested, Approved string
	// Behind: the target branch moved since the head was built (a commit that its pipeline did
	// not test): the branch is rebased before any merge, whatever GitLab reports — a merge
	// commit would otherwise land a combination nobody tested.
	Behind bool
	// On, when set, asks for the target branch to be read right before the merge call: it must
	// be On (the target head the owner found the branch built on) or the head's parent (a branch
	// rebased onto the target, or written on it); anything else landed since and the branch is
	// rebased first. "" : no such look (the legacy flow).
	On string
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
	// Pipeline is the head's pipeline when the merge waits for it or it failed.
	Pipeline *gitlab.Pipeline
	// Blocked (phase MergeBlocked): what a person must do on the MR, in plain words. Unblocked:
	// the merge was blocked and no longer is.
	Blocked   string
	Unblocked bool
}

// maxRefusals bounds the merges GitLab may refuse in a row; beyond it the MR needs a person.
const maxRefusals = 8

// ErrPipelineFailed: the pipeline of a head produced by a rebase or regeneration failed.
var ErrPipelineFailed = errors.New("pipeline failed after the branch moved")

// MergeStep does one action of a merge (no waiting in between: the caller's task is due again).
// It reads the MR first and acts on what it says (decide); the waiting phases look at what they
// wait for and act once it is there.
func (r *Runner) MergeStep(ctx context.Context, spec Spec, iid int64, st MergeState) (MergeResult, error) {
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
	}
	switch st.Phase {
	case MergeRebasing:
		return r.rebaseLook(ctx, spec, res)
	case MergePipeline:
		return r.pipelineLook(ctx, spec, res)
	case MergeBlocked:
		return blockedLook(res), nil
	case MergeChecking:
		res, err = r.decide(ctx, spec, res)
		if err == nil && res.State.Phase == MergeChecking {
			res.Wait = true // still computing
		}
		return res, err
	}
	return r.decide(ctx, spec, res)
}

// blockedLook is one look at an MR waiting for a person: only a look — nothing is approved,
// rebased or merged from this phase (a legacy merge waits here without its project's merge
// slot). Still blocked, or GitLab recomputing after the person acted → the same wait; else
// Unblocked, and the next action (MergeAttempt) decides.
func blockedLook(res MergeResult) MergeResult {
	status := Mergeability(res.MR)
	switch {
	case blockedBy(status, res.State, res.MR.SHA):
		res.Wait, res.Blocked = true, BlockerReason(status, res.MR.IID)
	case computing[status]:
		res.Wait = true
	default:
		res.State.Phase, res.Unblocked = MergeAttempt, true
	}
	return res
}

// blockedBy reports a status that only a person can clear: anything GitLab reports in the way
// but a conflict, a rebase, CI, a recomputation — and approvals the reviewer accounts have not
// given yet for this head.
func blockedBy(status string, st MergeState, head string) bool {
	switch {
	case status == "" || status == "mergeable" || computing[status] || bindery[status]:
		return false
	case status == "not_approved":
		return st.Approved == head
	}
	return true
}

// bindery are the statuses bindery clears itself.
var bindery = map[string]bool{"conflict": true, "need_rebase": true, "ci_still_running": true, "ci_must_pass": true}

// decide acts on an open MR's state, in GitLab's order of checks (docs/gitlab.md): GitLab
// merging it right now → look again shortly; still computing → MergeChecking; a conflict →
// regenerate the branch from the target head once (a second one is ErrConflict); behind the
// target → rebase (MergeRebasing); CI not passed → MergePipeline; not approved → approve, and
// once approved by every reviewer account, still not approved → blocked; any other blocker →
// MergeBlocked with the reason. Then the head must be the tested one (else MergePipeline for
// its pipeline), and the merge is asked for at exactly that SHA.
func (r *Runner) decide(ctx context.Context, spec Spec, res MergeResult) (MergeResult, error) {
	mr, project := res.MR, spec.Project
	if mr.State == gitlab.StateLocked {
		res.Pause = true // GitLab is merging it right now: not merged, not refused either
		return res, nil
	}
	status := Mergeability(mr)
	res.State.Phase = MergeAttempt
	switch {
	case status == "conflict":
		return r.regenerate(ctx, spec, res)
	case status == "need_rebase":
		return r.rebase(ctx, spec, res)
	case computing[status]:
		res.State.Phase = MergeChecking
		return res, nil
	case status == "ci_still_running" || status == "ci_must_pass":
		res.State.Phase, res.Event = MergePipeline, EventPipeline
		return res, nil
	case blockedBy(status, res.State, mr.SHA):
		res.State.Phase, res.Blocked = MergeBlocked, BlockerReason(status, mr.IID)
		return res, nil
	case status == "not_approved":
		return res, r.approveHead(ctx, project, &res) // then read again: the approvals count now
	case res.State.Behind:
		return r.rebase(ctx, spec, res)
	}
	if res.State.Tested != mr.SHA {
		pl, err := r.pipelineOf(ctx, project, mr)
		if err != nil {
			return res, err
		}
		if pl == nil || pl.Outcome() != gitlab.Passed {
			res.State.Phase, res.Event, res.Pipeline = MergePipeline, EventPipeline, pl
			return res, nil
		}
		// Tested: recorded by the owner with this outcome, before the merge of the next action
		// (so the head merged is always one the owner recorded as tested).
		res.State.Tested = mr.SHA
		return res, nil
	}
	if res.State.On != "" {
		on, err := r.onTarget(ctx, spec, &res)
		if err != nil || !on {
			if err != nil {
				return res, err
			}
			return r.rebase(ctx, spec, res)
		}
	}
	return r.merge(ctx, spec, res)
}

// onTarget is the last look before a merge that asks for one (MergeState.On): the target
// branch's head must be what the tested head was built on — On, or the head's parent (a branch
// GitLab rebased onto the target, or one written on it). GitLab's merge method `merge` merges a
// branch whose base is behind: without this look a commit that landed on the target since the
// owner's own look (a person's push, a legacy merge) would be merged beside the head, a tree no
// pipeline tested. A head not on the target is rebased onto it and tested again; On becomes the
// head read, so a rebase GitLab finds needless (the head holds the target already) ends the
// loop. Only a commit that lands inside the merge call itself is left beside (docs/gitlab.md,
// 'What a merge guarantees, per merge method').
func (r *Runner) onTarget(ctx context.Context, spec Spec, res *MergeResult) (bool, error) {
	b, err := r.GitLab.GetBranch(ctx, spec.Project, spec.TargetBranch)
	if err != nil {
		return false, fmt.Errorf("read the target branch %s: %w", spec.TargetBranch, err)
	}
	if b.CommitSHA == res.State.On {
		return true, nil
	}
	parents, err := r.ParentsOf(ctx, spec.Project, res.MR.SHA)
	if err != nil {
		return false, err
	}
	res.State.On = b.CommitSHA
	return len(parents) > 0 && parents[0] == b.CommitSHA, nil
}

// computing are the statuses GitLab reports while it (re)computes mergeability.
var computing = map[string]bool{"checking": true, "unchecked": true, "preparing": true, "approvals_syncing": true}

// merge asks GitLab to merge the tested head. Refused (405/406/422: something keeps it from
// merging; 409: the head moved) → read the MR again shortly and decide from it; before GitLab
// 15.6, whose MR does not say it needs a rebase, a refusal git gives (406) is answered with one.
func (r *Runner) merge(ctx context.Context, spec Spec, res MergeResult) (MergeResult, error) {
	mr := res.MR
	merged, err := r.GitLab.Merge(ctx, spec.Project, mr.IID, gitlab.MergeOptions{SHA: res.State.Tested, RemoveSourceBranch: true})
	switch {
	case err == nil && merged.Merged():
		res.Merged, res.MR = true, merged
		return res, nil
	case err == nil:
		res.Pause, res.MR = true, merged // accepted, still merging (locked): the next read says
		return res, nil
	case !errors.Is(err, gitlab.ErrSHAMismatch) && !errors.Is(err, gitlab.ErrNotMergeable) && !errors.Is(err, gitlab.ErrMergeFailed):
		return res, fmt.Errorf("merge MR !%d: %w", mr.IID, err)
	}
	res.State.Refused++
	if res.State.Refused >= maxRefusals {
		res.State.Phase = MergeBlocked
		res.Blocked = BlockerReason("refused", mr.IID) // after maxRefusals refusals in a row
		return res, nil
	}
	if mr.DetailedMergeStatus == "" && errors.Is(err, gitlab.ErrMergeFailed) {
		return r.rebase(ctx, spec, res)
	}
	res.Pause = true
	return res, nil
}

func (r *Runner) rebase(ctx context.Context, spec Spec, res MergeResult) (MergeResult, error) {
	// 409: a rebase of this MR is under way already (one asked for by an attempt whose answer
	// was lost, or by a person), or GitLab could not enqueue it yet: look at it like at our own
	// (no rebase running and still behind → asked again).
	if err := r.GitLab.Rebase(ctx, spec.Project, res.MR.IID); err != nil && !errors.Is(err, gitlab.ErrRebaseBusy) {
		return res, fmt.Errorf("rebase MR !%d: %w", res.MR.IID, err)
	}
	res.State.Phase, res.Event, res.State.Behind = MergeRebasing, EventRebasing, false
	return res, nil
}

// Mergeability is the MR's detailed_merge_status, or — from GitLab before 15.6, which does not
// report it — what its older fields say: still computing, a draft, an unresolved discussion, a
// conflict (git cannot merge it; a branch that only needs a rebase looks mergeable there, and
// the merge's refusal tells). "" when nothing is known to be in the way.
func Mergeability(mr gitlab.MergeRequest) string {
	if mr.DetailedMergeStatus != "" {
		return mr.DetailedMergeStatus
	}
	switch {
	case mr.MergeStatus == "checking" || mr.MergeStatus == "unchecked" || mr.MergeStatus == "cannot_be_merged_recheck":
		return "checking"
	case mr.Draft:
		return "draft_status"
	case !mr.BlockingDiscussionsResolved:
		return "discussions_not_resolved"
	case mr.HasConflicts || mr.MergeStatus == "cannot_be_merged":
		return "conflict"
	}
	return ""
}

// BlockerReason says in plain words what holds MR !iid at status, for the notes of the step and
// the batch: explain's words, so that every page and message tells the same story of it
// (explain.MergeBlocked reads the note back).
func BlockerReason(status string, iid int64) string { return explain.BlockerNote(status, iid) }

// rebaseLook is one look at a rebase GitLab runs: still running → wait; failed → regenerate;
// done → wait for the new head's pipeline.
func (r *Runner) rebaseLook(ctx context.Context, spec Spec, res MergeResult) (MergeResult, error) {
	mr := res.MR
	switch {
	case mr.RebaseInProgress:
		res.Wait = true
		return res, nil
	case mr.MergeError != "":
		r.Log.InfoContext(ctx, "rebase failed; regenerating the branch", "project", spec.Project, "mr", mr.IID, "error", mr.MergeError)
		return r.regenerate(ctx, spec, res)
	}
	res.State.Phase, res.Event, res.State.Refused = MergePipeline, EventPipeline, 0
	return res, nil
}

// regenerate answers a conflict: the branch rewritten from the target head with the requests'
// files, once; then the new head's pipeline.
func (r *Runner) regenerate(ctx context.Context, spec Spec, res MergeResult) (MergeResult, error) {
	if res.State.Regenerated {
		return res, ErrConflict
	}
	if err := r.Regenerate(ctx, spec); err != nil {
		return res, fmt.Errorf("regenerate MR !%d: %w", res.MR.IID, err)
	}
	res.State.Regenerated, res.State.Phase, res.Event, res.State.Refused = true, MergePipeline, EventRegenerating, 0
	return res, nil
}

// pipelineLook is one look at the pipeline of the MR's head: none yet or running → wait;
// failed → ErrPipelineFailed (res.Pipeline is it); passed → the head is tested, approved by the
// reviewer accounts unless it already is (a push may reset approvals), and the merge goes on.
func (r *Runner) pipelineLook(ctx context.Context, spec Spec, res MergeResult) (MergeResult, error) {
	mr := res.MR
	pl, err := r.pipelineOf(ctx, spec.Project, mr)
	res.Pipeline = pl
	switch {
	case err != nil:
		return res, err
	case pl == nil || pl.Outcome() == gitlab.Running:
		res.Wait = true
		return res, nil
	case pl.Outcome() == gitlab.Failed:
		return res, ErrPipelineFailed
	}
	if err := r.approveHead(ctx, spec.Project, &res); err != nil {
		return res, err
	}
	res.State.Phase, res.State.Tested, res.State.Refused = MergeAttempt, mr.SHA, 0
	return res, nil
}

// approveHead has the reviewer accounts approve the MR's head unless they already did (a push
// may reset approvals; a new head needs its own).
func (r *Runner) approveHead(ctx context.Context, project string, res *MergeResult) error {
	if res.State.Approved == res.MR.SHA {
		return nil
	}
	if err := r.GitLab.Approve(ctx, project, res.MR.IID, res.MR.SHA); err != nil {
		return fmt.Errorf("approve MR !%d: %w", res.MR.IID, err)
	}
	res.State.Approved = res.MR.SHA
	return nil
}
