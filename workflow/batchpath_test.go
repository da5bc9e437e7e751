package workflow_test

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"bindery/api"
	"bindery/internal/remote/gitlab"
	"bindery/internal/sim"
	"bindery/internal/testkit"
	"bindery/internal/testkit/enginekit"
	"bindery/internal/vocab/state"
	"bindery/internal/work/engine"
	"bindery/store"
	"bindery/store/storetest"
	"bindery/workflow"
)

// The approval-first flow through package batch's real Service: rounds, one MR per batch,
// bisection, BLOCKED and the operators' resume and settle.

// roundUntil runs the batch round and reconciliation (the crons' jobs) until cond holds. The
// reconciliation matters here: the deploy simulator answers at once, so its callback often
// arrives before the batch recorded its members MERGED, and the reconciliation replays it.
func (h *harness) roundUntil(what string, cond func() bool) {
	h.t.Helper()
	h.waitFor(what, func() bool {
		h.round()
		if _, err := h.wf.Reconcile(bg); err != nil {
			h.t.Fatal(err)
		}
		return cond()
	})
}

// approved applies for each target as user and approves each; it returns the operationIds once
// all are in the waiting set.
func (h *harness) approved(user string, targets ...string) []string {
	h.t.Helper()
	var ops []string
	for _, target := range targets {
		op := h.apply(user, target)
		h.decide(op, sim.TicketApproved)
		h.waitState(op, state.StatusMRCreating, state.StepQueued)
		ops = append(ops, op)
	}
	// A round claims the rows admitted before the database clock's current tick (SQLite keeps
	// milliseconds): a round right after may find nothing to claim yet.
	enginekit.On(h.t, h.db).ClockPast("SELECT CAST(MAX(created_at) AS CHAR) FROM merge_batch_request")
	return ops
}

func TestApprovalFirstRequestsAreBatchedIntoOneMRAndValidated(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		h := setup(t, db, options{approvalFirst: true, realBatch: true})
		ops := append(h.approved("alice", "db-read"), h.approved("bob", "db-read")...)
		h.roundUntil("both validated", func() bool {
			return h.view(ops[0]).Status == state.StatusValidated && h.view(ops[1]).Status == state.StatusValidated
		})
		v0, v1 := h.view(ops[0]), h.view(ops[1])
		if v0.BatchID == 0 || v0.BatchID != v1.BatchID || v0.MR == nil || v1.MR == nil || v0.MR.ID != v1.MR.ID {
			t.Fatalf("not one batch and one MR: %+v / %+v", v0, v1)
		}
		if n := h.sims.GitLab.Calls("create_mr"); n != 1 {
			t.Fatalf("%d MRs for one batch", n)
		}
		if stages := doneStages(t, v0); stages != "approval batch ci merge deploy" {
			t.Fatalf("stages %v", stages)
		}
		// Observed after the validation's commit, which the view shows first: wait for both.
		for _, stage := range []string{"batch", "ci", "merge", "deploy"} {
			h.waitFor("stage "+stage+" observed once per request", func() bool {
				return h.metric(`bindery_request_stage_seconds_count{stage="`+stage+`"}`) == "2"
			})
		}
		var batches api.Page[api.BatchView]
		h.api("GET", "/api/ops/batches", "ops", "", &batches)
		if len(batches.Items) != 1 || batches.Items[0].Status != "SUCCEEDED" || len(batches.Items[0].Members) != 2 || batches.Items[0].MR == nil {
			t.Fatalf("ops batches: %+v", batches.Items)
		}
		// One log line per validated request, naming it, its batch and the instance that
		// committed the flip: a multi-process test counts validations across kills from them.
		for _, op := range ops {
			if got := h.validatedLines(op); len(got) != 1 || !strings.Contains(got[0], fmt.Sprintf("batch=%d ", v0.BatchID)) || !strings.Contains(got[0], "instance=test-instance-1") {
				t.Errorf("validated log lines of %s: %q", op, got)
			}
		}
	})
}

