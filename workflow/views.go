package workflow

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"bindery/api"
	"bindery/batch"
	"bindery/internal/vocab/apperr"
	"bindery/internal/vocab/explain"
	"bindery/internal/vocab/state"
	"bindery/internal/work/engine"
	"bindery/store"
)

// What the API shows: the request view with its timeline, stage durations and "why is it
// waiting" (docs/workflow.md, 'What the requester is told'), the lists, the batches, the preview.

// Stage names (the SPA words them): the step table's (store.StepInfo.Stage).
const (
	stageApproval = state.StageApproval
	stageBatch    = state.StageBatch
	stageCI       = state.StageCI
	stageMerge    = state.StageMerge
	stageDeploy   = state.StageDeploy
	stageClose    = state.StageClose
)

// Stages of the stage view beyond the step table's: the binding in effect, and removed again
// (revoked or expired).
const (
	StageEffect  = "effect"
	StageRevoked = "revoked"
)

// CurrentStage is the stage of the stage view a request is at: the binding's status says the
// phases (approval, in effect, revoking, revoked), the step says which part of the way to a
// merge; a failure is at the stage it stopped in (last: the newest stage of its history).
func CurrentStage(status state.BindingStatus, step state.Step, last string) string {
	switch {
	case status == state.StatusClosed && step == state.StepWithdrawn:
		return last // withdrawn where it failed: never in effect
	case status == state.StatusClosed:
		return StageRevoked
	case status == state.StatusValidated && step >= state.StepCloseStarted && step < state.StepCalledBack:
		return stageClose
	case status == state.StatusValidated:
		return StageEffect
	case status.Failed():
		return last
	case status == state.StatusRejected, status.AwaitingApproval():
		return stageApproval
	case stageOf(step) != "":
		return stageOf(step)
	case status == state.StatusMRCreating:
		return stageCI
	case status == state.StatusMerged:
		return stageDeploy
	}
	return stageMerge // MR_CREATED (its pipeline passed), MERGING
}

// stageOf is the stage a step belongs to ("" for an instant or a final step).
func stageOf(s state.Step) string { return s.Info().Stage }

// stagesOf sums the time spent in each stage from the step history: the time from a step to the
// next one counts for the step's stage (a stage entered twice — a retry, a re-admission — adds
// up). A stage left for a failure is not done; with live, the stage of the last step is still
// running and counts until now.
func stagesOf(steps []store.StepRecord, now time.Time, live bool) []api.StageDuration {
	var out []api.StageDuration
	index := map[string]int{}
	for i, rec := range steps {
		stage := stageOf(rec.Step)
		if stage == "" {
			continue
		}
		j, ok := index[stage]
		if !ok {
			j = len(out)
			index[stage] = j
			out = append(out, api.StageDuration{Stage: stage})
		}
		if i+1 < len(steps) {
			next := steps[i+1]
			out[j].Duration += next.At.Sub(rec.At)
			out[j].Done = stageOf(next.Step) != stage && !next.Status.Failed()
			continue
		}
		out[j].Done = false
		if live {
			out[j].Duration += now.Sub(rec.At)
		}
	}
	return out
}

// Request is the full view of one request.
func (w *Workflow) Request(ctx context.Context, operationID string) (api.RequestView, error) {
	d, err := w.db.RequestDetail(ctx, operationID)
	if err != nil {
		return api.RequestView{}, notFound(err)
	}
	// The database clock came with the read: no query of its own.
	var cutoff time.Time
	if state.AwaitsDeploy(d.Operation.Status, d.Operation.Step) {
		cutoff = d.Now.Add(-w.cfg.Current().DeployOverdue())
	}
	v := w.view(d, time.Now(), cutoff)
	if deployOverdue(v.Status, d.Operation.Step, d.Operation.UpdatedAt, cutoff) && v.Waiting != nil {
		v.Waiting.WaitingFor += "; " + w.lastDeployWords(ctx, d.Operation.Project)
	}
	w.describeTrain(ctx, d, &v)
	if v.ExpiresIn != "" {
		// In effect with an expiry: it may be renewed, unless a renewal waits for its decision
		// (one read, only for such a request).
		if err := w.describeRenewal(ctx, &v, d.Operation.FileExpiresAt); err != nil {
			return api.RequestView{}, err
		}
	}
	if inEffect(d.Operation) {
		// In effect: the drift check may have found its file gone or changed (one read by the
		// relation's key).
		if err := w.describeDrift(ctx, d.Operation, &v); err != nil {
			return api.RequestView{}, err
		}
	}
	if v.Waiting != nil && v.Waiting.Stage == stageApproval && v.Status.AwaitingApproval() {
		v.Waiting.ApprovalTakes = w.approvalTakes(ctx, d.Operation.TargetKey)
	}
	saidWithDetails(&v)
	v.OperatorText = w.withValues(v.OperatorText)
	return v, nil
}

