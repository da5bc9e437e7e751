package workflow_test

import (
	"bindery/internal/testkit"
	"fmt"
	"strings"
	"testing"
	"time"

	"bindery/api"
	"bindery/internal/platform/config"
	"bindery/internal/sim"
	"bindery/internal/vocab/state"
	"bindery/store"
	"bindery/store/storetest"
	"bindery/workflow"
)

// leavingProject holds the one target a reload removes from the catalog (targetsRemovedSims).
const leavingProject = "infra/leaving"

// targetsRemovedSims: the merge train's simulators with one car (trainSims), deploys called back
// by hand (the simulator drops its own); the target `leaving` (leavingTarget) is alone in its
// project, with a ttl.
var targetsRemovedSims = strings.Replace(fmt.Sprintf(trainSims, 1), "    delay: 0s\n", "    delay: 0s\n    dropRate: 1\n", 1) + `reconcile:
  minAge: 1ms
targets:
  - key: db-read
    title: DB read
    project: infra/access-config
    path: bindings/db-read/{subject}.yaml
`

const leavingTarget = `  - key: leaving
    title: Leaving soon
    project: infra/leaving
    path: bindings/leaving/{subject}.yaml
    ttl: 720h
`

// applyAs applies for target as subject through the workflow itself (the server's demo sign-in
// knows only alice and bob) and returns the operationId.
func (h *harness) applyAs(subject, target string) string {
	h.t.Helper()
	op := fmt.Sprintf("op-%s-%d", strings.Split(subject, "@")[0], opSeq.Add(1))
	if _, err := h.wf.Apply(bg, workflow.ApplyInput{ApplyRequest: api.ApplyRequest{OperationID: op, TargetKey: target, Reason: "for the test"}, Subject: subject}); err != nil {
		h.t.Fatalf("apply as %s: %v", subject, err)
	}
	return op
}

// approvedAs is approved for any subject: applied, approved, in the waiting set.
func (h *harness) approvedAs(subject, target string) string {
	h.t.Helper()
	op := h.applyAs(subject, target)
	h.decide(op, sim.TicketApproved)
	h.waitState(op, state.StatusMRCreating, state.StepQueued)
	time.Sleep(2 * time.Millisecond) // the database clock past the admission (see approved)
	return op
}

// driveUntil moves the simulator's clock past a pipeline and runs a round until cond holds.
func (h *harness) driveUntil(clock *testkit.Clock, what string, cond func() bool) {
	h.t.Helper()
	h.waitFor(what, func() bool {
		if cond() {
			return true
		}
		clock.Advance(11 * time.Minute)
		h.round()
		return cond()
	})
}

// deployLeaving calls back the deploy of the latest merge of the leaving project, as its deploy
// pipeline would (the deploy proves every merge at or before it deployed).
func (h *harness) deployLeaving() {
	h.t.Helper()
	var last sim.DeployRecord
	for _, r := range h.sims.Deploy.Records() {
		if r.Project == leavingProject {
			last = r
		}
	}
	if last.SHA == "" {
		h.t.Fatal("no merge of the leaving project to deploy")
	}
	var res api.CallbackResult
	if code, _ := h.hookJSON("/hooks/deploy", deployBody(api.DeployCallback{Project: leavingProject, SHA: last.SHA}), deployAuth, &res); code != 200 || res.Code != api.CallbackAccepted {
		h.t.Fatalf("the deploy callback of %s at %s: %d %+v", leavingProject, last.SHA, code, res)
	}
}

// settledTo waits until op is at status and step, running reconciliation meanwhile (a deploy of a
// later merge proves the earlier ones deployed by merge order).
func (h *harness) settledTo(op string, status state.BindingStatus, step state.Step) api.RequestView {
	h.t.Helper()
	h.waitFor(fmt.Sprintf("%s to reach %s/%s", op, status, step), func() bool {
		if _, err := h.wf.Reconcile(bg); err != nil {
			h.t.Fatal(err)
		}
		v := h.view(op)
		return v.Status == status && v.Step.Code == int(step)
	})
	return h.view(op)
}

