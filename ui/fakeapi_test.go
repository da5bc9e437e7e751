package ui_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"bindery/api"
	"bindery/internal/platform/config"
	"bindery/internal/vocab/explain"
	"bindery/internal/vocab/state"
	"bindery/workflow"
)

// fakeAPI is an in-memory bindery JSON API and approval simulator that follows the contract
// (api/api.go, the shared formats of /api/me, lists, /sim/approvals) so the SPA can be
// tested in a browser before the real handlers exist. A request that was approved moves one
// step further each time its view is read, so polling pages see live progress; an operator's
// retry puts a stuck request back on that path.
type fakeAPI struct {
	mu  sync.Mutex
	cfg *config.Snapshot
	// removedTargets: targets bindings use that the catalog lacks (GET /api/ops/config).
	removedTargets []api.TargetUse
	reqs           map[string]*fakeRequest
	order          []string // operationIds, oldest first
	tickets        []*fakeTicket
	batches        map[int64]*api.BatchView
	// anonymousIs401: /api/me without a demo user answers 401 as the demo server does (else the
	// fake signs such a caller in as alice, as most tests want).
	anonymousIs401 bool
	nextID         int64

	applies []string          // operationId of every POST /api/apply, in order
	bodies  map[string]string // the body each operationId was first applied with
	retries []string          // "operationId by identity" of every retry
	// withdrawals are the "operationId by identity" of every withdrawal that ran; answered
	// holds each withdrawal's answer by its operationId (replayed, as server/idempotency.go).
	withdrawals []string
	answered    map[string]api.RequestView
	audit       []map[string]any
	// rounds is the answer of a batch round (nil: nothing waited in the catalog's project).
	rounds []api.PartitionRound
	// listenAddr is the address the fake says the process listens on, set by the -addr flag.
	listenAddr string
	// paused holds the projects whose queue an operator paused; nexts every merge-next
	// ("operationId by identity").
	paused map[string]*api.TrainPause
	nexts  []string
	// left holds, per batch, the members that left it with their change (a bisection's half):
	// listed with the batch, and in its moved list with the batch they are in now.
	left map[int64][]string
}

type fakeRequest struct {
	view     api.RequestView
	approved bool // moving along the scripted path
	stageAt  time.Time
}

type fakeTicket struct {
	ID          string     `json:"id"`
	OperationID string     `json:"operationId"`
	Subject     string     `json:"subject"`
	TargetKey   string     `json:"targetKey"`
	Reason      string     `json:"reason"`
	Status      string     `json:"status"`
	CreatedAt   time.Time  `json:"createdAt"`
	DecidedAt   *time.Time `json:"decidedAt"`
	DecidedBy   string     `json:"decidedBy,omitempty"`
	Comment     string     `json:"comment,omitempty"`
}

func newFakeAPI() *fakeAPI {
	return &fakeAPI{cfg: config.MustParse(string(config.Sample)), reqs: map[string]*fakeRequest{}, batches: map[int64]*api.BatchView{}, nextID: 40,
		paused: map[string]*api.TrainPause{}, left: map[int64][]string{}, removedTargets: []api.TargetUse{}}
}

// Handler serves /api/ and /sim/.
func (f *fakeAPI) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /api/me", f.me)
	mux.HandleFunc("GET /api/targets", f.targets)
	mux.HandleFunc("GET /api/preview", f.preview)
	mux.HandleFunc("POST /api/apply", f.apply)
	mux.HandleFunc("GET /api/my/requests", f.myRequests)
	mux.HandleFunc("GET /api/requests/{id}", f.request)
	mux.HandleFunc("POST /api/requests/{id}/revoke", f.revoke)
	mux.HandleFunc("POST /api/requests/{id}/withdraw", f.withdraw)
	mux.HandleFunc("GET /sim/approvals", f.approvals)
	mux.HandleFunc("POST /sim/approvals/{id}/decide", f.decide)
	mux.HandleFunc("GET /api/ops/requests", f.opsOnly(f.stuck))
	mux.HandleFunc("GET /api/ops/attention", f.opsOnly(f.attention))
	mux.HandleFunc("POST /api/ops/requests/{id}/retry", f.opsOnly(f.retry))
	mux.HandleFunc("POST /api/ops/requests/{id}/next", f.opsOnly(f.mergeNext))
	mux.HandleFunc("GET /api/ops/trains", f.opsOnly(f.trains))
	mux.HandleFunc("POST /api/ops/trains/pause", f.opsOnly(f.pause))
	mux.HandleFunc("POST /api/ops/trains/resume", f.opsOnly(f.resume))
	mux.HandleFunc("GET /api/ops/batches", f.opsOnly(f.listBatches))
	mux.HandleFunc("POST /api/ops/batches/run", f.opsOnly(f.round))
	mux.HandleFunc("POST /api/ops/batches/{id}/settle", f.opsOnly(f.settle))
	mux.HandleFunc("POST /api/ops/reconcile", f.opsOnly(f.reconcile))
	mux.HandleFunc("GET /api/ops/config", f.opsOnly(f.config))
	mux.HandleFunc("GET /api/ops/audit", f.opsOnly(f.auditLog))
	(&fakeNotify{}).register(mux, f)
	(&fakeTokens{}).register(mux)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		fail(w, http.StatusNotFound, "NOT_FOUND", "No such endpoint.")
	})
	return mux
}

func identity(r *http.Request) (name, id string) {
	name = r.Header.Get("X-Bindery-User")
	if c, err := r.Cookie("bindery_user"); err == nil && name == "" {
		name = c.Value
	}
	if name == "" {
		name = "alice"
	}
	return name, name + "@example.com"
}

func reply(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func fail(w http.ResponseWriter, status int, code, msg string) {
	reply(w, status, map[string]string{"code": code, "message": msg, "requestId": "fake-" + strconv.Itoa(status)})
}

func (f *fakeAPI) opsOnly(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if name, _ := identity(r); name != "ops" {
			fail(w, http.StatusForbidden, "ACCESS_DENIED", "Access denied")
			return
		}
		f.mu.Lock()
		defer f.mu.Unlock()
		h(w, r)
	}
}

func (f *fakeAPI) me(w http.ResponseWriter, r *http.Request) {
	if f.anonymousIs401 && r.Header.Get("X-Bindery-User") == "" {
		if c, err := r.Cookie("bindery_user"); err != nil || c.Value == "" {
			// As the demo server answers a caller without a user (server test: "no identity in
			// demo mode is 401 naming the demo users").
			reply(w, 401, map[string]string{"code": "UNAUTHENTICATED", "message": "Pick a demo user: alice, bob, ops.", "requestId": "r-anon"})
			return
		}
	}
	name, id := identity(r)
	reply(w, 200, map[string]any{"identity": id, "displayName": name, "ops": name == "ops", "demo": true, "demoUsers": []string{"alice", "bob", "ops"}, "signOut": false})
}

func (f *fakeAPI) targets(w http.ResponseWriter, r *http.Request) {
	name, id := identity(r)
	f.mu.Lock()
	defer f.mu.Unlock()
	items := []map[string]any{}
	for _, t := range f.cfg.Targets() {
		// As the server: a restricted target only for the ops user here; the caller's newest
		// request of the target, when in effect or on its way.
		item := map[string]any{"key": t.Key, "title": t.Title, "project": t.Project, "ruleCodes": t.RuleCodes, "ttl": api.ShortDuration(t.TTL), "mayApply": len(t.RuleCodes) == 0 || name == "ops"}
		for i := len(f.order) - 1; i >= 0; i-- {
			v := f.reqs[f.order[i]].view
			if v.Subject != id || v.TargetKey != t.Key {
				continue
			}
			if v.Status == state.StatusValidated {
				item["yours"] = map[string]any{"state": "IN_EFFECT", "operationId": v.OperationID, "status": v.Status}
			} else if !v.Status.Reappliable() {
				item["yours"] = map[string]any{"state": "IN_FLIGHT", "operationId": v.OperationID, "status": v.Status}
			}
			break
		}
		items = append(items, item)
	}
	reply(w, 200, map[string]any{"items": items})
}