// withValues gives the configuration keys an operator's sentence names their values in force
// (explain.WithValues).
func (w *Workflow) withValues(sentence string) string {
	if sentence == "" {
		return sentence
	}
	snap := w.cfg.Current()
	return explain.WithValues(sentence, func(key string) (string, bool) {
		for _, r := range snap.Report {
			if r.Key == key {
				return r.Effective, true
			}
		}
		return "", false
	})
}

// approvalSample is how many of a target's latest decided approvals the estimate of an approval
// reads (batch.EstimateMinimum of them at least, else there is no estimate).
const approvalSample = 20

// approvalTakes says how long approvals of targetKey usually take: the median of its latest
// decided ones. The approval system decides when its approvers do — bindery's looks at the ticket
// say nothing of that, so they are not shown as a wait.
func (w *Workflow) approvalTakes(ctx context.Context, targetKey string) string {
	ds, err := w.db.ApprovalDurations(ctx, targetKey, approvalSample)
	switch {
	case err != nil:
		w.log.WarnContext(ctx, "approval durations not read; the request view shows no estimate of its approval", "target", targetKey, "err", err)
		return ""
	case len(ds) < batch.EstimateMinimum:
		return fmt.Sprintf("%s: %d %s of this target decided so far; an estimate needs %d", explain.NoEstimate, len(ds), explain.Plural(len(ds), "approval"), batch.EstimateMinimum)
	}
	return fmt.Sprintf("approvals of this target usually take about %s (median of the last %d)", explain.Duration(batch.Median(ds)), len(ds))
}

// saidWithDetails: where the view said more than the sentence table of its state (a paused
// queue, the person who must act on a merge request, who ended it, the approvers' comment), an
// operator reads those details too, unless the view has words of the operator's own for them.
func saidWithDetails(v *api.RequestView) {
	said := explain.Sentence(v.Status, state.Step(v.Step.Code), v.NextAction)
	if v.NextActionText != said.Requester && v.OperatorText == said.Operator {
		v.OperatorText = ""
	}
}

// lastDeployWords says what bindery last heard of the project's deploys: whether the deploy
// pipeline reports at all, and for which MR.
func (w *Workflow) lastDeployWords(ctx context.Context, project string) string {
	iid, at, ok, err := w.db.LastDeploy(ctx, project)
	switch {
	case err != nil:
		return "the last deploy reported for " + project + " could not be read"
	case !ok:
		return "no deploy of " + project + " has been reported to bindery yet"
	}
	return fmt.Sprintf("the last deploy reported for %s was of merge request !%d, at %s UTC", project, iid, at.UTC().Format("2006-01-02 15:04"))
}

// deployCutoff is the database clock minus reconcile.deployOverdue: a MERGED request (or a
// removal at CLOSE_MERGED) unchanged since before it waits for a deploy callback that is
// overdue. The clock is read only when one of ops waits for its deploy; zero (nothing overdue) when none is or the clock cannot be read — the view
// then shows the ordinary deploy wait, and the stuck list still lists the request.
func (w *Workflow) deployCutoff(ctx context.Context, ops ...store.Operation) time.Time {
	if !slices.ContainsFunc(ops, func(o store.Operation) bool { return state.AwaitsDeploy(o.Status, o.Step) }) {
		return time.Time{}
	}
	now, err := w.db.Now(ctx)
	if err != nil {
		w.log.WarnContext(ctx, "database clock not read; overdue deploys shown as ordinary waits", "err", err)
		return time.Time{}
	}
	return now.Add(-w.cfg.Current().DeployOverdue())
}

// deployOverdue: the request's grant or removal merged and its deploy callback is later than
// reconcile.deployOverdue. Reconciliation cannot infer the last merged MR of a project until a
// later MR of it is called back, so an operator confirms the deploy (a retry).
func deployOverdue(status state.BindingStatus, step state.Step, updated, cutoff time.Time) bool {
	return state.AwaitsDeploy(status, step) && !cutoff.IsZero() && updated.Before(cutoff)
}

// nextAction is store.NextActionFor, except that a request whose deploy callback is overdue
// waits for an operator.
func nextAction(status state.BindingStatus, step state.Step, updated, cutoff time.Time) state.NextAction {
	if deployOverdue(status, step, updated, cutoff) {
		return state.NextWaitManual
	}
	return state.NextActionFor(status, step)
}

