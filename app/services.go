package app

import (
	"context"
	"fmt"

	"bindery/approval"
	"bindery/batch"
	"bindery/change"
	"bindery/gitlab"
	"bindery/metric"
	"bindery/permission"
	"bindery/server"
	"bindery/worker"
	"bindery/workflow"
)

var _ server.Workflow = (*workflow.Workflow)(nil)

// Services is the product's wiring of the workflow (Options.Services for `serve` and `demo`):
// the GitLab, approval-system and permission clients — in demo mode the simulators mounted on
// this process, reached over HTTP like the real systems —, one bounded worker pool for every
// long step (workers.size, workers.queue), the batch service, the workflow and its cron jobs.
// The cron starts with Run; at shutdown the cron stops first, then the pool drains (steps still
// running at the deadline are cancelled and left to the lease sweep), then the database closes.
// A missing GitLab or approval-system setting in serve mode is an error here: bindery refuses to
// start rather than accept requests it cannot carry out.
func Services(ctx context.Context, a *App) (server.Workflow, server.Permissions, error) {
	snap := a.cfg.Current()
	var gitlabURL, approvalURL string
	if a.opts.Mode == ModeDemo {
		gitlabURL, approvalURL = a.URL()+"/sim/gitlab", a.URL()+"/sim/approval"
	}
	log := a.log
	gl, err := gitlab.New(a.cfg, gitlab.Options{Metrics: a.metrics, Log: log.With("component", "gitlab"), DefaultBaseURL: gitlabURL})
	if err != nil {
		return nil, nil, err
	}
	tickets, err := approval.New(a.cfg, approval.Options{Metrics: a.metrics, Log: log.With("component", "approval"), DefaultURL: approvalURL})
	if err != nil {
		return nil, nil, err
	}
	perms := permission.New(a.cfg, permission.Options{Metrics: a.metrics, Log: log.With("component", "permission")})

	pool := worker.NewPool(snap.Workers(), snap.WorkerQueue(), log.With("component", "worker"), a.metrics)
	rec := metric.New(metric.SetSink(a.metrics), log)
	runner := &change.Runner{GitLab: gl, Log: log.With("component", "change")}
	batches := batch.New(batch.Options{DB: a.db, Config: a.cfg, Change: runner, Pool: pool, Log: log, Recorder: rec, Instance: a.instance})
	wf, err := workflow.New(workflow.Options{
		DB: a.db, Config: a.cfg, Batches: batches, Tickets: tickets, Change: runner, Pool: pool,
		Log: log.With("component", "workflow"), Recorder: rec, Instance: a.instance, BaseURL: a.URL(), GitLabURL: gitlabURL,
	})
	if err != nil {
		pool.Shutdown(context.Background()) //nolint:errcheck // nothing was queued
		return nil, nil, fmt.Errorf("workflow: %w", err)
	}
	cron := workflow.NewCron(wf, a.db)
	a.starts = append(a.starts, func(context.Context) { cron.Start() })
	a.drains = append(a.drains, cron.Stop, pool.Shutdown)
	return wf, perms, nil
}