// docs/workflow.md, 'Bisection': a deterministic pipeline failure of a multi-member batch is
// bisected until the culprit is alone and failed; the other seven merge.
func TestBisectionIsolatesTheBadMemberAndTheOtherSevenMerge(t *testing.T) {
	t.Parallel()
	var targets strings.Builder
	targets.WriteString("targets:\n")
	for i := 1; i <= 8; i++ {
		fmt.Fprintf(&targets, "  - {key: t%d, title: T%d, project: infra/access-config, path: \"bindings/t%d/{subject}.yaml\"}\n", i, i, i)
	}
	extra := strings.Replace(fastSims, "    approvalsRequired: 2\n", "    approvalsRequired: 2\n    pipelineFailOn: [bindings/t6/]\n", 1) + targets.String()
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		h := setup(t, db, options{approvalFirst: true, realBatch: true, extra: extra})
		var ops []string
		for i := 1; i <= 8; i++ {
			ops = append(ops, h.approved("alice", fmt.Sprintf("t%d", i))...)
		}
		bad := ops[5]
		h.roundUntil("every member settled", func() bool {
			for _, op := range ops {
				v := h.view(op)
				if v.Status != state.StatusValidated && !v.Status.Failed() {
					return false
				}
			}
			return true
		})
		for i, op := range ops {
			v := h.view(op)
			if op == bad {
				wantState(t, v, state.StatusCreateFailed, state.StepCreatePipelineFailed, state.NextContactSupport)
				// The stage view shows the failure where it happened, linking the run that failed.
				if v.Stage != "ci" || v.Pipeline == nil {
					t.Fatalf("failed member at stage %q, pipeline %+v; want ci with the failed pipeline", v.Stage, v.Pipeline)
				}
				if pl, err := h.gl.GetPipeline(bg, v.Project, v.Pipeline.ID); err != nil || pl.Outcome() != gitlab.Failed {
					t.Errorf("the failed member links pipeline %d (%s, %v), not the one that failed", v.Pipeline.ID, pl.Status, err)
				}
				// It names the job that failed in that pipeline, with GitLab's link to it.
				jobs, err := h.gl.FailedJobs(bg, v.Project, v.Pipeline.ID)
				if err != nil || len(jobs) != 1 || v.FailedJob == nil || v.FailedJob.ID != jobs[0].ID || v.FailedJob.Name != "test" ||
					v.FailedJob.URL != jobs[0].WebURL || !strings.Contains(v.FailedJob.URL, "/-/jobs/") {
					t.Fatalf("failed job %+v; the pipeline's failed jobs %+v (%v)", v.FailedJob, jobs, err)
				}
				if page := h.get(v.FailedJob.URL); page.status != 200 {
					t.Errorf("the failed job's link %s answers %d", v.FailedJob.URL, page.status)
				}
				continue
			}
			if v.Stage != workflow.StageEffect {
				t.Errorf("member %d at stage %q, want in effect", i+1, v.Stage)
			}
			if v.FailedJob != nil {
				t.Errorf("member %d, in effect, names a failed job %+v", i+1, v.FailedJob)
			}
			// Its approval ticket is a link to the ticket's page.
			if v.Ticket == nil || v.Ticket.ID == "" || v.Ticket.URL != h.url+"/sim/approvals/"+v.Ticket.ID {
				t.Errorf("member %d: ticket %+v, want a link to its page", i+1, v.Ticket)
			} else if page := h.get(v.Ticket.URL); page.status != 200 || !strings.Contains(page.body, v.Ticket.ID) {
				t.Errorf("the ticket's link %s answers %d", v.Ticket.URL, page.status)
			}
			if v.Status != state.StatusValidated {
				t.Errorf("member %d: %s/%s", i+1, v.Status, v.Step.Name)
			}
		}
		for i := 1; i <= 8; i++ {
			_, ok := h.sims.GitLab.File(project, "main", fmt.Sprintf("bindings/t%d/alice@example.com.yaml", i))
			if ok != (i != 6) {
				t.Errorf("t%d file on main: %v", i, ok)
			}
		}
		// The ops view names the culprit, on the batch that isolated it and in its timeline.
		var batches api.Page[api.BatchView]
		h.api("GET", "/api/ops/batches", "ops", "", &batches)
		var found *api.BatchView
		for i, b := range batches.Items {
			if b.Bisection != nil && b.Bisection.Culprit != "" {
				if found != nil {
					t.Fatalf("two batches name a culprit: %+v, %+v", *found, b)
				}
				found = &batches.Items[i]
			}
		}
		first := batches.Items[len(batches.Items)-1]
		if found == nil || found.Bisection.Culprit != bad || found.Bisection.Rounds != 3 || found.Bisection.Of != first.ID || found.Status != "FAILED" {
			t.Fatalf("no batch names the culprit %s after 3 bisections of batch %d: %+v", bad, first.ID, batches.Items)
		}
		named := fmt.Sprintf("batch %d isolated the culprit %s after 3 bisections", found.ID, bad)
		if !strings.Contains(found.Note, named) {
			t.Errorf("batch note %q does not say %q", found.Note, named)
		}
		tl := h.view(bad).Timeline
		if cause := tl[len(tl)-1].Cause; !strings.Contains(cause, named) {
			t.Errorf("the culprit's last timeline cause %q does not say %q", cause, named)
		}
		// Its owner reads it too, in the words of the failed step.
		var mine api.RequestView
		h.api("GET", "/api/requests/"+bad, "alice", "", &mine)
		told := fmt.Sprintf("batch %d isolated this request as the change that fails, after 3 bisections", found.ID)
		if note := mine.Timeline[len(mine.Timeline)-1].Note; !strings.Contains(note, told) || !strings.Contains(note, "/-/pipelines/") {
			t.Errorf("the culprit's owner reads %q, want %q and the pipeline's link", note, told)
		}
	})
}