func (w *Workflow) view(d store.RequestDetail, now, cutoff time.Time) api.RequestView {
	op := d.Operation
	status := op.Status
	var expires *time.Time
	if d.Binding != nil {
		status, expires = d.Binding.Status, d.Binding.ExpiresAt
	}
	overdue := deployOverdue(status, op.Step, op.UpdatedAt, cutoff)
	action := nextAction(status, op.Step, op.UpdatedAt, cutoff)
	if action == state.NextWait && d.Waiting != nil && d.Waiting.BlockedBy != nil {
		// Nothing of the partition is batched before its BLOCKED car is cleared or settled: a
		// person or an operator must act, bindery alone will not take it further.
		action = state.NextWaitManual
	}
	said := explain.Sentence(status, op.Step, action)
	v := api.RequestView{
		OperationID: op.OperationID, Subject: op.SubjectID, TargetKey: op.TargetKey, TargetTitle: op.TargetKey,
		Project: op.Project, Reason: op.Reason, Flow: op.Flow, Status: status,
		Step: StepOf(op.Step), Stage: CurrentStage(status, op.Step, lastStage(d.Steps)),
		Label: said.Label, NextAction: action, NextActionText: said.Requester, OperatorText: said.Operator,
		CreatedAt: op.CreatedAt, UpdatedAt: op.UpdatedAt, ExpiresAt: expires,
		Timeline: make([]api.TimelineEntry, len(d.Steps)), Causes: make([]string, len(d.Steps)),
	}
	if t, ok := batch.TargetOf(w.cfg.Current(), op); ok && t.Title != "" {
		v.TargetTitle = t.Title
	}
	live := status != state.StatusValidated && status != state.StatusRejected && status != state.StatusClosed && !status.Failed()
	if status == state.StatusValidated && action == state.NextWait {
		live = true // the close phase runs
	}
	for i, s := range d.Steps {
		end := now
		if i+1 < len(d.Steps) {
			end = d.Steps[i+1].At
		}
		v.Timeline[i] = api.TimelineEntry{Step: StepOf(s.Step), Status: s.Status, At: s.At, Duration: end.Sub(s.At), Note: explain.Told(s.Step, s.Note, w.links(op.Project))}
		v.Causes[i] = s.Note
	}
	v.Stages = stagesOf(d.Steps, now, live)
	if v.Stages == nil {
		v.Stages = []api.StageDuration{}
	}
	mr := op.MRIID
	if d.Batch != nil {
		// The newest batch carries the request now (a re-admitted or closing request's older
		// MR is history): its MR and pipeline are the ones to look at.
		v.BatchID = d.Batch.ID
		if d.Batch.MRIID != 0 {
			mr = d.Batch.MRIID
		}
	}
	v.MR, v.Pipeline = w.mrLink(op.Project, mr), w.pipelineLink(op.Project, d.Pipeline())
	if j := d.FailedJob; j != nil && status.Failed() {
		// Only a finished failure names the job: a pipeline an operator runs again keeps its id.
		v.FailedJob = &api.JobLink{ID: j.JobID, Name: j.Name, URL: j.WebURL}
	}
	v.Ticket, v.DecidedBy = w.ticketLink(op.TicketID), op.DecidedBy
	if expires != nil && status == state.StatusValidated && op.Step == state.StepCalledBack {
		v.ExpiresIn = explain.ExpiresIn(expires.Sub(d.Now))
	}
	w.outcome(&v, d, status)
	v.Waiting = w.waitingFor(d, status, action, overdue, v)
	switch {
	case v.Waiting == nil:
	case v.Waiting.Blocker != nil && v.Waiting.Blocker.Behind:
		v.NextActionText = behindText(v.Waiting.Blocker, d.Now)
	case v.Waiting.Blocker != nil:
		v.NextActionText = "Your request waits: " + v.Waiting.Blocker.Text + "."
	case op.Step.Info().Person:
		v.NextActionText = "Your request waits for " + v.Waiting.WaitingFor
	case action == state.NextWait && len(d.Steps) > 0 && explain.IsFlakyRetry(d.Steps[len(d.Steps)-1].Note):
		v.NextActionText = explain.FlakyRetry
	}
	return v
}

// blockedPoll is the longest time between two looks at a merge request held for a person: the
// poll schedule of its task (poll.short, then poll.long; change.Lifecycle's merge wait). A
// GitLab webhook of the merge request wakes it sooner.
func (w *Workflow) blockedPoll() time.Duration {
	short, _, long, _ := w.cfg.Current().PollStages()
	return max(short, long)
}

// mergeBlocker is the story of a merge held for a person, from the note bindery recorded of it
// (the step's or the batch's): ok false when the note is not one of those (a batch BLOCKED for
// an operator: a pipeline or rebase that gave no answer). mr is the merge request when the note
// does not name it.
func (w *Workflow) mergeBlocker(note, project string, mr, batchID int64, since time.Time) (*api.Blocker, bool) {
	b, ok := explain.MergeBlocked(note, project, w.blockedPoll())
	if b.MR != 0 {
		mr = b.MR
	}
	return &api.Blocker{Text: b.Text(), Label: b.Label(), MR: w.mrLink(project, mr), BatchID: batchID, Since: since}, ok
}

// behindBlocked is the blocker of the BLOCKED car b that a request waits behind: its merge held
// for a person, or why else it is blocked (an operator's part).
func (w *Workflow) behindBlocked(b store.Batch) *api.Blocker {
	bl, ok := w.mergeBlocker(b.Note, b.Project, b.MRIID, b.ID, b.UpdatedAt)
	if !ok {
		bl.Text, bl.Label = blockedWords(b), "Behind a blocked batch"
	}
	bl.Behind = true
	return bl
}

