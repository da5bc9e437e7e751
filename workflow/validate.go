package workflow

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"bindery/api"
	"bindery/batch"
	"bindery/internal/platform/logging"
	"bindery/internal/vocab/apperr"
	"bindery/store"
)

// Validation: a MERGED request becomes VALIDATED when the deploy pipeline reports its MR (exact
// operationIds when the callback carries them), or when reconciliation infers it from a later MR
// of the same project. A removal that merged (VALIDATED at CLOSE_MERGED) is CLOSED the same way. Both are the movers inEffectNow and removedNow (moves.go) applied by store's TransitionMany, which returns only the rows
// they really flipped; the metric and the stage durations are emitted for exactly those, after the
// commit, so a race between the two paths counts each request once.

// Metric names (histograms in seconds, counters).
const (
	metricValidated = "bindery_requests_validated_total"
	metricStage     = "bindery_request_stage_seconds"
)

// DeployCallback handles an authenticated deploy-pipeline callback, believed only for what
// bindery knows: the project must be in the catalog — or one bindery accepted requests for,
// whose targets may have left the catalog while those requests finish — and the MR one bindery
// opened there (else 422 CALLBACK_REFUSED, recorded for operators in the audit log, no effect —
// nothing is inferred from it); listed operationIds that are not requests of that MR are refused
// and reported in the answer.
func (w *Workflow) DeployCallback(ctx context.Context, cb api.DeployCallback) (api.CallbackResult, error) {
	if !w.catalogProject(cb.Project) {
		known, err := w.db.PartitionKnown(ctx, cb.Project)
		if err != nil {
			return api.CallbackResult{}, err
		}
		if !known {
			return api.CallbackResult{}, w.refuseDeploy(ctx, cb, "project "+cb.Project+" is not in the catalog")
		}
	}
	var d Deployed
	err := retryPreempted(ctx, func() error { // a deadlock is tried again here, not by the sender
		var err error
		d, err = RecordDeploy(ctx, w.db, store.Deploy{Project: cb.Project, MRIID: cb.MRIID, SHA: strings.ToLower(cb.SHA), OperationIDs: cb.OperationIDs})
		return err
	})
	switch {
	case errors.Is(err, ErrUnknownMR):
		return api.CallbackResult{}, w.refuseDeploy(ctx, cb, fmt.Sprintf("bindery opened no merge request !%d in %s", cb.MRIID, cb.Project))
	case errors.Is(err, ErrUnknownCommit):
		return api.CallbackResult{}, w.refuseDeploy(ctx, cb, fmt.Sprintf("no merge bindery recorded in %s landed commit %s", cb.Project, cb.SHA))
	}
	if err != nil {
		return api.CallbackResult{}, err
	}
	w.validated(ctx, d.Validated, "callback")
	w.removed(ctx, d.Closed, "callback")
	if d.Fresh && len(d.Validated)+len(d.Closed)+len(d.Refused) == 0 {
		// Early: the MR's requests were not MERGED when this callback read them. The merge step
		// (a batch's settlement: batch.Service.AfterMerge) replays a recorded callback after its own commit, but it may have read before this
		// record committed; reading again after it means one of the two always sees the other.
		w.catchUpDeploy(ctx, cb.Project, cb.MRIID)
	}
	res := api.CallbackResult{Code: api.CallbackAccepted, Refused: d.Refused}
	if len(d.Refused) > 0 {
		w.rec.Inc("bindery_deploy_callbacks_refused_total", "reason", "not_members")
		w.log.WarnContext(ctx, "deploy callback names requests that are not of its MR; they are not validated",
			"project", cb.Project, "mr", cb.MRIID, "refused", d.Refused)
	}
	if !d.Fresh && len(d.Validated)+len(d.Closed) == 0 && len(d.Refused) == 0 {
		res.Code = api.CallbackDuplicate
	}
	return res, nil
}

// catalogProject reports whether a target of the catalog in force lives in project.
func (w *Workflow) catalogProject(project string) bool {
	for _, t := range w.cfg.Current().Targets() {
		if t.Project == project {
			return true
		}
	}
	return false
}

