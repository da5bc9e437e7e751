package batch_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"bindery/batch"
	"bindery/internal/platform/config"
	"bindery/internal/remote/gitlab"
	"bindery/internal/sim"
	"bindery/internal/vocab/state"
	"bindery/internal/work/change"
	"bindery/store"
	"bindery/store/storetest"
)

// One member whose change breaks CI among 8: the batch is bisected until the culprit is alone;
// it ends CREATE_FAILED / CREATE_PIPELINE_FAILED (contact support) and the other 7 merge.
func TestOneBadMemberAmongEightIsIsolatedByBisectionAndTheOtherSevenMerge(t *testing.T) {
	for _, culprit := range []int{1, 6} { // in the half that stays, in the half that goes back
		t.Run(fmt.Sprintf("culprit %d", culprit), func(t *testing.T) {
			storetest.Each(t, func(t *testing.T, db *store.DB) {
				e := setup(t, db, settings{})
				f := e.gl.Faults()
				f.PipelineFailOn = []string{"breaks-ci"}
				e.gl.SetFaults(f)
				svc := e.service(t, "i1")
				var ids []string
				for i := range 8 {
					id, reason := fmt.Sprintf("op-%d", i), "needs access"
					if i == culprit {
						reason = "breaks-ci"
					}
					e.admit(t, id, fmt.Sprintf("user-%d", i), "t1", reason)
					ids = append(ids, id)
				}
				batches := e.drain(t, svc, projectA)

				for i, id := range ids {
					if i == culprit {
						e.expect(t, id, state.StatusCreateFailed, state.StepCreatePipelineFailed, state.NextContactSupport)
						if e.onMain(t, "t1", fmt.Sprintf("user-%d", i)) {
							t.Errorf("the culprit's file landed")
						}
						continue
					}
					e.expect(t, id, state.StatusMerged, state.StepHandleMerged, state.NextWait)
					if !e.onMain(t, "t1", fmt.Sprintf("user-%d", i)) {
						t.Errorf("%s: file not on main", id)
					}
				}
				var lastID int64
				if err := db.Raw().QueryRowContext(bg, "SELECT batch_id FROM merge_batch_member WHERE operation_id = ? ORDER BY id DESC LIMIT 1", ids[culprit]).Scan(&lastID); err != nil {
					t.Fatal(err)
				}
				last, _ := db.Batch(bg, lastID)
				if last.Status != state.BatchFailed {
					t.Fatalf("the culprit's last batch: %+v", last)
				}
				if n := e.count(t, "SELECT COUNT(*) FROM operation WHERE batch_id = ? AND status = ?", lastID, state.StatusMerged); n != 0 {
					t.Fatalf("%d members merged with the culprit's failed batch", n)
				}
				if n := e.count(t, "SELECT COUNT(*) FROM merge_batch_request WHERE operation_id = ?", ids[culprit]); n != 0 {
					t.Fatalf("the failed culprit still has %d processing rows", n)
				}
				if n := e.sink.count(`bindery_batch_bisections_total{project="infra/access-config"}`); n < 3 {
					t.Fatalf("%d bisections, want at least 3 to isolate one in 8", n)
				}
				t.Logf("batches: %d", len(batches))
			})
		})
	}
}

// A flaky pipeline gets one new run on the same commit, which passes: nothing is bisected and
// every member merges.
func TestAFlakyPipelineIsRetriedOnceThenPasses(t *testing.T) {
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		e := setup(t, db, settings{})
		svc := e.service(t, "i1")
		ids := e.admitMany(t, "flaky", "t1", 3)
		e.gl.FailNextPipelines(1)
		batches := e.drain(t, svc, projectA)
		if len(batches) != 1 || batches[0].Status != state.BatchSucceeded {
			t.Fatalf("batches: %+v", batches)
		}
		for _, id := range ids {
			e.expect(t, id, state.StatusMerged, state.StepHandleMerged, state.NextWait)
		}
		if n := e.gl.Calls("retry_pipeline"); n != 1 {
			t.Fatalf("%d pipeline retries, want 1", n)
		}
		if n := e.sink.count(`bindery_batch_bisections_total{project="infra/access-config"}`); n != 0 {
			t.Fatalf("a flaky failure was bisected %d times", n)
		}
	})
}