// behindWords: "behind blocked batch 7 since 08:06 UTC: <why>".
func behindWords(b *api.Blocker, now time.Time) string { return behindOf(b).Words(now) }

// behindText is the requester's sentence of a request behind a BLOCKED car.
func behindText(b *api.Blocker, now time.Time) string { return behindOf(b).Requester(now) }

func behindOf(b *api.Blocker) explain.Behind {
	return explain.Behind{BatchID: b.BatchID, Since: b.Since, Why: b.Text}
}

// clockWords says a time of the database clock for people (explain.Clock).
func clockWords(t, now time.Time) string { return explain.Clock(t, now) }

// taskWaiting is what a request waits for while the task that drives it is at its step, from the
// table of the task's kind ("" : the request's own step says it); {mr} is the merge request.
func (w *Workflow) taskWaiting(t *store.Task) string {
	switch {
	case t == nil:
		return ""
	case t.Kind == state.TaskBatch:
		return w.batches.Waiting(t.Step)
	}
	row, _ := w.row(Step(t.Step))
	return row.waiting
}

// waitingFor answers "why is my request waiting" in plain words, from the step table and the work
// that drives the request; nil when it is not waiting. It never names a party not asked yet.
func (w *Workflow) waitingFor(d store.RequestDetail, status state.BindingStatus, action state.NextAction, overdue bool, v api.RequestView) *api.Waiting {
	if len(d.Steps) == 0 || action == state.NextNone || action == state.NextReapply {
		return nil
	}
	op := d.Operation
	last := d.Steps[len(d.Steps)-1]
	wt := &api.Waiting{Since: last.At, BatchID: v.BatchID, Stage: stageOf(op.Step)}
	mr := "the merge request"
	if v.MR != nil {
		mr = fmt.Sprintf("merge request !%d", v.MR.ID)
	}
	words := func(s string) string {
		return strings.NewReplacer("{mr}", mr, "{note}", strings.TrimSuffix(explain.Told(last.Step, last.Note, nil), ".")).Replace(s)
	}
	switch {
	case overdue:
		wt.Stage, wt.WaitingFor = stageDeploy, "the deploy pipeline to report that "+mr+" is deployed — overdue: check the deploy pipeline; an operator can confirm the deploy"
		if status == state.StatusValidated {
			wt.Stage = stageClose // the removal's deploy
		}
	case action == state.NextContactSupport:
		wt.Stage, wt.WaitingFor = lastStage(d.Steps), "its requester or an operator: waiting will not fix this failure (withdraw the request and apply again, or retry it)"
	case action == state.NextWaitManual && op.Step == state.StepHandleMRBlocked:
		// The merge is held for a person: one story of it, as the batch and the ops console tell it.
		var batchID int64
		if d.Batch != nil && d.Batch.Status == state.BatchBlocked {
			batchID = d.Batch.ID
		}
		mrID := op.MRIID
		if v.MR != nil {
			mrID = v.MR.ID
		}
		wt.Blocker, _ = w.mergeBlocker(last.Note, op.Project, mrID, batchID, last.At)
		wt.Stage, wt.WaitingFor = lastStage(d.Steps), "a person in GitLab: "+wt.Blocker.Text
	case action == state.NextWaitManual && op.Step.Info().Person:
		wt.Stage, wt.WaitingFor = lastStage(d.Steps), words(explain.Waiting(op.Step))
	case action == state.NextWaitManual && (d.Waiting == nil || d.Waiting.BlockedBy == nil):
		wt.Stage, wt.WaitingFor = lastStage(d.Steps), "an operator to retry the step that stopped"
	case d.Waiting != nil:
		wt.Since, wt.Position, wt.Ahead, wt.NextBy = d.Waiting.Since, d.Waiting.Position(), d.Waiting.Ahead, d.Waiting.NextBy
		wt.Stage, wt.BatchID = stageBatch, 0
		wt.WaitingFor = fmt.Sprintf("the next batch round of %s (%d ahead in the queue)", d.Waiting.Partition, d.Waiting.Ahead)
		if d.Waiting.Action == state.ActionDelete {
			wt.Stage = stageClose
			wt.WaitingFor = fmt.Sprintf("the next batch round of %s to remove the file (%d ahead in the queue)", d.Waiting.Partition, d.Waiting.Ahead)
		}
		if b := d.Waiting.BlockedBy; b != nil {
			// Nothing of the partition is batched until that one is resolved: say so, since when,
			// and why.
			wt.BatchID, wt.Blocker = b.ID, w.behindBlocked(*b)
			wt.WaitingFor = fmt.Sprintf("the next batch of %s, %s (%d ahead in the queue)", d.Waiting.Partition, behindWords(wt.Blocker, d.Now), d.Waiting.Ahead)
		}
	case w.taskWaiting(d.Task) != "":
		wt.WaitingFor = words(w.taskWaiting(d.Task))
	case explain.Waiting(op.Step) != "":
		wt.WaitingFor = words(explain.Waiting(op.Step))
	case status == state.StatusMRCreated:
		wt.Stage, wt.WaitingFor = stageMerge, "the approval of "+mr
	case status == state.StatusMerging:
		wt.Stage, wt.WaitingFor = stageMerge, "the reviewer bots to approve and merge "+mr
	case status == state.StatusMerged:
		wt.Stage, wt.WaitingFor = stageDeploy, "the deploy pipeline to report that "+mr+" is deployed"
	default:
		return nil
	}
	if explain.IsFlakyRetry(last.Note) && action == state.NextWait {
		// Its pipeline failed and runs once more: the wait is that run's, and the page says so.
		wt.WaitingFor = "its pipeline's new run to pass — " + explain.Told(last.Step, last.Note, nil)
	}
	if status.AwaitingApproval() {
		// The approval wait began when the request first went to the approval system.
		for i := len(d.Steps) - 1; i >= 0 && stageOf(d.Steps[i].Step) == stageApproval; i-- {
			wt.Since = d.Steps[i].At
		}
	}
	if wt.Stage == "" {
		wt.Stage = lastStage(d.Steps)
	}
	if t := d.Task; t != nil && action == state.NextWait {
		wt.Lane = t.Lane
		switch {
		case t.Queued():
			wt.QueuedBehind, wt.QueuedBehindMore = d.Ahead, d.AheadMore
			behind := strconv.Itoa(d.Ahead)
			if d.AheadMore {
				behind = "more than " + behind
			}
			wt.WaitingFor = fmt.Sprintf("a free worker (queued behind %s %s), then %s", behind, laneWords(t.Lane, d.Ahead), wt.WaitingFor)
		case t.Claimed():
			wt.Running = true
		case status.AwaitingApproval() && op.Step == state.StepApprovalSent:
			// Its looks at the ticket are not a wait's end, nor is bindery to act: the approvers
			// decide when they do (ApprovalTakes says how long that usually takes).
			wt.Lane = ""
		default:
			next := t.DueAt
			wt.NextCheckAt = &next
		}
	}
	return wt
}

