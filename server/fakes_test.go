package server

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"bindery/api"
	"bindery/internal/vocab/apperr"
	"bindery/internal/vocab/state"
	"bindery/store"
	"bindery/workflow"
)

// Hand-written fakes of the seams, with function fields to override one behaviour per test and
// a small in-memory default that behaves like the workflow's contract.

var t0 = time.Date(2026, 3, 2, 4, 0, 0, 0, time.UTC) // a Monday, 12:00 in Asia/Shanghai

type fakeWorkflow struct {
	ApplyFn            func(ctx context.Context, in workflow.ApplyInput) (api.ApplyResult, error)
	RequestFn          func(ctx context.Context, id string) (api.RequestView, error)
	MyRequestsFn       func(ctx context.Context, subject, cursor string, limit int) (api.Page[api.RequestSummary], error)
	RevokeFn           func(ctx context.Context, id, actor string) (api.RequestView, error)
	WithdrawFn         func(ctx context.Context, id, actor string) (api.RequestView, error)
	RenewFn            func(ctx context.Context, id, actor, renewalID string) (api.RequestView, error)
	PreviewFn          func(ctx context.Context, target, subject string) (api.Preview, error)
	BatchesFn          func(ctx context.Context, cursor string, limit int, status state.BatchStatus) (api.Page[api.BatchView], error)
	RunRoundFn         func(ctx context.Context) (api.RoundResult, error)
	SettleBatchFn      func(ctx context.Context, id int64, actor string) (api.BatchView, error)
	StuckRequestsFn    func(ctx context.Context, f workflow.StuckFilter) (api.Page[api.RequestSummary], error)
	RetryFn            func(ctx context.Context, id, actor string) (api.RequestView, error)
	ReconcileFn        func(ctx context.Context) (api.ReconcileResult, error)
	TrainsFn           func(ctx context.Context) (api.Page[api.Train], error)
	RemovedTargetsFn   func(ctx context.Context) ([]api.TargetUse, error)
	PauseTrainFn       func(ctx context.Context, project, reason, actor string) (api.Train, error)
	ResumeTrainFn      func(ctx context.Context, project, actor string) (api.Train, error)
	MergeNextFn        func(ctx context.Context, id, actor string) (api.RequestView, error)
	ApprovalCallbackFn func(ctx context.Context, cb api.ApprovalCallback) (api.CallbackResult, error)
	DeployCallbackFn   func(ctx context.Context, cb api.DeployCallback) (api.CallbackResult, error)
	GitLabEventFn      func(ctx context.Context, ev workflow.GitLabEvent) (api.CallbackResult, error)
	DriftFn            func(ctx context.Context) (api.DriftList, error)

	mu       sync.Mutex
	calls    []string                   // every call, in order, with its arguments
	requests map[string]api.RequestView // the default in-memory requests by operationId
	db       *store.DB                  // where Apply writes its idempotency record
}

var _ Workflow = (*fakeWorkflow)(nil)

func newFakeWorkflow() *fakeWorkflow {
	return &fakeWorkflow{requests: map[string]api.RequestView{}}
}

func (f *fakeWorkflow) record(format string, args ...any) {
	f.mu.Lock()
	f.calls = append(f.calls, fmt.Sprintf(format, args...))
	f.mu.Unlock()
}

// Calls returns the calls made so far.
func (f *fakeWorkflow) Calls() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.calls...)
}

// count counts calls of one method.
func (f *fakeWorkflow) count(method string) int {
	n := 0
	for _, c := range f.Calls() {
		if strings.HasPrefix(c, method+"(") {
			n++
		}
	}
	return n
}

// put adds a request to the in-memory default.
func (f *fakeWorkflow) put(v api.RequestView) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if v.Step.Code == 0 {
		v.Step = api.StepView{Code: int(state.StepCreateStarted), Name: state.StepCreateStarted.String()}
	}
	if v.NextAction == "" {
		v.NextAction = state.NextActionFor(v.Status, state.Step(v.Step.Code))
	}
	v.CreatedAt, v.UpdatedAt = t0, t0
	if v.Stages == nil {
		v.Stages = []api.StageDuration{}
	}
	if v.Timeline == nil {
		v.Timeline = []api.TimelineEntry{}
	}
	f.requests[v.OperationID] = v
}

