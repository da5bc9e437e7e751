package server

import (
	"net/http"
	"slices"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"bindery/api"
	"bindery/internal/platform/config"
	"bindery/internal/vocab/apperr"
	"bindery/internal/vocab/state"
	"bindery/store"
	"bindery/workflow"
)

// The ops console's API. Every handler here runs after the ops rule was checked.

// operatorParam is the reserved parameter that names who performed an ops action. The server
// writes it from the login identity after copying the client's parameters, so a client that
// sends it is overwritten, never believed (docs/api.md, 'Who may call').
const operatorParam = "__authenticatedOperator"

// opsParams binds an ops action's body: a JSON object of parameters whose "operationId" is the
// client's id of the action. The parameters are copied first, then the operator is written —
// never the reverse order.
func opsParams(r *http.Request) (map[string]any, string, error) {
	var client map[string]any
	if err := bindJSON(r, &client, false); err != nil {
		return nil, "", err
	}
	key, _ := client["operationId"].(string)
	if err := checkOperationID("operationId", key); err != nil {
		return nil, "", err
	}
	params := make(map[string]any, len(client)+1)
	for k, v := range client {
		params[k] = v
	}
	params[operatorParam] = infoOf(r).caller.ID
	return params, key, nil
}

// opsAction runs an audited, idempotent ops action.
func (s *Server) opsAction(w http.ResponseWriter, r *http.Request, action string, extra map[string]any, run func(operator string) (int, any, error)) (int, any, error) {
	return s.checkedOpsAction(w, r, action, extra, nil, run)
}

// checkedOpsAction is opsAction whose parameters check first refuses (400) before anything is
// recorded.
func (s *Server) checkedOpsAction(w http.ResponseWriter, r *http.Request, action string, extra map[string]any, check func(params map[string]any) error,
	run func(operator string) (int, any, error)) (int, any, error) {
	params, key, err := opsParams(r)
	if err != nil {
		return 0, nil, err
	}
	if check != nil {
		if err := check(params); err != nil {
			return 0, nil, err
		}
	}
	for k, v := range extra {
		params[k] = v
	}
	return s.idempotent(w, r, action, key, params, func() (int, any, error) {
		if err := s.audit(r, action, key, params); err != nil {
			return 0, nil, err
		}
		return run(params[operatorParam].(string))
	}, replayStored)
}

// opsRunRound is POST /api/ops/batches/run: one batch round now, the cron round's own code.
func (s *Server) opsRunRound(w http.ResponseWriter, r *http.Request) (int, any, error) {
	return s.opsAction(w, r, "ops.batches.run", nil, func(string) (int, any, error) {
		res, err := s.deps.Workflow.RunRound(r.Context())
		return http.StatusOK, res, err
	})
}

// opsSettle is POST /api/ops/batches/:id/settle.
func (s *Server) opsSettle(w http.ResponseWriter, r *http.Request) (int, any, error) {
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil || id <= 0 {
		return 0, nil, apperr.Invalid("id", "must be a batch id (a positive integer)")
	}
	return s.opsAction(w, r, "ops.batches.settle", map[string]any{"batchId": id}, func(op string) (int, any, error) {
		res, err := s.deps.Workflow.SettleBatch(r.Context(), id, op)
		return http.StatusOK, res, err
	})
}

// opsRetry is POST /api/ops/requests/:operationId/retry: re-run the request's current step, or confirm
// the deploy of a merged request whose deploy callback is overdue.
func (s *Server) opsRetry(w http.ResponseWriter, r *http.Request) (int, any, error) {
	id := r.PathValue("operationId")
	if err := checkOperationID("operationId", id); err != nil {
		return 0, nil, err
	}
	return s.opsAction(w, r, "ops.requests.retry", map[string]any{"request": id}, func(op string) (int, any, error) {
		res, err := s.deps.Workflow.Retry(r.Context(), id, op)
		return http.StatusAccepted, res, err
	})
}

// opsMergeNext is POST /api/ops/requests/:operationId/next: the request goes into the next car of
// its project, ahead of the waiting set.
func (s *Server) opsMergeNext(w http.ResponseWriter, r *http.Request) (int, any, error) {
	id := r.PathValue("operationId")
	if err := checkOperationID("operationId", id); err != nil {
		return 0, nil, err
	}
	return s.opsAction(w, r, "ops.requests.next", map[string]any{"request": id}, func(op string) (int, any, error) {
		res, err := s.deps.Workflow.MergeNext(r.Context(), id, op)
		return http.StatusOK, res, err
	})
}

// opsTrains is GET /api/ops/trains: each project's merge train.
func (s *Server) opsTrains(w http.ResponseWriter, r *http.Request) (int, any, error) {
	page, err := s.deps.Workflow.Trains(r.Context())
	if page.Items == nil {
		page.Items = []api.Train{}
	}
	return http.StatusOK, page, err
}