// A pipeline that takes longer than poll.timeout stops the batch at BLOCKED (WAIT_MANUAL); an
// operator's retry resumes the batch from GitLab's state, where the pipeline has passed since.
func TestABatchPipelineTimeoutWaitsForAnOperatorWhoseRetryFinishesIt(t *testing.T) {
	t.Parallel()
	extra := strings.NewReplacer("timeout: 10s", "timeout: 100ms", "pipelineDuration: 0s", "pipelineDuration: 1500ms").Replace(fastSims)
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		// GitLab's clock stands still until the batch is BLOCKED: on a loaded machine the
		// pipeline would otherwise pass before the engine gets to see it time out.
		clock := testkit.NewClock(time.Now())
		h := setup(t, db, options{approvalFirst: true, realBatch: true, clock: clock, extra: extra})
		op := h.approved("alice", "db-read")[0]
		h.round()
		v := h.waitState(op, state.StatusMRCreating, state.StepCreatePipelinePending)
		wantState(t, v, state.StatusMRCreating, state.StepCreatePipelinePending, state.NextWaitManual)
		if b, _ := db.Batch(bg, v.BatchID); b.Status != state.BatchBlocked {
			t.Fatalf("batch %s, want BLOCKED", b.Status)
		}
		var stuck api.Page[api.RequestSummary]
		if h.api("GET", "/api/ops/requests", "ops", "", &stuck); len(stuck.Items) != 1 || stuck.Items[0].OperationID != op {
			t.Fatalf("stuck list %+v", stuck.Items)
		}
		clock.Advance(time.Minute)
		h.waitFor("the pipeline to pass in GitLab", func() bool {
			mr, err := h.gl.GetMergeRequest(bg, project, v.MR.ID)
			return err == nil && mr.HeadPipeline != nil && mr.HeadPipeline.Outcome() == gitlab.Passed
		})
		if code := h.retry(op); code != 202 {
			t.Fatalf("retry: %d", code)
		}
		h.roundUntil("validated", func() bool { return h.view(op).Status == state.StatusValidated })
	})
}