// Apply writes the idempotency record it is given in a transaction of its own, like the
// workflow's application, and counts as a call only once it holds the key (a duplicate that
// finds the key taken never proceeds).
func (f *fakeWorkflow) Apply(ctx context.Context, in workflow.ApplyInput) (api.ApplyResult, error) {
	var res api.ApplyResult
	err := f.inTx(ctx, func(tx *store.Tx) error {
		if in.Idempotency != nil && f.ApplyFn == nil {
			rec := *in.Idempotency
			rec.Body, _ = json.Marshal(api.ApplyResult{Code: api.CodeAccepted, OperationID: in.OperationID, Status: state.StatusApprovalSending, NextAction: state.NextWait})
			if err := tx.RecordAnswer(ctx, rec); err != nil {
				return err
			}
		}
		var err error
		res, err = f.apply(ctx, in)
		return err
	})
	return res, err
}

// inTx runs fn in a transaction of the harness's database (without one: directly).
func (f *fakeWorkflow) inTx(ctx context.Context, fn func(tx *store.Tx) error) error {
	if f.db == nil {
		return fn(nil)
	}
	return f.db.InTx(ctx, fn)
}

func (f *fakeWorkflow) apply(ctx context.Context, in workflow.ApplyInput) (api.ApplyResult, error) {
	f.record("Apply(%s,%s,%s,%q)", in.OperationID, in.Subject, in.TargetKey, in.Reason)
	if f.ApplyFn != nil {
		return f.ApplyFn(ctx, in)
	}
	f.mu.Lock()
	for _, v := range f.requests {
		if v.Subject == in.Subject && v.TargetKey == in.TargetKey && !v.Status.Reappliable() {
			f.mu.Unlock()
			return api.ApplyResult{}, apperr.New(apperr.ApplyInProgress, "You already have an active request for this target.")
		}
	}
	f.mu.Unlock()
	f.put(api.RequestView{OperationID: in.OperationID, Subject: in.Subject, TargetKey: in.TargetKey, Reason: in.Reason, Status: state.StatusApprovalSending})
	return api.ApplyResult{Code: api.CodeAccepted, OperationID: in.OperationID, Status: state.StatusApprovalSending, NextAction: state.NextWait}, nil
}

