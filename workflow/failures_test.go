package workflow_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"bindery/api"
	"bindery/internal/platform/config"
	"bindery/internal/remote/approval"
	"bindery/internal/sim"
	"bindery/internal/testkit/enginekit"
	"bindery/internal/vocab/explain"
	"bindery/internal/vocab/state"
	"bindery/store"
	"bindery/store/storetest"
	"bindery/workflow"
)

// Every failure path ends in its documented binding status, step and next action (docs/states.md);
// the retryable ones are finished by an operator's retry.

// ops retries a request through the API and returns the HTTP status.
func (h *harness) retry(op string) int {
	h.t.Helper()
	return h.api("POST", "/api/ops/requests/"+op+"/retry", "ops", fmt.Sprintf(`{"operationId":"retry-%s-%d"}`, op, opSeq.Add(1)), nil)
}

func wantState(t *testing.T, v api.RequestView, status state.BindingStatus, step state.Step, next state.NextAction) {
	t.Helper()
	if v.Status != status || v.Step.Code != int(step) || v.NextAction != next {
		t.Fatalf("state %s/%s/%s, want %s/%s/%s", v.Status, v.Step.Name, v.NextAction, status, step, next)
	}
	if v.NextActionText == "" || (next != state.NextNone && next != state.NextReapply && v.Waiting == nil) {
		t.Fatalf("no explanation: text %q, waiting %+v", v.NextActionText, v.Waiting)
	}
}

// A new application while every first-steps worker is busy is not refused: its step waits in the
// database for a free worker, and the request view says so — no failure, nothing to retry — and
// it runs as soon as a worker is free.
func TestABusyFirstLaneQueuesTheApplicationAndSaysSo(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		var held *heldTickets
		h := setup(t, db, options{approvalFirst: true, workers: 1, wrapTickets: func(next workflow.Tickets) workflow.Tickets {
			held = holdTickets(next)
			return held
		}})
		// A lease far longer than the test: the held call must not be cut at the lease's end
		// (5 s) however slowly a loaded machine runs the checks made while it is held.
		h.cfg.Replace(config.MustParse(strings.Replace(configFor(true, fastSims), "leaseTTL: 5s", "leaseTTL: 1h", 1)))
		first := h.apply("alice", "db-read")
		<-held.entered // the only first-steps worker is busy with alice's ticket
		var res api.ApplyResult
		if code := h.api("POST", "/api/apply", "bob", `{"operationId":"op-queued","targetKey":"db-read","reason":"r"}`, &res); code != 202 {
			t.Fatalf("apply while the lane is busy: %d", code)
		}
		if res.Status != state.StatusApprovalSending || res.NextAction != state.NextWait {
			t.Fatalf("answer %+v: a busy lane is no failure", res)
		}
		v := h.view("op-queued")
		wantState(t, v, state.StatusApprovalSending, state.StepApprovalSending, state.NextWait)
		if w := v.Waiting; w == nil || w.Lane != "first" || w.Running || !strings.Contains(w.WaitingFor, "a free worker") ||
			strings.Contains(w.WaitingFor, "approvers") {
			t.Fatalf("waiting: %+v", v.Waiting)
		}
		if w := h.view(first).Waiting; w == nil || !w.Running {
			t.Fatalf("the running step's view: %+v", w)
		}
		var stuck api.Page[api.RequestSummary]
		if h.api("GET", "/api/ops/requests", "ops", "", &stuck); len(stuck.Items) != 0 {
			t.Fatalf("stuck list %+v", stuck.Items)
		}
		close(held.release)
		h.waitState(first, state.StatusApprovalSent, state.StepApprovalSent)
		v = h.waitState("op-queued", state.StatusApprovalSent, state.StepApprovalSent)
		if w := v.Waiting; w == nil || w.WaitingFor != "the approvers in the approval system" {
			t.Fatalf("waiting after the ticket: %+v", w)
		}
	})
}