// With batch.flakyRetries 0 a failed pipeline of a single member is final at once.
func TestWithoutFlakyRetriesASingleMembersFailedPipelineIsFinal(t *testing.T) {
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		e := setup(t, db, settings{flakyRetries: -1})
		svc := e.service(t, "i1")
		e.admit(t, "op-1", "alice", "t1", "please")
		e.gl.FailNextPipelines(1)
		o := e.round(t, svc, projectA)
		if b := e.stopped(t, o.BatchID); b.Status != state.BatchFailed {
			t.Fatalf("batch: %+v", b)
		}
		e.expect(t, "op-1", state.StatusCreateFailed, state.StepCreatePipelineFailed, state.NextContactSupport)
		if n := e.gl.Calls("create_mr_pipeline"); n != 0 {
			t.Fatalf("%d retries with flakyRetries 0", n)
		}
		if st := e.gl.MergeRequestState(projectA, 1); st != "closed" {
			t.Fatalf("the failed batch's MR is %q, want closed", st)
		}
	})
}

// A pipeline that gives no answer within poll.timeout stops the batch BLOCKED (it keeps the
// slot) and its members at CREATE_PIPELINE_PENDING / WAIT_MANUAL; once the pipeline finished,
// an operator's resume reads the remote state and finishes the batch on the same MR.
func TestAPipelineTimeoutBlocksTheBatchAndResumeFinishesIt(t *testing.T) {
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		e := setup(t, db, settings{manualClock: true, pipelineTime: 10 * time.Minute, pollTimeout: 300 * time.Millisecond})
		svc := e.service(t, "i1")
		ids := e.admitMany(t, "slow", "t1", 2)
		o := e.round(t, svc, projectA)
		b := e.stopped(t, o.BatchID)
		if b.Status != state.BatchBlocked || b.MRIID == 0 || e.task(t, b.ID).Step != "blocked" {
			t.Fatalf("after the timeout: %+v", b)
		}
		for _, id := range ids {
			e.expect(t, id, state.StatusMRCreating, state.StepCreatePipelinePending, state.NextWaitManual)
		}
		e.admit(t, "late", "late-user", "t1", "later")
		if o := e.round(t, svc, projectA); o.Result != state.RoundSlotOccupied {
			t.Fatalf("a blocked batch must keep its partition's slot: %+v", o)
		}

		e.clock.Advance(11 * time.Minute) // the pipeline finished meanwhile
		if err := svc.Resume(bg, b.ID); err != nil {
			t.Fatal(err)
		}
		e.landedOnOneMR(t, b.ID, ids)
	})
}

// A rebase that conflicts even after the branch was regenerated from the target head is a
// property of the member set: the batch is bisected like a failed pipeline, and a single member
// fails with HANDLE_REBASE_CONFLICT (contact support) — the batch is never BLOCKED, so the
// partition is never held for batch.blockedTimeout behind it. Here every rebase conflicts: each
// member ends failed on its own, the MRs are closed, and the partition drains.
func TestAPersistentConflictIsBisectedNotBlocked(t *testing.T) {
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		e := setup(t, db, settings{})
		f := e.gl.Faults()
		f.NeedRebaseRate, f.RebaseConflictRate = 1, 1
		e.gl.SetFaults(f)
		svc := e.service(t, "i1")
		ids := e.admitMany(t, "conflict", "t1", 2)
		batches := e.drain(t, svc, projectA)
		if len(batches) != 2 {
			t.Fatalf("batches: %+v", batches)
		}
		for _, b := range batches {
			if b.Status != state.BatchFailed || e.gl.MergeRequestState(projectA, b.MRIID) != "closed" {
				t.Fatalf("batch %d: %s, MR %s", b.ID, b.Status, e.gl.MergeRequestState(projectA, b.MRIID))
			}
		}
		for _, id := range ids {
			e.expect(t, id, state.StatusHandleFailed, state.StepHandleRebaseConflict, state.NextContactSupport)
		}
		if n := e.sink.count(`bindery_batch_bisections_total{project="infra/access-config"}`); n != 1 {
			t.Fatalf("%d bisections, want 1", n)
		}
	})
}