// A reload drops a target (a configuration file cut in the middle of `targets:` is still valid
// YAML) while requests for it are everywhere: waiting for their approval, queued, in CI, merged
// and waiting for their deploy, in effect. Nothing in flight notices: each ends in effect, and the
// bindings in effect are revoked and expire as before — closed — with the target as it was when
// they were accepted. Only a new application is refused, and the ops console lists the target
// with its bindings in flight and in effect.
func TestAReloadThatDropsATargetHarmsNothingInFlight(t *testing.T) {
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		clock := testkit.NewClock(time.Now())
		h := setup(t, db, options{approvalFirst: true, realBatch: true, clock: clock, extra: targetsRemovedSims + leavingTarget})
		status := func(op string) state.BindingStatus { return h.view(op).Status }

		// In effect: alice and erin; merged, its deploy not reported yet: bob.
		effect, expiring := h.approvedAs("alice@example.com", "leaving"), h.approvedAs("erin@example.com", "leaving")
		h.driveUntil(clock, "alice's and erin's grants merged", func() bool { return status(effect) == state.StatusMerged && status(expiring) == state.StatusMerged })
		h.deployLeaving()
		h.settledTo(effect, state.StatusValidated, state.StepCalledBack)
		h.settledTo(expiring, state.StatusValidated, state.StepCalledBack)
		mergedOp := h.approvedAs("bob@example.com", "leaving")
		h.driveUntil(clock, "bob's grant merged", func() bool { return status(mergedOp) == state.StatusMerged })
		// In CI: carol's car; queued behind it: dave; waiting for the approvers: frank.
		inCI := h.approvedAs("carol@example.com", "leaving")
		h.round()
		h.waitFor("carol's car in CI", func() bool { v := h.view(inCI); return v.MR != nil && v.Status == state.StatusMRCreating })
		queued := h.approvedAs("dave@example.com", "leaving")
		h.round()
		waiting := h.applyAs("frank@example.com", "leaving")
		h.waitState(waiting, state.StatusApprovalSent, 0)
		if v := h.view(queued); v.BatchID != 0 {
			t.Fatalf("dave should wait behind carol's car: %+v", v)
		}

		// The reload: the catalog without `leaving`.
		snap, err := config.Parse([]byte(configFor(true, targetsRemovedSims)))
		if err != nil {
			t.Fatal(err)
		}
		h.cfg.Replace(snap)

		var refused struct{ Code, Field, Message string }
		if code := h.api("POST", "/api/apply", "bob", `{"operationId":"op-bob-late","targetKey":"leaving","reason":"too late"}`, &refused); code != 400 || refused.Field != "targetKey" || !strings.Contains(refused.Message, "not in the catalog") {
			t.Fatalf("a new application for the removed target: %d %+v", code, refused)
		}
		var cfg struct {
			RemovedTargets []api.TargetUse `json:"removedTargets"`
		}
		if code := h.api("GET", "/api/ops/config", "ops", "", &cfg); code != 200 || len(cfg.RemovedTargets) != 1 ||
			cfg.RemovedTargets[0] != (api.TargetUse{Key: "leaving", InFlight: 4, InEffect: 2}) {
			t.Fatalf("the ops console's targets that left the catalog: %d %+v", code, cfg.RemovedTargets)
		}

		// Everything in flight goes on: frank approved now, carol's car, dave's and frank's.
		h.decide(waiting, sim.TicketApproved)
		h.driveUntil(clock, "carol, dave and frank merged", func() bool {
			return status(inCI) == state.StatusMerged && status(queued) == state.StatusMerged && status(waiting) == state.StatusMerged
		})
		h.deployLeaving()
		for _, op := range []string{mergedOp, inCI, queued, waiting} {
			v := h.settledTo(op, state.StatusValidated, state.StepCalledBack)
			if v.ExpiresAt == nil || v.TargetTitle != "Leaving soon" {
				t.Errorf("%s in effect without the target's ttl or title as accepted: expires %v, title %q", op, v.ExpiresAt, v.TargetTitle)
			}
		}
		// The bindings in effect stay until revoked or expired, and both removals work.
		if code := h.api("POST", "/api/requests/"+effect+"/revoke", "alice", `{"operationId":"rv-alice"}`, nil); code != 202 {
			t.Fatalf("revoke: %d", code)
		}
		if _, err := db.Raw().Exec("UPDATE binding SET expires_at = '2000-01-01 00:00:00' WHERE operation_id = ?", expiring); err != nil {
			t.Fatal(err)
		}
		// bob's expiry lost in a crash right after his validation: the expiry run repairs it
		// with the ttl his target had when he applied.
		if _, err := db.Raw().Exec("UPDATE binding SET expires_at = NULL WHERE operation_id = ?", mergedOp); err != nil {
			t.Fatal(err)
		}
		if n, err := h.wf.Expire(bg); err != nil || n != 1 {
			t.Fatalf("expiry: %d %v", n, err)
		}
		if v := h.view(mergedOp); v.ExpiresAt == nil || v.ExpiresAt.Before(time.Now().Add(29*24*time.Hour)) {
			t.Errorf("bob's lost expiry, repaired: %v, want about 30 days from his validation", v.ExpiresAt)
		}
		h.driveUntil(clock, "both removals merged", func() bool {
			return h.view(effect).Step.Code == int(state.StepCloseMerged) && h.view(expiring).Step.Code == int(state.StepCloseMerged)
		})
		h.deployLeaving()
		h.settledTo(effect, state.StatusClosed, state.StepCloseSucceeded)
		h.settledTo(expiring, state.StatusClosed, state.StepCloseSucceeded)

		for _, c := range []struct {
			subject string
			in      bool
		}{{"alice", false}, {"erin", false}, {"bob", true}, {"carol", true}, {"dave", true}, {"frank", true}} {
			path := fmt.Sprintf("bindings/leaving/%s@example.com.yaml", c.subject)
			if _, ok := h.sims.GitLab.File(leavingProject, "main", path); ok != c.in {
				t.Errorf("%s on main: %v, want %v", path, ok, c.in)
			}
		}
		if code := h.api("GET", "/api/ops/config", "ops", "", &cfg); code != 200 || len(cfg.RemovedTargets) != 1 ||
			cfg.RemovedTargets[0] != (api.TargetUse{Key: "leaving", InFlight: 0, InEffect: 4}) {
			t.Fatalf("the targets that left the catalog once all settled: %d %+v", code, cfg.RemovedTargets)
		}
	})
}
