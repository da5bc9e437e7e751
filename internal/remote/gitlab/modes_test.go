package gitlab_test

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"bindery/internal/remote/gitlab"
	"bindery/internal/remote/outbound"
	"bindery/internal/work/engine"
)

// The client against each way a real GitLab answers (docs/gitlab.md), through the simulator's
// sim.gitlab knobs.

func withKnobs(knobs ...string) string {
	return strings.Replace(baseConfig, "    rebaseDuration: 0s\n", "    rebaseDuration: 0s\n    "+strings.Join(knobs, "\n    ")+"\n", 1)
}

// Before GitLab 15.6 an MR has no detailed_merge_status: merge_status, has_conflicts, draft and
// blocking_discussions_resolved say what is in the way, and the client reads every one.
func TestBeforeGitLab15_6TheOlderFieldsSayWhatIsInTheWay(t *testing.T) {
	b := setup(t, withKnobs(`version: "15.5"`, "mergeBlocker: discussions_not_resolved"))
	mr := b.openMR(t, "old")
	read := func() (gitlab.MergeRequest, error) {
		b.sim.Sync()
		if got, err := b.client.GetMergeRequest(ctx, project, mr.IID); err != nil || got.MergeStatus != "checking" {
			return got, err
		}
		return b.client.GetMergeRequest(ctx, project, mr.IID) // the first read after a change finds it computing
	}
	got, err := read()
	switch {
	case err != nil:
		t.Fatal(err)
	case got.DetailedMergeStatus != "":
		t.Fatalf("detailed_merge_status %q on 15.5", got.DetailedMergeStatus)
	case got.MergeStatus != "can_be_merged" || got.BlockingDiscussionsResolved || got.Draft || got.HasConflicts:
		t.Fatalf("older fields: %+v", got)
	}
	// A conflict with the target: cannot_be_merged and has_conflicts.
	if _, err := b.sim.PushToBranch(project, "main", "bindings/old.yaml", "someone else's\n"); err != nil {
		t.Fatal(err)
	}
	b.sim.SetBlocker(project, mr.IID, "")
	got, err = read()
	if err != nil || got.MergeStatus != "cannot_be_merged" || !got.HasConflicts || !got.BlockingDiscussionsResolved {
		t.Fatalf("after a conflicting push: %+v %v", got, err)
	}
}

// A project with branch pipelines only refuses MR pipelines (ErrNoMRPipelines, not transient);
// a pipeline on the branch (source api) and the pipeline retry work there.
func TestBranchPipelinesOnlyRefuseMRPipelines(t *testing.T) {
	b := setup(t, withKnobs("pipelineSource: push"))
	mr := b.openMR(t, "push")
	_, err := b.client.CreateMergeRequestPipeline(ctx, project, mr.IID)
	if !errors.Is(err, gitlab.ErrNoMRPipelines) || statusOf(err) != 400 || engine.Transient(err) {
		t.Fatalf("MR pipeline in a branch-pipelines project: %v (status %d)", err, statusOf(err))
	}
	p, err := b.client.CreatePipeline(ctx, project, "push")
	if err != nil || p.Source != "api" || p.SHA != mr.SHA || p.Ref != "push" {
		t.Fatalf("branch pipeline = %+v, %v", p, err)
	}
	list, err := b.client.MergeRequestPipelines(ctx, project, mr.IID)
	if err != nil || len(list) == 0 || list[0].ID != p.ID {
		t.Fatalf("the MR's pipelines = %+v, %v; want the new one first", list, err)
	}
}

// GitLab's pipeline retry runs the failed jobs again in the same pipeline.
func TestAFailedPipelineIsRetriedInPlace(t *testing.T) {
	b := setup(t, "")
	b.sim.FailNextPipelines(1)
	mr := b.openMR(t, "flaky")
	b.sim.Sync()
	got, err := b.client.GetMergeRequest(ctx, project, mr.IID)
	if err != nil || got.HeadPipeline == nil || got.HeadPipeline.Outcome() != gitlab.Failed {
		t.Fatalf("head pipeline = %+v, %v", got.HeadPipeline, err)
	}
	id := got.HeadPipeline.ID
	p, err := b.client.RetryPipeline(ctx, project, id)
	if err != nil || p.ID != id {
		t.Fatalf("retry = %+v, %v", p, err)
	}
	b.sim.Sync()
	if p, err = b.client.GetPipeline(ctx, project, id); err != nil || p.Outcome() != gitlab.Passed {
		t.Fatalf("after the retry: %+v, %v", p, err)
	}
}

// A merged-results pipeline runs on a merge commit of the head into the target: its sha is not
// the head's, its ref is the MR's merge ref, and the commit's parents name the head.
func TestAMergedResultsPipelineRunsOnAMergeCommitOfTheHead(t *testing.T) {
	b := setup(t, withKnobs("pipelineSource: merged_result"))
	mr := b.openMR(t, "merged-results")
	b.sim.Sync()
	got, err := b.client.GetMergeRequest(ctx, project, mr.IID)
	if err != nil || got.HeadPipeline == nil {
		t.Fatalf("MR = %+v, %v", got, err)
	}
	p := got.HeadPipeline
	if p.SHA == got.SHA || !strings.HasSuffix(p.Ref, "/merge") || p.Source != "merge_request_event" {
		t.Fatalf("head pipeline %+v for head %s", p, got.SHA)
	}
	c, err := b.client.GetCommit(ctx, project, p.SHA)
	if err != nil || !slices.Contains(c.ParentIDs, got.SHA) || len(c.ParentIDs) != 2 {
		t.Fatalf("merge commit = %+v, %v; want the head %s among two parents", c, err, got.SHA)
	}
	if _, err := b.client.GetCommit(ctx, project, strings.Repeat("0", 40)); !errors.Is(err, gitlab.ErrNotFound) {
		t.Fatalf("unknown commit: %v", err)
	}
}

// A rate limit is a transient 429 carrying GitLab's Retry-After, which the engine's backoff
// honours.
func TestARateLimitCarriesRetryAfter(t *testing.T) {
	b := setup(t, withKnobs("rateLimitRate: 1"))
	_, err := b.client.GetMergeRequest(ctx, project, 1)
	if statusOf(err) != 429 || !engine.Transient(err) || outbound.RetryAfterOf(err) != time.Second {
		t.Fatalf("rate limited: %v (status %d, retry after %s)", err, statusOf(err), outbound.RetryAfterOf(err))
	}
}