// Settlement closes the MR and reads it again: an MR merged meanwhile wins over the close, and
// its members are MERGED (then validated), never failed. Here the batch is BLOCKED on a pipeline
// that outlived poll.timeout, someone merges the MR by hand once it passed, and an operator then
// settles the batch.
func TestTheMergeWinsOverTheCloseWhenAnOperatorSettles(t *testing.T) {
	t.Parallel()
	extra := strings.NewReplacer("timeout: 10s", "timeout: 100ms", "pipelineDuration: 0s", "pipelineDuration: 1500ms",
		"approvalsRequired: 2", "approvalsRequired: 0").Replace(fastSims)
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		clock := testkit.NewClock(time.Now()) // the pipeline passes only once the batch is BLOCKED
		h := setup(t, db, options{approvalFirst: true, realBatch: true, clock: clock, extra: extra})
		op := h.approved("alice", "db-read")[0]
		h.round()
		v := h.waitState(op, state.StatusMRCreating, state.StepCreatePipelinePending)
		clock.Advance(time.Minute)
		h.waitFor("the pipeline to pass in GitLab", func() bool {
			mr, err := h.gl.GetMergeRequest(bg, project, v.MR.ID)
			return err == nil && mr.HeadPipeline != nil && mr.HeadPipeline.Outcome() == gitlab.Passed
		})
		mr, err := h.gl.GetMergeRequest(bg, project, v.MR.ID)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := h.gl.Merge(bg, project, mr.IID, gitlab.MergeOptions{SHA: mr.SHA}); err != nil {
			t.Fatalf("merge by hand: %v", err)
		}
		h.settleBatch(v.BatchID)
		if b := h.settledBatch(v.BatchID); b.Status != state.BatchSucceeded {
			t.Fatalf("settled %s: the merge must win", b.Status)
		}
		h.waitFor("validated (deploy callback, or its replay by reconciliation)", func() bool {
			if _, err := h.wf.Reconcile(bg); err != nil {
				t.Fatal(err)
			}
			return h.view(op).Status == state.StatusValidated
		})
		var again api.BatchView
		if code := h.api("POST", fmt.Sprintf("/api/ops/batches/%d/settle", v.BatchID), "ops", `{"operationId":"settle-2"}`, &again); code != 409 {
			t.Fatalf("settling a settled batch: %d", code)
		}
	})
}

// An operator settles a batch whose pipeline hung (BLOCKED, its MR open): its member does not read
// that bindery could not prepare the merge request, nor that operators will retry it — nothing
// is scheduled — but that its batch was stopped before the merge, that nothing tries it again by
// itself, and its two ways out; its MR is named. The operator reading it gets Retry and Withdraw.
func TestASettledBatchTellsItsMembersWhatHappenedAndWhatComesNext(t *testing.T) {
	t.Parallel()
	extra := strings.NewReplacer("timeout: 10s", "timeout: 100ms", "pipelineDuration: 0s", "pipelineDuration: 1h").Replace(fastSims)
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		h := setup(t, db, options{approvalFirst: true, realBatch: true, extra: extra})
		op := h.approved("alice", "db-read")[0]
		h.round()
		v := h.waitState(op, state.StatusMRCreating, state.StepCreatePipelinePending)
		h.settleBatch(v.BatchID)
		if b := h.settledBatch(v.BatchID); b.Status != state.BatchFailed {
			t.Fatalf("settled %s", b.Status)
		}
		h.waitState(op, state.StatusCreateFailed, state.StepBatchAbandoned)
		var mine api.RequestView
		if code := h.api("GET", "/api/requests/"+op, "alice", "", &mine); code != 200 {
			t.Fatalf("view: %d", code)
		}
		if mine.Label != "Its batch was stopped before the merge" || mine.NextAction != state.NextWaitManual || !mine.Withdrawable {
			t.Errorf("its requester reads %q, %s, withdrawable %v", mine.Label, mine.NextAction, mine.Withdrawable)
		}
		for _, want := range []string{"was stopped before its merge request merged", "Nothing tries it again by itself", "withdraw this request and apply again"} {
			if !strings.Contains(mine.NextActionText, want) {
				t.Errorf("its requester reads %q, without %q", mine.NextActionText, want)
			}
		}
		for _, wrong := range []string{"could not prepare", "operators will retry", "keep waiting"} {
			if strings.Contains(strings.ToLower(mine.NextActionText+" "+mine.Label), wrong) {
				t.Errorf("its requester reads %q / %q", mine.Label, mine.NextActionText)
			}
		}
		if mine.MR == nil || mine.MR.ID != v.MR.ID {
			t.Errorf("its MR is not named: %+v", mine.MR)
		}
		ops := h.view(op)
		if !strings.Contains(ops.NextActionText, "Retry it; or withdraw it") || strings.Contains(strings.ToLower(ops.NextActionText), "contact") {
			t.Errorf("an operator reads %q", ops.NextActionText)
		}
	})
}

