package change

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"bindery/internal/remote/gitlab"
	"bindery/store"
)

// Verdict of one look at a pipeline.
type Verdict int

const (
	PipelinePending Verdict = iota // no answer yet: look again later
	PipelinePassed                 // it succeeded (or the MR is merged: nothing left to wait for)
	PipelineFailed                 // it failed: deterministic, the same commit gives the same result
)

func (o Verdict) String() string {
	return [...]string{"pending", "passed", "failed"}[o]
}

// PipelineResult is what one look at the MR's head pipeline found.
type PipelineResult struct {
	Outcome  Verdict
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
		res.Outcome = PipelinePassed
		return res, nil
	case mr.Closed():
		return res, ErrMRClosed
	}
	pl, err := r.pipelineOf(ctx, project, mr)
	if err != nil || pl == nil {
		return res, err
	}
	res.Pipeline = pl
	switch pl.Outcome() {
	case gitlab.Passed:
		res.Outcome = PipelinePassed
	case gitlab.Failed:
		res.Outcome = PipelineFailed
	}
	return res, nil
}

// PipelineLook is one check of a pipeline wait with the flaky allowance: a failed pipeline gets
// new runs on the same commit while retries remain.
type PipelineLook struct {
	PipelineResult
	// Retried: the pipeline failed and its failed jobs run again on the same commit (one retry
	// of the allowance used); the wait starts over.
	Retried bool
}

// LookAtPipeline is CheckPipeline, then — for a failed pipeline with retriesLeft > 0 — its
// failed jobs run again (a flaky failure gets another chance before it counts).
func (r *Runner) LookAtPipeline(ctx context.Context, project string, iid int64, retriesLeft int) (PipelineLook, error) {
	res, err := r.CheckPipeline(ctx, project, iid)
	if err != nil || res.Outcome != PipelineFailed || retriesLeft <= 0 {
		return PipelineLook{PipelineResult: res}, err
	}
	if err := r.RetryPipeline(ctx, project, res.MR, res.Pipeline); err != nil {
		return PipelineLook{PipelineResult: res}, err
	}
	r.Log.InfoContext(ctx, "pipeline failed; its failed jobs run again (flaky retry)", "project", project, "mr", iid, "pipeline", res.Pipeline.ID)
	res.Outcome = PipelinePending
	return PipelineLook{PipelineResult: res, Retried: true}, nil
}

// pipelineOf finds the pipeline of the MR's current head the way GitLab matches one to an MR
// (docs/gitlab.md): a pipeline whose sha is the head — an MR pipeline or, in projects with
// branch pipelines only, a push pipeline of the source branch — or a merged-results pipeline,
// whose sha is a merge commit of the head into the target (refs/merge-requests/<iid>/merge).
// head_pipeline first (it can lag behind a push), then the MR's pipelines, newest first. None:
// no pipeline for this head yet.
func (r *Runner) pipelineOf(ctx context.Context, project string, mr gitlab.MergeRequest) (*gitlab.Pipeline, error) {
	lookups := 0
	forHead := func(p *gitlab.Pipeline) (bool, error) {
		switch {
		case p.SHA == mr.SHA:
			return true, nil
		case !strings.HasSuffix(p.Ref, "/merge") || lookups == maxMergeRefLookups:
			return false, nil
		}
		lookups++
		parents, err := r.ParentsOf(ctx, project, p.SHA)
		return slices.Contains(parents, mr.SHA), err
	}
	if p := mr.HeadPipeline; p != nil {
		if ok, err := forHead(p); ok || err != nil {
			return p, err
		}
	}
	list, err := r.GitLab.MergeRequestPipelines(ctx, project, mr.IID)
	if err != nil {
		return nil, err
	}
	for i := range list { // newest first
		ok, err := forHead(&list[i])
		if err != nil {
			return nil, err
		}
		if ok {
			return &list[i], nil
		}
	}
	return nil, nil
}

// maxMergeRefLookups bounds the commits read in one look: only the newest merge-ref pipelines
// can be for the current head.
const maxMergeRefLookups = 3