func TestApprovalSystemDownThenRetried(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		h := setup(t, db, options{approvalFirst: true})
		h.sims.Approval.Inject("open_ticket", sim.FaultError, 4) // more than the step's retries
		op := h.apply("alice", "db-read")
		v := h.waitState(op, state.StatusCreateFailed, state.StepApprovalSendFailed)
		wantState(t, v, state.StatusCreateFailed, state.StepApprovalSendFailed, state.NextWaitManual)
		if last := v.Timeline[len(v.Timeline)-1]; !strings.Contains(last.Cause, "HTTP 500") || strings.Contains(last.Cause, "127.0.0.1") ||
			last.Note != explain.Failure(state.StepApprovalSendFailed)+"." {
			t.Fatalf("failure note %q, cause %q: want the step's sentence, and for operators the classified cause, no host", last.Note, last.Cause)
		}
		if code := h.retry(op); code != 202 {
			t.Fatalf("retry: %d", code)
		}
		h.waitState(op, state.StatusApprovalSent, state.StepApprovalSent)
		h.decide(op, sim.TicketApproved)
		h.waitState(op, state.StatusMRCreating, state.StepQueued)
	})
}

// A 5xx (or a lost answer) from the approval system is retried in the step, 3 times with a
// short backoff, before the request shows APPROVAL_SEND_FAILED; a 4xx is not retried.
func TestTheTicketStepRetriesAMomentaryApprovalSystemFailure(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		h := setup(t, db, options{approvalFirst: true})
		h.sims.Approval.Inject("open_ticket", sim.FaultError, 2)
		h.sims.Approval.Inject("open_ticket", sim.FaultDrop, 1)
		op := h.apply("alice", "db-read")
		v := h.waitState(op, state.StatusApprovalSent, state.StepApprovalSent)
		if n := h.sims.Approval.Calls("open_ticket"); n != 4 {
			t.Fatalf("%d calls to open the ticket, want 4 (3 failures, then success)", n)
		}
		for _, e := range v.Timeline {
			if e.Status.Failed() {
				t.Fatalf("timeline shows a failure the retries absorbed: %+v", v.Timeline)
			}
		}
		if n := len(h.sims.Approval.Tickets()); n != 1 {
			t.Fatalf("%d tickets (the dropped answer's ticket is reused)", n)
		}

		h.sims.Approval.Inject("open_ticket", sim.FaultStatus(400, "bad ticket"), 1)
		before := h.sims.Approval.Calls("open_ticket")
		op2 := h.apply("bob", "db-read")
		h.waitState(op2, state.StatusCreateFailed, state.StepApprovalSendFailed)
		if n := h.sims.Approval.Calls("open_ticket") - before; n != 1 {
			t.Fatalf("a 4xx was called %d times, want once", n)
		}
	})
}

// Another holder takes the work over (the claim expired, another instance claimed it) while this
// run fails: the failure belongs to a run that no longer counts. Nothing is written, and nothing
// is logged as a warning or an error — a takeover is the recovery working, not a fault.
func TestAStepFailingAfterATakeoverWritesNothingAndIsNoError(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		var h *harness
		h = setup(t, db, options{approvalFirst: true, wrapTickets: func(workflow.Tickets) workflow.Tickets {
			return ticketsFunc(func(ctx context.Context, tk approval.Ticket) (string, error) {
				if err := enginekit.On(t, db).TakeOver(state.TaskRequest, tk.OperationID, "other-instance"); err != nil {
					return "", fmt.Errorf("test setup: %w", err)
				}
				return "", errors.New("the ticket was refused for a reason of its own")
			})
		}})
		op := h.apply("alice", "db-read")
		h.waitFor("the step to stop", func() bool {
			l := h.logs.String()
			return strings.Contains(l, "work moved on") || strings.Contains(l, "taken by another holder")
		})
		o, err := db.Operation(bg, op)
		task, _ := h.task(op)
		if err != nil || o.Status != state.StatusApprovalSending || task.Owner != "other-instance" {
			t.Fatalf("after the takeover: %+v %+v %v", o, task, err)
		}
		for _, e := range h.view(op).Timeline {
			if e.Status.Failed() {
				t.Fatalf("a failure was written for a step another instance holds: %+v", e)
			}
		}
		for _, line := range strings.Split(h.logs.String(), "\n") {
			if strings.Contains(line, op) && (strings.Contains(line, "level=ERROR") || strings.Contains(line, "level=WARN")) {
				t.Fatalf("a takeover logged as a fault: %s", line)
			}
		}
	})
}

