package server

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"unicode"
	"unicode/utf8"

	"bindery/api"
	"bindery/internal/platform/identity"
	"bindery/internal/vocab/apperr"
	"bindery/internal/vocab/explain"
	"bindery/internal/vocab/state"
	"bindery/store"
	"bindery/workflow"
)

// The requester's API. Every handler here runs after authentication: infoOf(r).caller is set.

// maxReason bounds an application's reason (characters).
const maxReason = 1000

// checkReason bounds the reason of an application or a revocation. It is shown to approvers,
// written into the repository file and the audit log: a NUL or a terminal escape sequence there
// is never what a person meant to write, so control characters other than line breaks and tabs
// are refused.
func checkReason(reason string) error {
	switch {
	case utf8.RuneCountInString(reason) > maxReason:
		return apperr.Invalid("reason", "must be at most %d characters", maxReason)
	case strings.ContainsFunc(reason, func(r rune) bool { return unicode.IsControl(r) && r != '\n' && r != '\r' && r != '\t' }):
		return apperr.Invalid("reason", "must not contain control characters (line breaks and tabs are fine)")
	}
	return nil
}

// apply is POST /api/apply. The synchronous checks run in the order of docs/workflow.md, 'Applying'
// — arguments, target, (the target's permission), access mode, idempotency — and then the workflow
// writes the first state and answers 202 at once.
func (s *Server) apply(w http.ResponseWriter, r *http.Request) (int, any, error) {
	var b api.ApplyRequest
	if err := bindJSON(r, &b, true); err != nil {
		return 0, nil, err
	}
	b.TargetKey, b.Reason = strings.TrimSpace(b.TargetKey), strings.TrimSpace(b.Reason)
	if err := checkOperationID("operationId", b.OperationID); err != nil {
		return 0, nil, err
	}
	switch {
	case b.TargetKey == "":
		return 0, nil, apperr.Invalid("targetKey", "is required")
	case b.Reason == "":
		return 0, nil, apperr.Invalid("reason", "is required: tell the approvers why you need it")
	}
	if err := checkReason(b.Reason); err != nil {
		return 0, nil, err
	}
	snap := s.deps.Config.Current()
	target, ok := snap.Target(b.TargetKey)
	if !ok {
		return 0, nil, apperr.Invalid("targetKey", "is not in the catalog")
	}
	caller := infoOf(r).caller
	// A restricted target: any of its rule codes, or the ops rule, in one round trip.
	if len(target.RuleCodes) > 0 && !s.permit(r.Context(), caller, s.orOps(caller, target.RuleCodes)...) {
		return 0, nil, apperr.Denied(errors.New("target rule codes not held"))
	}
	wf := s.deps.Workflow
	if !snap.ApplyOpen(s.now()) {
		// A resend of an application accepted while the window was open (its 202 was lost) is
		// not a new application: it gets its own answer, DUPLICATE_SUBMIT, not APPLY_CLOSED.
		status, res, ok, err := s.resentApplication(r.Context(), b, caller.ID)
		if err != nil || ok {
			return status, res, err
		}
		return 0, nil, apperr.New(apperr.ApplyClosed, "Applications are closed right now (access mode %s).", snap.ApplyMode())
	}
	// One commit per application: its idempotency record and answer go into its transaction.
	return s.answeredOnce(r, "apply", b.OperationID, b, http.StatusAccepted, func(rec store.Answer) (any, error) {
		res, err := wf.Apply(r.Context(), workflow.ApplyInput{ApplyRequest: b, Subject: caller.ID,
			Idempotency: &rec})
		if err != nil {
			return nil, err
		}
		if res.Code == "" {
			res.Code = api.CodeAccepted
		}
		return res, nil
	}, s.replayApply)
}

// resentApplication is the stored answer of an application already accepted under b's
// operationId — the same payload from the same caller, not expired (idempotency.ttl) — replayed
// as DUPLICATE_SUBMIT. ok false: a new application. A database that does not answer is an
// error (503, try again), never "a new application" refused for good.
func (s *Server) resentApplication(ctx context.Context, b api.ApplyRequest, caller string) (int, any, bool, error) {
	rec, err := s.deps.DB.IdempotencyRecord(ctx, "apply", b.OperationID)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return 0, nil, false, nil
	case err != nil:
		return 0, nil, false, err
	case rec.Status == 0 || rec.PayloadHash != payloadHash("apply", caller, b) || !s.now().Before(rec.ExpiresAt):
		return 0, nil, false, nil
	}
	status, res, err := s.replayApply(ctx, rec)
	return status, res, err == nil, err
}