// Bounds of a pause's parameters (characters): a project path as GitLab allows it, and the reason
// every waiting requester reads (train_pause.reason).
const (
	maxProject     = 255
	maxPauseReason = 512
)

// projectParam is the project an action on a train names.
func projectParam(params map[string]any) (string, error) {
	v, present := params["project"]
	p, ok := v.(string)
	switch {
	case !present || v == nil:
		return "", apperr.Invalid("project", "is required (a GitLab project path, e.g. infra/access-config)")
	case !ok:
		return "", apperr.Invalid("project", "must be a string")
	case p == "":
		return "", apperr.Invalid("project", "is required (a GitLab project path, e.g. infra/access-config)")
	case utf8.RuneCountInString(p) > maxProject:
		return "", apperr.Invalid("project", "must be at most %d characters", maxProject)
	case strings.ContainsFunc(p, func(c rune) bool { return unicode.IsSpace(c) || unicode.IsControl(c) }):
		return "", apperr.Invalid("project", "must be a GitLab project path (no spaces or control characters)")
	}
	return p, nil
}

// pauseReason is a pause's reason: what every requester waiting for the project reads.
func pauseReason(params map[string]any) (string, error) {
	return requiredReason(params, "tell the waiting requesters why their queue is paused")
}

// requiredReason is an ops action's reason (at most maxPauseReason characters, no control
// characters but line breaks and tabs); why says what it is for when it is missing.
func requiredReason(params map[string]any, why string) (string, error) {
	v, present := params["reason"]
	reason, ok := v.(string)
	switch {
	case !present || v == nil:
		return "", apperr.Invalid("reason", "is required: %s", why)
	case !ok:
		return "", apperr.Invalid("reason", "must be a string")
	case utf8.RuneCountInString(reason) > maxPauseReason:
		return "", apperr.Invalid("reason", "must be at most %d characters", maxPauseReason)
	case strings.TrimSpace(reason) == "":
		return "", apperr.Invalid("reason", "is required: %s", why)
	case strings.ContainsFunc(reason, func(c rune) bool { return unicode.IsControl(c) && c != '\n' && c != '\r' && c != '\t' }):
		return "", apperr.Invalid("reason", "must not contain control characters (line breaks and tabs are fine)")
	}
	return strings.TrimSpace(reason), nil
}

// opsPause is POST /api/ops/trains/pause: a project's queue claims nothing and merges nothing
// until it is resumed; its waiting requesters read who paused it and why.
func (s *Server) opsPause(w http.ResponseWriter, r *http.Request) (int, any, error) {
	var project, reason string
	check := func(params map[string]any) (err error) {
		if project, err = projectParam(params); err != nil {
			return err
		}
		reason, err = pauseReason(params)
		return err
	}
	return s.checkedOpsAction(w, r, "ops.trains.pause", nil, check, func(op string) (int, any, error) {
		res, err := s.deps.Workflow.PauseTrain(r.Context(), project, reason, op)
		return http.StatusOK, res, err
	})
}

// opsResume is POST /api/ops/trains/resume: the project's queue runs again and its cars merge.
func (s *Server) opsResume(w http.ResponseWriter, r *http.Request) (int, any, error) {
	var project string
	check := func(params map[string]any) (err error) {
		project, err = projectParam(params)
		return err
	}
	return s.checkedOpsAction(w, r, "ops.trains.resume", nil, check, func(op string) (int, any, error) {
		res, err := s.deps.Workflow.ResumeTrain(r.Context(), project, op)
		return http.StatusOK, res, err
	})
}

// opsReconcile is POST /api/ops/reconcile: the reconciliation cron's run, now.
func (s *Server) opsReconcile(w http.ResponseWriter, r *http.Request) (int, any, error) {
	return s.opsAction(w, r, "ops.reconcile", nil, func(string) (int, any, error) {
		res, err := s.deps.Workflow.Reconcile(r.Context())
		return http.StatusOK, res, err
	})
}

// opsBatches is GET /api/ops/batches?cursor=&limit=.
func (s *Server) opsBatches(w http.ResponseWriter, r *http.Request) (int, any, error) {
	cursor, limit, wf, err := s.listQuery(r)
	if err != nil {
		return 0, nil, err
	}
	status := state.BatchStatus(strings.ToUpper(strings.TrimSpace(r.URL.Query().Get("status"))))
	if status != "" && !status.Known() {
		return 0, nil, apperr.Invalid("status", "is not a batch status (RUNNING, BLOCKED, SUCCEEDED, FAILED)")
	}
	page, err := wf.Batches(r.Context(), cursor, limit, status)
	if page.Items == nil {
		page.Items = []api.BatchView{}
	}
	return http.StatusOK, page, err
}

