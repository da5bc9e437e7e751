package workflow_test

import (
	"strings"
	"testing"

	"bindery/store"
	"bindery/store/storetest"
	"bindery/workflow"
)

// SPEC §11.14: a process stopped in the middle of a step leaves the step's lease; once it
// expires, the sweep on any instance re-runs the step from the remote state and the request
// finishes. A stop writes nothing (no failure), and a stalled holder that comes back cannot
// overwrite what the new holder did.

func TestAStepStoppedByAShutdownIsResumedByAnotherInstance(t *testing.T) {
	extra := strings.Replace(fastSims, "pipelineDuration: 0s", "pipelineDuration: 1s", 1)
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		h := setup(t, db, options{extra: extra})
		op := h.apply("alice", "db-read")
		h.waitFor("the MR to be recorded", func() bool { v := h.view(op); return v.MR != nil })
		h.crash() // inside the pipeline wait
		v := h.view(op)
		if v.Status != store.StatusMRCreating || v.Step.Code != int(store.StepCreateStarted) {
			t.Fatalf("after the stop: %s/%s; a stop must write nothing", v.Status, v.Step.Name)
		}
		if o, _ := db.Operation(bg, op); o.LeaseOwner != "test-instance-1" {
			t.Fatalf("lease after the stop: %q", o.LeaseOwner)
		}

		h.restart("test-instance-2", nil)
		if n, err := h.wf.Sweep(bg); err != nil || n != 0 {
			t.Fatalf("sweep before the lease expired: %d %v", n, err)
		}
		h.expireLease(op)
		if n, err := h.wf.Sweep(bg); err != nil || n != 1 {
			t.Fatalf("sweep: %d %v", n, err)
		}
		v = h.waitState(op, store.StatusApprovalSent, store.StepApprovalSent)
		if n := h.sims.GitLab.Calls("create_mr"); n != 1 {
			t.Fatalf("%d MRs: the resumed step must reuse the recorded one", n)
		}
		if n := len(h.sims.Approval.Tickets()); n != 1 {
			t.Fatalf("%d tickets", n)
		}
	})
}

func TestAStalledStepIsTakenOverAndItsLateWriteChangesNothing(t *testing.T) {
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		var held *heldTickets
		h := setup(t, db, options{approvalFirst: true, wrapTickets: func(next workflow.Tickets) workflow.Tickets {
			held = holdTickets(next)
			return held
		}})
		op := h.apply("alice", "db-read")
		<-held.entered // instance 1 stalls inside the call to the approval system
		h.expireLease(op)
		h.restart("test-instance-2", nil)
		other := h.wf
		h.restart("test-instance-3", nil)
		// Two instances sweep at once: one takes the step over.
		done := make(chan int, 2)
		for _, wf := range []*workflow.Workflow{other, h.wf} {
			go func() {
				n, err := wf.Sweep(bg)
				if err != nil {
					t.Error(err)
				}
				done <- n
			}()
		}
		<-done
		<-done
		h.waitState(op, store.StatusApprovalSent, store.StepApprovalSent)
		close(held.release) // instance 1 comes back
		h.waitFor("instance 1's step to give up", func() bool { return len(held.entered) == 0 })
		v := h.view(op)
		for _, e := range v.Timeline {
			if e.Status.Failed() {
				t.Fatalf("a failure was written: %+v", v.Timeline)
			}
		}
		sent := 0
		for _, e := range v.Timeline {
			if e.Step.Code == int(store.StepApprovalSent) {
				sent++
			}
		}
		if sent != 1 || len(h.sims.Approval.Tickets()) != 1 {
			t.Fatalf("SENT written %d times, %d tickets", sent, len(h.sims.Approval.Tickets()))
		}
	})
}

// An operator's retry of a batched request resumes its batch; where there is no step to run,
// the retry is refused with 409.
func TestRetryResumesTheBatchOrSaysThereIsNothingToRetry(t *testing.T) {
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		h := setup(t, db, options{approvalFirst: true})
		op := h.apply("alice", "db-read")
		h.waitState(op, store.StatusApprovalSent, 0)
		var e struct{ Code string }
		if code := h.api("POST", "/api/ops/requests/missing-op/retry", "ops", `{"operationId":"r-0"}`, &e); code != 404 {
			t.Fatalf("unknown request: %d", code)
		}
		h.decide(op, "APPROVED")
		h.waitState(op, store.StatusMRCreating, store.StepQueued)
		if code := h.api("POST", "/api/ops/requests/"+op+"/retry", "ops", `{"operationId":"r-1"}`, &e); code != 409 || e.Code != "CONFLICT" {
			t.Fatalf("retry of a queued request: %d %+v", code, e)
		}
		if code := h.api("POST", "/api/ops/requests/"+op+"/retry", "alice", `{"operationId":"r-2"}`, nil); code != 403 {
			t.Fatalf("retry by a requester: %d", code)
		}
		// Claimed by a batch (the fake records the resume).
		batchID := claimNow(t, h)
		if code := h.retry(op); code != 202 {
			t.Fatalf("retry of a batched request: %d", code)
		}
		h.fake.mu.Lock()
		resumed := h.fake.resumed
		h.fake.mu.Unlock()
		if len(resumed) != 1 || resumed[0] != batchID {
			t.Fatalf("resumed %v, want batch %d", resumed, batchID)
		}
	})
}

// claimNow claims the waiting set of the project into a batch, as a round would.
func claimNow(t *testing.T, h *harness) int64 {
	t.Helper()
	var id int64
	h.waitFor("a claim", func() bool {
		c, err := h.db.Claim(bg, store.ClaimInput{Partition: project, Project: project, Max: 50, Owner: "x", Lease: 1 << 40,
			Members: &store.MemberChange{From: []store.BindingStatus{store.StatusMRCreating}, To: store.StatusMRCreating, Step: store.StepBatched}})
		if err != nil {
			t.Fatal(err)
		}
		id = c.Batch.ID
		return c.Outcome == store.RoundClaimed
	})
	return id
}

// A step handed off with the lease its own transition wrote runs on that lease: the transition
// already bumped the version (a previous holder fails its writes), and taking the lease again
// would cost a transaction per application (BENCHMARKS.md). The sweep's hand-offs, which find
// an expired lease, still take it (above).
func TestTheFirstStepRunsOnTheLeaseWrittenWithTheApplication(t *testing.T) {
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		h := setup(t, db, options{approvalFirst: true})
		op := h.apply("alice", "db-read")
		h.waitState(op, store.StatusApprovalSent, store.StepApprovalSent)
		o, err := db.Operation(bg, op)
		if err != nil {
			t.Fatal(err)
		}
		// Version 1 written by the application, 2 by APPROVAL_SENT: no lease taken in between.
		if o.Version != 2 || o.LeaseOwner != "" {
			t.Fatalf("version %d, lease %q: want 2, released", o.Version, o.LeaseOwner)
		}
	})
}
