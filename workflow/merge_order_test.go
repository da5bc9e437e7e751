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

// deployOf is the simulated deploy of project!iid (the deploy pipeline ran after the merge; the
// simulator dropped its callback, the test sends what it says).
func (h *harness) deployOf(iid int64) sim.DeployRecord {
	h.t.Helper()
	var rec sim.DeployRecord
	h.waitFor("the deploy of the merge", func() bool {
		for _, r := range h.sims.Deploy.Records() {
			if r.Project == project && r.MRIID == iid {
				rec = r
				return true
			}
		}
		return false
	})
	if len(rec.SHA) != 40 {
		h.t.Fatalf("the deploy of !%d names no commit: %+v", iid, rec)
	}
	return rec
}

// roundsUntil runs batch rounds (the cron's job, without reconciliation) until op has status: a
// round may find a request admitted within the database clock's resolution not yet claimable.
func (h *harness) roundsUntil(op string, status state.BindingStatus) {
	h.t.Helper()
	h.waitFor(op+" "+string(status), func() bool {
		h.round()
		return h.view(op).Status == status
	})
}

// reconciled runs reconciliation and returns each request's status.
func (h *harness) reconciled(ops ...string) map[string]state.BindingStatus {
	h.t.Helper()
	if _, err := h.wf.Reconcile(bg); err != nil {
		h.t.Fatal(err)
	}
	out := map[string]state.BindingStatus{}
	for _, op := range ops {
		out[op] = h.view(op).Status
	}
	return out
}

// Legacy and batched MRs of one project merge out of number order: legacy MR !1 waits for its
// approval while batch MR !2 merges and is deployed; !1 merges after it. The deploy of !2 did
// not ship !1, so nothing may take it for !1's — no request is VALIDATED before a deploy that
// includes its merge. A later batch's deploy, called back by commit only, does include it.
func TestNoRequestIsValidatedBeforeADeployThatIncludesIt(t *testing.T) {
	extra := strings.Replace(fastSims, "    delay: 0s\n", "    delay: 0s\n    dropRate: 1\n", 1) + "reconcile:\n  minAge: 1ms\n"
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		h := setup(t, db, options{realBatch: true, extra: extra})
		legacy := h.apply("alice", "db-read")
		first := h.waitState(legacy, state.StatusApprovalSent, 0)

		h.reconfigure(true, extra)
		batched := h.approved("bob", "db-read")[0]
		h.roundsUntil(batched, state.StatusMerged)
		second := h.view(batched)
		if first.MR == nil || second.MR == nil || first.MR.ID >= second.MR.ID {
			t.Fatalf("MRs: legacy %+v, batched %+v; want the legacy one numbered first", first.MR, second.MR)
		}
		d2 := h.deployOf(second.MR.ID)
		if code, _ := h.deploy(api.DeployCallback{Project: project, MRIID: d2.MRIID, SHA: d2.SHA}); code != 200 {
			t.Fatalf("deploy callback of !%d: %d", d2.MRIID, code)
		}
		h.waitState(batched, state.StatusValidated, 0)

		h.decide(legacy, sim.TicketApproved)
		h.waitState(legacy, state.StatusMerged, 0)
		if st := h.reconciled(legacy); st[legacy] != state.StatusMerged {
			t.Fatalf("the legacy request merged after !%d's deploy is %s", d2.MRIID, st[legacy])
		}

		later := h.approved("ops", "db-read")[0]
		h.roundsUntil(later, state.StatusMerged)
		third := h.view(later)
		d3 := h.deployOf(third.MR.ID)
		if code, _ := h.deploy(api.DeployCallback{Project: project, SHA: d3.SHA}); code != 200 {
			t.Fatalf("deploy callback by commit %s: %d", d3.SHA, code)
		}
		h.waitState(later, state.StatusValidated, 0)
		if st := h.reconciled(legacy); st[legacy] != state.StatusValidated {
			t.Fatalf("after the deploy of !%d (merged after it): %s", d3.MRIID, st[legacy])
		}
		tl := h.view(legacy).Timeline
		if last := tl[len(tl)-1]; !strings.Contains(last.Note, "deploy of MR !") || !strings.Contains(last.Note, fmt.Sprintf("!%d ", third.MR.ID)) {
			t.Fatalf("the timeline does not say which deploy it was inferred from: %+v", last)
		}

		// A commit no recorded merge landed is refused; nothing changes.
		if code, _ := h.deploy(api.DeployCallback{Project: project, SHA: strings.Repeat("0", 40)}); code != 422 {
			t.Fatalf("an unknown commit: %d", code)
		}
	})
}
