package workflow_test

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"bindery/api"
	"bindery/internal/sim"
	"bindery/internal/vocab/state"
	"bindery/store"
	"bindery/store/storetest"
)

// noDeploys: the deploy simulator drops every callback, so that a test sends the ones it means.
var noDeploys = strings.Replace(fastSims, "    delay: 0s\n", "    delay: 0s\n    dropRate: 1\n", 1) + "reconcile:\n  minAge: 1ms\n"

// grantedByHand takes a legacy request of user to MERGED and, when deploy is set, calls its
// deploy back exactly (the simulator drops them); it returns the request and its MR.
func (h *harness) grantedByHand(user string, deploy bool) (string, int64) {
	h.t.Helper()
	op := h.apply(user, "db-read")
	h.waitState(op, state.StatusApprovalSent, 0)
	h.decide(op, sim.TicketApproved)
	v := h.waitState(op, state.StatusMerged, 0)
	if deploy {
		d := h.deployOf(v.MR.ID)
		var res api.CallbackResult
		if code, _ := h.hookJSON("/hooks/deploy", deployBody(api.DeployCallback{Project: project, MRIID: d.MRIID, SHA: d.SHA, OperationIDs: []string{op}}), deployAuth, &res); code != 200 || len(res.Refused) > 0 {
			h.t.Fatalf("the grant's deploy callback: %d %+v", code, res)
		}
		h.waitState(op, state.StatusValidated, state.StepCalledBack)
	}
	return op, v.MR.ID
}

var deployAuth = map[string]string{"Authorization": "Bearer test-deploy-token"}

// removalDeploy waits until the removal of op merged (the deploy simulator saw a merge that
// deleted op's file in another MR than grant) and returns that deploy.
func (h *harness) removalDeploy(op string, grant int64) sim.DeployRecord {
	h.t.Helper()
	var rec sim.DeployRecord
	h.roundUntil("the merge of "+op+"'s removal", func() bool {
		for _, r := range h.sims.Deploy.Records() {
			if r.Project == project && r.MRIID != grant && slices.Contains(r.OperationIDs, op) {
				rec = r
				return true
			}
		}
		return false
	})
	return rec
}

// The chaos run's first defect: a deploy callback of a removal's MR names the revoked request,
// whose operation still named the MR that had added its file. Its id was refused ("not of its
// MR"), a removal-only deploy was not recorded at all, and so it did not move the merge-order
// watermark: a request merged before it, whose own callback was lost, waited for an operator.
// Now the callback is checked against the MR of each request's current action (here: the
// removal), recorded, and reconciliation infers the earlier merge from it.
func TestARemovalsDeployCallbackIsAcceptedAndMovesTheWatermark(t *testing.T) {
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		h := setup(t, db, options{realBatch: true, extra: noDeploys})
		alice, grant := h.grantedByHand("alice", true)
		bob, _ := h.grantedByHand("bob", false) // merged after alice's grant; its callback is lost

		if code := h.api("POST", "/api/requests/"+alice+"/revoke", "alice", `{"operationId":"rv-alice"}`, nil); code != 202 {
			t.Fatalf("revoke: %d", code)
		}
		d := h.removalDeploy(alice, grant)
		// Merged, not deployed: still in effect, and the page says what it waits for.
		h.waitState(alice, state.StatusValidated, state.StepCloseMerged)
		var v api.RequestView // as its requester reads it
		if code := h.api("GET", "/api/requests/"+alice, "alice", "", &v); code != 200 {
			t.Fatalf("view: %d", code)
		}
		wantState(t, v, state.StatusValidated, state.StepCloseMerged, state.NextWait)
		if v.Step.Label != "Removal merged, waiting for the deploy" || v.Stage != "close" ||
			v.NextActionText != "Removal merged, waiting for the deploy: the binding stays in effect until the deploy pipeline reports the removal deployed." ||
			!strings.Contains(v.Waiting.WaitingFor, "the deploy pipeline to report that the removal (merge request !") {
			t.Fatalf("the merged removal reads %q at stage %s, waiting for %q", v.Step.Label, v.Stage, v.Waiting.WaitingFor)
		}
		if h.reconciled(alice)[alice] != state.StatusValidated {
			t.Fatal("a removal was closed before any deploy that includes its merge")
		}
		var res api.CallbackResult
		code, _ := h.hookJSON("/hooks/deploy", deployBody(api.DeployCallback{Project: project, MRIID: d.MRIID, SHA: d.SHA, OperationIDs: []string{alice}}), deployAuth, &res)
		if code != 200 || res.Code != api.CallbackAccepted || len(res.Refused) > 0 {
			t.Fatalf("the removal's exact deploy callback: %d %+v; want ACCEPTED, nothing refused", code, res)
		}
		if got := h.metric(`bindery_deploy_callbacks_refused_total{reason="not_members"}`); got != "" {
			t.Fatalf("a correct callback counted as refused: %s", got)
		}
		if n := count(t, db, "SELECT COUNT(*) FROM deploy_callback WHERE project = ? AND mr_iid = ?", project, d.MRIID); n != 1 {
			t.Fatalf("the removal-only deploy was not recorded (%d rows)", n)
		}
		if st := h.reconciled(bob); st[bob] != state.StatusValidated {
			t.Fatalf("bob merged before the deployed removal and is %s: the removal's deploy did not move the watermark", st[bob])
		}
		// Its deploy ends it: CLOSED, no expiry, and it says which end it was.
		v = h.waitState(alice, state.StatusClosed, state.StepCloseSucceeded)
		if v.ExpiresAt != nil || v.NextAction != state.NextReapply ||
			v.NextActionText != "Revoked by alice@example.com: the binding's file was removed and the removal is deployed. You can apply again." {
			t.Fatalf("the closed request: expires %v, %s %q", v.ExpiresAt, v.NextAction, v.NextActionText)
		}
		if n := count(t, db, "SELECT COUNT(*) FROM removal_merged"); n != 0 {
			t.Fatalf("%d removals still listed as waiting for their deploy", n)
		}
	})
}

