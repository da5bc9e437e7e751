package workflow_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"

	"bindery/api"
	"bindery/internal/vocab/explain"
	"bindery/internal/vocab/state"
	"bindery/store"
	"bindery/store/storetest"
)

// The deploy callback of a project's last merged MR is lost: reconciliation has no later
// callback to infer from, so nothing but an operator validates the request (docs/workflow.md,
// 'Nothing is lost': every request ends terminal or visible and resolvable). Once
// reconcile.deployOverdue passed, it is in the ops stuck list and its view says the deploy is
// overdue; the ops retry confirms the deploy.

// lostDeploys is the batch path with every deploy callback dropped by the simulator.
func lostDeploys(overdue string) string {
	return strings.Replace(fastSims, "    delay: 0s\n", "    delay: 0s\n    dropRate: 1\n", 1) +
		"reconcile:\n  minAge: 1ms\n  deployOverdue: " + overdue + "\n"
}

// mergedBatch applies for db-read as each user, approved, and runs rounds until all are MERGED
// (one batch, one MR when the users are few).
func (h *harness) mergedBatch(users ...string) []string {
	h.t.Helper()
	var ops []string
	for _, u := range users {
		ops = append(ops, h.approved(u, "db-read")...)
	}
	h.roundUntil("the batch merged", func() bool {
		for _, op := range ops {
			if h.view(op).Status != state.StatusMerged {
				return false
			}
		}
		return true
	})
	return ops
}

// stuckList is the ops stuck list as the console asks for it (no filter).
func (h *harness) stuckList() map[string]api.RequestSummary {
	h.t.Helper()
	var page api.Page[api.RequestSummary]
	if code := h.api("GET", "/api/ops/requests?limit=100", "ops", "", &page); code != 200 {
		h.t.Fatalf("stuck list: %d", code)
	}
	out := map[string]api.RequestSummary{}
	for _, s := range page.Items {
		out[s.OperationID] = s
	}
	return out
}

// validatedCount is the validated metric of the project summed over every path.
func (h *harness) validatedCount() int {
	total := 0
	for _, via := range []string{"callback", "reconcile", "operator"} {
		var n int
		fmt.Sscan(h.metric(`bindery_requests_validated_total{via="`+via+`",project="`+project+`"}`), &n)
		total += n
	}
	return total
}