// blockedWords say why a BLOCKED batch holds its partition, for the requests waiting behind it:
// its note says what an operator or a person must do while nothing failed; once its failure is
// decided, the note carries the failure's cause (for operators) and the words are fixed.
func blockedWords(b store.Batch) string {
	if b.Failing != "" || b.LastError != "" {
		return "it failed and is being settled"
	}
	return b.Note
}

// laneWords names n tasks of a lane for people.
func laneWords(lane string, n int) string {
	what := "background check"
	if lane == engine.LaneFirst {
		what = "request"
	}
	if n != 1 {
		what += "s"
	}
	return what
}

// lastStage is the stage of the newest step that had one.
func lastStage(steps []store.StepRecord) string {
	for i := len(steps) - 1; i >= 0; i-- {
		if s := stageOf(steps[i].Step); s != "" {
			return s
		}
	}
	return stageApproval
}

// linker makes the web addresses of the request view, by the configuration in force.
func (w *Workflow) linker() explain.Links { return explain.Links{GitLab: w.gitlabWeb()} }

func (w *Workflow) mrLink(project string, iid int64) *api.Link { return w.linker().MR(project, iid) }

// links gives the web addresses of project's merge requests and pipelines, for the details a
// requester reads of a failure (explain.Told).
func (w *Workflow) links(project string) func(kind string, id int64) string {
	return w.linker().Of(project)
}

// ticketLink is the approval ticket id with its web address when approval.ticketURL (or the
// demo's default) gives one; nil without a ticket. The id goes into the address escaped: the
// approval system chose it.
func (w *Workflow) ticketLink(id string) *api.TicketLink {
	if id == "" {
		return nil
	}
	tmpl := w.cfg.Current().TicketURL()
	if tmpl == "" && w.cfg.Current().ApprovalSystemURL() == "" {
		tmpl = w.ticket // the demo's simulator is the approval system in use
	}
	l := &api.TicketLink{ID: id}
	if tmpl != "" {
		l.URL = strings.ReplaceAll(tmpl, "{id}", url.PathEscape(id))
	}
	return l
}

func (w *Workflow) pipelineLink(project string, id int64) *api.Link {
	return w.linker().Pipeline(project, id)
}

// summary is one row of a list (cutoff: deployCutoff of the list).
func (w *Workflow) summary(o store.Operation, cutoff time.Time) api.RequestSummary {
	action := nextAction(o.Status, o.Step, o.UpdatedAt, cutoff)
	return api.RequestSummary{
		OperationID: o.OperationID, Subject: o.SubjectID, TargetKey: o.TargetKey, Flow: o.Flow, Status: o.Status,
		Step: StepOf(o.Step), Label: explain.Sentence(o.Status, o.Step, action).Label, NextAction: action,
		MR: w.mrLink(o.Project, o.MRIID), UpdatedAt: o.UpdatedAt, CreatedAt: o.CreatedAt, Withdrawable: state.Withdrawable(o.Status, o.Step),
	}
}

