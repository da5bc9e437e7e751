package workflow_test

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"bindery/internal/sim"
	"bindery/internal/vocab/state"
	"bindery/store"
	"bindery/store/storetest"
	"bindery/workflow"
)

// The legacy MR-first flow: the MR first (its pipeline must pass), then the ticket with
// ext.mrId, then approve and merge that MR, then the deploy callback.
func TestLegacyFlowTakesARequestFromApplyToValidated(t *testing.T) {
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		h := setup(t, db, options{})
		op := h.apply("alice", "db-read")

		tk := h.ticketOf(op)
		ext, callbackURL, _ := h.sims.Approval.TicketExt(tk.ID)
		v := h.waitState(op, state.StatusApprovalSent, state.StepApprovalSent)
		if v.Flow != workflow.FlowLegacy || v.MR == nil || ext["mrId"] != strconv.FormatInt(v.MR.ID, 10) {
			t.Fatalf("ticket ext %v, view MR %+v flow %s: the ticket must carry the request's MR", ext, v.MR, v.Flow)
		}
		if callbackURL != h.url+"/hooks/approval" {
			t.Fatalf("callback URL %s", callbackURL)
		}
		if got := h.sims.GitLab.MergeRequestState(project, v.MR.ID); got != "opened" {
			t.Fatalf("MR state before approval: %s", got)
		}

		h.decide(op, sim.TicketApproved)
		v = h.waitState(op, state.StatusValidated, state.StepCalledBack) // merged, then the deploy simulator called back
		h.waitFor("the expiry, written after the validation", func() bool { v = h.view(op); return v.ExpiresAt != nil })
		if got := h.sims.GitLab.MergeRequestState(project, v.MR.ID); got != "merged" {
			t.Fatalf("MR state: %s", got)
		}
		if content, ok := h.sims.GitLab.File(project, "main", "bindings/db-read/alice@example.com.yaml"); !ok || !strings.Contains(content, "operationId: "+op) {
			t.Fatalf("file on main: %v %q", ok, content)
		}
		if v.NextAction != state.NextNone || v.ExpiresAt == nil || v.ExpiresAt.Sub(v.UpdatedAt) < 719*time.Hour {
			t.Fatalf("validated view: next %s expires %v (updated %v)", v.NextAction, v.ExpiresAt, v.UpdatedAt)
		}
		var steps []string
		for _, e := range v.Timeline {
			steps = append(steps, e.Step.Name)
		}
		want := "CREATE_STARTED CREATE_STARTED CREATE_SUCCEEDED APPROVAL_SENDING APPROVAL_SENT HANDLE_STARTED HANDLE_APPROVED HANDLE_MERGED CALLED_BACK"
		if strings.Join(steps, " ") != want {
			t.Fatalf("timeline:\n %s\nwant\n %s", strings.Join(steps, " "), want)
		}
		if stages := doneStages(t, v); stages != "ci approval merge deploy" {
			t.Fatalf("stages %v", stages)
		}
		if v.Waiting != nil {
			t.Fatalf("a validated request waits for %+v", v.Waiting)
		}
		// Counted after the callback's commit, which the view may see first.
		h.waitFor("the validated metric", func() bool {
			return h.metric(`bindery_requests_validated_total{via="callback",project="infra/access-config"}`) == "1"
		})
	})
}

// A rejected legacy request ends REJECTED and its MR is closed.
func TestLegacyRejectionClosesTheMR(t *testing.T) {
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		h := setup(t, db, options{})
		op := h.apply("alice", "db-read")
		v := h.waitState(op, state.StatusApprovalSent, 0)
		h.decide(op, sim.TicketRejected)
		v = h.waitState(op, state.StatusRejected, state.StepApprovalRejected)
		if v.NextAction != state.NextReapply {
			t.Fatalf("next action %s", v.NextAction)
		}
		h.waitFor("the MR to be closed", func() bool { return h.sims.GitLab.MergeRequestState(project, v.MR.ID) == "closed" })
	})
}