// deployBody is a deploy callback's JSON.
func deployBody(cb api.DeployCallback) []byte {
	b, _ := json.Marshal(cb)
	return b
}

// A removal waits for its deploy exactly as a grant: when its own callback is lost, the deploy of
// a later merge (named by its commit only) proves it deployed by merge order; when no later
// merge comes, the removal is listed for operators once its deploy is overdue, and an
// operator's retry confirms the deploy and closes it.
func TestARemovalWhoseCallbackIsLostIsClosedByALaterDeployOrAnOperator(t *testing.T) {
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		h := setup(t, db, options{realBatch: true, extra: noDeploys + "  deployOverdue: 1ms\n"})
		alice, grant := h.grantedByHand("alice", true)
		if code := h.api("POST", "/api/requests/"+alice+"/revoke", "alice", `{"operationId":"rv-alice"}`, nil); code != 202 {
			t.Fatalf("revoke: %d", code)
		}
		h.removalDeploy(alice, grant) // its callback is dropped
		h.waitState(alice, state.StatusValidated, state.StepCloseMerged)

		// A later merge is deployed and called back by its commit only.
		bob, bobMR := h.grantedByHand("bob", false)
		d := h.deployOf(bobMR)
		if code, _ := h.deploy(api.DeployCallback{Project: project, SHA: d.SHA}); code != 200 {
			t.Fatalf("bob's deploy by commit: %d", code)
		}
		h.waitState(bob, state.StatusValidated, 0)
		if st := h.reconciled(alice); st[alice] != state.StatusClosed {
			t.Fatalf("a removal merged before a deployed merge is %s after reconciliation", st[alice])
		}
		tl := h.view(alice).Timeline
		if last := tl[len(tl)-1]; last.Step.Code != int(state.StepCloseSucceeded) || !strings.Contains(last.Note, "includes the removal's merge") {
			t.Fatalf("the inferred close does not say which deploy it came from: %+v", last)
		}

		// No later merge: the operators see it once its deploy is overdue, and confirm it.
		carol, carolGrant := h.grantedByHand("ops", true)
		if code := h.api("POST", "/api/requests/"+carol+"/revoke", "ops", `{"operationId":"rv-carol"}`, nil); code != 202 {
			t.Fatalf("revoke: %d", code)
		}
		h.removalDeploy(carol, carolGrant)
		v := h.waitState(carol, state.StatusValidated, state.StepCloseMerged)
		h.waitFor("the overdue removal in the stuck list", func() bool {
			var page api.Page[api.RequestSummary]
			h.api("GET", "/api/ops/requests", "ops", "", &page)
			for _, it := range page.Items {
				if it.OperationID == carol {
					return it.NextAction == state.NextWaitManual
				}
			}
			return false
		})
		v = h.view(carol)
		if v.NextAction != state.NextWaitManual || !strings.Contains(v.Waiting.WaitingFor, "overdue") || v.Waiting.Stage != "close" {
			t.Fatalf("an overdue removal: %s, waiting %+v", v.NextAction, v.Waiting)
		}
		if code := h.api("POST", "/api/ops/requests/"+carol+"/retry", "ops", `{"operationId":"retry-carol"}`, &v); code != 200 && code != 202 {
			t.Fatalf("retry: %d", code)
		}
		v = h.waitState(carol, state.StatusClosed, state.StepCloseSucceeded)
		if last := v.Timeline[len(v.Timeline)-1]; !strings.Contains(last.Note, "Deploy confirmed by ops") ||
			!strings.HasPrefix(v.NextActionText, "Revoked by ops") {
			t.Fatalf("confirmed: %+v; %q", last, v.NextActionText)
		}
	})
}