// refuseDeploy records a deploy callback bindery cannot verify for operators (the audit log and
// the callback.refused event, once per project and MR; a metric; the log) and answers 422: the sender is told, nothing else
// happens.
func (w *Workflow) refuseDeploy(ctx context.Context, cb api.DeployCallback, why string) error {
	w.rec.Inc("bindery_deploy_callbacks_refused_total", "reason", "unverified")
	w.log.WarnContext(ctx, "deploy callback refused: "+why, "project", cb.Project, "mr", cb.MRIID, "operations", len(cb.OperationIDs))
	if _, err := w.db.RefuseCallback(ctx, store.AuditEvent{
		Key: fmt.Sprintf("hook.deploy.refused:%s!%d@%s", cb.Project, cb.MRIID, cb.SHA), Actor: "deploy pipeline", Action: "hook.deploy.refused",
		RequestID: logging.RequestID(ctx), Params: map[string]any{"project": cb.Project, "mrIid": cb.MRIID, "sha": cb.SHA, "operationIds": cb.OperationIDs, "why": why},
	}, store.EventFacts{Project: cb.Project, MRIID: cb.MRIID, SHA: cb.SHA, Refused: cb.OperationIDs, Why: why}); err != nil {
		w.log.WarnContext(ctx, "refused deploy callback not audited", "err", err)
	}
	return apperr.New(apperr.CallbackRefused, "Deploy callback refused: %s. Nothing was recorded.", why)
}

// Reconcile validates MERGED requests whose deploy callback was lost: inside the window
// (now − reconcile.maxAge, now − reconcile.minAge), those whose MR landed at or before a merge a
// deploy callback proves deployed, on the same branch (docs/architecture.md, "Reconciliation").
// Safe on every instance at once: each flip happens once.
//
// First, deploy callbacks that arrived before their MR's requests were recorded MERGED are
// replayed (exact, no minAge needed: the callback is there); then the inference by merge order.
func (w *Workflow) Reconcile(ctx context.Context) (api.ReconcileResult, error) {
	minAge, maxAge := w.cfg.Current().ReconcileWindow()
	early, err := w.db.EarlyDeploys(ctx, maxAge)
	if err != nil {
		return api.ReconcileResult{}, err
	}
	replayed, closed := 0, 0
	for _, d := range early {
		res, err := RecordDeploy(ctx, w.db, d)
		if err != nil {
			return api.ReconcileResult{}, err
		}
		w.validated(ctx, res.Validated, "callback")
		w.removed(ctx, res.Closed, "callback")
		replayed += len(res.Validated)
		closed += len(res.Closed)
	}
	res, err := ReconcileDeploys(ctx, w.db, minAge, maxAge)
	// What was committed before an error is real: report and count it either way.
	w.validated(ctx, res.Validated, "reconcile")
	w.removed(ctx, res.Closed, "reconcile")
	if err != nil {
		return api.ReconcileResult{}, err
	}
	return api.ReconcileResult{Scanned: res.Scanned + replayed + closed, Validated: len(res.Validated) + replayed, Closed: len(res.Closed) + closed}, nil
}

// removed runs after the commit that closed removals whose deploy came (or was inferred, or
// confirmed): one "removed" log line per request, the close stage's time, and the metric.
func (w *Workflow) removed(ctx context.Context, ops []store.Operation, via string) {
	for _, o := range ops {
		w.rec.Inc("bindery_requests_closed_total", "via", via, "project", o.Project)
		w.log.InfoContext(ctx, "removed", "operation", o.OperationID, "instance", w.engine.Instance(), "project", o.Project, "mr", o.MRIID, "via", via)
		for _, st := range o.Stages {
			if st.Stage == stageClose {
				w.rec.Observe(metricStage, st.Spent.Seconds(), "stage", st.Stage)
			}
		}
	}
}