// opsStuck is GET /api/ops/requests?status=&step=&cursor=&limit=.
func (s *Server) opsStuck(w http.ResponseWriter, r *http.Request) (int, any, error) {
	cursor, limit, err := pageQuery(r)
	if err != nil {
		return 0, nil, err
	}
	f := workflow.StuckFilter{Cursor: cursor, Limit: limit}
	if v := strings.ToUpper(strings.TrimSpace(r.URL.Query().Get("status"))); v != "" {
		f.Status = state.BindingStatus(v)
		if !knownStatus(f.Status) {
			return 0, nil, apperr.Invalid("status", "is not a binding status")
		}
	}
	if v := strings.TrimSpace(r.URL.Query().Get("step")); v != "" {
		n, err := strconv.Atoi(v)
		if f.Step = state.Step(n); err != nil || !f.Step.Known() {
			return 0, nil, apperr.Invalid("step", "is not a step code")
		}
	}
	page, err := s.deps.Workflow.StuckRequests(r.Context(), f)
	if page.Items == nil {
		page.Items = []api.RequestSummary{}
	}
	return http.StatusOK, page, err
}

// opsAttention is GET /api/ops/attention: how many requests the stuck list holds, how many
// batches are BLOCKED and how many drift findings are open — what the navigation's count says on
// every page of an operator. Three bounded reads of the lists the console shows, so the count
// never disagrees with them.
func (s *Server) opsAttention(w http.ResponseWriter, r *http.Request) (int, any, error) {
	stuck, err := s.deps.Workflow.StuckRequests(r.Context(), workflow.StuckFilter{Limit: api.AttentionCap})
	if err != nil {
		return 0, nil, err
	}
	blocked, err := s.deps.Workflow.Batches(r.Context(), "", api.AttentionCap, state.BatchBlocked)
	if err != nil {
		return 0, nil, err
	}
	// A member of a BLOCKED batch is that batch's matter: one thing to clear, counted once.
	inBlocked := map[string]bool{}
	for _, b := range blocked.Items {
		for _, m := range b.Members {
			inBlocked[m.OperationID] = true
		}
	}
	requests := 0
	for _, it := range stuck.Items {
		if !inBlocked[it.OperationID] {
			requests++
		}
	}
	drift, err := s.deps.Workflow.OpenDrift(r.Context(), api.AttentionCap+1)
	if err != nil {
		return 0, nil, err
	}
	overdue, err := s.deps.Workflow.OverdueReviews(r.Context(), api.AttentionCap+1)
	if err != nil {
		return 0, nil, err
	}
	a := api.Attention{Requests: requests, BlockedBatches: len(blocked.Items), Drift: min(drift, api.AttentionCap), Reviews: min(overdue, api.AttentionCap),
		More: stuck.NextCursor != "" || blocked.NextCursor != "" || drift > api.AttentionCap || overdue > api.AttentionCap}
	a.Total = a.Requests + a.BlockedBatches + a.Drift + a.Reviews
	return http.StatusOK, a, nil
}

// driftID is a drift finding's id from the path.
func driftID(r *http.Request) (int64, error) {
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil || id <= 0 {
		return 0, apperr.Invalid("id", "must be a drift finding's id (a positive integer)")
	}
	return id, nil
}

// opsDriftAccept is POST /api/ops/drift/:id/accept: the repository wins (docs/drift.md, 'Repairs').
func (s *Server) opsDriftAccept(w http.ResponseWriter, r *http.Request) (int, any, error) {
	id, err := driftID(r)
	if err != nil {
		return 0, nil, err
	}
	return s.opsAction(w, r, "ops.drift.accept", map[string]any{"findingId": id}, func(op string) (int, any, error) {
		res, err := s.deps.Workflow.AcceptDrift(r.Context(), id, op)
		return http.StatusOK, res, err
	})
}

// opsDriftRestore is POST /api/ops/drift/:id/restore: bindery writes the file again, through a
// batch like any change (docs/drift.md, 'Repairs').
func (s *Server) opsDriftRestore(w http.ResponseWriter, r *http.Request) (int, any, error) {
	id, err := driftID(r)
	if err != nil {
		return 0, nil, err
	}
	return s.opsAction(w, r, "ops.drift.restore", map[string]any{"findingId": id}, func(op string) (int, any, error) {
		res, err := s.deps.Workflow.RestoreDrift(r.Context(), id, op)
		return http.StatusAccepted, res, err
	})
}