// An MR closed outside bindery while its pipeline runs: the webhook's Wake makes the batch look
// now (its next look would be an hour away); the batch fails with HANDLE_MR_CLOSED and the
// members leave the waiting set.
func TestAnMRClosedOutsideFailsTheBatchWithHandleMRClosed(t *testing.T) {
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		e := setup(t, db, settings{manualClock: true, pipelineTime: 10 * time.Minute, pollTimeout: 2 * time.Hour, pollInterval: time.Hour})
		svc := e.service(t, "i1")
		ids := e.admitMany(t, "closed", "t1", 2)
		o := e.round(t, svc, projectA)
		var b store.Batch
		waitFor(t, "the MR to be recorded", func() bool {
			b, _ = db.Batch(bg, o.BatchID)
			return b.MRIID != 0
		})
		waitFor(t, "the batch to wait an hour for its next look", func() bool { return e.task(t, b.ID).Overdue < -30*time.Minute })
		if _, err := e.runner.GitLab.CloseMergeRequest(bg, projectA, b.MRIID); err != nil {
			t.Fatal(err)
		}
		if n, err := svc.Wake(bg, projectA, b.MRIID); err != nil || n != 1 {
			t.Fatalf("wake: %d %v", n, err)
		}
		if b = e.stopped(t, b.ID); b.Status != state.BatchFailed {
			t.Fatalf("batch: %+v", b)
		}
		for _, id := range ids {
			e.expect(t, id, state.StatusCreateFailed, state.StepHandleMRClosed, state.NextContactSupport)
		}
		if n := e.count(t, "SELECT COUNT(*) FROM merge_batch_request WHERE batch_id = ?", b.ID); n != 0 {
			t.Fatalf("%d processing rows kept by the failed batch", n)
		}
	})
}

// batch.maxWait: a round leaves a partition alone until batch.maxRequests wait or the oldest
// waited long enough.
func TestARoundWaitsForASizeOrAnAge(t *testing.T) {
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		e := setup(t, db, settings{maxRequests: 3, maxWait: time.Hour})
		svc := e.service(t, "i1")
		e.admitMany(t, "few", "t1", 2)
		if o := e.round(t, svc, projectA); o.Result != state.RoundNotDue || o.Err != nil {
			t.Fatalf("2 of 3 waiting, younger than maxWait: %+v", o)
		}
		e.admit(t, "third", "user-third", "t1", "x")
		o := e.round(t, svc, projectA)
		if o.Result != state.RoundClaimed || o.Claimed != 3 {
			t.Fatalf("3 of 3: %+v", o)
		}
		e.stopped(t, o.BatchID)
	})
}

// An error the runner does not handle ends in the declared failure of the step it was in: the
// reviewer accounts may not approve (403) → the batch fails, its MR closed, its members
// HANDLE_FAILED / HANDLE_APPROVE_FAILED, which operators can retry.
func TestAnUnhandledErrorEndsInTheStepsDeclaredFailure(t *testing.T) {
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		e := setup(t, db, settings{})
		f := e.gl.Faults()
		f.DeniedApprovers, f.DeniedApproveStatus = []string{"reviewer-1", "reviewer-2"}, 403
		e.gl.SetFaults(f)
		svc := e.service(t, "i1")
		ids := e.admitMany(t, "denied", "t1", 2)
		o := e.round(t, svc, projectA)
		b := e.stopped(t, o.BatchID)
		if b.Status != state.BatchFailed {
			t.Fatalf("batch: %+v", b)
		}
		e.failedOnApprove(t, b, ids)
	})
}

// GitLab answering 500 says nothing about the batch: nothing fails, the batch stays RUNNING and
// its task says why it is not moving, trying again with backoff; once GitLab is back it lands.
func TestAnUnavailableGitLabIsRetriedUntilItIsBack(t *testing.T) {
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		e := setup(t, db, settings{})
		f := e.gl.Faults()
		f.ErrorRate, f.Endpoints = 1, []string{"approve"}
		e.gl.SetFaults(f)
		svc := e.service(t, "i1")
		ids := e.admitMany(t, "outage", "t1", 2)
		o := e.round(t, svc, projectA)
		waitFor(t, "the batch to retry the unavailable GitLab", func() bool {
			task := e.task(t, o.BatchID)
			return task.Failures >= 3 && strings.HasPrefix(task.Note, "a dependency is unavailable (gitlab approve: HTTP 500")
		})
		if b, _ := db.Batch(bg, o.BatchID); b.Status != state.BatchRunning {
			t.Fatalf("batch: %+v", b)
		}
		for _, id := range ids {
			e.expect(t, id, state.StatusMerging, state.StepHandleStarted, state.NextWait)
		}
		e.gl.ResetFaults()
		e.landedOnOneMR(t, o.BatchID, ids)
	})
}