// summaries are the rows of a list; cutoff is deployCutoff of the list (or of the page it is
// part of: one clock read for a page of batches, not one per batch).
func (w *Workflow) summaries(ops []store.Operation, cutoff time.Time) []api.RequestSummary {
	out := make([]api.RequestSummary, len(ops))
	for i, o := range ops {
		out[i] = w.summary(o, cutoff)
	}
	return out
}

// badCursor turns the store's cursor error into the API's.
func badCursor(err error) error {
	if errors.Is(err, store.ErrBadCursor) {
		return apperr.Invalid("cursor", "is not a cursor this API returned")
	}
	return err
}

// MyRequests lists subject's requests, newest first.
func (w *Workflow) MyRequests(ctx context.Context, subject, cursor string, limit int) (api.Page[api.RequestSummary], error) {
	ops, next, err := w.db.OperationsBySubject(ctx, subject, store.Page{Cursor: cursor, Limit: limit})
	if err != nil {
		return api.Page[api.RequestSummary]{}, badCursor(err)
	}
	items := w.summaries(ops, w.deployCutoff(ctx, ops...))
	w.tellHolds(ctx, ops, items)
	// In effect: when each expires, and that it can be renewed (one more read, only for a page
	// that has requests in effect).
	var inEffect []string
	for _, o := range ops {
		if o.Status == state.StatusValidated && o.Step == state.StepCalledBack {
			inEffect = append(inEffect, o.OperationID)
		}
	}
	if len(inEffect) > 0 {
		at, now, err := w.db.Expiries(ctx, inEffect)
		if err != nil {
			return api.Page[api.RequestSummary]{}, err
		}
		for i := range items {
			if e, ok := at[items[i].OperationID]; ok {
				items[i].ExpiresAt, items[i].ExpiresIn = &e, explain.ExpiresIn(e.Sub(now))
			}
		}
	}
	return api.Page[api.RequestSummary]{Items: items, NextCursor: next}, nil
}

// inWaitingSet: the steps of a request in its project's waiting set (to add its file, or to
// remove it).
func inWaitingSet(o store.Operation) bool {
	return o.Status == state.StatusMRCreating && o.Step == state.StepQueued || o.Status == state.StatusValidated && o.Step == state.StepCloseStarted
}

// tellHolds gives the rows of a list what holds their requests, in the words and with the facts
// their request pages have (Request, describeTrain): a merge held for a person, a blocked batch
// ahead in the project's train, an operator's pause of the queue. One bounded read for the
// page (store.HoldsOf), and none when no row can be held. A read that fails leaves the rows
// as the sentence table says them (the list must not fail for it).
func (w *Workflow) tellHolds(ctx context.Context, ops []store.Operation, items []api.RequestSummary) {
	var partitions, blocked []string
	seen := map[string]bool{}
	for i, o := range ops {
		switch {
		case o.Step == state.StepHandleMRBlocked:
			blocked = append(blocked, o.OperationID)
		case items[i].NextAction != state.NextWait:
			continue
		}
		if !seen[o.Project] {
			seen[o.Project] = true
			partitions = append(partitions, o.Project)
		}
	}
	if len(partitions) == 0 {
		return
	}
	h, err := w.db.HoldsOf(ctx, partitions, blocked)
	if err != nil {
		w.log.WarnContext(ctx, "holds not read; the list shows its rows without their pauses and blocked batches", "err", err)
		return
	}
	now, err := w.db.Now(ctx)
	if err != nil {
		now = time.Now()
	}
	for i, o := range ops {
		w.tellHold(&items[i], o, h, now)
	}
}

// tellHold is tellHolds for one row.
func (w *Workflow) tellHold(it *api.RequestSummary, o store.Operation, h store.Holds, now time.Time) {
	cars := h.Cars[o.Project]
	at := -1
	if o.BatchID != 0 && !inWaitingSet(o) {
		at = slices.IndexFunc(cars, func(c store.Batch) bool { return c.ID == o.BatchID })
	}
	if o.Step == state.StepHandleMRBlocked {
		// The merge is held for a person: the request page's story of it (waitingFor).
		step, ok := h.Blocked[o.OperationID]
		if !ok || it.NextAction != state.NextWaitManual {
			return
		}
		var batchID int64
		mr := o.MRIID
		if at >= 0 {
			if cars[at].Status == state.BatchBlocked {
				batchID = cars[at].ID
			}
			if cars[at].MRIID != 0 {
				mr = cars[at].MRIID
			}
		}
		it.Blocker, _ = w.mergeBlocker(step.Note, o.Project, mr, batchID, step.At)
		it.NextActionText = "Your request waits: " + it.Blocker.Text + "."
		return
	}
	if it.NextAction != state.NextWait {
		return
	}
	switch first := slices.IndexFunc(cars, func(c store.Batch) bool { return c.Status == state.BatchBlocked }); {
	case inWaitingSet(o) && first >= 0:
		// Nothing of the project is batched before its blocked car is cleared or settled.
		it.NextAction = state.NextWaitManual
		it.Label = explain.Sentence(o.Status, o.Step, it.NextAction).Label
		it.Blocker = w.behindBlocked(cars[first])
		it.NextActionText = behindText(it.Blocker, now)
		return
	case at > 0 && first >= 0 && first < at:
		// A car ahead of its own is blocked: it cannot merge before that one.
		it.NextAction = state.NextWaitManual
		it.Blocker = w.behindBlocked(cars[first])
		it.NextActionText = behindText(it.Blocker, now)
		return
	}
	if p, ok := h.Pauses[o.Project]; ok && (inWaitingSet(o) || at >= 0) {
		it.Paused = &api.TrainPause{By: p.By, Reason: p.Reason, Since: p.At}
		it.NextActionText = pauseOf(o.Project, p).Requester(now)
	}
}