func TestAMergedRequestWhoseDeployCallbackIsOverdueIsListedAndConfirmedByAnOperator(t *testing.T) {
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		h := setup(t, db, options{approvalFirst: true, realBatch: true, extra: lostDeploys("1h")})
		ops := h.mergedBatch("alice", "bob")
		if res, err := h.wf.Reconcile(bg); err != nil || res.Validated != 0 {
			t.Fatalf("reconcile without a later callback: %+v %v", res, err)
		}

		// Not overdue yet: an ordinary wait, not listed, and the retry keeps refusing.
		if _, listed := h.stuckList()[ops[0]]; listed {
			t.Fatal("listed as stuck before its deploy is overdue")
		}
		v := h.view(ops[0])
		if v.NextAction != state.NextWait || v.Waiting == nil || strings.Contains(v.Waiting.WaitingFor, "overdue") {
			t.Fatalf("before overdue: %s %+v", v.NextAction, v.Waiting)
		}
		var e struct{ Code, Message string }
		if code := h.api("POST", "/api/ops/requests/"+ops[0]+"/retry", "ops", `{"operationId":"early-retry"}`, &e); code != 409 ||
			!strings.Contains(e.Message, "merged and waiting for the deploy pipeline; reconciliation validates it") {
			t.Fatalf("retry before overdue: %d %+v", code, e)
		}

		h.reconfigure(true, lostDeploys("1s"))
		h.waitFor("both listed as stuck", func() bool { l := h.stuckList(); _, a := l[ops[0]]; _, b := l[ops[1]]; return a && b })
		for id, s := range h.stuckList() {
			if s.Status == state.StatusMerged && s.NextAction != state.NextWaitManual {
				t.Fatalf("%s listed with next action %s", id, s.NextAction)
			}
		}
		v = h.view(ops[0]) // an operator reads what to do; its requester that operators were alerted
		var mine api.RequestView
		if code := h.api("GET", "/api/requests/"+ops[0], "alice", "", &mine); code != 200 ||
			mine.NextActionText != explain.Sentence(state.StatusMerged, state.StepHandleMerged, state.NextWaitManual).Requester ||
			!strings.Contains(mine.NextActionText, "Operators have been alerted") {
			t.Fatalf("its requester reads %d %q", code, mine.NextActionText)
		}
		if v.Status != state.StatusMerged || v.NextAction != state.NextWaitManual || !strings.Contains(v.NextActionText, "check the project's deploy pipeline") ||
			!strings.Contains(v.NextActionText, "confirm the deploy") || v.Waiting == nil ||
			!strings.Contains(v.Waiting.WaitingFor, "overdue") || v.Waiting.Stage != "deploy" ||
			!strings.Contains(v.Waiting.WaitingFor, "no deploy of "+project+" has been reported to bindery yet") {
			t.Fatalf("overdue view: %s %q %+v", v.NextAction, v.NextActionText, v.Waiting)
		}
		// The batch list (one database clock read for the page) shows the members as the view does.
		var batches api.Page[api.BatchView]
		if code := h.api("GET", "/api/ops/batches", "ops", "", &batches); code != 200 || len(batches.Items) == 0 || len(batches.Items[0].Members) == 0 {
			t.Fatalf("batch list: %d %+v", code, batches)
		}
		for _, m := range batches.Items[0].Members {
			if m.Status == state.StatusMerged && m.NextAction != state.NextWaitManual {
				t.Fatalf("batch member %s listed with next action %s", m.OperationID, m.NextAction)
			}
		}
		// A resend of bob's application whose idempotency record is gone answers as the view does.
		if _, err := db.Raw().ExecContext(bg, "DELETE FROM idempotency_record WHERE idem_key = ?", ops[1]); err != nil {
			t.Fatal(err)
		}
		var res api.ApplyResult
		body := fmt.Sprintf(`{"operationId":%q,"targetKey":"db-read","reason":"for the test"}`, ops[1])
		if code := h.api("POST", "/api/apply", "bob", body, &res); code != 202 || res.Code != api.CodeDuplicateSubmit || res.NextAction != state.NextWaitManual {
			t.Fatalf("resend of an overdue request: %d %+v", code, res)
		}

		if code := h.api("POST", "/api/ops/requests/"+ops[0]+"/retry", "ops", `{"operationId":"confirm-1"}`, &v); code != 202 {
			t.Fatalf("retry of an overdue deploy: %d", code)
		}
		if v.Status != state.StatusValidated || v.Step.Code != int(state.StepCalledBack) || v.NextAction != state.NextNone {
			t.Fatalf("after the confirmation: %s/%s/%s", v.Status, v.Step.Name, v.NextAction)
		}
		if last := v.Timeline[len(v.Timeline)-1]; !strings.HasPrefix(last.Note, "Deploy confirmed by ") {
			t.Fatalf("timeline ends with %+v", last)
		}
		if v.ExpiresAt == nil {
			t.Fatal("no expiry after validation (db-read has a ttl)")
		}
		if got := h.metric(`bindery_requests_validated_total{via="operator",project="` + project + `"}`); got != "1" {
			t.Fatalf("operator-validated metric %q", got)
		}
		if got := h.validatedLines(ops[0]); len(got) != 1 {
			t.Fatalf("validated logged %d times: %q", len(got), got)
		}
		var audit api.Page[store.AuditEntry]
		h.api("GET", "/api/ops/audit?limit=10", "ops", "", &audit)
		if !auditHas(audit.Items, "ops.requests.retry", ops[0]) {
			t.Fatalf("the confirmation is not audited: %+v", audit.Items)
		}

		// Once validated, a second retry has nothing to do; the other request still waits.
		if code := h.api("POST", "/api/ops/requests/"+ops[0]+"/retry", "ops", `{"operationId":"confirm-2"}`, &e); code != 409 {
			t.Fatalf("second retry: %d %+v", code, e)
		}
		l := h.stuckList()
		if _, listed := l[ops[0]]; listed {
			t.Fatal("still listed after the confirmation")
		}
		if _, listed := l[ops[1]]; !listed || h.view(ops[1]).Status != state.StatusMerged {
			t.Fatal("the other request was not left to its own confirmation")
		}
		if n := h.validatedCount(); n != 1 {
			t.Fatalf("validated counted %d times", n)
		}
	})
}

func auditHas(entries []store.AuditEntry, action, request string) bool {
	for _, e := range entries {
		var p map[string]any
		if e.Action == action && json.Unmarshal(e.Params, &p) == nil && p["request"] == request {
			return true
		}
	}
	return false
}