// An operator settles a batch that waits out a GitLab outage between retries (its next try an
// hour away): the settlement runs at once and stands, and nothing is logged as an error.
func TestSettlingABatchWaitingOutAnOutageSettlesItAtOnce(t *testing.T) {
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		e := setup(t, db, settings{pollInterval: time.Hour}) // the retry waits an hour (the pipeline passes at its first read)
		f := e.gl.Faults()
		f.ErrorRate, f.Endpoints = 1, []string{"approve"}
		e.gl.SetFaults(f)
		svc := e.service(t, "i1")
		ids := e.admitMany(t, "waiting", "t1", 2)
		o := e.round(t, svc, projectA)
		waitFor(t, "the batch to wait out the outage", func() bool {
			task := e.task(t, o.BatchID)
			return strings.HasPrefix(task.Note, "a dependency is unavailable") && task.Overdue < -30*time.Minute
		})
		e.gl.ResetFaults()
		if err := svc.Settle(bg, o.BatchID, "ops@example.com"); err != nil {
			t.Fatal(err)
		}
		if b := e.stopped(t, o.BatchID); b.Status != state.BatchFailed || !strings.Contains(b.Note, "settled by ops@example.com") {
			t.Fatalf("batch: %+v", b)
		}
		for _, id := range ids {
			e.expect(t, id, state.StatusHandleFailed, state.StepBatchAbandoned, state.NextWaitManual)
		}
		if l := e.logs.Lines("level=ERROR", fmt.Sprintf("batch=%d ", o.BatchID)); len(l) != 0 {
			t.Fatalf("the stopped runner logged a failure: %s", l)
		}
	})
}

// panickingApprove is the real GitLab client, except that approving panics.
type panickingApprove struct{ gitlab.API }

func (panickingApprove) Approve(context.Context, string, int64, string) error {
	panic("approve component exploded")
}

// A panic inside a step is the step's failure, not a batch that looks busy forever: the batch
// fails with the approve step's declared failure and its MR is closed. The panic's text stays
// in the log: members and operators read "unexpected error".
func TestAPanicInAStepEndsInItsDeclaredFailure(t *testing.T) {
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		e := setup(t, db, settings{})
		e.runner = &change.Runner{GitLab: panickingApprove{e.runner.GitLab}, Log: e.runner.Log}
		svc := e.service(t, "i1")
		ids := e.admitMany(t, "panic", "t1", 2)
		o := e.round(t, svc, projectA)
		b := e.stopped(t, o.BatchID)
		if b.Status != state.BatchFailed || !strings.Contains(b.Note, "unexpected error") || strings.Contains(b.Note, "exploded") {
			t.Fatalf("batch: %+v", b)
		}
		e.failedOnApprove(t, b, ids)
		for _, id := range ids {
			for _, s := range e.steps(t, id) {
				if strings.Contains(s.Note, "exploded") {
					t.Fatalf("the panic's text reached %s's timeline: %q", id, s.Note)
				}
			}
		}
		if l := e.logs.Lines("approve component exploded"); len(l) == 0 {
			t.Fatal("the panic is not in the log")
		}
	})
}