// ParentsOf is a commit's parents (none: GitLab no longer has it); a commit never changes, so
// the answer is kept.
func (r *Runner) ParentsOf(ctx context.Context, project, sha string) ([]string, error) {
	if p, ok := r.parents.get(project + "@" + sha); ok {
		return p, nil
	}
	c, err := r.GitLab.GetCommit(ctx, project, sha)
	if errors.Is(err, gitlab.ErrNotFound) {
		return nil, nil // a merge ref's commit GitLab already dropped: not this head's
	}
	if err != nil {
		return nil, fmt.Errorf("read commit %s: %w", sha, err)
	}
	r.parents.put(project+"@"+sha, c.ParentIDs)
	return c.ParentIDs, nil
}

// parentCache is a small bounded map, usable as its zero value; full, it starts over.
type parentCache struct {
	mu sync.Mutex
	m  map[string][]string
}

const parentCacheSize = 1024

func (c *parentCache) get(k string) ([]string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	p, ok := c.m[k]
	return p, ok
}

func (c *parentCache) put(k string, p []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil || len(c.m) >= parentCacheSize {
		c.m = make(map[string][]string)
	}
	c.m[k] = p
}

// RetryPipeline gives a failed pipeline another chance on the same commit: GitLab's pipeline
// retry (its failed jobs run again; any source), or — no pipeline known — a new pipeline for the
// head (restartPipeline).
func (r *Runner) RetryPipeline(ctx context.Context, project string, mr gitlab.MergeRequest, pl *gitlab.Pipeline) error {
	if pl == nil {
		return r.restartPipeline(ctx, project, mr)
	}
	if _, err := r.GitLab.RetryPipeline(ctx, project, pl.ID); err != nil {
		return fmt.Errorf("retry pipeline %d: %w", pl.ID, err)
	}
	return nil
}

// restartPipeline starts a new pipeline for the MR's head: an MR pipeline, or — in a project
// whose CI runs branch pipelines only, where GitLab refuses MR pipelines — a pipeline on the
// source branch.
func (r *Runner) restartPipeline(ctx context.Context, project string, mr gitlab.MergeRequest) error {
	_, err := r.GitLab.CreateMergeRequestPipeline(ctx, project, mr.IID)
	if errors.Is(err, gitlab.ErrNoMRPipelines) {
		_, err = r.GitLab.CreatePipeline(ctx, project, mr.SourceBranch)
	}
	if err != nil {
		return fmt.Errorf("start a pipeline for MR !%d: %w", mr.IID, err)
	}
	return nil
}

// RestartStuckPipeline is an operator's resume of work whose pipeline gave no answer in time: a
// head pipeline that finished meanwhile is taken as it is; one still running (or none) gets a
// new pipeline on the same commit, because waiting on it again may wait forever (a hung
// runner). A rebase in progress is left to finish. It reports whether a new pipeline was started.
func (r *Runner) RestartStuckPipeline(ctx context.Context, project string, iid int64) (bool, error) {
	mr, err := r.GitLab.GetMergeRequest(ctx, project, iid)
	if err != nil || mr.RebaseInProgress || !mr.Open() {
		return false, err
	}
	pl, err := r.pipelineOf(ctx, project, mr)
	if err != nil {
		return false, err
	}
	if pl != nil && pl.Outcome() != gitlab.Running {
		return false, nil
	}
	r.Log.InfoContext(ctx, "resume: a new pipeline in place of one that gave no answer", "project", project, "mr", iid)
	return true, r.restartPipeline(ctx, project, mr)
}

// KeepFailedJob looks up the first failed job of a pipeline that failed for good and keeps it
// in db for the request pages of the requests it carried (the batch flow's members, a legacy
// request). Best effort: GitLab not answering, a pipeline without a failed job (canceled,
// skipped) or a write that fails is logged, and the failure goes on as decided.
func (r *Runner) KeepFailedJob(ctx context.Context, db *store.DB, project string, pipeline int64) {
	if pipeline == 0 {
		return
	}
	jobs, err := r.GitLab.FailedJobs(ctx, project, pipeline)
	if err != nil {
		r.Log.WarnContext(ctx, "could not read the failed pipeline's jobs; the request page names none", "project", project, "pipeline", pipeline, "error", err)
		return
	}
	if len(jobs) == 0 {
		return
	}
	j := jobs[0]
	if err := db.RecordFailedJob(ctx, store.FailedJob{Project: project, PipelineID: pipeline, JobID: j.ID, Name: j.Name, WebURL: j.WebURL}); err != nil {
		r.Log.WarnContext(ctx, "could not keep the failed job; the request page names none", "project", project, "pipeline", pipeline, "error", err)
	}
}