// validated runs after the commit that flipped ops to VALIDATED: the expiry of each binding from
// its target's ttl (a crash before it is repaired by the expiry cron), the metric, one
// "validated" log line per request and the stage durations. Metrics sit outside any failure handling.
func (w *Workflow) validated(ctx context.Context, ops []store.Operation, via string) {
	if len(ops) == 0 {
		return
	}
	if err := w.fillExpiries(ctx, ops); err != nil {
		w.log.WarnContext(ctx, "expiry not set after validation; the expiry cron repairs it", "err", err)
	}
	for _, o := range ops {
		w.rec.Inc(metricValidated, "via", via, "project", o.Project)
		// The metric is per process and dies with a kill; this line, one per committed flip,
		// lets a multi-process run count validations across every instance and restart.
		w.log.InfoContext(ctx, "validated", "operation", o.OperationID, "batch", o.BatchID, "instance", w.engine.Instance(), "project", o.Project, "mr", o.MRIID, "via", via)
	}
	// The flip returned each request's time per stage with the row it locked: no step history
	// is read, however many requests one reconciliation validates.
	for _, o := range ops {
		for _, st := range o.Stages {
			if st.Stage != stageApproval { // the approval wait was recorded at the decision
				w.rec.Observe(metricStage, st.Spent.Seconds(), "stage", st.Stage)
			}
		}
	}
}

// fillExpiries gives each of ops' VALIDATED bindings without an expiry one: its target's ttl as
// the request was accepted (batch.TargetOf) after its validation; none for a target without one.
func (w *Workflow) fillExpiries(ctx context.Context, ops []store.Operation) error {
	type expiry struct {
		key string
		ttl time.Duration
	}
	byTarget := map[expiry][]string{}
	snap := w.cfg.Current()
	for _, o := range ops {
		if t, ok := batch.TargetOf(snap, o); ok && t.TTL > 0 {
			k := expiry{o.TargetKey, t.TTL}
			byTarget[k] = append(byTarget[k], o.OperationID)
		}
	}
	for k, list := range byTarget {
		if _, err := w.db.FillExpiry(ctx, k.key, k.ttl, list...); err != nil {
			return fmt.Errorf("the expiry of %s: %w", k.key, err)
		}
	}
	return nil
}

// observeApproval records the approval wait of a decided request (after the callback's commit).
func (w *Workflow) observeApproval(ctx context.Context, operationID string) {
	steps, err := w.db.Steps(ctx, operationID)
	if err != nil {
		return
	}
	for _, s := range stagesOf(steps, time.Now(), false) {
		if s.Stage == stageApproval && s.Done {
			w.rec.Observe(metricStage, s.Duration.Seconds(), "stage", s.Stage)
		}
	}
}

// CatchUpDeploy is catchUpDeploy for the batch path (batch.Service.AfterMerge): it runs after
// the commit that records a batch's merge.
func (w *Workflow) CatchUpDeploy(ctx context.Context, project string, iid int64) {
	w.catchUpDeploy(ctx, project, iid)
}

// catchUpDeploy replays the deploy callback of (project, iid) when it arrived before the MR's
// requests were recorded MERGED — a quick deploy pipeline beats the merge step's own write. The
// replay validates exactly what the callback named (RecordDeploy is idempotent). The remaining
// interleaving (both sides reading before the other commits) is closed by reconciliation.
func (w *Workflow) catchUpDeploy(ctx context.Context, project string, iid int64) {
	// It runs after a commit (the merge step's, the callback's): the caller's context may end
	// right then (a step's ends with its run), and a deadlock with the other side is likely, as
	// both write the same rows at that moment. So its own deadline, and a retry of a conflict:
	// otherwise only reconciliation, minutes later, validates what is already proven.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	d, err := w.db.RecordedDeploy(ctx, project, iid)
	if errors.Is(err, store.ErrNotFound) {
		return
	}
	if err == nil {
		var res Deployed
		if err = retryPreempted(ctx, func() error {
			var err error
			res, err = RecordDeploy(ctx, w.db, d)
			return err
		}); err == nil {
			w.validated(ctx, res.Validated, "callback")
			return
		}
	}
	w.log.WarnContext(ctx, "early deploy callback not replayed; reconciliation will validate", "project", project, "mr", iid, "err", err)
}