func (f *fakeWorkflow) Request(ctx context.Context, id string) (api.RequestView, error) {
	f.record("Request(%s)", id)
	if f.RequestFn != nil {
		return f.RequestFn(ctx, id)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	v, ok := f.requests[id]
	if !ok {
		return api.RequestView{}, apperr.New(apperr.NotFound, "No such request.")
	}
	return v, nil
}

func (f *fakeWorkflow) MyRequests(ctx context.Context, subject, cursor string, limit int) (api.Page[api.RequestSummary], error) {
	f.record("MyRequests(%s,%s,%d)", subject, cursor, limit)
	if f.MyRequestsFn != nil {
		return f.MyRequestsFn(ctx, subject, cursor, limit)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	var page api.Page[api.RequestSummary]
	for _, v := range f.requests {
		if v.Subject == subject {
			page.Items = append(page.Items, api.RequestSummary{OperationID: v.OperationID, Subject: v.Subject, TargetKey: v.TargetKey, Status: v.Status, Step: v.Step, NextAction: v.NextAction, CreatedAt: v.CreatedAt, UpdatedAt: v.UpdatedAt})
		}
	}
	sort.Slice(page.Items, func(i, j int) bool { return page.Items[i].OperationID > page.Items[j].OperationID })
	return page, nil
}

func (f *fakeWorkflow) Revoke(ctx context.Context, id, actor string) (api.RequestView, error) {
	f.record("Revoke(%s,%s)", id, actor)
	if f.RevokeFn != nil {
		return f.RevokeFn(ctx, id, actor)
	}
	f.mu.Lock()
	v := f.requests[id]
	f.mu.Unlock()
	v.Step = api.StepView{Code: int(state.StepCloseStarted), Name: state.StepCloseStarted.String()}
	v.NextAction = state.NextActionFor(v.Status, state.StepCloseStarted)
	f.put(v)
	return v, nil
}

func (f *fakeWorkflow) Renew(ctx context.Context, id, actor, renewalID string) (api.RequestView, error) {
	f.record("Renew(%s,%s,%s)", id, actor, renewalID)
	if f.RenewFn != nil {
		return f.RenewFn(ctx, id, actor, renewalID)
	}
	f.mu.Lock()
	v := f.requests[id]
	f.mu.Unlock()
	return v, nil
}

func (f *fakeWorkflow) Withdraw(ctx context.Context, id, actor string) (api.RequestView, error) {
	f.record("Withdraw(%s,%s)", id, actor)
	if f.WithdrawFn != nil {
		return f.WithdrawFn(ctx, id, actor)
	}
	f.mu.Lock()
	v := f.requests[id]
	f.mu.Unlock()
	v.Status, v.Withdrawable = state.StatusClosed, false
	v.Step = api.StepView{Code: int(state.StepWithdrawn), Name: state.StepWithdrawn.String()}
	v.NextAction = state.NextActionFor(v.Status, state.StepWithdrawn)
	f.put(v)
	return v, nil
}

func (f *fakeWorkflow) Preview(ctx context.Context, target, subject string) (api.Preview, error) {
	f.record("Preview(%s,%s)", target, subject)
	if f.PreviewFn != nil {
		return f.PreviewFn(ctx, target, subject)
	}
	return api.Preview{Path: "bindings/" + target + "/" + subject + ".yaml", Content: "subject: " + subject + "\n"}, nil
}

func (f *fakeWorkflow) Batches(ctx context.Context, cursor string, limit int, status state.BatchStatus) (api.Page[api.BatchView], error) {
	f.record("Batches(%s,%d,%s)", cursor, limit, status)
	if f.BatchesFn != nil {
		return f.BatchesFn(ctx, cursor, limit, status)
	}
	return api.Page[api.BatchView]{Items: []api.BatchView{{ID: 7, Partition: "infra/access-config", Status: "RUNNING", Members: []api.RequestSummary{}, CreatedAt: t0, UpdatedAt: t0}}}, nil
}

func (f *fakeWorkflow) RunRound(ctx context.Context) (api.RoundResult, error) {
	f.record("RunRound()")
	if f.RunRoundFn != nil {
		return f.RunRoundFn(ctx)
	}
	return api.RoundResult{Partitions: []api.PartitionRound{{Partition: "infra/access-config", Outcome: "NOTHING_WAITING"}}}, nil
}

func (f *fakeWorkflow) SettleBatch(ctx context.Context, id int64, actor string) (api.BatchView, error) {
	f.record("SettleBatch(%d,%s)", id, actor)
	if f.SettleBatchFn != nil {
		return f.SettleBatchFn(ctx, id, actor)
	}
	if id != 7 {
		return api.BatchView{}, apperr.New(apperr.NotFound, "No such batch.")
	}
	return api.BatchView{ID: 7, Partition: "infra/access-config", Status: "FAILED", Members: []api.RequestSummary{}, CreatedAt: t0, UpdatedAt: t0}, nil
}

func (f *fakeWorkflow) StuckRequests(ctx context.Context, flt workflow.StuckFilter) (api.Page[api.RequestSummary], error) {
	f.record("StuckRequests(%s,%d,%s,%d)", flt.Status, flt.Step, flt.Cursor, flt.Limit)
	if f.StuckRequestsFn != nil {
		return f.StuckRequestsFn(ctx, flt)
	}
	return api.Page[api.RequestSummary]{}, nil
}

func (f *fakeWorkflow) Retry(ctx context.Context, id, actor string) (api.RequestView, error) {
	f.record("Retry(%s,%s)", id, actor)
	if f.RetryFn != nil {
		return f.RetryFn(ctx, id, actor)
	}
	return f.Request(ctx, id)
}

func (f *fakeWorkflow) Reconcile(ctx context.Context) (api.ReconcileResult, error) {
	f.record("Reconcile()")
	if f.ReconcileFn != nil {
		return f.ReconcileFn(ctx)
	}
	return api.ReconcileResult{Scanned: 3, Validated: 1}, nil
}

// fakeTrain is the one project the fake knows: infra/access-config, the catalog's.
func fakeTrain(paused *api.TrainPause) api.Train {
	return api.Train{Project: "infra/access-config", Length: 3, Cars: []api.TrainCar{{BatchID: 7, Position: 1, Status: "RUNNING", PipelineState: "running",
		Members: []api.RequestSummary{}, Since: t0}}, Queue: []api.QueuedRequest{}, Paused: paused}
}

func (f *fakeWorkflow) Trains(ctx context.Context) (api.Page[api.Train], error) {
	f.record("Trains()")
	if f.TrainsFn != nil {
		return f.TrainsFn(ctx)
	}
	return api.Page[api.Train]{Items: []api.Train{fakeTrain(nil)}}, nil
}

func (f *fakeWorkflow) DriftFindings(ctx context.Context) (api.DriftList, error) {
	f.record("DriftFindings()")
	if f.DriftFn != nil {
		return f.DriftFn(ctx)
	}
	return api.DriftList{Items: []api.DriftFinding{}}, nil
}

func (f *fakeWorkflow) OpenDrift(ctx context.Context, limit int) (int, error) {
	list, err := f.DriftFindings(ctx)
	n := 0
	for _, d := range list.Items {
		if d.State == "open" {
			n++
		}
	}
	return min(n, limit), err
}

func (f *fakeWorkflow) AcceptDrift(ctx context.Context, id int64, actor string) (api.DriftFinding, error) {
	f.record("AcceptDrift(%d, %s)", id, actor)
	return api.DriftFinding{ID: id, Kind: "missing", State: "closed"}, nil
}

func (f *fakeWorkflow) RestoreDrift(ctx context.Context, id int64, actor string) (api.DriftFinding, error) {
	f.record("RestoreDrift(%d, %s)", id, actor)
	return api.DriftFinding{ID: id, Kind: "missing", State: "open"}, nil
}

func (f *fakeWorkflow) IgnoreDrift(ctx context.Context, id int64, reason, actor string) (api.DriftFinding, error) {
	f.record("IgnoreDrift(%d, %q, %s)", id, reason, actor)
	return api.DriftFinding{ID: id, Kind: "missing", State: "ignored", IgnoreReason: reason}, nil
}

func (f *fakeWorkflow) ImportRepository(ctx context.Context, dryRun bool, actor string) (api.ImportResult, error) {
	f.record("ImportRepository(%t, %s)", dryRun, actor)
	return api.ImportResult{Items: []api.ImportItem{{Path: "bindings/db-read/zed@example.com.yaml", TargetKey: "db-read", Subject: "zed@example.com", Becomes: "a binding in effect"}}, DryRun: dryRun}, nil
}

func (f *fakeWorkflow) RemovedTargets(ctx context.Context) ([]api.TargetUse, error) {
	f.record("RemovedTargets()")
	if f.RemovedTargetsFn != nil {
		return f.RemovedTargetsFn(ctx)
	}
	return nil, nil
}

func (f *fakeWorkflow) PauseTrain(ctx context.Context, project, reason, actor string) (api.Train, error) {
	f.record("PauseTrain(%s,%q,%s)", project, reason, actor)
	if f.PauseTrainFn != nil {
		return f.PauseTrainFn(ctx, project, reason, actor)
	}
	if project != "infra/access-config" {
		return api.Train{}, apperr.New(apperr.NotFound, "No such project: %s is not in the catalog and bindery has no batches of it.", project)
	}
	return fakeTrain(&api.TrainPause{By: actor, Reason: reason, Since: t0}), nil
}

func (f *fakeWorkflow) ResumeTrain(ctx context.Context, project, actor string) (api.Train, error) {
	f.record("ResumeTrain(%s,%s)", project, actor)
	if f.ResumeTrainFn != nil {
		return f.ResumeTrainFn(ctx, project, actor)
	}
	if project != "infra/access-config" {
		return api.Train{}, apperr.New(apperr.NotFound, "No such project: %s is not in the catalog and bindery has no batches of it.", project)
	}
	return fakeTrain(nil), nil
}

func (f *fakeWorkflow) MergeNext(ctx context.Context, id, actor string) (api.RequestView, error) {
	f.record("MergeNext(%s,%s)", id, actor)
	if f.MergeNextFn != nil {
		return f.MergeNextFn(ctx, id, actor)
	}
	return f.Request(ctx, id)
}

func (f *fakeWorkflow) ApprovalCallback(ctx context.Context, cb api.ApprovalCallback) (api.CallbackResult, error) {
	f.record("ApprovalCallback(%s,%s,%s,%v)", cb.CallbackID, cb.OperationID, cb.Result, cb.Ext)
	if f.ApprovalCallbackFn != nil {
		return f.ApprovalCallbackFn(ctx, cb)
	}
	if _, err := f.Request(ctx, cb.OperationID); err != nil {
		return api.CallbackResult{Code: api.CallbackIgnoredStale}, nil
	}
	return api.CallbackResult{Code: api.CallbackAccepted}, nil
}

func (f *fakeWorkflow) DeployCallback(ctx context.Context, cb api.DeployCallback) (api.CallbackResult, error) {
	if cb.SHA != "" {
		f.record("DeployCallback(%s,%d@%s,%v)", cb.Project, cb.MRIID, cb.SHA, cb.OperationIDs)
	} else {
		f.record("DeployCallback(%s,%d,%v)", cb.Project, cb.MRIID, cb.OperationIDs)
	}
	if f.DeployCallbackFn != nil {
		return f.DeployCallbackFn(ctx, cb)
	}
	return api.CallbackResult{Code: api.CallbackAccepted}, nil
}

func (f *fakeWorkflow) GitLabEvent(ctx context.Context, ev workflow.GitLabEvent) (api.CallbackResult, error) {
	f.record("GitLabEvent(%s,%s,%s,%d,%d,%s,%s,%s)", ev.Kind, ev.EventID, ev.Project, ev.MRIID, ev.PipelineID, ev.Status, ev.Action, ev.Ref)
	if f.GitLabEventFn != nil {
		return f.GitLabEventFn(ctx, ev)
	}
	return api.CallbackResult{Code: api.CallbackAccepted}, nil
}

// fakePermissions grants rule codes per identity and counts round trips.
type fakePermissions struct {
	CheckFn func(ctx context.Context, id string, groups, codes []string) (bool, error)

	mu     sync.Mutex
	grants map[string][]string
	checks []string
}

var _ Permissions = (*fakePermissions)(nil)

func newFakePermissions() *fakePermissions {
	return &fakePermissions{grants: map[string][]string{
		"ops@example.com": {"bindery-ops"},
		"bob@example.com": {"b-owners"},
	}}
}

func (p *fakePermissions) Check(ctx context.Context, id string, groups, codes []string) (bool, error) {
	p.mu.Lock()
	p.checks = append(p.checks, id+":"+strings.Join(codes, "|"))
	p.mu.Unlock()
	if p.CheckFn != nil {
		return p.CheckFn(ctx, id, groups, codes)
	}
	grants := p.grants[id]
	for _, g := range groups {
		grants = append(grants, p.grants["group:"+g]...)
	}
	for _, g := range grants {
		for _, c := range codes {
			if g == c {
				return true, nil
			}
		}
	}
	return false, nil
}

func (p *fakePermissions) Checks() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.checks...)
}

