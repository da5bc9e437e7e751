package app

import (
	"fmt"

	"bindery/batch"
	"bindery/internal/platform/config"
	"bindery/internal/platform/metric"
	"bindery/internal/remote/approval"
	"bindery/internal/remote/gitlab"
	"bindery/internal/remote/permission"
	"bindery/internal/sim"
	"bindery/internal/work/change"
	"bindery/internal/work/engine"
	"bindery/internal/work/notify"
	"bindery/server"
	"bindery/workflow"
)

var _ server.Workflow = (*workflow.Workflow)(nil)

// wire builds the workflow and what serves it: the GitLab, approval-system and permission
// clients — in demo mode the simulators mounted on this process, reached over HTTP like the real
// systems —, the engine that runs every step as a task in two lanes (workers.first for a
// request's first steps, workers.size for the rest), the batch service, the workflow and its
// cron. The engine and the cron are services Run starts (and Close stops, see Run for the
// order). A missing GitLab or approval-system setting in serve mode is an error here: bindery
// refuses to start rather than accept requests it cannot carry out.
func (a *App) wire() (server.Workflow, server.Permissions, error) {
	snap := a.cfg.Current()
	var gitlabURL, approvalURL, ticketURL string
	if a.opts.Mode == ModeDemo {
		gitlabURL, approvalURL = a.URL()+"/sim/gitlab", a.URL()+"/sim/approval"
		ticketURL = a.URL() + "/sim/approvals/{id}" // the simulated approval system's ticket page
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

	rec := metric.New(metric.SetSink(a.metrics), log)
	eng := engine.New(engine.Options{
		DB: a.db, Log: log, Recorder: rec, Instance: a.instance, IdlePoll: snap.IdlePoll(),
		Lanes: map[string]int{engine.LaneFirst: snap.FirstWorkers(), engine.LaneBackground: snap.Workers(), engine.LaneNotify: snap.NotifyWorkers()},
	})
	eng.Gauges(a.metrics)
	runner := &change.Runner{GitLab: gl, Log: log.With("component", "change")}
	batches := batch.New(batch.Options{DB: a.db, Config: a.cfg, Change: runner, Engine: eng, Log: log, Recorder: rec})
	wf, err := workflow.New(workflow.Options{
		DB: a.db, Config: a.cfg, Batches: batches, Tickets: tickets, Change: runner, Engine: eng,
		Log: log.With("component", "workflow"), Recorder: rec, BaseURL: a.URL(), GitLabURL: gitlabURL,
		TicketURL: ticketURL,
	})
	if err != nil {
		return nil, nil, fmt.Errorf("workflow: %w", err)
	}
	batches.AfterMerge(wf.CatchUpDeploy)
	no := notify.Options{
		DB: a.db, Config: a.cfg, Engine: eng, Log: log, Recorder: rec, Instance: a.instance, BaseURL: a.URL(), GitLabURL: gitlabURL, Notes: gl,
	}
	if a.opts.Mode == ModeDemo {
		// The demo tells its mailbox: email to its SMTP sink, every event to its webhook receiver.
		no.DemoEmail = config.Email{SMTP: a.sims.Mailbox.SMTPAddr(), From: "bindery <bindery@demo.example>", StartTLS: config.StartTLSNone}
		no.DemoWebhooks = []config.Webhook{{Name: "demo-mailbox", URL: a.URL() + "/sim/webhooks/demo-mailbox", Secrets: []string{sim.DemoWebhookSecret}}}
	}
	n, err := notify.New(no)
	if err != nil {
		return nil, nil, fmt.Errorf("notify: %w", err)
	}
	a.notifications = n
	a.engine, a.cron, a.watch = eng, workflow.NewCron(wf, a.db), n.NewWatch(liveWithin, a.metrics)
	return wf, perms, nil
}