// The deploy callback and the reconciliation race for the same requests: each is validated once,
// and the metric counts each once.
func TestADeployCallbackRacingReconciliationValidatesOnce(t *testing.T) {
	t.Parallel()
	extra := strings.Replace(fastSims, "    delay: 0s\n", "    delay: 0s\n    dropRate: 1\n", 1) + "reconcile:\n  minAge: 1ms\n"
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		h := setup(t, db, options{extra: extra})
		var ops []string
		var mrs []int64
		for _, user := range []string{"alice", "bob", "ops"} {
			op := h.apply(user, "db-read")
			h.waitState(op, state.StatusApprovalSent, 0)
			h.decide(op, sim.TicketApproved)
			v := h.waitState(op, state.StatusMerged, 0) // the deploy simulator drops every callback
			ops, mrs = append(ops, op), append(mrs, v.MR.ID)
		}
		var wg sync.WaitGroup
		for i := range 3 {
			wg.Add(2)
			go func() { defer wg.Done(); h.deploy(api.DeployCallback{Project: project, MRIID: mrs[2-i]}) }()
			go func() {
				defer wg.Done()
				if _, err := h.wf.Reconcile(bg); err != nil {
					t.Error(err)
				}
			}()
		}
		wg.Wait()
		if _, err := h.wf.Reconcile(bg); err != nil {
			t.Fatal(err)
		}
		for _, op := range ops {
			if v := h.view(op); v.Status != state.StatusValidated {
				t.Fatalf("%s: %s", op, v.Status)
			}
		}
		total := 0
		for _, via := range []string{"callback", "reconcile"} {
			var n int
			fmt.Sscan(h.metric(`bindery_requests_validated_total{via="`+via+`",project="infra/access-config"}`), &n)
			total += n
		}
		if total != 3 {
			t.Fatalf("validated counted %d times for 3 requests", total)
		}
		for _, op := range ops {
			if got := h.validatedLines(op); len(got) != 1 {
				t.Fatalf("%s validated logged %d times: %q", op, len(got), got)
			}
		}
		if code, answer := h.deploy(api.DeployCallback{Project: project, MRIID: mrs[0]}); code != 200 || answer != "DUPLICATE" {
			t.Fatalf("repeated callback: %d %s", code, answer)
		}
	})
}

// A lost deploy callback is closed by reconciliation once a later MR of the project is called
// back (MR numbers grow, the deploy pipeline runs in merge order).
func TestALostDeployCallbackIsReconciled(t *testing.T) {
	t.Parallel()
	extra := strings.Replace(fastSims, "    delay: 0s\n", "    delay: 0s\n    dropRate: 1\n", 1) + "reconcile:\n  minAge: 1ms\n"
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		h := setup(t, db, options{extra: extra})
		lost := h.apply("alice", "db-read")
		h.waitState(lost, state.StatusApprovalSent, 0)
		h.decide(lost, sim.TicketApproved)
		h.waitState(lost, state.StatusMerged, 0)
		if res, err := h.wf.Reconcile(bg); err != nil || res.Validated != 0 {
			t.Fatalf("reconcile without a later callback: %+v %v", res, err)
		}

		later := h.apply("bob", "db-read")
		h.waitState(later, state.StatusApprovalSent, 0)
		h.decide(later, sim.TicketApproved)
		lv := h.waitState(later, state.StatusMerged, 0)
		if code, _ := h.deploy(api.DeployCallback{Project: project, MRIID: lv.MR.ID, OperationIDs: []string{later}}); code != 200 {
			t.Fatalf("deploy: %d", code)
		}
		h.waitState(later, state.StatusValidated, state.StepCalledBack)
		if v := h.view(lost); v.Status != state.StatusMerged {
			t.Fatalf("an exact callback validated another request: %s", v.Status)
		}
		var res api.ReconcileResult
		if code := h.api("POST", "/api/ops/reconcile", "ops", `{"operationId":"reconcile-1"}`, &res); code != 200 || res.Validated != 1 {
			t.Fatalf("reconcile: %d %+v", code, res)
		}
		h.waitState(lost, state.StatusValidated, state.StepCalledBack)
		if got := h.metric(`bindery_requests_validated_total{via="reconcile",project="infra/access-config"}`); got != "1" {
			t.Fatalf("reconciled metric %q", got)
		}
	})
}

// validatedLines are the "validated" log lines of op.
func (h *harness) validatedLines(op string) []string {
	var out []string
	for _, line := range strings.Split(h.logs.String(), "\n") {
		if strings.Contains(line, " msg=validated ") && strings.Contains(line, " operation="+op+" ") {
			out = append(out, line)
		}
	}
	return out
}