// A panic inside a step is the step's declared failure, not a dead worker or a silent request.
func TestAPanickingStepWritesItsDeclaredFailure(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		h := setup(t, db, options{approvalFirst: true, wrapTickets: func(workflow.Tickets) workflow.Tickets {
			return ticketsFunc(func(context.Context, approval.Ticket) (string, error) { panic("boom") })
		}})
		op := h.apply("alice", "db-read")
		v := h.waitState(op, state.StatusCreateFailed, state.StepApprovalSendFailed)
		if note := v.Timeline[len(v.Timeline)-1].Note; strings.Contains(note, "boom") {
			t.Fatalf("the panic value leaks into the note: %q", note)
		}
		// The worker survived: the next request is handled too.
		op2 := h.apply("bob", "db-read")
		h.waitState(op2, state.StatusCreateFailed, state.StepApprovalSendFailed)
	})
}

func TestLegacyPipelineFailedIsDeterministic(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		h := setup(t, db, options{})
		f := h.sims.GitLab.Faults()
		f.PipelineFailRate = 1
		h.sims.GitLab.SetFaults(f)
		op := h.apply("alice", "db-read")
		v := h.waitState(op, state.StatusCreateFailed, state.StepCreatePipelineFailed)
		wantState(t, v, state.StatusCreateFailed, state.StepCreatePipelineFailed, state.NextContactSupport)
		if v.MR == nil || v.Waiting.WaitingFor == "" {
			t.Fatalf("view: %+v", v)
		}
		// The request page links the pipeline that failed and the job that failed in it.
		jobs, err := h.gl.FailedJobs(bg, v.Project, v.Pipeline.ID)
		if err != nil || len(jobs) != 1 || v.FailedJob == nil || v.FailedJob.URL != jobs[0].WebURL || v.FailedJob.Name != "test" {
			t.Fatalf("pipeline %+v, failed job %+v; the pipeline's failed jobs %+v (%v)", v.Pipeline, v.FailedJob, jobs, err)
		}
	})
}

// The failed job is looked up best effort: GitLab failing to list the jobs changes nothing of
// the failure, the page just names no job.
func TestAFailedJobGitLabDoesNotListLeavesTheFailureAsItIs(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		h := setup(t, db, options{})
		f := h.sims.GitLab.Faults()
		f.PipelineFailRate = 1
		h.sims.GitLab.SetFaults(f)
		h.sims.GitLab.Inject("pipeline_jobs", sim.FaultError, 1000)
		op := h.apply("alice", "db-read")
		v := h.waitState(op, state.StatusCreateFailed, state.StepCreatePipelineFailed)
		wantState(t, v, state.StatusCreateFailed, state.StepCreatePipelineFailed, state.NextContactSupport)
		if v.Pipeline == nil || v.FailedJob != nil {
			t.Fatalf("pipeline %+v, failed job %+v: want the pipeline and no job", v.Pipeline, v.FailedJob)
		}
	})
}

// batch.flakyRetries: a failed pipeline gets a new one on the same commit before it counts.
func TestLegacyFlakyPipelineIsRetriedOnce(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		h := setup(t, db, options{extra: strings.Replace(fastSims, "flakyRetries: 0", "flakyRetries: 1", 1)})
		h.sims.GitLab.FailNextPipelines(1)
		op := h.apply("alice", "db-read")
		h.waitState(op, state.StatusApprovalSent, state.StepApprovalSent)
	})
}

func TestLegacyPipelineTimeoutWaitsForAnOperatorWhoFinishesIt(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		h := setup(t, db, options{extra: strings.Replace(fastSims, "timeout: 10s", "timeout: 200ms", 1)})
		f := h.sims.GitLab.Faults()
		f.PipelineStuckRate = 1
		h.sims.GitLab.SetFaults(f)
		op := h.apply("alice", "db-read")
		v := h.waitState(op, state.StatusMRCreating, state.StepCreatePipelinePending)
		wantState(t, v, state.StatusMRCreating, state.StepCreatePipelinePending, state.NextWaitManual)

		f.PipelineStuckRate = 0
		h.sims.GitLab.SetFaults(f)
		if code := h.retry(op); code != 202 {
			t.Fatalf("retry: %d", code)
		}
		h.waitState(op, state.StatusApprovalSent, state.StepApprovalSent)

		// The same at merge time: approved, then the rebase's pipeline never answers.
		f.NeedRebaseRate, f.PipelineStuckRate = 1, 1
		h.sims.GitLab.SetFaults(f)
		h.decide(op, sim.TicketApproved)
		v = h.waitState(op, state.StatusMerging, state.StepHandlePipelinePending)
		wantState(t, v, state.StatusMerging, state.StepHandlePipelinePending, state.NextWaitManual)
		f.NeedRebaseRate, f.PipelineStuckRate = 0, 0
		h.sims.GitLab.SetFaults(f)
		if code := h.retry(op); code != 202 {
			t.Fatalf("retry: %d", code)
		}
		h.waitState(op, state.StatusValidated, state.StepCalledBack)
	})
}