// StuckRequests lists the requests an operator or support must act on — a failure status, a
// pending step, or a merged request whose deploy callback is overdue (reconcile.deployOverdue) —
// longest unchanged first; a status or step filter lists those instead.
func (w *Workflow) StuckRequests(ctx context.Context, f StuckFilter) (api.Page[api.RequestSummary], error) {
	sf := store.StuckFilter{Step: f.Step, Page: store.Page{Cursor: f.Cursor, Limit: f.Limit}, NeedsOperator: f.Status == "" && f.Step == 0,
		DeployOverdue: w.cfg.Current().DeployOverdue(), ApprovalOverdue: w.cfg.Current().ApprovalTimeout()}
	if f.Status != "" {
		sf.Statuses = []state.BindingStatus{f.Status}
	}
	ops, next, err := w.db.StuckOperations(ctx, sf)
	if err != nil {
		return api.Page[api.RequestSummary]{}, badCursor(err)
	}
	items := w.summaries(ops, w.deployCutoff(ctx, ops...))
	byBatch := map[int64]*api.Blocker{} // a BLOCKED batch's members share its one story: read it once
	for i, o := range ops {
		if o.Step != state.StepHandleMRBlocked {
			continue
		}
		if bl, ok := byBatch[o.BatchID]; ok && o.BatchID != 0 {
			items[i].Blocker = bl
			continue
		}
		items[i].Blocker = w.blockerOfRequest(ctx, o)
		byBatch[o.BatchID] = items[i].Blocker
	}
	return api.Page[api.RequestSummary]{Items: items, NextCursor: next}, nil
}

// blockerOfRequest is the story of a request's merge held for a person, for the ops console's
// list: its BLOCKED batch's note, or a legacy request's own step note (nil when neither can be
// read: the row then shows its step).
func (w *Workflow) blockerOfRequest(ctx context.Context, o store.Operation) *api.Blocker {
	if o.BatchID != 0 {
		if b, err := w.db.Batch(ctx, o.BatchID); err == nil && b.Status == state.BatchBlocked {
			bl, _ := w.mergeBlocker(b.Note, b.Project, b.MRIID, b.ID, b.UpdatedAt)
			return bl
		}
	}
	steps, err := w.db.Steps(ctx, o.OperationID)
	if err != nil {
		w.log.WarnContext(ctx, "steps not read; the stuck list shows the blocked request without its blocker", "op", o.OperationID, "err", err)
		return nil
	}
	for i := len(steps) - 1; i >= 0; i-- {
		if steps[i].Step == state.StepHandleMRBlocked {
			bl, _ := w.mergeBlocker(steps[i].Note, o.Project, o.MRIID, 0, steps[i].At)
			return bl
		}
	}
	return nil
}

// Batches lists batches newest first, each with its members.
func (w *Workflow) Batches(ctx context.Context, cursor string, limit int, status state.BatchStatus) (api.Page[api.BatchView], error) {
	bs, next, err := w.db.Batches(ctx, store.BatchFilter{Status: status, Page: store.Page{Cursor: cursor, Limit: limit}})
	if err != nil {
		return api.Page[api.BatchView]{}, badCursor(err)
	}
	var members []store.Operation
	for _, b := range bs {
		members = append(members, b.Members...)
	}
	cutoff := w.deployCutoff(ctx, members...)
	out := make([]api.BatchView, len(bs))
	for i, b := range bs {
		out[i] = w.batchView(b.Batch, b.Members, cutoff)
		for _, m := range b.Members { // in the members' order, each once
			if to, ok := b.Moved[m.OperationID]; ok {
				out[i].Moved = append(out[i].Moved, api.MovedMember{OperationID: m.OperationID, BatchID: to})
			}
		}
	}
	return api.Page[api.BatchView]{Items: out, NextCursor: next}, nil
}