// A batch whose failure could not be settled (GitLab fails the close) says so in the ops view:
// the decided failure and the last error, with no internals in them.
func TestTheOpsViewShowsABatchWhoseSettlementFailed(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		h := setup(t, db, options{approvalFirst: true, realBatch: true})
		f := h.sims.GitLab.Faults()
		f.DeniedApprovers, f.DeniedApproveStatus = []string{sim.ReviewerUsername(0)}, 403
		h.sims.GitLab.SetFaults(f)
		h.sims.GitLab.Inject("update_mr", sim.FaultError, 1000)
		op := h.approved("alice", "db-read")[0]
		h.round()
		var batches api.Page[api.BatchView]
		h.waitFor("the pending settlement in the ops view", func() bool {
			h.api("GET", "/api/ops/batches", "ops", "", &batches)
			return len(batches.Items) == 1 && batches.Items[0].Failing != "" && batches.Items[0].LastError != ""
		})
		b := batches.Items[0]
		if b.Status != "RUNNING" || !strings.Contains(b.LastError, "HTTP 500") || strings.Contains(b.LastError, "127.0.0.1") ||
			strings.HasPrefix(b.Failing, "10") || b.Note == "" {
			t.Fatalf("batch view: %+v", b)
		}
		if v := h.view(op); v.Status != state.StatusMerging {
			t.Fatalf("member: %s", v.Status)
		}
	})
}

// settleBatch settles batch id as an operator, again while the API answers that a step of the
// batch runs right now (409, "look again in a moment").
func (h *harness) settleBatch(id int64) {
	h.t.Helper()
	h.waitFor(fmt.Sprintf("batch %d's settlement to be accepted", id), func() bool {
		var e struct{ Code, Message string }
		req := fmt.Sprintf(`{"operationId":"settle-%d-%d"}`, id, opSeq.Add(1))
		code := h.api("POST", fmt.Sprintf("/api/ops/batches/%d/settle", id), "ops", req, &e)
		switch {
		case code == 200:
			return true
		case code == 409 && strings.Contains(e.Message, "running right now"):
			return false
		}
		h.t.Fatalf("settle: %d %+v", code, e)
		return false
	})
}

// settledBatch waits until batch id is SUCCEEDED or FAILED and returns it.
func (h *harness) settledBatch(id int64) store.Batch {
	h.t.Helper()
	var b store.Batch
	h.waitFor(fmt.Sprintf("batch %d to be settled", id), func() bool {
		var err error
		b, err = h.db.Batch(bg, id)
		return err == nil && !b.Status.Active()
	})
	return b
}

// The durable-execution scenario: more batches wait on CI (pipelines of an hour) than there are
// background workers, and a new application's approval ticket is still sent at once — the
// batches' waits are rows with due times, not workers, and the first steps have their own lane.
// (Its latency against idle is measured by BenchmarkFirstStepWithBatchesInCI.)
func TestANewApplicationIsNotDelayedByBatchesWaitingOnCI(t *testing.T) {
	t.Parallel()
	var targets strings.Builder
	targets.WriteString("targets:\n")
	for i := range 12 {
		fmt.Fprintf(&targets, "  - {key: p%02d, title: P%d, project: infra/p%02d, path: \"bindings/{subject}.yaml\"}\n", i, i, i)
	}
	extra := strings.Replace(fastSims, "pipelineDuration: 0s", "pipelineDuration: 1h", 1) + targets.String()
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		h := setup(t, db, options{approvalFirst: true, realBatch: true, extra: extra, workers: 2, first: 1})
		var waiting []string
		for i := range 10 {
			waiting = append(waiting, h.approved("alice", fmt.Sprintf("p%02d", i))...)
		}
		h.roundUntil("10 batches waiting on CI", func() bool {
			return h.count("SELECT COUNT(*) FROM task WHERE kind = 'batch' AND step = 'pipeline' AND checks > 0") == 10
		})
		if n := h.currentEngine().Running(engine.LaneBackground); n > 2 {
			t.Fatalf("%d background actions with 2 workers", n)
		}
		op := h.apply("bob", "p11")
		v := h.waitState(op, state.StatusApprovalSent, state.StepApprovalSent)
		if w := v.Waiting; w == nil || w.WaitingFor != "the approvers in the approval system" {
			t.Fatalf("waiting: %+v", w)
		}
		for _, id := range waiting {
			if w := h.view(id).Waiting; w == nil || !strings.Contains(w.WaitingFor, "the pipeline of merge request !1 to pass") {
				t.Fatalf("%s waiting: %+v", id, w)
			}
		}
	})
}