// opsDriftIgnore is POST /api/ops/drift/:id/ignore {operationId, reason}.
func (s *Server) opsDriftIgnore(w http.ResponseWriter, r *http.Request) (int, any, error) {
	id, err := driftID(r)
	if err != nil {
		return 0, nil, err
	}
	var reason string
	check := func(params map[string]any) (err error) {
		reason, err = requiredReason(params, "tell the other operators why this file may differ")
		return err
	}
	return s.checkedOpsAction(w, r, "ops.drift.ignore", map[string]any{"findingId": id}, check, func(op string) (int, any, error) {
		res, err := s.deps.Workflow.IgnoreDrift(r.Context(), id, reason, op)
		return http.StatusOK, res, err
	})
}

// opsImport is POST /api/ops/import {operationId, dryRun}: bindery import from the console.
func (s *Server) opsImport(w http.ResponseWriter, r *http.Request) (int, any, error) {
	dryRun := false
	check := func(params map[string]any) error {
		v, present := params["dryRun"]
		if !present {
			return nil
		}
		b, ok := v.(bool)
		if !ok {
			return apperr.Invalid("dryRun", "must be true or false")
		}
		dryRun = b
		return nil
	}
	return s.checkedOpsAction(w, r, "ops.import", nil, check, func(op string) (int, any, error) {
		res, err := s.deps.Workflow.ImportRepository(r.Context(), dryRun, op)
		return http.StatusOK, res, err
	})
}

// opsDrift is GET /api/ops/drift: the drift check's findings (docs/drift.md).
func (s *Server) opsDrift(w http.ResponseWriter, r *http.Request) (int, any, error) {
	list, err := s.deps.Workflow.DriftFindings(r.Context())
	return http.StatusOK, list, err
}

func knownStatus(st state.BindingStatus) bool {
	for _, s := range state.AllStatuses {
		if s == st {
			return true
		}
	}
	return false
}

// opsConfig shows the effective configuration (secrets redacted by the loader), which keys fell
// back to defaults, the last failed reload, the static keys waiting for a restart and the targets
// in use that left the catalog.
func (s *Server) opsConfig(w http.ResponseWriter, r *http.Request) (int, any, error) {
	snap := s.deps.Config.Current()
	v := api.ConfigView{
		Generation: snap.Generation, LoadedAt: snap.LoadedAt, Keys: s.inForce(snap.Report), Unknown: snap.Unknown,
		LastError: s.deps.Config.LastError(), PendingRestart: config.PendingRestart(s.started, snap), RemovedTargets: []api.TargetUse{},
	}
	removed, err := s.deps.Workflow.RemovedTargets(r.Context())
	if err != nil {
		return 0, nil, err
	}
	v.RemovedTargets = append(v.RemovedTargets, removed...)
	if v.Unknown == nil {
		v.Unknown = []string{}
	}
	if v.PendingRestart == nil {
		v.PendingRestart = []string{}
	}
	return http.StatusOK, v, nil
}

// inForce is the key report with server.addr as the process listens: the -addr flag overrides
// the key, and a port 0 is the one the system picked. The report is a copy; the snapshot's
// own stays as loaded.
func (s *Server) inForce(report []config.KeyReport) []config.KeyReport {
	if s.deps.ListenAddr == "" {
		return report
	}
	out := slices.Clone(report)
	for i, k := range out {
		if k.Key != "server.addr" {
			continue
		}
		switch {
		case s.deps.AddrFlag:
			out[i].Status = config.StatusFlag
			out[i].Note = "set by the -addr flag, which overrides server.addr (" + k.Effective + ")"
		case k.Effective != s.deps.ListenAddr:
			out[i].Note = "bound as " + s.deps.ListenAddr + " (server.addr says " + k.Effective + ")"
		}
		out[i].Effective = s.deps.ListenAddr
	}
	return out
}

// opsAudit is GET /api/ops/audit?cursor=&limit=, newest first.
func (s *Server) opsAudit(w http.ResponseWriter, r *http.Request) (int, any, error) {
	cursor, limit, err := pageQuery(r)
	if err != nil {
		return 0, nil, err
	}
	var before int64
	if cursor != "" {
		// Only the spelling this API returns: the document can then say what a cursor is.
		if before, err = strconv.ParseInt(cursor, 10, 64); err != nil || before <= 0 || strconv.FormatInt(before, 10) != cursor {
			return 0, nil, apperr.Invalid("cursor", "is not a cursor this API returned")
		}
	}
	entries, err := s.deps.DB.ListAudit(r.Context(), before, limit+1)
	if err != nil {
		return 0, nil, err
	}
	page := api.Page[store.AuditEntry]{Items: entries}
	if len(entries) > limit {
		page.Items = entries[:limit]
		page.NextCursor = strconv.FormatInt(entries[limit-1].ID, 10)
	}
	return http.StatusOK, page, nil
}