func (w *Workflow) batchView(b store.Batch, members []store.Operation, cutoff time.Time) api.BatchView {
	v := api.BatchView{
		ID: b.ID, Partition: b.Partition, Status: string(b.Status), MR: w.mrLink(b.Project, b.MRIID),
		Pipeline: w.pipelineLink(b.Project, b.PipelineID), Members: w.summaries(members, cutoff), Note: b.Note,
		Failing: batch.PendingFailure(b), LastError: b.LastError, CreatedAt: b.CreatedAt, UpdatedAt: b.UpdatedAt,
	}
	if b.Bisections > 0 {
		v.Bisection = &api.BisectionView{Of: b.BisectionRoot(), Rounds: b.Bisections, Culprit: b.Culprit}
	}
	if b.Status == state.BatchBlocked {
		// Held for a person in GitLab: the batch and its held members tell the same story.
		if bl, ok := w.mergeBlocker(b.Note, b.Project, b.MRIID, b.ID, b.UpdatedAt); ok {
			v.Blocker = bl
			for i, m := range members {
				if m.Step == state.StepHandleMRBlocked {
					v.Members[i].Blocker = bl
				}
			}
		}
	}
	return v
}

// batchRow is one batch without its members (NOT_FOUND when there is none).
func (w *Workflow) batchRow(ctx context.Context, id int64) (store.Batch, error) {
	b, err := w.db.Batch(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return store.Batch{}, apperr.Wrap(err, apperr.NotFound, "No such batch.")
	}
	return b, err
}

// batchByID is one batch with its members.
func (w *Workflow) batchByID(ctx context.Context, id int64) (api.BatchView, error) {
	b, err := w.batchRow(ctx, id)
	if err != nil {
		return api.BatchView{}, err
	}
	reqs, err := w.db.BatchRequests(ctx, id)
	if err != nil {
		return api.BatchView{}, err
	}
	ops := make([]store.Operation, len(reqs))
	for i, r := range reqs {
		ops[i] = r.Operation
	}
	return w.batchView(b, ops, w.deployCutoff(ctx, ops...)), nil
}

// RemovedTargets lists the targets bindings still use (in flight or in effect) that the catalog
// in force no longer has, with their counts: they finish with the target as accepted, and only
// new applications are refused — but the ops console tells, in case a reload cut the catalog
// short by mistake.
func (w *Workflow) RemovedTargets(ctx context.Context) ([]api.TargetUse, error) {
	used, err := w.db.TargetsInUse(ctx)
	if err != nil {
		return nil, err
	}
	snap := w.cfg.Current()
	var out []api.TargetUse
	for _, u := range used {
		if _, ok := snap.Target(u.Key); !ok {
			out = append(out, api.TargetUse(u))
		}
	}
	return out, nil
}

// Preview renders the file a request of subject for targetKey would add. Read-only; the HTTP
// layer answers {} on any error.
func (w *Workflow) Preview(ctx context.Context, targetKey, subject string) (api.Preview, error) {
	t, ok := w.cfg.Current().Target(targetKey)
	if !ok {
		return api.Preview{}, errTargetGone
	}
	f, err := fileOf(t, previewOperation(subject, targetKey, time.Now()))
	if err != nil {
		return api.Preview{}, err
	}
	return api.Preview{Path: f.Path, Content: f.Content}, nil
}

// StepOf is the view of a step.
func StepOf(s state.Step) api.StepView {
	return api.StepView{Code: int(s), Name: s.String(), Label: explain.Label(s)}
}

// StuckFilter narrows GET /api/ops/requests (both optional) and pages it.
type StuckFilter struct {
	Status state.BindingStatus // "" → any
	Step   state.Step          // 0 → any
	Cursor string
	Limit  int
}

// describeDrift adds the open drift finding of op's binding to its view, in the requester's words.
func (w *Workflow) describeDrift(ctx context.Context, op store.Operation, v *api.RequestView) error {
	f, err := w.db.DriftOfRelation(ctx, op.TargetKey, op.SubjectID)
	if errors.Is(err, store.ErrNotFound) || err == nil && (f.State != store.DriftOpen || f.OperationID != op.OperationID) {
		return nil
	}
	if err != nil {
		return err
	}
	what := v.TargetTitle
	if what == "" {
		what = op.TargetKey
	}
	d := &api.RequestDrift{Kind: f.Kind, Commit: f.CommitSHA, Author: f.Author, CommittedAt: f.CommittedAt, FirstSeen: f.FirstSeen}
	switch f.Kind {
	case store.DriftMissing:
		d.Text = explain.DriftRemoved(what, f.CommitSHA, f.Author, f.CommittedAt)
	case store.DriftChanged:
		d.Text = explain.DriftChangedForRequester(what)
	default:
		return nil
	}
	if f.RestoreAt != nil {
		r, err := w.db.RestoreOf(ctx, f)
		if err != nil {
			return err
		}
		if d.Restoring = r.State == store.RestoreWaiting || r.State == store.RestoreBatched || r.State == store.RestoreMerged; d.Restoring {
			d.Text += " " + explain.DriftRestoringForRequester
		}
	}
	v.Drift = d
	return nil
}
