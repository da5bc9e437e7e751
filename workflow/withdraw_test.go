package workflow_test

import (
	"fmt"
	"strings"
	"testing"

	"bindery/api"
	"bindery/internal/sim"
	"bindery/internal/vocab/state"
	"bindery/store"
	"bindery/store/storetest"
)

// yours is the caller's request of target as the apply form's catalog shows it ("" : none).
func (h *harness) yours(user, target string) string {
	h.t.Helper()
	var cat struct {
		Items []struct {
			Key   string
			Yours *struct{ State, OperationID string }
		}
	}
	if code := h.api("GET", "/api/targets", user, "", &cat); code != 200 {
		h.t.Fatalf("targets: %d", code)
	}
	for _, it := range cat.Items {
		if it.Key == target && it.Yours != nil {
			return it.Yours.State + " " + it.Yours.OperationID
		}
	}
	return ""
}

// A failed request is no dead end. A batch that isolated a change as the one that makes the
// pipeline fail leaves its requester words that say so — with the failed job — and both ways
// out: withdraw and apply again, or ask where support.contact says. Operators read retry and
// withdraw, never "contact support". The owner withdraws it (a stranger cannot; a second
// withdrawal changes nothing): it is CLOSED through the transition table, in no batch and
// without work, audited; the apply form no longer holds the target, and applying again works.
func TestAFailedRequestIsWithdrawnAndAppliedForAgain(t *testing.T) {
	extra := strings.Replace(fastSims, "    approvalsRequired: 2\n", "    approvalsRequired: 2\n    pipelineFailOn: [bindings/t2/]\n", 1) +
		"support:\n  contact: https://chat.example/bindery-help\n" + `targets:
  - {key: t1, title: T1, project: infra/access-config, path: "bindings/t1/{subject}.yaml"}
  - {key: t2, title: T2, project: infra/access-config, path: "bindings/t2/{subject}.yaml"}
`
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		h := setup(t, db, options{approvalFirst: true, realBatch: true, extra: extra})
		ops := append(h.approved("alice", "t1"), h.approved("alice", "t2")...)
		bad := ops[1]
		h.roundUntil("both settled", func() bool {
			return h.view(ops[0]).Status == state.StatusValidated && h.view(bad).Status.Failed()
		})
		var v api.RequestView
		h.api("GET", "/api/requests/"+bad, "alice", "", &v)
		wantState(t, v, state.StatusCreateFailed, state.StepCreatePipelineFailed, state.NextContactSupport)
		if !v.Withdrawable || v.FailedJob == nil || v.Pipeline == nil || v.BatchID == 0 {
			t.Fatalf("withdrawable %t, failed job %+v, pipeline %+v, batch %d", v.Withdrawable, v.FailedJob, v.Pipeline, v.BatchID)
		}
		want := fmt.Sprintf("Your change made the pipeline fail: batch %d isolated this request as the change that fails, after 1 bisection; pipeline %d: %s (failed job: test #%d). "+
			"Waiting will not fix it. You can withdraw this request and apply again, or ask the maintainers: https://chat.example/bindery-help.",
			v.BatchID, v.Pipeline.ID, v.Pipeline.URL, v.FailedJob.ID)
		if v.NextActionText != want {
			t.Fatalf("the requester reads\n%q\nwant\n%q", v.NextActionText, want)
		}
		ops2 := h.view(bad) // an operator's view
		if txt := ops2.NextActionText; strings.Contains(strings.ToLower(txt), "contact") || !strings.Contains(txt, "retry") || !strings.Contains(txt, "withdraw it") {
			t.Fatalf("the operator reads %q", txt)
		}
		if got := h.yours("alice", "t2"); got != "IN_FLIGHT "+bad {
			t.Fatalf("the apply form holds %q", got)
		}
		var e struct{ Code, Message string }
		if code := h.api("POST", "/api/apply", "alice", `{"operationId":"again-0","targetKey":"t2","reason":"again"}`, &e); code != 409 || e.Code != "APPLY_IN_PROGRESS" {
			t.Fatalf("applying over a failed request: %d %+v", code, e)
		}

		if code := h.api("POST", "/api/requests/"+bad+"/withdraw", "bob", `{"operationId":"wd-bob"}`, nil); code != 404 {
			t.Fatalf("a stranger's withdrawal: %d", code)
		}
		if code := h.api("POST", "/api/requests/"+ops[0]+"/withdraw", "alice", `{"operationId":"wd-ok"}`, &e); code != 409 || e.Code != "CONFLICT" {
			t.Fatalf("withdrawing a request in effect: %d %+v", code, e)
		}
		v = api.RequestView{}
		if code := h.api("POST", "/api/requests/"+bad+"/withdraw", "alice", `{"operationId":"wd-1","reason":"fixing my change"}`, &v); code != 202 {
			t.Fatalf("withdraw: %d %+v", code, v)
		}
		wantState(t, v, state.StatusClosed, state.StepWithdrawn, state.NextReapply)
		if v.Withdrawable || v.NextActionText != "Withdrawn by alice@example.com after it failed: nothing of it is in effect. You can apply again." {
			t.Fatalf("withdrawn: %t %q", v.Withdrawable, v.NextActionText)
		}
		if code := h.api("POST", "/api/requests/"+bad+"/withdraw", "alice", `{"operationId":"wd-2"}`, &v); code != 202 || v.Step.Code != int(state.StepWithdrawn) {
			t.Fatalf("withdrawing again: %d %s", code, v.Step.Name)
		}
		if n := count(t, db, "SELECT COUNT(*) FROM operation_step WHERE operation_id = ? AND step = ?", bad, state.StepWithdrawn); n != 1 {
			t.Fatalf("%d withdrawals recorded", n)
		}
		if _, ok := h.task(bad); ok {
			t.Fatal("a withdrawn request has work")
		}
		if n := count(t, db, "SELECT COUNT(*) FROM merge_batch_request WHERE operation_id = ? AND batch_id IS NULL", bad); n != 0 {
			t.Fatal("a withdrawn request waits for a batch")
		}
		var audit api.Page[store.AuditEntry]
		h.api("GET", "/api/ops/audit?limit=10", "ops", "", &audit)
		if !auditHas(audit.Items, "withdraw", bad) {
			t.Fatalf("the withdrawal is not audited: %+v", audit.Items)
		}
		if got := h.yours("alice", "t2"); got != "" {
			t.Fatalf("the apply form still holds %q", got)
		}
		again := h.apply("alice", "t2")
		h.waitState(again, state.StatusApprovalSent, 0)
	})
}