// A target removed from the catalog after its requests were admitted: the requests whose change
// was validated and recorded at admission still land (in-flight requests finish: docs/workflow.md,
// 'Targets and the file change'); one admitted without it cannot be rendered any more and fails
// alone (CREATE_INVALID) while the rest of its batch goes on.
func TestRequestsOfARemovedTargetFinishAsAdmitted(t *testing.T) {
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		e := setup(t, db, settings{})
		svc := e.service(t, "i1")
		e.admit(t, "kept-1", "alice", "t2", "x")
		e.admit(t, "kept-2", "bob", "t1", "x")
		r, err := db.Apply(bg, store.Application{OperationID: "bare", SubjectID: "carol", TargetKey: "t2", Project: projectA,
			Flow: "approval-first", Reason: "x", Status: state.StatusApprovalSending, Step: state.StepApprovalSending})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := db.Transition(bg, r, store.Change{To: state.StatusMRCreating, Step: state.StepQueued}); err != nil {
			t.Fatal(err)
		}
		if _, err := db.Admit(bg, store.Admission{OperationID: "bare", Action: state.ActionAdd, Partition: projectA}); err != nil {
			t.Fatal(err)
		}

		without := strings.Replace(settings{}.config(), "  - key: t2\n", "  - key: t2-renamed\n", 1)
		e.src.Replace(config.MustParse(without))
		batches := e.drain(t, svc, projectA)
		if len(batches) != 1 || batches[0].Status != state.BatchSucceeded {
			t.Fatalf("batches: %+v", batches)
		}
		e.expect(t, "kept-1", state.StatusMerged, state.StepHandleMerged, state.NextWait)
		e.expect(t, "kept-2", state.StatusMerged, state.StepHandleMerged, state.NextWait)
		e.expect(t, "bare", state.StatusCreateFailed, state.StepCreateInvalid, state.NextContactSupport)
		if _, ok := e.gl.File(projectA, "main", "bindings/t2/alice.yaml"); !ok {
			t.Fatal("the removed target's admitted file did not land")
		}
		if n := e.count(t, "SELECT COUNT(*) FROM merge_batch_request WHERE operation_id = 'bare'"); n != 0 {
			t.Fatalf("the failed member is still in the waiting set")
		}
	})
}

// A batch fails (the reviewers may not approve), and settling it fails too: GitLab answers 500
// to the close. The failure was decided before the close (write-ahead) and is not lost: the
// batch stays active with the decided failure and the last error on it, the settlement is tried
// again, and once GitLab is back it goes through as decided — the MR closed, the members failed
// with the approve step's failure — without running the batch again.
func TestAFailedSettlementIsRecordedOnTheBatchAndRetriedAsDecided(t *testing.T) {
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		e := setup(t, db, settings{})
		_, ids, b := e.unsettleableBatch(t, "unsettled")
		batchID := b.ID
		if b.Status != state.BatchRunning || !strings.Contains(b.LastError, "HTTP 500") || strings.Contains(b.LastError, "127.0.0.1") ||
			batch.PendingFailure(b) == "" || !strings.Contains(b.Note, "retrying") {
			t.Fatalf("batch: %+v", b)
		}
		for _, id := range ids {
			e.expect(t, id, state.StatusMerging, state.StepHandleStarted, state.NextWait)
		}
		if n := e.sink.count(`bindery_batch_settle_failures_total{project="infra/access-config"}`); n < 1 {
			t.Fatalf("settle failures counted %d times", n)
		}

		// GitLab is back: the next try settles it as decided, approving nothing again.
		approves := e.gl.Calls("approve")
		e.gl.ResetFaults()
		e.failClose.Store(false)
		if b = e.stopped(t, batchID); b.Status != state.BatchFailed || b.Failing != "" || b.LastError != "" {
			t.Fatalf("batch after GitLab came back: %+v", b)
		}
		if n := e.gl.Calls("approve"); n != approves {
			t.Fatalf("the batch ran again: %d approve calls, was %d", n, approves)
		}
		e.failedOnApprove(t, b, ids)
	})
}

// An operator's resume overrides a pending failed settlement: the decided failure and the last
// error are cleared and the runner decides again from the remote state (it approves again, not
// the sweep's settle-as-decided), and with GitLab back the batch ends settled.
func TestResumingABatchWithAPendingSettlementRunsItAgain(t *testing.T) {
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		e := setup(t, db, settings{})
		svc, ids, pending := e.unsettleableBatch(t, "reresumed")
		approves := e.gl.Calls("approve")
		// The settle step keeps trying the close: the operator tries again while it runs (409).
		waitFor(t, "the operator's resume to be accepted", func() bool {
			err := svc.Resume(bg, pending.ID)
			if err != nil && !errors.Is(err, batch.ErrBusy) && !errors.Is(err, store.ErrPreempted) {
				t.Fatalf("resume: %v", err)
			}
			return err == nil
		})
		if b, _ := db.Batch(bg, pending.ID); b.Status != state.BatchRunning || b.Failing != "" || b.LastError != "" || batch.PendingFailure(b) != "" {
			t.Fatalf("batch after the resume: %+v", b)
		}
		e.failClose.Store(false) // the close works again; the reviewer still may not approve
		b := e.stopped(t, pending.ID)
		if b.Status != state.BatchFailed || b.Failing != "" || b.LastError != "" {
			t.Fatalf("batch: %+v", b)
		}
		if n := e.gl.Calls("approve"); n <= approves {
			t.Fatalf("the resumed batch was not run again: %d approve calls, was %d", n, approves)
		}
		e.failedOnApprove(t, b, ids)
	})
}

