package workflow_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"bindery/batch"
	"bindery/internal/platform/config"
	"bindery/internal/remote/approval"
	"bindery/internal/sim"
	"bindery/internal/testkit"
	"bindery/internal/vocab/state"
	"bindery/store"
	"bindery/store/storetest"
	"bindery/workflow"
)

// docs/architecture.md, 'Durable execution': a process stopped in the middle of a step leaves the
// step's task, claimed; the claim expires and any instance's dispatcher re-runs the step from the
// remote state and the request finishes. A stop writes nothing (no failure), and a stalled holder
// that comes back cannot overwrite what the new holder did.

func TestAStepStoppedByACrashIsResumedByAnotherInstance(t *testing.T) {
	t.Parallel()
	extra := strings.Replace(fastSims, "pipelineDuration: 0s", "pipelineDuration: 1s", 1)
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		// GitLab's clock stands still until the new instance runs: the crash lands inside the
		// pipeline wait however slowly the machine runs the test, and no second is waited out.
		clock := testkit.NewClock(time.Now())
		h := setup(t, db, options{extra: extra, clock: clock})
		op := h.apply("alice", "db-read")
		h.waitFor("the MR to be recorded", func() bool { v := h.view(op); return v.MR != nil })
		h.crash() // inside the pipeline wait
		// Before the stop the step may have asked twice: on a loaded machine the write recording
		// the MR can outlive the step's lease and the step runs again, and GitLab answers the
		// same MR (its source branch has one). What the resumed step asks is counted from here.
		created := h.sims.GitLab.Calls("create_mr")
		v := h.view(op)
		if v.Status != state.StatusMRCreating || v.Step.Code != int(state.StepCreateStarted) {
			t.Fatalf("after the stop: %s/%s; a stop must write nothing", v.Status, v.Step.Name)
		}
		if task, ok := h.task(op); !ok || task.Step != "create_pipeline" {
			t.Fatalf("the task after the stop: %+v %v", task, ok)
		}

		// The dead holder's lease runs out (made so now rather than waited out: the engine's
		// tests hold the expiry itself), and another instance's dispatcher takes the step.
		h.expire(op)
		h.restart("test-instance-2", nil)
		clock.Advance(time.Minute)
		v = h.waitState(op, state.StatusApprovalSent, state.StepApprovalSent)
		if n := h.sims.GitLab.Calls("create_mr") - created; n != 0 {
			t.Fatalf("the resumed step asked for an MR %d times: it must reuse the recorded one", n)
		}
		if v.MR == nil || v.MR.ID != 1 || h.sims.GitLab.MergeRequestState(project, 2) != "" {
			t.Fatalf("the request's MR %+v, and a second MR is %q: one MR for the request", v.MR, h.sims.GitLab.MergeRequestState(project, 2))
		}
		if n := len(h.sims.Approval.Tickets()); n != 1 {
			t.Fatalf("%d tickets", n)
		}
	})
}

func TestAStalledStepIsTakenOverAndItsLateWriteChangesNothing(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		var held *heldTickets
		h := setup(t, db, options{approvalFirst: true, wrapTickets: func(next workflow.Tickets) workflow.Tickets {
			// Instance 1 stalls inside one call. Its engine stops in the background, so it may
			// still take the step again once its claim expires: that call goes through (held
			// too, the step would wait for the release under instance 1's hour-long lease, and the
			// test for a takeover that cannot come — seen twice in a loaded package run).
			held = holdTickets(next)
			held.firstOnly = true
			return held
		}})
		// A lease far longer than the test: instance 1's step is cut neither by its own lease's
		// deadline nor by a renewal that finds its claim taken, so what it does when it comes back
		// is its late write, however slowly the machine runs the test.
		h.cfg.Replace(config.MustParse(strings.Replace(configFor(true, fastSims), "leaseTTL: 5s", "leaseTTL: 1h", 1)))
		op := h.apply("alice", "db-read")
		<-held.entered // instance 1 stalls inside the call to the approval system
		h.restart("test-instance-2", nil)
		h.join("test-instance-3", nil)
		// Two instances dispatch at once; instance 1's claim expires: one of them takes the step over.
		h.expire(op)
		h.waitState(op, state.StatusApprovalSent, state.StepApprovalSent)
		close(held.release) // instance 1 comes back
		h.waitFor("instance 1's step to give up", func() bool { return len(held.entered) == 0 && strings.Contains(h.logs.String(), "test-instance-1") })
		h.waitFor("instance 1's late write to be refused", func() bool { return strings.Contains(h.logs.String(), "work moved on") })
		v := h.view(op)
		for _, e := range v.Timeline {
			if e.Status.Failed() {
				t.Fatalf("a failure was written: %+v", v.Timeline)
			}
		}
		sent := 0
		for _, e := range v.Timeline {
			if e.Step.Code == int(state.StepApprovalSent) {
				sent++
			}
		}
		if sent != 1 || len(h.sims.Approval.Tickets()) != 1 {
			t.Fatalf("SENT written %d times, %d tickets", sent, len(h.sims.Approval.Tickets()))
		}
	})
}