// The deploy callback arrives while operators confirm the same requests: each is validated
// once, counted once and logged once, whoever wins.
func TestAnOverdueDeployConfirmedWhileItsCallbackArrivesValidatesOnce(t *testing.T) {
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		h := setup(t, db, options{approvalFirst: true, realBatch: true, extra: lostDeploys("1ms")})
		ops := h.mergedBatch("alice", "bob", "carol@example.com", "dave@example.com")
		mr := h.view(ops[0]).MR
		if mr == nil {
			t.Fatal("no MR")
		}
		h.waitFor("all listed as stuck", func() bool { return len(h.stuckList()) == len(ops) })
		var wg sync.WaitGroup
		codes := make([]int, len(ops))
		for i, op := range ops {
			wg.Add(1)
			go func() { defer wg.Done(); codes[i] = h.retry(op) }()
		}
		wg.Add(2)
		go func() { defer wg.Done(); h.deploy(api.DeployCallback{Project: project, MRIID: mr.ID}) }()
		go func() {
			defer wg.Done()
			if _, err := h.wf.Reconcile(bg); err != nil {
				t.Error(err)
			}
		}()
		wg.Wait()
		for i, op := range ops {
			// 202: confirmed or found validated; 409: validated before the retry read it.
			if codes[i] != 202 && codes[i] != 409 {
				t.Errorf("retry of %s: %d", op, codes[i])
			}
			if v := h.view(op); v.Status != state.StatusValidated {
				t.Fatalf("%s: %s", op, v.Status)
			}
			if got := h.validatedLines(op); len(got) != 1 {
				t.Fatalf("%s validated logged %d times: %q", op, len(got), got)
			}
		}
		if n := h.validatedCount(); n != len(ops) {
			t.Fatalf("validated counted %d times for %d requests", n, len(ops))
		}
		if n := len(h.stuckList()); n != 0 {
			t.Fatalf("%d still listed as stuck", n)
		}
	})
}

// A deploy callback is not believed blindly, token or not: an MR bindery never opened (naming a
// request merged in another MR, or none), or a project outside the catalog, is 422 and changes
// nothing — no request validated, no watermark raised, so reconciliation infers nothing from it
// either — and operators find it in the audit log; a callback of the right MR naming a request of
// another MR validates what is its own and reports the rest.
func TestADeployCallbackIsBelievedOnlyForWhatBinderyKnows(t *testing.T) {
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		h := setup(t, db, options{approvalFirst: true, realBatch: true, extra: lostDeploys("1h")})
		first := h.mergedBatch("alice")
		iid := h.view(first[0]).MR.ID
		for _, cb := range []api.DeployCallback{
			{Project: project, MRIID: 424242, OperationIDs: first},
			{Project: project, MRIID: 999999},
			{Project: "somebody/else", MRIID: iid},
		} {
			body, _ := json.Marshal(cb)
			if code, answer := h.hook("/hooks/deploy", body, map[string]string{"Authorization": "Bearer test-deploy-token"}); code != 422 || answer != "CALLBACK_REFUSED" {
				t.Fatalf("%+v: %d %s", cb, code, answer)
			}
		}
		if n := h.count("SELECT COUNT(*) FROM deploy_callback"); n != 0 {
			t.Fatalf("%d unverified callbacks were recorded", n)
		}
		if n := h.count("SELECT COUNT(*) FROM audit_log WHERE action = 'hook.deploy.refused'"); n != 3 {
			t.Fatalf("%d refused callbacks in the audit log, want 3", n)
		}
		// A later batch merges; reconciliation has nothing verified to infer from.
		second := h.mergedBatch("bob")
		if res, err := h.wf.Reconcile(bg); err != nil || res.Validated != 0 {
			t.Fatalf("reconciliation inferred from refused callbacks: %+v %v", res, err)
		}
		// The second MR's callback naming the first MR's request: its own is not named, the
		// other is refused; then without ids, its own request is validated.
		body, _ := json.Marshal(api.DeployCallback{Project: project, MRIID: h.view(second[0]).MR.ID, OperationIDs: first})
		var res api.CallbackResult
		if code, _ := h.hookJSON("/hooks/deploy", body, map[string]string{"Authorization": "Bearer test-deploy-token"}, &res); code != 200 || len(res.Refused) != 1 || res.Refused[0] != first[0] {
			t.Fatalf("a callback naming another MR's request: %d %+v", code, res)
		}
		if v := h.view(first[0]); v.Status != state.StatusMerged {
			t.Fatalf("the other MR's request was validated: %s", v.Status)
		}
		body, _ = json.Marshal(api.DeployCallback{Project: project, MRIID: h.view(second[0]).MR.ID})
		if code, answer := h.hook("/hooks/deploy", body, map[string]string{"Authorization": "Bearer test-deploy-token"}); code != 200 || answer != api.CallbackAccepted {
			t.Fatalf("the genuine callback: %d %s", code, answer)
		}
		if v := h.view(second[0]); v.Status != state.StatusValidated {
			t.Fatalf("its own request: %s", v.Status)
		}
	})
}