// GitLab answers a rebase with 409 (one is under way already, or it could not enqueue it yet):
// the merge waits for the rebase like for its own and asks again, and the batch lands.
func TestABusyRebaseIsWaitedForNotAFailure(t *testing.T) {
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		e := setup(t, db, settings{pipelineTime: time.Second})
		svc := e.service(t, "i1")
		ids := e.admitMany(t, "busy", "t1", 2)
		o := e.round(t, svc, projectA)
		waitFor(t, "the MR to be recorded", func() bool {
			b, _ := db.Batch(bg, o.BatchID)
			return b.MRIID != 0
		})
		// Someone else's commit on the target while the pipeline runs: the merge must rebase.
		if _, err := e.gl.PushToBranch(projectA, "main", "elsewhere.txt", "theirs\n"); err != nil {
			t.Fatal(err)
		}
		e.gl.Inject("rebase", sim.FaultStatus(http.StatusConflict, "Failed to enqueue the rebase operation, possibly due to a long-lived transaction. Try again later."), 1)
		e.landedOnOneMR(t, o.BatchID, ids)
		if n := e.gl.Calls("rebase"); n != 2 {
			t.Fatalf("%d rebase calls, want 2 (the busy one, then the rebase)", n)
		}
	})
}

// A pipeline that gives no answer within poll.timeout (a hung runner) is replaced once by a new
// pipeline on the same commit: when that one passes, the batch lands on its one MR without ever
// being BLOCKED, so its partition is never parked for an operator.
func TestAHungPipelineIsReplacedOnceWithoutBlocking(t *testing.T) {
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		e := setup(t, db, settings{pollTimeout: 300 * time.Millisecond})
		e.gl.StickNextPipelines(1)
		svc := e.service(t, "i1")
		ids := e.admitMany(t, "hung", "t1", 2)
		o := e.round(t, svc, projectA)
		if b := e.stopped(t, o.BatchID); b.Status != state.BatchSucceeded {
			t.Fatalf("batch: %+v", b)
		}
		for _, id := range ids {
			e.expect(t, id, state.StatusMerged, state.StepHandleMerged, state.NextWait)
		}
		if n := e.gl.Calls("create_mr_pipeline"); n != 1 {
			t.Fatalf("%d new pipelines, want 1 in place of the hung one", n)
		}
		if n := e.count(t, "SELECT COUNT(*) FROM operation_step WHERE step IN (?, ?)", state.StepCreatePipelinePending, state.StepHandlePipelinePending); n != 0 {
			t.Fatalf("%d members stopped for an operator", n)
		}
	})
}

// A pipeline that never finishes (stuck), nor does the new one started in its place, blocks the
// batch: the project's CI is not answering, which no other batch of the partition could pass. The operator's
// resume must not wait on that same pipeline again (it would block again, forever): it starts a
// new pipeline on the same commit, which passes, and the batch lands on its one MR.
func TestResumingABatchBlockedOnAStuckPipelineStartsANewPipeline(t *testing.T) {
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		e := setup(t, db, settings{pollTimeout: 300 * time.Millisecond})
		svc, ids, o := e.blockedOnStuckPipeline(t, "stuck")
		for _, id := range ids {
			e.expect(t, id, state.StatusMRCreating, state.StepCreatePipelinePending, state.NextWaitManual)
		}
		if err := svc.Resume(bg, o.BatchID); err != nil {
			t.Fatal(err)
		}
		e.landedOnOneMR(t, o.BatchID, ids)
	})
}