func (f *fakeAPI) preview(w http.ResponseWriter, r *http.Request) {
	_, id := identity(r)
	t, ok := f.cfg.Target(r.URL.Query().Get("target"))
	if !ok {
		reply(w, 200, map[string]any{}) // any failure: empty, never an error
		return
	}
	reply(w, 200, map[string]string{
		"path":    strings.ReplaceAll(t.Path, "{subject}", id),
		"content": fmt.Sprintf("subject: %s\ntarget: %s\noperationId: (assigned on submit)\nreason: (your reason)\n", id, t.Key),
	})
}

func (f *fakeAPI) apply(w http.ResponseWriter, r *http.Request) {
	_, subject := identity(r)
	var in workflow.ApplyInput
	if err := json.NewDecoder(r.Body).Decode(&in); err != nil {
		fail(w, 400, "INVALID_ARGUMENT", "body: not JSON")
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.applies = append(f.applies, in.OperationID)
	if in.OperationID == "" {
		fail(w, 400, "INVALID_ARGUMENT", "operationId: required")
		return
	}
	// As server/idempotency.go: the same id with another body is 422, whatever became of it.
	body := in.TargetKey + "\x00" + in.Reason
	if first, ok := f.bodies[in.OperationID]; ok && first != body {
		fail(w, 422, "IDEMPOTENCY_KEY_REUSED", "This operationId was already used for a different request; generate a new one.")
		return
	}
	if f.bodies == nil {
		f.bodies = map[string]string{}
	}
	f.bodies[in.OperationID] = body
	if fr, ok := f.reqs[in.OperationID]; ok {
		v := fr.view
		reply(w, 202, api.ApplyResult{Code: api.CodeDuplicateSubmit, OperationID: v.OperationID, Status: v.Status, NextAction: v.NextAction})
		return
	}
	t, ok := f.cfg.Target(in.TargetKey)
	if !ok {
		fail(w, 400, "INVALID_ARGUMENT", "targetKey: no such target")
		return
	}
	if strings.TrimSpace(in.Reason) == "" {
		fail(w, 400, "INVALID_ARGUMENT", "reason: required")
		return
	}
	for _, fr := range f.reqs {
		if fr.view.Subject == subject && fr.view.TargetKey == t.Key && !fr.view.Status.Reappliable() {
			fail(w, 409, "APPLY_IN_PROGRESS", "An active request exists for this target.")
			return
		}
	}
	now := time.Now()
	fr := f.add(in.OperationID, subject, t, in.Reason, now)
	f.nextID++
	f.tickets = append(f.tickets, &fakeTicket{ID: "T" + strconv.FormatInt(f.nextID, 10), OperationID: in.OperationID, Subject: subject,
		TargetKey: t.Key, Reason: in.Reason, Status: "PENDING", CreatedAt: now})
	reply(w, 202, api.ApplyResult{Code: api.CodeAccepted, OperationID: in.OperationID, Status: fr.view.Status, NextAction: fr.view.NextAction})
}

// add records a new request waiting for approval (the caller holds the lock).
func (f *fakeAPI) add(opID, subject string, t config.Target, reason string, at time.Time) *fakeRequest {
	fr := &fakeRequest{view: api.RequestView{OperationID: opID, Subject: subject, TargetKey: t.Key, TargetTitle: t.Title,
		Project: t.Project, Reason: reason, Flow: "approval-first", CreatedAt: at}, stageAt: at}
	fr.view.Stages = []api.StageDuration{{Stage: "approval"}}
	fr.move(state.StatusApprovalSending, state.StepApprovalSending, at)
	fr.move(state.StatusApprovalSent, state.StepApprovalSent, at)
	fr.view.Waiting = &api.Waiting{Stage: "approval", WaitingFor: "the approvers in the approval system", Since: at,
		ApprovalTakes: "approvals of this target usually take about 2 h (median of the last 20)"}
	ticket := fmt.Sprintf("T-%06d", len(f.order)+1) // as approval.ticketURL links it
	fr.view.Ticket = &api.TicketLink{ID: ticket, URL: "https://approvals.example.com/tickets/" + ticket}
	f.reqs[opID] = fr
	f.order = append(f.order, opID)
	return fr
}

// move appends a timeline entry and sets status, step and next action as the workflow would.
func (fr *fakeRequest) move(status state.BindingStatus, step state.Step, at time.Time) {
	v := &fr.view
	v.Timeline = append(v.Timeline, api.TimelineEntry{Step: workflow.StepOf(step), Status: status, At: at})
	v.Status, v.Step = status, workflow.StepOf(step)
	last := "approval"
	if n := len(v.Stages); n > 0 {
		last = v.Stages[n-1].Stage
	}
	v.Stage = workflow.CurrentStage(status, step, last)
	v.NextAction = state.NextActionFor(status, step)
	said := explain.Sentence(status, step, v.NextAction)
	v.Label, v.NextActionText, v.OperatorText = said.Label, said.Requester, said.Operator
	v.UpdatedAt = at
}

// lastStage is the newest stage the request entered ("approval" before any).
func (fr *fakeRequest) lastStage() string {
	if n := len(fr.view.Stages); n > 0 {
		return fr.view.Stages[n-1].Stage
	}
	return "approval"
}

// enter closes the running stage and starts the next one ("" ends the last).
func (fr *fakeRequest) enter(stage string, at time.Time) {
	st := fr.view.Stages
	if n := len(st); n > 0 && !st[n-1].Done {
		st[n-1].Done, st[n-1].Duration = true, at.Sub(fr.stageAt)
	}
	if stage != "" {
		st = append(st, api.StageDuration{Stage: stage})
	}
	fr.view.Stages, fr.stageAt = st, at
}

// advance takes one step along the approved path (the caller holds the lock).
func (f *fakeAPI) advance(fr *fakeRequest, now time.Time) {
	v := &fr.view
	switch {
	case v.Status == state.StatusMRCreating && v.Step.Code == int(state.StepQueued):
		f.nextID++
		b := &api.BatchView{ID: f.nextID, Partition: v.Project, Status: "RUNNING", CreatedAt: now, UpdatedAt: now}
		f.batches[b.ID] = b
		v.BatchID = b.ID
		fr.move(state.StatusMRCreating, state.StepBatched, now)
		v.Waiting = &api.Waiting{Stage: "batch", WaitingFor: "the bot to open the batch's merge request", Since: now, BatchID: b.ID, Lane: "background"}
	case v.Status == state.StatusMRCreating:
		mr := &api.Link{ID: 100 + v.BatchID, URL: fmt.Sprintf("https://gitlab.example.com/%s/-/merge_requests/%d", v.Project, 100+v.BatchID)}
		pl := &api.Link{ID: 9000 + v.BatchID, URL: fmt.Sprintf("https://gitlab.example.com/%s/-/pipelines/%d", v.Project, 9000+v.BatchID)}
		v.MR, v.Pipeline = mr, pl
		if b := f.batches[v.BatchID]; b != nil {
			b.MR, b.Pipeline = mr, pl
		}
		fr.enter("ci", now)
		fr.move(state.StatusMRCreated, state.StepCreateSucceeded, now)
		v.Waiting = &api.Waiting{Stage: "merge", WaitingFor: "the reviewer bots to approve and merge", Since: now, BatchID: v.BatchID}
	case v.Status == state.StatusMRCreated:
		fr.enter("merge", now)
		fr.move(state.StatusMerging, state.StepHandleApproved, now)
	case v.Status == state.StatusMerging:
		fr.enter("deploy", now)
		fr.move(state.StatusMerged, state.StepHandleMerged, now)
		v.Waiting = &api.Waiting{Stage: "deploy", WaitingFor: "the deploy pipeline to report back", Since: now, BatchID: v.BatchID}
		if b := f.batches[v.BatchID]; b != nil {
			b.Status, b.UpdatedAt = "SUCCEEDED", now
		}
	case v.Status == state.StatusMerged:
		fr.enter("", now)
		fr.move(state.StatusValidated, state.StepCalledBack, now)
		v.Waiting = nil
		exp := now.Add(720 * time.Hour)
		v.ExpiresAt = &exp
		fr.approved = false
	case v.Status == state.StatusValidated && v.Step.Code == int(state.StepCloseStarted):
		fr.removalMerged(now, 64)
	case v.Status == state.StatusValidated && v.Step.Code == int(state.StepCloseMerged):
		fr.removed(now)
		fr.approved = false
	}
}

// removalMerged: the removal's MR !mr merged; the binding is in effect until its deploy.
func (fr *fakeRequest) removalMerged(at time.Time, mr int64) {
	v := &fr.view
	v.MR = &api.Link{ID: mr, URL: fmt.Sprintf("https://gitlab.example.com/%s/-/merge_requests/%d", v.Project, mr)}
	fr.move(state.StatusValidated, state.StepCloseMerged, at)
	v.Timeline[len(v.Timeline)-1].Note = fmt.Sprintf("MR !%d merged", mr)
	v.Waiting = &api.Waiting{Stage: "close", WaitingFor: fmt.Sprintf("the deploy pipeline to report that the removal (merge request !%d) is deployed; until then the binding is still in effect", mr), Since: at}
	v.NextActionText = explain.Removing(true)
}

// removed: the removal's deploy came (CLOSED), as workflow/outcome.go words it.
func (fr *fakeRequest) removed(at time.Time) {
	v := &fr.view
	fr.enter("", at)
	fr.move(state.StatusClosed, state.StepCloseSucceeded, at)
	v.Timeline[len(v.Timeline)-1].Note = fmt.Sprintf("the deploy of MR !%d includes the removal", v.MR.ID)
	by := ""
	for _, e := range v.Timeline {
		if e.Step.Code == int(state.StepCloseStarted) {
			by = strings.TrimSuffix(strings.TrimPrefix(e.Note, "Revoked by "), ".")
			break
		}
	}
	v.NextActionText, v.Waiting, v.ExpiresAt = explain.Closed(explain.EndRevoked, by), nil, nil
}

// snapshot returns the view with durations filled in (until the next entry, or now).
func (fr *fakeRequest) snapshot(now time.Time) api.RequestView {
	v := fr.view
	v.Timeline = append([]api.TimelineEntry(nil), v.Timeline...)
	for i := range v.Timeline {
		end := now
		if i+1 < len(v.Timeline) {
			end = v.Timeline[i+1].At
		}
		v.Timeline[i].Duration = end.Sub(v.Timeline[i].At)
	}
	v.Stages = append([]api.StageDuration(nil), v.Stages...)
	if n := len(v.Stages); n > 0 && !v.Stages[n-1].Done {
		v.Stages[n-1].Duration = now.Sub(fr.stageAt)
	}
	return v
}

func (fr *fakeRequest) summary() api.RequestSummary {
	v := fr.view
	return api.RequestSummary{OperationID: v.OperationID, Subject: v.Subject, TargetKey: v.TargetKey, Flow: v.Flow, Status: v.Status, Step: v.Step, Label: v.Label,
		NextAction: v.NextAction, MR: v.MR, UpdatedAt: v.UpdatedAt, CreatedAt: v.CreatedAt, Withdrawable: v.Withdrawable, Blocker: heldMerge(v)}
}

// heldMerge is the blocker a summary carries: the request's own merge held for a person
// (workflow/views.go StuckRequests), not the one it waits behind.
func heldMerge(v api.RequestView) *api.Blocker {
	if v.Waiting == nil || v.Waiting.Blocker == nil || v.Waiting.Blocker.Behind {
		return nil
	}
	return v.Waiting.Blocker
}

func (f *fakeAPI) request(w http.ResponseWriter, r *http.Request) {
	name, id := identity(r)
	f.mu.Lock()
	defer f.mu.Unlock()
	fr, ok := f.reqs[r.PathValue("id")]
	if !ok || (fr.view.Subject != id && name != "ops") {
		fail(w, 404, "NOT_FOUND", "No such request.")
		return
	}
	now := time.Now()
	if fr.approved {
		f.advance(fr, now)
	}
	v := fr.snapshot(now)
	if fr.view.Subject != id { // an operator reads someone's request (server/handlers.go ownedRequest)
		v = v.ForOperator()
	}
	reply(w, 200, v)
}

// owned is the request of the path as the owner-checked routes find it (nil: answered 404).
func (f *fakeAPI) owned(w http.ResponseWriter, r *http.Request) (*fakeRequest, string) {
	name, id := identity(r)
	fr, ok := f.reqs[r.PathValue("id")]
	if !ok || (fr.view.Subject != id && name != "ops") {
		fail(w, 404, "NOT_FOUND", "No such request.")
		return nil, id
	}
	return fr, id
}

// revoke starts the close phase of a request in effect; the request then moves on as it is read:
// its removal merges, then its deploy closes it (advance).
func (f *fakeAPI) revoke(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fr, who := f.owned(w, r)
	if fr == nil {
		return
	}
	if fr.view.Status != state.StatusValidated {
		fail(w, 409, "CONFLICT", "Only a request in effect (VALIDATED) can be revoked; this one is "+string(fr.view.Status)+".")
		return
	}
	now := time.Now()
	fr.enter("close", now)
	fr.move(state.StatusValidated, state.StepCloseStarted, now)
	fr.view.Timeline[len(fr.view.Timeline)-1].Note = "Revoked by " + who + "."
	fr.view.Waiting = &api.Waiting{Stage: "close", WaitingFor: "the next batch round of " + fr.view.Project + " to remove the file (0 ahead in the queue)", Since: now, Position: 1}
	fr.view.NextActionText = explain.Removing(false)
	fr.approved = true
	reply(w, 202, fr.snapshot(now))
}

// withdraw closes a failed request (server/handlers.go withdraw, workflow/withdraw.go): once
// per operationId, 409 for a request that did not fail.
func (f *fakeAPI) withdraw(w http.ResponseWriter, r *http.Request) {
	var body struct{ OperationID string }
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil || body.OperationID == "" {
		fail(w, 400, "INVALID_ARGUMENT", "operationId: required")
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	fr, who := f.owned(w, r)
	if fr == nil {
		return
	}
	if v, ok := f.answered[body.OperationID]; ok {
		reply(w, 202, v)
		return
	}
	if !fr.view.Withdrawable {
		fail(w, 409, "CONFLICT", "Only a request that failed can be withdrawn; this one is "+string(fr.view.Status)+".")
		return
	}
	now := time.Now()
	f.withdrawals = append(f.withdrawals, fr.view.OperationID+" by "+who)
	f.audit = append(f.audit, map[string]any{"at": now, "actor": who, "action": "withdraw",
		"params": map[string]any{"operationId": body.OperationID, "request": fr.view.OperationID, "__authenticatedOperator": who}, "requestId": "fake"})
	fr.move(state.StatusClosed, state.StepWithdrawn, now)
	fr.view.Timeline[len(fr.view.Timeline)-1].Note = "Withdrawn by " + who + "."
	fr.view.Stage = workflow.CurrentStage(state.StatusClosed, state.StepWithdrawn, fr.lastStage())
	fr.view.NextActionText = explain.Closed(explain.EndWithdrawn, who)
	fr.view.Withdrawable, fr.view.OperatorText, fr.view.FailedJob, fr.view.Waiting = false, "", nil, nil
	if f.answered == nil {
		f.answered = map[string]api.RequestView{}
	}
	f.answered[body.OperationID] = fr.snapshot(now)
	reply(w, 202, f.answered[body.OperationID])
}

func (f *fakeAPI) myRequests(w http.ResponseWriter, r *http.Request) {
	_, id := identity(r)
	f.mu.Lock()
	defer f.mu.Unlock()
	page := api.Page[api.RequestSummary]{Items: []api.RequestSummary{}}
	for i := len(f.order) - 1; i >= 0; i-- {
		if fr := f.reqs[f.order[i]]; fr.view.Subject == id {
			page.Items = append(page.Items, fr.summary())
		}
	}
	reply(w, 200, page)
}

func (f *fakeAPI) approvals(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	reply(w, 200, map[string]any{"items": f.tickets})
}

func (f *fakeAPI) decide(w http.ResponseWriter, r *http.Request) {
	var body struct{ Decision, DecidedBy, Comment string }
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil || (body.Decision != "APPROVED" && body.Decision != "REJECTED") {
		fail(w, 400, "INVALID_ARGUMENT", "decision: APPROVED or REJECTED")
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, t := range f.tickets {
		if t.ID != r.PathValue("id") {
			continue
		}
		if t.Status != "PENDING" {
			fail(w, 409, "CONFLICT", "already decided")
			return
		}
		now := time.Now()
		t.Status, t.DecidedAt, t.DecidedBy, t.Comment = body.Decision, &now, body.DecidedBy, body.Comment
		// What bindery does with the signed callback.
		if fr := f.reqs[t.OperationID]; fr != nil && fr.view.Status.AwaitingApproval() {
			if body.Decision == "APPROVED" {
				fr.enter("batch", now)
				fr.move(state.StatusMRCreating, state.StepQueued, now)
				fr.view.Waiting = &api.Waiting{Stage: "batch", WaitingFor: "the next batch of its project", Since: now, Position: 1}
				fr.approved = true
			} else {
				fr.enter("", now)
				fr.move(state.StatusRejected, state.StepApprovalRejected, now)
				fr.view.Waiting = nil
				// As workflow/rejection.go words it (who and their comment, when sent).
				note := "Decision: rejected."
				switch {
				case body.DecidedBy != "" && body.Comment != "":
					note = "Rejected by " + body.DecidedBy + ": " + body.Comment
				case body.DecidedBy != "":
					note = "Rejected by " + body.DecidedBy + "."
				}
				fr.view.Timeline[len(fr.view.Timeline)-1].Note = note
				fr.view.NextActionText = explain.Rejected(note)
			}
		}
		reply(w, 200, t)
		return
	}
	fail(w, 404, "NOT_FOUND", "No such ticket.")
}

// needsOperator is the stuck list's rule without filters, as the fake words its requests.
func needsOperator(v api.RequestView) bool {
	return v.NextAction == state.NextWaitManual || v.NextAction == state.NextContactSupport
}

// attention counts as server/ops.go does: the stuck list without filters and the BLOCKED batches.
func (f *fakeAPI) attention(w http.ResponseWriter, r *http.Request) {
	var a api.Attention
	for _, op := range f.order {
		if needsOperator(f.reqs[op].view) {
			a.Requests++
		}
	}
	for _, b := range f.batches {
		if b.Status == "BLOCKED" {
			a.BlockedBatches++
		}
	}
	a.Total = a.Requests + a.BlockedBatches
	reply(w, 200, a)
}

func (f *fakeAPI) stuck(w http.ResponseWriter, r *http.Request) {
	status, step := r.URL.Query().Get("status"), r.URL.Query().Get("step")
	page := api.Page[api.RequestSummary]{Items: []api.RequestSummary{}}
	for _, op := range f.order {
		v := f.reqs[op].view
		match := needsOperator(v)
		if status != "" {
			match = string(v.Status) == status
		}
		if step != "" && strconv.Itoa(v.Step.Code) != step {
			match = false
		}
		if match {
			page.Items = append(page.Items, f.reqs[op].summary())
		}
	}
	reply(w, 200, page)
}

func (f *fakeAPI) retry(w http.ResponseWriter, r *http.Request) {
	_, who := identity(r)
	fr, ok := f.reqs[r.PathValue("id")]
	if !ok {
		fail(w, 404, "NOT_FOUND", "No such request.")
		return
	}
	f.retries = append(f.retries, fr.view.OperationID+" by "+who)
	// As server/ops.go records it: the client's parameters, the path's and the reserved operator.
	f.audit = append(f.audit, map[string]any{"at": time.Now(), "actor": who, "action": "ops.requests.retry",
		"params": map[string]any{"operationId": "form-" + strconv.Itoa(len(f.audit)), "request": fr.view.OperationID, "__authenticatedOperator": who}, "requestId": "fake"})
	if fr.view.Status == state.StatusMerged { // an overdue deploy: the retry confirms it
		fr.move(state.StatusValidated, state.StepCalledBack, time.Now())
		fr.view.Timeline[len(fr.view.Timeline)-1].Note = "Deploy confirmed by " + who + "."
		fr.view.Waiting = nil
		fr.enter("", time.Now())
		reply(w, 202, fr.snapshot(time.Now()))
		return
	}
	fr.move(state.StatusMerging, state.StepHandleStarted, time.Now())
	fr.approved = true
	reply(w, 202, map[string]string{"code": "ACCEPTED", "operationId": fr.view.OperationID})
}

func (f *fakeAPI) listBatches(w http.ResponseWriter, r *http.Request) {
	page := api.Page[api.BatchView]{Items: []api.BatchView{}}
	status := r.URL.Query().Get("status")
	for _, b := range f.batches {
		if status != "" && b.Status != status {
			continue
		}
		bv := *b
		bv.Members, bv.Moved = []api.RequestSummary{}, nil
		for _, op := range f.order {
			if fr := f.reqs[op]; fr.view.BatchID == b.ID {
				bv.Members = append(bv.Members, fr.summary())
			} else if contains(f.left[b.ID], op) {
				bv.Members = append(bv.Members, fr.summary())
				bv.Moved = append(bv.Moved, api.MovedMember{OperationID: op, BatchID: fr.view.BatchID})
			}
		}
		page.Items = append(page.Items, bv)
	}
	sort.Slice(page.Items, func(i, j int) bool { return page.Items[i].ID > page.Items[j].ID })
	reply(w, 200, page)
}

func (f *fakeAPI) round(w http.ResponseWriter, r *http.Request) {
	if f.rounds != nil {
		reply(w, 200, api.RoundResult{Partitions: f.rounds})
		return
	}
	reply(w, 200, api.RoundResult{Partitions: []api.PartitionRound{{Partition: "infra/access-config", Outcome: "NOTHING_WAITING"}}})
}

func (f *fakeAPI) settle(w http.ResponseWriter, r *http.Request) {
	id, _ := strconv.ParseInt(r.PathValue("id"), 10, 64)
	b, ok := f.batches[id]
	if !ok {
		fail(w, 404, "NOT_FOUND", "No such batch.")
		return
	}
	b.Status, b.UpdatedAt = "FAILED", time.Now()
	reply(w, 200, b)
}

func (f *fakeAPI) reconcile(w http.ResponseWriter, r *http.Request) {
	reply(w, 200, api.ReconcileResult{Scanned: 3, Validated: 1, Closed: 1})
}

func (f *fakeAPI) config(w http.ResponseWriter, r *http.Request) {
	keys := append([]config.KeyReport(nil), f.cfg.Report...)
	for i, k := range keys {
		if k.Key == "server.addr" && f.listenAddr != "" { // as server/ops.go reports the -addr flag
			keys[i].Effective, keys[i].Status, keys[i].Note = f.listenAddr, config.StatusFlag, "set by the -addr flag, which overrides server.addr ("+k.Effective+")"
		}
	}
	reply(w, 200, map[string]any{"generation": 3, "loadedAt": time.Now().Add(-42 * time.Minute), "keys": keys, "unknown": []string{"ratelimit.aply"},
		"lastError": map[string]any{"at": time.Now().Add(-5 * time.Minute), "message": "config.yaml line 12: apply.window: want \"Mon-Fri 10:00-18:00\""}, "pendingRestart": []string{},
		"removedTargets": f.removedTargets})
}

func (f *fakeAPI) auditLog(w http.ResponseWriter, r *http.Request) {
	items := []map[string]any{}
	for i := len(f.audit) - 1; i >= 0; i-- {
		items = append(items, f.audit[i])
	}
	reply(w, 200, map[string]any{"items": items})
}

// addBatch puts fr's request in a new batch of its project with MR !mr and pipeline pipeline;
// the caller holds f.mu.
func (f *fakeAPI) addBatch(fr *fakeRequest, status string, mr, pipeline int64, created, updated time.Time) *api.BatchView {
	f.nextID++
	project := fr.view.Project
	b := &api.BatchView{ID: f.nextID, Partition: project, Status: status, CreatedAt: created, UpdatedAt: updated,
		MR:       &api.Link{ID: mr, URL: fmt.Sprintf("https://gitlab.example.com/%s/-/merge_requests/%d", project, mr)},
		Pipeline: &api.Link{ID: pipeline, URL: fmt.Sprintf("https://gitlab.example.com/%s/-/pipelines/%d", project, pipeline)}}
	f.batches[b.ID] = b
	fr.view.BatchID, fr.view.MR, fr.view.Pipeline = b.ID, b.MR, b.Pipeline
	return b
}

// seedStuck adds a request of subject stopped at a retryable step (pipeline still pending
// after the polling timeout: MERGING / HANDLE_PIPELINE_PENDING / WAIT_MANUAL), in a batch.
func (f *fakeAPI) seedStuck(opID, subject, targetKey string, at time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	t, _ := f.cfg.Target(targetKey)
	fr := f.add(opID, subject, t, "on-call rotation", at)
	fr.enter("batch", at.Add(4*time.Minute))
	fr.move(state.StatusMRCreating, state.StepQueued, at.Add(4*time.Minute))
	b := f.addBatch(fr, "BLOCKED", 57, 8812, at.Add(6*time.Minute), at.Add(40*time.Minute))
	b.Note = "pipeline still running after the polling timeout"
	fr.move(state.StatusMRCreating, state.StepBatched, at.Add(6*time.Minute))
	fr.enter("ci", at.Add(7*time.Minute))
	fr.move(state.StatusMRCreated, state.StepCreateSucceeded, at.Add(19*time.Minute))
	fr.enter("merge", at.Add(19*time.Minute))
	fr.move(state.StatusMerging, state.StepHandlePipelinePending, at.Add(40*time.Minute))
	fr.view.Waiting = &api.Waiting{Stage: "merge", WaitingFor: "an operator to retry: the pipeline did not finish in time", Since: at.Add(40 * time.Minute), BatchID: b.ID}
}

// seedInCI adds a request whose batch waits for its pipeline: the view names the pipeline and
// when bindery looks at it again (the batch's task, due then).
func (f *fakeAPI) seedInCI(opID, subject, targetKey string, at time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	t, _ := f.cfg.Target(targetKey)
	fr := f.add(opID, subject, t, "on-call rotation", at)
	fr.enter("batch", at.Add(2*time.Minute))
	fr.move(state.StatusMRCreating, state.StepQueued, at.Add(2*time.Minute))
	b := f.addBatch(fr, "RUNNING", 61, 8820, at.Add(3*time.Minute), at.Add(3*time.Minute))
	b.Note = "MR !61 carries 1 changes"
	fr.enter("ci", at.Add(3*time.Minute))
	fr.move(state.StatusMRCreating, state.StepCreateStarted, at.Add(3*time.Minute))
	next := time.Now().Add(30 * time.Second)
	fr.view.Waiting = &api.Waiting{Stage: "ci", WaitingFor: "the pipeline of merge request !61 to pass", Since: at.Add(3 * time.Minute), BatchID: b.ID,
		Lane: "background", NextCheckAt: &next}
}

// blockedPoll is the demo's longest gap between two looks at a held merge request (the sample
// configuration's poll.long).
const blockedPoll = 5 * time.Second

// seedBlockedMerge adds a request whose batch is BLOCKED because its merge request has an
// unresolved discussion (MERGING / HANDLE_MR_BLOCKED / WAIT_MANUAL), told as workflow/views.go
// tells it: one story of the blocker on the page, the badge, the stuck list and the batch.
func (f *fakeAPI) seedBlockedMerge(opID, subject, targetKey string, at time.Time) *api.BatchView {
	f.mu.Lock()
	defer f.mu.Unlock()
	t, _ := f.cfg.Target(targetKey)
	fr := f.add(opID, subject, t, "on-call rotation", at)
	fr.enter("batch", at.Add(2*time.Minute))
	fr.move(state.StatusMRCreating, state.StepQueued, at.Add(2*time.Minute))
	b := f.addBatch(fr, "BLOCKED", 64, 8840, at.Add(3*time.Minute), at.Add(14*time.Minute))
	fr.move(state.StatusMRCreating, state.StepBatched, at.Add(3*time.Minute))
	fr.enter("ci", at.Add(3*time.Minute))
	fr.move(state.StatusMRCreating, state.StepCreateStarted, at.Add(3*time.Minute))
	fr.move(state.StatusMRCreated, state.StepCreateSucceeded, at.Add(12*time.Minute))
	fr.enter("merge", at.Add(12*time.Minute))
	fr.move(state.StatusMerging, state.StepHandleStarted, at.Add(12*time.Minute))
	b.Note = explain.BlockerNote("discussions_not_resolved", b.MR.ID)
	fr.move(state.StatusMerging, state.StepHandleMRBlocked, at.Add(14*time.Minute))
	fr.view.Timeline[len(fr.view.Timeline)-1].Note = b.Note
	story, _ := explain.MergeBlocked(b.Note, t.Project, blockedPoll)
	b.Blocker = &api.Blocker{Text: story.Text(), Label: story.Label(), MR: b.MR, BatchID: b.ID, Since: at.Add(14 * time.Minute)}
	fr.view.NextActionText = "Your request waits: " + story.Text() + "."
	fr.view.Waiting = &api.Waiting{Stage: "merge", WaitingFor: "a person in GitLab: " + story.Text(), Since: at.Add(14 * time.Minute), BatchID: b.ID, Blocker: b.Blocker}
	return b
}

// seedBehindBlocked adds a request approved after batch blocked was BLOCKED: first in its
// project's waiting set, held behind that batch (WAIT_MANUAL), as workflow/views.go words it.
func (f *fakeAPI) seedBehindBlocked(opID, subject, targetKey string, at time.Time, blocked *api.BatchView) {
	f.mu.Lock()
	defer f.mu.Unlock()
	t, _ := f.cfg.Target(targetKey)
	fr := f.add(opID, subject, t, "release on-call", at)
	fr.enter("batch", at.Add(time.Minute))
	fr.move(state.StatusMRCreating, state.StepQueued, at.Add(time.Minute))
	behind := *blocked.Blocker
	behind.Behind = true
	words := fmt.Sprintf("behind blocked batch %d since %s UTC: %s", blocked.ID, behind.Since.UTC().Format("15:04"), behind.Text)
	fr.view.NextAction = state.NextWaitManual
	fr.view.NextActionText = "Your request waits " + words + ". It goes on once that is cleared, or an operator settles the batch."
	fr.view.Waiting = &api.Waiting{Stage: "batch", WaitingFor: fmt.Sprintf("the next batch of %s, %s (0 ahead in the queue)", t.Project, words),
		Since: at.Add(time.Minute), BatchID: blocked.ID, Position: 1, Blocker: &behind}
}

// seedHeld adds a request approved at, first in a waiting set that a batch round holds for more
// requests to share a pipeline until heldUntil (batch.maxWait).
func (f *fakeAPI) seedHeld(opID, subject, targetKey string, at, heldUntil time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	t, _ := f.cfg.Target(targetKey)
	fr := f.add(opID, subject, t, "on-call rotation", at)
	fr.enter("batch", at.Add(time.Minute))
	fr.move(state.StatusMRCreating, state.StepQueued, at.Add(time.Minute))
	clock := heldUntil.UTC().Format("15:04") + " UTC"
	fr.view.NextActionText = "Your request waits until " + clock + " for more requests to share a pipeline; then a batch takes it."
	fr.view.Waiting = &api.Waiting{Stage: "batch", WaitingFor: fmt.Sprintf("more requests of %s to share a pipeline with, until %s at the latest (1 of up to 50 waiting)", t.Project, clock),
		Since: at.Add(time.Minute), Position: 1, HeldUntil: &heldUntil}
}

// seedQueued adds an approved request waiting for a batch of its project.
func (f *fakeAPI) seedQueued(opID, subject, targetKey string, at time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	t, _ := f.cfg.Target(targetKey)
	fr := f.add(opID, subject, t, "on-call rotation", at)
	fr.enter("batch", at.Add(2*time.Minute))
	fr.move(state.StatusMRCreating, state.StepQueued, at.Add(2*time.Minute))
	fr.view.Waiting = &api.Waiting{Stage: "batch", WaitingFor: "the next batch of " + t.Project, Since: at.Add(2 * time.Minute), Position: 1}
}

// seedMerged adds a request merged and waiting for the deploy that includes its merge.
func (f *fakeAPI) seedMerged(opID, subject, targetKey string, at time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	t, _ := f.cfg.Target(targetKey)
	fr := f.add(opID, subject, t, "on-call rotation", at)
	fr.enter("merge", at.Add(5*time.Minute))
	fr.move(state.StatusMerging, state.StepHandleStarted, at.Add(5*time.Minute))
	fr.enter("deploy", at.Add(9*time.Minute))
	fr.move(state.StatusMerged, state.StepHandleMerged, at.Add(9*time.Minute))
	fr.view.MR = &api.Link{ID: 58, URL: "https://gitlab.example.com/" + t.Project + "/-/merge_requests/58"}
	fr.view.Waiting = &api.Waiting{Stage: "deploy", WaitingFor: "the deploy pipeline to report that merge request !58 is deployed", Since: at.Add(9 * time.Minute)}
}

// seedOverdueDeploy adds a request merged at, whose deploy callback never came: the workflow
// lists it as WAIT_MANUAL with the overdue wording (the sentence table's).
func (f *fakeAPI) seedOverdueDeploy(opID, subject, targetKey string, at time.Time) {
	f.seedMerged(opID, subject, targetKey, at)
	f.mu.Lock()
	defer f.mu.Unlock()
	fr := f.reqs[opID]
	fr.view.NextAction = state.NextWaitManual
	said := explain.Sentence(state.StatusMerged, state.StepHandleMerged, state.NextWaitManual)
	fr.view.Label, fr.view.NextActionText, fr.view.OperatorText = said.Label, said.Requester, said.Operator
	fr.view.Waiting.WaitingFor = "the deploy pipeline to report that merge request !58 is deployed — overdue: check the deploy pipeline; an operator can confirm the deploy"
}

// seen is what the fake received, read under its lock (the browser's requests run on the
// server's goroutines).
func (f *fakeAPI) seen() (applies, retries []string, requests int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.applies...), append([]string(nil), f.retries...), len(f.reqs)
}

// seedFailedInCI adds a request whose batch was bisected and whose own pipeline then failed for
// good (CREATE_FAILED / CREATE_PIPELINE_FAILED / CONTACT_SUPPORT): a finished failure.
func (f *fakeAPI) seedFailedInCI(opID, subject, targetKey string, at time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	t, _ := f.cfg.Target(targetKey)
	fr := f.add(opID, subject, t, "on-call rotation", at)
	fr.enter("batch", at.Add(2*time.Minute))
	fr.move(state.StatusMRCreating, state.StepQueued, at.Add(2*time.Minute))
	fr.move(state.StatusMRCreating, state.StepBatched, at.Add(3*time.Minute))
	fr.enter("ci", at.Add(3*time.Minute))
	fr.move(state.StatusMRCreating, state.StepCreateStarted, at.Add(3*time.Minute))
	fr.move(state.StatusMRCreating, state.StepQueued, at.Add(9*time.Minute))
	fr.view.Timeline[len(fr.view.Timeline)-1].Note = "returned to the waiting set: batch 41 is bisected; retried with its half only, before any newcomer. " +
		"The pipeline of the merge request failed (pipeline 8829: https://gitlab.example.com/" + t.Project + "/-/pipelines/8829)."
	b := f.addBatch(fr, "FAILED", 63, 8831, at.Add(10*time.Minute), at.Add(16*time.Minute))
	fr.move(state.StatusMRCreating, state.StepCreateStarted, at.Add(10*time.Minute))
	fr.move(state.StatusCreateFailed, state.StepCreatePipelineFailed, at.Add(16*time.Minute))
	fr.view.Timeline[len(fr.view.Timeline)-1].Note = explain.Told(state.StepCreatePipelineFailed, "pipeline 8831 ("+b.Pipeline.URL+") failed",
		func(string, int64) string { return b.Pipeline.URL })
	fr.enter("", at.Add(16*time.Minute))
	fr.view.FailedJob = &api.JobLink{ID: 77031, Name: "test", URL: "https://gitlab.example.com/" + t.Project + "/-/jobs/77031"}
	fr.view.Waiting = &api.Waiting{Stage: "ci", WaitingFor: "its requester or an operator: waiting will not fix this failure (withdraw the request and apply again, or retry it)", Since: at.Add(16 * time.Minute)}
	// As workflow/outcome.go words it: the cause with the failed job, both ways out.
	failed := explain.Failed{Step: state.StepCreatePipelineFailed, Note: "batch 63 isolated the culprit " + opID + " after 1 bisection: pipeline 8831 failed",
		Job: "test #77031", Links: func(string, int64) string { return b.Pipeline.URL }}
	fr.view.Withdrawable = true
	fr.view.NextActionText, fr.view.OperatorText = explain.WayOut(failed), explain.ForOperator(failed)
}

// Where a seeded revocation stands (seedRevoked).
const (
	revocationQueued = iota // CLOSE_STARTED: waiting for a batch
	removalMerged           // CLOSE_MERGED: merged, waiting for the deploy
	removalDeployed         // CLOSED
)

// seedRevoked adds a request that was in effect and whose binding is being removed: its
// revocation queued, its removal merged, or removed and deployed (CLOSED).
func (f *fakeAPI) seedRevoked(opID, subject, targetKey string, at time.Time, stage int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	t, _ := f.cfg.Target(targetKey)
	fr := f.add(opID, subject, t, "on-call rotation", at)
	fr.enter("deploy", at.Add(5*time.Minute))
	fr.move(state.StatusMerged, state.StepHandleMerged, at.Add(5*time.Minute))
	fr.enter("", at.Add(6*time.Minute))
	fr.move(state.StatusValidated, state.StepCalledBack, at.Add(6*time.Minute))
	exp := at.Add(720 * time.Hour)
	fr.view.ExpiresAt = &exp
	fr.enter("close", at.Add(20*time.Minute))
	fr.move(state.StatusValidated, state.StepCloseStarted, at.Add(20*time.Minute))
	fr.view.Timeline[len(fr.view.Timeline)-1].Note = "Revoked by " + subject + "."
	fr.view.Waiting = &api.Waiting{Stage: "close", WaitingFor: "the next batch round of " + t.Project + " to remove the file (0 ahead in the queue)", Since: at.Add(20 * time.Minute), Position: 1}
	fr.view.NextActionText = explain.Removing(false)
	if stage >= removalMerged {
		fr.removalMerged(at.Add(24*time.Minute), 66)
	}
	if stage >= removalDeployed {
		fr.removed(at.Add(25 * time.Minute))
	}
}

// The merge trains, as workflow/train.go shows them: each catalog project's active batches as
// its cars (batch.train 3), its requests waiting in the queue (a view with a place in line and no
// batch), its pause. The caller holds f.mu.

const fakeTrainLength = 3

// waitingIn reports whether fr's request waits in project's waiting set.
func (fr *fakeRequest) waitingIn(project string) bool {
	v := fr.view
	return v.Project == project && v.Waiting != nil && v.Waiting.Position > 0 && v.Waiting.Car == nil && v.BatchID == 0
}

func (f *fakeAPI) trainOf(project string) api.Train {
	t := api.Train{Project: project, Length: fakeTrainLength, Cars: []api.TrainCar{}, Queue: []api.QueuedRequest{}, Paused: f.paused[project],
		Pipelines: "median of the last 8 pipelines of " + project + ": 9 min"}
	var ids []int64
	for id, b := range f.batches {
		if b.Partition == project && (b.Status == "RUNNING" || b.Status == "BLOCKED") {
			ids = append(ids, id)
		}
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	for i, id := range ids {
		b := f.batches[id]
		c := api.TrainCar{BatchID: id, Position: i + 1, Status: b.Status, MR: b.MR, Pipeline: b.Pipeline, PipelineState: "running", Members: []api.RequestSummary{},
			Since: b.CreatedAt, WaitingFor: "waiting for the bot to open the batch's merge request"}
		if b.MR != nil {
			c.WaitingFor = fmt.Sprintf("waiting for the pipeline of merge request !%d to pass", b.MR.ID)
		}
		if b.Status == "BLOCKED" {
			c.PipelineState, c.WaitingFor = "blocked", "blocked: "+b.Note
			if t.Blocked == nil {
				t.Blocked = &api.TrainBlock{BatchID: id, Since: b.UpdatedAt, Why: b.Note}
			}
		} else {
			c.Estimate = &api.Estimate{Words: fmt.Sprintf("about %d min", 9*(i+1)), Basis: t.Pipelines}
		}
		for _, op := range f.order {
			if fr := f.reqs[op]; fr.view.BatchID == id {
				c.Members = append(c.Members, fr.summary())
			}
		}
		t.Cars = append(t.Cars, c)
	}
	var queue []api.QueuedRequest
	for _, op := range f.order {
		if fr := f.reqs[op]; fr.waitingIn(project) {
			t.Waiting++
			q := api.QueuedRequest{RequestSummary: fr.summary(), Since: fr.view.Waiting.Since, NextBy: fr.view.Waiting.NextBy}
			if q.NextBy != "" {
				t.MergeNext++
			}
			queue = append(queue, q)
		}
	}
	// In the order cars take them: the ones sent next first.
	sort.SliceStable(queue, func(i, j int) bool { return queue[i].NextBy != "" && queue[j].NextBy == "" })
	t.Queue = append(t.Queue, queue...)
	return t
}

func (f *fakeAPI) projects() []string {
	seen := map[string]bool{}
	var out []string
	for _, t := range f.cfg.Targets() {
		if !seen[t.Project] {
			seen[t.Project] = true
			out = append(out, t.Project)
		}
	}
	return out
}

func (f *fakeAPI) trains(w http.ResponseWriter, r *http.Request) {
	page := api.Page[api.Train]{Items: []api.Train{}}
	for _, p := range f.projects() {
		page.Items = append(page.Items, f.trainOf(p))
	}
	rank := func(t api.Train) int { // as workflow/train.go trainRank
		switch {
		case t.Blocked != nil:
			return 0
		case slices.ContainsFunc(t.Cars, func(c api.TrainCar) bool { return c.PipelineState == "failed" }):
			return 1
		case t.Paused != nil:
			return 2
		}
		return 3
	}
	sort.SliceStable(page.Items, func(i, j int) bool { return rank(page.Items[i]) < rank(page.Items[j]) })
	reply(w, 200, page)
}

// trainBody reads an action on a train as server/ops.go does: a known project, and for a pause a
// reason of at most 512 characters.
func (f *fakeAPI) trainBody(w http.ResponseWriter, r *http.Request, needReason bool) (project, reason string, ok bool) {
	var body struct{ OperationID, Project, Reason string }
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil || body.OperationID == "" {
		fail(w, 400, "INVALID_ARGUMENT", "operationId: required")
		return "", "", false
	}
	reason = strings.TrimSpace(body.Reason)
	switch {
	case needReason && reason == "":
		fail(w, 400, "INVALID_ARGUMENT", "reason: is required: tell the waiting requesters why their queue is paused")
		return "", "", false
	case len([]rune(body.Reason)) > 512:
		fail(w, 400, "INVALID_ARGUMENT", "reason: must be at most 512 characters")
		return "", "", false
	case !contains(f.projects(), body.Project) || body.Project == "":
		fail(w, 404, "NOT_FOUND", "No such project: "+body.Project+" is not in the catalog and bindery has no batches of it.")
		return "", "", false
	}
	_, who := identity(r)
	action := "ops.trains.resume"
	params := map[string]any{"operationId": body.OperationID, "project": body.Project, "__authenticatedOperator": who}
	if needReason {
		action, params["reason"] = "ops.trains.pause", body.Reason
	}
	f.audit = append(f.audit, map[string]any{"at": time.Now(), "actor": who, "action": action, "params": params, "requestId": "fake"})
	return body.Project, reason, true
}

func (f *fakeAPI) pause(w http.ResponseWriter, r *http.Request) {
	project, reason, ok := f.trainBody(w, r, true)
	if !ok {
		return
	}
	_, who := identity(r)
	f.paused[project] = &api.TrainPause{By: who, Reason: reason, Since: time.Now()}
	// Every requester waiting for the project reads it (workflow/train.go, waitingForACar).
	for _, op := range f.order {
		if fr := f.reqs[op]; fr.waitingIn(project) {
			fr.view.Waiting.WaitingFor = fmt.Sprintf("the queue of %s to be resumed — paused by %s: %s (%d ahead in the queue)", project, who, reason, fr.view.Waiting.Ahead)
			fr.view.NextActionText = fmt.Sprintf("Your request waits: the queue of %s is paused by %s: %s. It goes on when an operator resumes the queue.", project, who, reason)
		}
	}
	reply(w, 200, f.trainOf(project))
}

func (f *fakeAPI) resume(w http.ResponseWriter, r *http.Request) {
	project, _, ok := f.trainBody(w, r, false)
	if !ok {
		return
	}
	delete(f.paused, project)
	for _, op := range f.order {
		if fr := f.reqs[op]; fr.waitingIn(project) {
			fr.view.Waiting.WaitingFor = fmt.Sprintf("the next batch round of %s (%d ahead in the queue)", project, fr.view.Waiting.Ahead)
			fr.view.NextActionText = explain.NextActionText(fr.view.Status, state.Step(fr.view.Step.Code), fr.view.NextAction)
		}
	}
	reply(w, 200, f.trainOf(project))
}

func (f *fakeAPI) mergeNext(w http.ResponseWriter, r *http.Request) {
	_, who := identity(r)
	fr, ok := f.reqs[r.PathValue("id")]
	switch {
	case !ok:
		fail(w, 404, "NOT_FOUND", "No such request.")
		return
	case !fr.waitingIn(fr.view.Project):
		fail(w, 409, "CONFLICT", fmt.Sprintf("This request is not waiting for a car (it is %s): only a request in a project's waiting set can be sent into the next car.", fr.view.Status))
		return
	case fr.view.Waiting.NextBy != "":
		fail(w, 409, "CONFLICT", "This request was already sent into the next car of "+fr.view.Project+" by "+fr.view.Waiting.NextBy+".")
		return
	}
	f.nexts = append(f.nexts, fr.view.OperationID+" by "+who)
	f.audit = append(f.audit, map[string]any{"at": time.Now(), "actor": who, "action": "ops.requests.next",
		"params": map[string]any{"operationId": "form-" + strconv.Itoa(len(f.audit)), "request": fr.view.OperationID, "__authenticatedOperator": who}, "requestId": "fake"})
	now := time.Now()
	fr.move(fr.view.Status, state.Step(fr.view.Step.Code), now)
	fr.view.Timeline[len(fr.view.Timeline)-1].Note = "sent into the next car of " + fr.view.Project + " by " + who
	fr.view.Waiting.NextBy, fr.view.Waiting.Position, fr.view.Waiting.Ahead = who, 1, 0
	fr.view.Waiting.WaitingFor = "the next car of " + fr.view.Project + ", sent ahead of the queue by " + who
	reply(w, 200, fr.snapshot(now))
}

// seedTrain gives project a train of two cars in CI (alice's request in the second: car 2 of 2,
// an estimate) and two requests of bob waiting for a car.
func (f *fakeAPI) seedTrain(project string, at time.Time) (inCar string, waiting []string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var t config.Target
	for _, c := range f.cfg.Targets() {
		if c.Project == project && len(c.RuleCodes) == 0 {
			t = c
			break
		}
	}
	var cars []*api.BatchView
	for i, subject := range []string{"carol@example.com", "alice@example.com"} {
		fr := f.add(fmt.Sprintf("7a1b2c3d-0000-4000-8000-00000000000%d", i+1), subject, t, "on-call rotation", at)
		fr.enter("batch", at.Add(time.Minute))
		fr.move(state.StatusMRCreating, state.StepQueued, at.Add(time.Minute))
		b := f.addBatch(fr, "RUNNING", int64(70+i), int64(8900+i), at.Add(2*time.Minute), at.Add(2*time.Minute))
		b.Note = fmt.Sprintf("MR !%d carries 1 changes", 70+i)
		fr.enter("ci", at.Add(2*time.Minute))
		fr.move(state.StatusMRCreating, state.StepCreateStarted, at.Add(2*time.Minute))
		fr.view.Waiting = &api.Waiting{Stage: "ci", WaitingFor: fmt.Sprintf("the pipeline of merge request !%d to pass", 70+i), Since: at.Add(2 * time.Minute), BatchID: b.ID}
		cars = append(cars, b)
		inCar = fr.view.OperationID
	}
	merge := time.Now().Add(14 * time.Minute)
	v := f.reqs[inCar].view.Waiting
	v.Car = &api.Car{BatchID: cars[1].ID, Position: 2, Of: 2, Ahead: []api.CarAhead{{BatchID: cars[0].ID, MR: cars[0].MR, Pipeline: "running"}}}
	v.Estimate = &api.Estimate{MergeAt: &merge, Words: "about 14 min", Basis: "median of the last 8 pipelines of " + project + ": 9 min"}
	for i := range 2 {
		fr := f.add(fmt.Sprintf("7a1b2c3d-0000-4000-8000-00000000001%d", i), fmt.Sprintf("bob%d@example.com", i), t, "on-call rotation", at.Add(time.Duration(i)*time.Minute))
		fr.enter("batch", at.Add(3*time.Minute))
		fr.move(state.StatusMRCreating, state.StepQueued, at.Add(3*time.Minute))
		fr.view.Waiting = &api.Waiting{Stage: "batch", WaitingFor: fmt.Sprintf("the next batch round of %s (%d ahead in the queue)", project, i), Since: at.Add(3 * time.Minute),
			Position: i + 1, Ahead: i, Estimate: &api.Estimate{Words: "no estimate yet", Basis: "2 pipelines of " + project + " recorded so far; an estimate needs at least 3"}}
		waiting = append(waiting, fr.view.OperationID)
	}
	return inCar, waiting
}

// seedBisected gives targetKey's project a batch whose pipeline failed and which bisection
// settled: one member (culprit, bob's) failed alone in it, the other (alice's) was moved to a
// later batch and is in effect now. Returns the failed batch and the two operationIds.
func (f *fakeAPI) seedBisected(targetKey string, at time.Time) (failed int64, culprit, moved string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	t, _ := f.cfg.Target(targetKey)
	bad := f.add("3c2b1a09-8f7e-4d6c-9b5a-000000000001", "bob@example.com", t, "on-call rotation", at)
	bad.enter("batch", at.Add(time.Minute))
	bad.move(state.StatusMRCreating, state.StepQueued, at.Add(time.Minute))
	b := f.addBatch(bad, "FAILED", 80, 8950, at.Add(2*time.Minute), at.Add(30*time.Minute))
	bad.move(state.StatusCreateFailed, state.StepCreatePipelineFailed, at.Add(30*time.Minute))
	bad.view.NextAction = state.NextContactSupport
	b.Note = fmt.Sprintf("batch %d isolated the culprit %s after 1 bisection: pipeline 8950 failed", b.ID, bad.view.OperationID)
	b.Bisection = &api.BisectionView{Of: b.ID, Rounds: 1, Culprit: bad.view.OperationID}

	good := f.add("3c2b1a09-8f7e-4d6c-9b5a-000000000002", "alice@example.com", t, "on-call rotation", at)
	good.enter("batch", at.Add(time.Minute))
	good.move(state.StatusMRCreating, state.StepQueued, at.Add(time.Minute))
	later := f.addBatch(good, "SUCCEEDED", 81, 8951, at.Add(12*time.Minute), at.Add(25*time.Minute))
	later.Bisection = &api.BisectionView{Of: b.ID, Rounds: 1}
	good.move(state.StatusValidated, state.StepCalledBack, at.Add(25*time.Minute))
	good.view.NextAction, good.view.Waiting = state.NextNone, nil
	f.left[b.ID] = append(f.left[b.ID], good.view.OperationID)
	return b.ID, bad.view.OperationID, good.view.OperationID
}