func TestLegacyMergeFailures(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name  string
		fault func(h *harness, v api.RequestView)
		step  state.Step
		next  state.NextAction
	}{
		{"a rebase conflict that regeneration cannot solve", func(h *harness, v api.RequestView) {
			f := h.sims.GitLab.Faults()
			f.NeedRebaseRate, f.RebaseConflictRate = 1, 1
			h.sims.GitLab.SetFaults(f)
		}, state.StepHandleRebaseConflict, state.NextContactSupport},
		{"the MR closed outside bindery", func(h *harness, v api.RequestView) {
			h.closeMR(v.MR.ID)
		}, state.StepHandleMRClosed, state.NextContactSupport},
		{"the reviewers may not approve", func(h *harness, v api.RequestView) {
			f := h.sims.GitLab.Faults()
			f.DeniedApprovers, f.DeniedApproveStatus = []string{sim.ReviewerUsername(0)}, 403
			h.sims.GitLab.SetFaults(f)
		}, state.StepHandleApproveFailed, state.NextWaitManual},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			storetest.Each(t, func(t *testing.T, db *store.DB) {
				h := setup(t, db, options{})
				op := h.apply("alice", "db-read")
				v := h.waitState(op, state.StatusApprovalSent, state.StepApprovalSent)
				c.fault(h, v)
				h.decide(op, sim.TicketApproved)
				v = h.waitState(op, state.StatusHandleFailed, c.step)
				wantState(t, v, state.StatusHandleFailed, c.step, c.next)
			})
		})
	}
}

// closeMR closes an MR in the simulated GitLab as a person would.
func (h *harness) closeMR(iid int64) {
	h.t.Helper()
	if _, err := h.gl.CloseMergeRequest(bg, project, iid); err != nil {
		h.t.Fatal(err)
	}
}

// A request waiting for its decision longer than approval.timeout is listed for operators with
// its age; an operator's retry sends the ticket again (the approval system keeps one ticket per
// request) and the request goes on waiting for the approvers — not a 500, not a second ticket.
func TestAnApprovalWaitingTooLongIsListedAndItsTicketSentAgain(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		h := setup(t, db, options{approvalFirst: true})
		h.cfg.Replace(config.MustParse(strings.Replace(configFor(true, fastSims), "approval:\n", "approval:\n  timeout: 50ms\n", 1)))
		op := h.apply("alice", "db-read")
		h.waitState(op, state.StatusApprovalSent, state.StepApprovalSent)
		var stuck api.Page[api.RequestSummary]
		h.waitFor("the request in the stuck list", func() bool {
			h.api("GET", "/api/ops/requests", "ops", "", &stuck)
			return len(stuck.Items) == 1 && stuck.Items[0].OperationID == op
		})
		if s := stuck.Items[0]; s.Status != state.StatusApprovalSent || s.UpdatedAt.IsZero() {
			t.Fatalf("listed as %+v", s)
		}
		if code := h.retry(op); code != 202 {
			t.Fatalf("retry: %d", code)
		}
		h.waitFor("the ticket sent again", func() bool {
			v := h.view(op)
			return strings.Contains(v.Timeline[len(v.Timeline)-1].Note, "sent again")
		})
		v := h.view(op)
		wantState(t, v, state.StatusApprovalSent, state.StepApprovalSent, state.NextWait)
		if n := len(h.sims.Approval.Tickets()); n != 1 {
			t.Fatalf("%d tickets", n)
		}
		h.decide(op, sim.TicketApproved)
		h.waitState(op, state.StatusMRCreating, state.StepQueued)
	})
}