// A legacy request's MR is its own: withdrawing the failed request (here by an operator) closes it.
func TestWithdrawingAFailedLegacyRequestClosesItsMR(t *testing.T) {
	extra := strings.Replace(fastSims, "    approvalsRequired: 2\n", "    approvalsRequired: 2\n    pipelineFailOn: [bindings/db-read/]\n", 1)
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		h := setup(t, db, options{extra: extra})
		op := h.apply("alice", "db-read")
		v := h.waitState(op, state.StatusCreateFailed, state.StepCreatePipelineFailed)
		if v.MR == nil || !v.Withdrawable {
			t.Fatalf("a failed legacy request: MR %+v, withdrawable %t", v.MR, v.Withdrawable)
		}
		if !strings.HasPrefix(v.NextActionText, "Retry it") && !strings.Contains(v.NextActionText, "A failure of the change itself") {
			t.Fatalf("the operator reads %q", v.NextActionText)
		}
		var mine api.RequestView
		h.api("GET", "/api/requests/"+op, "alice", "", &mine)
		if !strings.HasPrefix(mine.NextActionText, "The pipeline of the merge request failed") || !strings.Contains(mine.NextActionText, "(failed job: test #") ||
			!strings.HasSuffix(mine.NextActionText, "Waiting will not fix it. You can withdraw this request and apply again, or ask the operators of bindery.") {
			t.Fatalf("the requester reads %q", mine.NextActionText)
		}
		mr := v.MR.ID
		v = api.RequestView{}
		if code := h.api("POST", "/api/requests/"+op+"/withdraw", "ops", `{"operationId":"wd-ops"}`, &v); code != 202 {
			t.Fatalf("withdraw: %d", code)
		}
		wantState(t, v, state.StatusClosed, state.StepWithdrawn, state.NextReapply)
		h.waitFor("its MR closed", func() bool {
			got, err := h.gl.GetMergeRequest(bg, project, mr)
			return err == nil && got.State == "closed"
		})
		h.waitFor("the close's task to end", func() bool { _, ok := h.task(op); return !ok })
		h.reconfigure(false, fastSims) // the change is fixed
		again := h.apply("alice", "db-read")
		h.waitState(again, state.StatusApprovalSent, 0)
		h.decide(again, sim.TicketApproved)
		h.waitState(again, state.StatusValidated, 0)
	})
}