// replayApply answers a repeated application: the same 202, coded DUPLICATE_SUBMIT (the SPA
// keeps its form locked), with the original operationId and the request's current status.
func (s *Server) replayApply(ctx context.Context, rec store.IdempotencyRecord) (int, any, error) {
	var res api.ApplyResult
	if err := json.Unmarshal(rec.Answer, &res); err != nil {
		return 0, nil, err
	}
	res.Code = api.CodeDuplicateSubmit
	if v, err := s.deps.Workflow.Request(ctx, res.OperationID); err == nil {
		res.Status, res.NextAction = v.Status, v.NextAction
	}
	return http.StatusAccepted, res, nil
}

// ownedRequest loads a request and checks that the caller owns it or is an operator (the
// authorization of the owner-checked routes). Someone else's request is answered like an unknown
// one: 404, the same words.
func (s *Server) ownedRequest(r *http.Request) (api.RequestView, error) {
	id := r.PathValue("operationId")
	if err := checkOperationID("operationId", id); err != nil {
		return api.RequestView{}, err
	}
	v, err := s.deps.Workflow.Request(r.Context(), id)
	if err != nil {
		return api.RequestView{}, err
	}
	// The owner reads the requester's view; an operator (asked only for someone else's request,
	// so that a requester's page costs no permission check) also reads the recorded causes.
	if caller := infoOf(r).caller; v.Subject != caller.ID {
		ops, err := s.operator(r.Context(), caller)
		if err != nil {
			// Not "not found": an operator would read that their request is gone. Nothing of it
			// is shown either.
			return api.RequestView{}, apperr.Wrap(err, apperr.Unavailable, "The permission check did not answer in time; try again in a moment.")
		}
		if !ops {
			return api.RequestView{}, apperr.Wrap(errors.New("neither the owner nor an operator"), apperr.NotFound, "No such request.")
		}
		v = v.ForOperator()
	}
	if v.NextActionText == "" {
		v.NextActionText = explain.NextActionText(v.Status, state.Step(v.Step.Code), v.NextAction)
	}
	return v, nil
}

// request is GET /api/requests/:operationId (owner or ops).
func (s *Server) request(w http.ResponseWriter, r *http.Request) (int, any, error) {
	return http.StatusOK, infoOf(r).owned, nil
}

// revoke is POST /api/requests/:operationId/revoke (owner or ops): starts the close phase of a
// VALIDATED request; 409 otherwise.
func (s *Server) revoke(w http.ResponseWriter, r *http.Request) (int, any, error) {
	return s.ownerAction(w, r, "revoke", func(v *api.RequestView) error {
		if v.Status != state.StatusValidated {
			return apperr.New(apperr.Conflict, "Only a request in effect (VALIDATED) can be revoked; this one is %s.", v.Status)
		}
		return nil
	}, func(ctx context.Context, id, actor, _ string) (api.RequestView, error) {
		return s.deps.Workflow.Revoke(ctx, id, actor)
	})
}

// renew is POST /api/requests/:operationId/renew (owner or ops): renews a binding in effect
// (docs/workflow.md, 'Expiry, reminders and renewal'); 409 when it is not in effect with an
// expiry, when the target's maxTtl leaves no room, or while another renewal waits for its
// decision.
func (s *Server) renew(w http.ResponseWriter, r *http.Request) (int, any, error) {
	return s.ownerAction(w, r, "renew", func(v *api.RequestView) error {
		if v.Status != state.StatusValidated {
			return apperr.New(apperr.Conflict, "%s", explain.NotRenewable)
		}
		return nil
	}, s.deps.Workflow.Renew)
}

// withdraw is POST /api/requests/:operationId/withdraw (owner or ops): closes a request that
// failed on its way to being in effect, so that its requester can apply again; 409 otherwise.
// Withdrawing a withdrawn request answers its view again.
func (s *Server) withdraw(w http.ResponseWriter, r *http.Request) (int, any, error) {
	return s.ownerAction(w, r, "withdraw", func(v *api.RequestView) error {
		withdrawn := v.Status == state.StatusClosed && v.Step.Code == int(state.StepWithdrawn)
		if !v.Withdrawable && !withdrawn {
			return apperr.New(apperr.Conflict, "Only a request that failed can be withdrawn; this one is %s.", v.Status)
		}
		return nil
	}, func(ctx context.Context, id, actor, _ string) (api.RequestView, error) {
		return s.deps.Workflow.Withdraw(ctx, id, actor)
	})
}

// ownerAction runs an owner-checked action on a request (revoke, withdraw, renew): its body is the
// action's own id and an optional reason; at most once per id (idempotent, the answer replayed);
// refused says why the request's state does not allow it (before anything is audited); the
// action is audited as scope, then run by the caller's identity.
func (s *Server) ownerAction(w http.ResponseWriter, r *http.Request, scope string, refused func(*api.RequestView) error,
	run func(ctx context.Context, operationID, actor, actionID string) (api.RequestView, error)) (int, any, error) {
	var b api.RevokeRequest
	if err := bindJSON(r, &b, true); err != nil {
		return 0, nil, err
	}
	if err := checkOperationID("operationId", b.OperationID); err != nil {
		return 0, nil, err
	}
	if err := checkReason(b.Reason); err != nil {
		return 0, nil, err
	}
	v := infoOf(r).owned
	params := map[string]any{"request": v.OperationID, "reason": b.Reason, operatorParam: infoOf(r).caller.ID}
	return s.idempotent(w, r, scope, b.OperationID, params, func() (int, any, error) {
		if err := refused(v); err != nil {
			return 0, nil, err
		}
		if err := s.audit(r, scope, b.OperationID, params); err != nil {
			return 0, nil, err
		}
		out, err := run(r.Context(), v.OperationID, infoOf(r).caller.ID, b.OperationID)
		return http.StatusAccepted, out, err
	}, replayStored)
}