// The lease scenario of the durable-execution issue, with the real steps: two attempts at one
// request's step on one instance (an operator's retry racing the dispatcher, the dispatcher's own
// runs) and another instance. The attempts never run at once, the one that loses writes nothing
// and orphans nothing: the request is never left in flight without work due for it, and it ends
// APPROVAL_SENT with one ticket.
func TestConcurrentAttemptsNeverOrphanARequest(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		var inCall, overlaps atomic.Int32
		slow := func(next workflow.Tickets) workflow.Tickets {
			return ticketsFunc(func(ctx context.Context, tk approval.Ticket) (string, error) {
				if inCall.Add(1) > 1 {
					overlaps.Add(1)
				}
				defer inCall.Add(-1)
				time.Sleep(20 * time.Millisecond) // the behaviour: a slow approval system, so attempts could overlap
				return next.Open(ctx, tk)
			})
		}
		h := setup(t, db, options{approvalFirst: true, wrapTickets: slow})
		h.sims.Approval.Inject("open_ticket", sim.FaultError, 2) // a retry or two on the way
		op := h.apply("alice", "db-read")
		h.join("test-instance-1", slow) // the same instance name: a second dispatcher of one process
		h.join("test-instance-2", slow)
		for range 20 { // operators retrying meanwhile: refused while the step runs, else it is due now
			var e struct{ Code string }
			code := h.api("POST", "/api/ops/requests/"+op+"/retry", "ops", fmt.Sprintf(`{"operationId":"r-%d"}`, opSeq.Add(1)), &e)
			if code != 202 && code != 409 {
				t.Fatalf("retry answered %d %+v\n%s", code, e, h.logs.String())
			}
			time.Sleep(5 * time.Millisecond) // the behaviour: retries spread over the attempts' lifetime
		}
		h.waitState(op, state.StatusApprovalSent, state.StepApprovalSent)
		h.waitFor("every attempt to end", func() bool {
			task, ok := h.task(op)
			return ok && task.Step == "ticket_poll" && task.Owner == "" && inCall.Load() == 0
		})
		if overlaps.Load() != 0 {
			t.Fatalf("%d attempts ran at once", overlaps.Load())
		}
		if ops, bs, err := db.Orphans(bg, 10); err != nil || len(ops)+len(bs) != 0 {
			t.Fatalf("orphans: %v %v %v", ops, bs, err)
		}
		if n := len(h.sims.Approval.Tickets()); n != 1 {
			t.Fatalf("%d tickets", n)
		}
		for _, line := range strings.Split(h.logs.String(), "\n") {
			if strings.Contains(line, "level=ERROR") {
				t.Fatalf("an error was logged: %s", line)
			}
		}
	})
}

// An operator's retry of a batched request resumes its batch; where there is no step to run,
// the retry is refused with 409.
func TestRetryResumesTheBatchOrSaysThereIsNothingToRetry(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		h := setup(t, db, options{approvalFirst: true})
		op := h.apply("alice", "db-read")
		h.waitState(op, state.StatusApprovalSent, 0)
		var e struct{ Code string }
		if code := h.api("POST", "/api/ops/requests/missing-op/retry", "ops", `{"operationId":"r-0"}`, &e); code != 404 {
			t.Fatalf("unknown request: %d", code)
		}
		h.decide(op, "APPROVED")
		h.waitState(op, state.StatusMRCreating, state.StepQueued)
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

// claimNow claims the waiting set of the project into a batch, with its task, as a round would.
func claimNow(t *testing.T, h *harness) int64 {
	t.Helper()
	var id int64
	h.waitFor("a claim", func() bool {
		c, err := batch.Claim(bg, h.db, store.ClaimInput{Partition: project, Project: project, Max: 50,
			Task:    &store.TaskSpec{Kind: state.TaskBatch, Lane: "background", Step: "open"}, // the fake runs no batch: it waits
			Members: &store.MemberChange{From: []state.BindingStatus{state.StatusMRCreating}, To: state.StatusMRCreating, Step: state.StepBatched}})
		if err != nil {
			t.Fatal(err)
		}
		id = c.Batch.ID
		return c.Outcome == state.RoundClaimed
	})
	return id
}

// The first step's task is written with the application and the step runs on its claim: an
// application is two writes of the request (the application, APPROVAL_SENT), no more.
func TestTheFirstStepRunsOnTheTaskWrittenWithTheApplication(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		h := setup(t, db, options{approvalFirst: true})
		op := h.apply("alice", "db-read")
		h.waitState(op, state.StatusApprovalSent, state.StepApprovalSent)
		o, err := db.Operation(bg, op)
		if err != nil {
			t.Fatal(err)
		}
		if task, ok := h.task(op); o.Version != 2 || !ok || task.Step != "ticket_poll" || task.Overdue > -time.Minute {
			t.Fatalf("version %d, task %+v: want 2, and the ticket to be read approval.pollAfter later", o.Version, task)
		}
	})
}