// The resume's new pipeline cannot be started at first (GitLab answers 500): the step is tried
// again, starts the new pipeline then, and the batch lands on its one MR.
func TestAResumeWhoseNewPipelineFailsToStartRetriesIt(t *testing.T) {
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		e := setup(t, db, settings{pollTimeout: 300 * time.Millisecond})
		svc, ids, o := e.blockedOnStuckPipeline(t, "restart")
		e.gl.Inject("create_mr_pipeline", sim.FaultError, 1)
		started := e.gl.Calls("create_mr_pipeline")
		if err := svc.Resume(bg, o.BatchID); err != nil {
			t.Fatal(err)
		}
		e.landedOnOneMR(t, o.BatchID, ids)
		if n := e.gl.Calls("create_mr_pipeline") - started; n != 2 {
			t.Fatalf("%d calls to start the new pipeline, want 2 (a failure, then success)", n)
		}
		if l := e.logs.Lines("instance=i1", "retrying", fmt.Sprintf("ref=%d ", o.BatchID)); len(l) != 1 {
			t.Fatalf("want 1 logged retry, got %q", l)
		}
	})
}

// GitLab answering 500 for a moment does not stop the batch: the step backs off and is tried
// again (on whichever instance claims it), and the batch lands on one MR.
func TestAMomentarilyUnavailableGitLabIsRetried(t *testing.T) {
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		e := setup(t, db, settings{})
		e.gl.Inject("create_mr", sim.FaultError, 3)
		svc := e.service(t, "i1")
		ids := e.admitMany(t, "blip", "t1", 2)
		o := e.round(t, svc, projectA)
		// The faults answer before any effect: one MR exists, the project's first.
		if b := e.stopped(t, o.BatchID); b.Status != state.BatchSucceeded || b.MRIID != 1 {
			t.Fatalf("batch: %+v", b)
		}
		for _, id := range ids {
			e.expect(t, id, state.StatusMerged, state.StepHandleMerged, state.NextWait)
		}
		if n := e.gl.Calls("create_mr"); n != 4 {
			t.Fatalf("%d calls to create the MR, want 4 (3 failures, then success)", n)
		}
		if l := e.logs.Lines("level=ERROR"); len(l) != 0 {
			t.Fatalf("errors logged: %s", l)
		}
		if l := e.logs.Lines("instance=i1", "retrying", fmt.Sprintf("ref=%d ", o.BatchID)); len(l) != 3 {
			t.Fatalf("want 3 logged retries, got %q", l)
		}
	})
}

// unsettleableBatch starts a batch of two that fails (a reviewer may not approve) while GitLab
// fails the close, so its settlement fails too; it returns the batch once that failed settlement
// is recorded on it.
func (e *env) unsettleableBatch(t *testing.T, prefix string) (*batch.Service, []string, store.Batch) {
	t.Helper()
	f := e.gl.Faults()
	f.DeniedApprovers, f.DeniedApproveStatus = []string{sim.ReviewerUsername(0)}, 403
	e.gl.SetFaults(f)
	e.failClose.Store(true)
	svc := e.service(t, "i1")
	ids := e.admitMany(t, prefix, "t1", 2)
	o := e.round(t, svc, projectA)
	var b store.Batch
	waitFor(t, "the settlement's failure to be recorded", func() bool {
		b, _ = e.db.Batch(bg, o.BatchID)
		return b.Failing != "" && b.LastError != ""
	})
	return svc, ids, b
}

// failedOnApprove checks that batch b failed in the approve step: its members ids HANDLE_FAILED /
// HANDLE_APPROVE_FAILED (operators may retry them), its MR closed.
func (e *env) failedOnApprove(t *testing.T, b store.Batch, ids []string) {
	t.Helper()
	for _, id := range ids {
		e.expect(t, id, state.StatusHandleFailed, state.StepHandleApproveFailed, state.NextWaitManual)
	}
	if st := e.gl.MergeRequestState(projectA, b.MRIID); st != "closed" {
		t.Fatalf("MR %s", st)
	}
}

// blockedOnStuckPipeline leaves a batch of two BLOCKED on a pipeline that never finishes (past
// poll.timeout), then lets new pipelines pass; the stuck one stays running.
func (e *env) blockedOnStuckPipeline(t *testing.T, prefix string) (*batch.Service, []string, batch.Outcome) {
	t.Helper()
	f := e.gl.Faults()
	f.PipelineStuckRate = 1
	e.gl.SetFaults(f)
	svc := e.service(t, "i1")
	ids := e.admitMany(t, prefix, "t1", 2)
	o := e.round(t, svc, projectA)
	if b := e.stopped(t, o.BatchID); b.Status != state.BatchBlocked {
		t.Fatalf("batch: %+v", b)
	}
	e.gl.ResetFaults()
	return svc, ids, o
}