// myRequests is GET /api/my/requests?cursor=&limit=: the caller's requests, newest first.
func (s *Server) myRequests(w http.ResponseWriter, r *http.Request) (int, any, error) {
	cursor, limit, wf, err := s.listQuery(r)
	if err != nil {
		return 0, nil, err
	}
	page, err := wf.MyRequests(r.Context(), infoOf(r).caller.ID, cursor, limit)
	if page.Items == nil {
		page.Items = []api.RequestSummary{}
	}
	return http.StatusOK, page, err
}

// listQuery reads a list's paging; it returns the workflow that answers the list.
func (s *Server) listQuery(r *http.Request) (string, int, Workflow, error) {
	cursor, limit, err := pageQuery(r)
	return cursor, limit, s.deps.Workflow, err
}

// maxOwnPages bounds how many pages of the caller's requests the catalog reads (newest first).
const maxOwnPages = 5

// targets is GET /api/targets: the catalog in force, as it stands for the caller.
func (s *Server) targets(w http.ResponseWriter, r *http.Request) (int, any, error) {
	caller := infoOf(r).caller
	snap := s.deps.Config.Current()
	yours, err := s.ownRequests(r.Context(), caller.ID)
	if err != nil {
		return 0, nil, err
	}
	items := []api.Target{}
	for _, t := range snap.Targets() {
		codes := t.RuleCodes
		if codes == nil {
			codes = []string{}
		}
		may := len(codes) == 0 || s.permit(r.Context(), caller, s.orOps(caller, codes)...)
		items = append(items, api.Target{Key: t.Key, Title: t.Title, Project: t.Project, RuleCodes: codes, TTL: api.ShortDuration(t.TTL), MayApply: may, Yours: yours[t.Key]})
	}
	return http.StatusOK, map[string]any{"items": items}, nil
}

// ownRequests is the caller's current request per target: the newest request of a target is
// the one its binding row follows (a new application reuses the row), so older ones are history.
func (s *Server) ownRequests(ctx context.Context, subject string) (map[string]*api.TargetYours, error) {
	out := map[string]*api.TargetYours{}
	wf := s.deps.Workflow
	seen := map[string]bool{}
	cursor := ""
	for range maxOwnPages {
		page, err := wf.MyRequests(ctx, subject, cursor, 100)
		if err != nil {
			return nil, err
		}
		for _, it := range page.Items {
			if seen[it.TargetKey] {
				continue
			}
			seen[it.TargetKey] = true
			switch {
			case it.Status == state.StatusValidated:
				out[it.TargetKey] = &api.TargetYours{State: "IN_EFFECT", OperationID: it.OperationID, Status: it.Status}
			case !it.Status.Reappliable():
				out[it.TargetKey] = &api.TargetYours{State: "IN_FLIGHT", OperationID: it.OperationID, Status: it.Status}
			}
		}
		if cursor = page.NextCursor; cursor == "" {
			break
		}
	}
	return out, nil
}

// preview is GET /api/preview?target=K. It never blocks applying: any failure is 200 {}.
func (s *Server) preview(w http.ResponseWriter, r *http.Request) (int, any, error) {
	key := r.URL.Query().Get("target")
	if _, ok := s.deps.Config.Current().Target(key); !ok {
		return http.StatusOK, api.Preview{}, nil
	}
	p, err := s.deps.Workflow.Preview(r.Context(), key, infoOf(r).caller.ID)
	if err != nil {
		s.deps.Log.WarnContext(r.Context(), "preview failed; answering empty", "target", key, "err", err)
		return http.StatusOK, api.Preview{}, nil
	}
	return http.StatusOK, p, nil
}

// me is GET /api/me: who the caller is and whether the ops console is theirs.
func (s *Server) me(w http.ResponseWriter, r *http.Request) (int, any, error) {
	c := infoOf(r).caller
	v := api.Me{Identity: c.ID, DisplayName: c.Name, Ops: s.isOperator(r.Context(), c), Demo: s.deps.Demo, SignOut: c.From == identity.FromSession}
	if s.deps.Demo && s.deps.Config.Current().OIDCIssuer() == "" {
		v.DemoUsers = identity.DemoUserNames()
	}
	return http.StatusOK, v, nil
}