// The access reviews: one review of db-read with one item (the workflow's tests run them on the
// real workflow).
func (f *fakeWorkflow) Reviews(context.Context, workflow.Reviewer) ([]api.ReviewSummary, error) {
	f.record("Reviews()")
	return []api.ReviewSummary{{ID: 7, TargetKey: "db-read", Status: "OPEN", StartedBy: "ops", StartedAt: time.Unix(0, 0).UTC(), Due: time.Unix(86400, 0).UTC()}}, nil
}

func (f *fakeWorkflow) StartReview(_ context.Context, _ workflow.Reviewer, op, target string, _ time.Time) (api.ReviewStarted, error) {
	f.record("StartReview(%s, %s)", op, target)
	return api.ReviewStarted{ID: 7, Items: 1}, nil
}

func (f *fakeWorkflow) Review(_ context.Context, _ workflow.Reviewer, id int64) (api.ReviewView, error) {
	f.record("Review(%d)", id)
	return fakeReview(id), nil
}

func fakeReview(id int64) api.ReviewView {
	return api.ReviewView{ID: id, TargetKey: "db-read", TargetTitle: "DB read", Status: "OPEN", StartedBy: "ops", StartedAt: time.Unix(0, 0).UTC(), Due: time.Unix(86400, 0).UTC(),
		Items: []api.ReviewItem{{ID: 3, OperationID: "op-v", Subject: "alice", InEffect: true}}, Undecided: 1}
}

func (f *fakeWorkflow) DecideReviewItem(_ context.Context, _ workflow.Reviewer, id, item int64, op, decision, _ string) (api.ReviewView, error) {
	f.record("DecideReviewItem(%d, %d, %s, %s)", id, item, op, decision)
	return fakeReview(id), nil
}

func (f *fakeWorkflow) CompleteReview(_ context.Context, _ workflow.Reviewer, id int64, op string) (api.ReviewView, error) {
	f.record("CompleteReview(%d, %s)", id, op)
	return fakeReview(id), nil
}

func (f *fakeWorkflow) ReviewRecords(_ context.Context, _ workflow.Reviewer, id int64, row func(api.ReviewRecord) error) error {
	return row(api.ReviewRecord{Review: id, Target: "db-read", Item: 3, Request: "op-v", Subject: "=alice"})
}

func (f *fakeWorkflow) OverdueReviews(context.Context, int) (int, error) { return 0, nil }
