package batch_test

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"bindery/batch"
	"bindery/internal/remote/gitlab"
	"bindery/internal/sim"
	"bindery/internal/vocab/state"
	"bindery/store"
	"bindery/store/storetest"
)

// blocked leaves a batch of n members BLOCKED on a pipeline that outlives poll.timeout (its
// pipeline needs 10 simulated minutes) and returns it with the members' ids.
func (e *env) blocked(t *testing.T, svc *batch.Service, prefix string, n int) (store.Batch, []string) {
	t.Helper()
	ids := e.admitMany(t, prefix, "t1", n)
	o := e.round(t, svc, projectA)
	b := e.stopped(t, o.BatchID)
	if b.Status != state.BatchBlocked || b.MRIID == 0 {
		t.Fatalf("want a blocked batch with an MR: %+v", b)
	}
	return b, ids
}

var slowPipelines = settings{manualClock: true, pipelineTime: 10 * time.Minute, pollTimeout: 300 * time.Millisecond}

// The merge lands while the operator's settlement closes the MR: the close finds it merged and
// the batch succeeds — the merge wins the race with the close, members MERGED, files in place.
func TestAMergeRacingTheCloseInSettlementWins(t *testing.T) {
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		e := setup(t, db, slowPipelines)
		svc := e.service(t, "i1")
		b, ids := e.blocked(t, svc, "race", 3)
		e.clock.Advance(11 * time.Minute) // the pipeline passed: the MR can be merged

		var once sync.Once
		var mergeErr error
		merge := func() {
			once.Do(func() {
				mergeErr = e.mergeNow(b.MRIID)
			})
		}
		e.beforeClose.Store(&merge) // the merge lands between settlement's read and its close

		if err := svc.Settle(bg, b.ID, "ops@example.com"); err != nil {
			t.Fatal(err)
		}
		got := e.settled(t, b.ID)
		if mergeErr != nil {
			t.Fatalf("the racing merge: %v", mergeErr)
		}
		if got.Status != state.BatchSucceeded {
			t.Fatalf("batch: %+v", got)
		}
		for i, id := range ids {
			e.expect(t, id, state.StatusMerged, state.StepHandleMerged, state.NextWait)
			if !e.onMain(t, "t1", fmt.Sprintf("user-race-%02d", i)) {
				t.Errorf("%s: file not on main", id)
			}
		}
		if st := e.gl.MergeRequestState(projectA, b.MRIID); st != "merged" {
			t.Fatalf("MR %s", st)
		}
	})
}

// Two operators settle the same batch at once: the settlement happens once — the second asks for
// what is under way already, or is refused because the batch changed or its settle step is
// running — the members' failure is written once, the MR is closed and the waiting set no longer
// holds them.
func TestTwoSettlersAtOnceSettleOnce(t *testing.T) {
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		e := setup(t, db, slowPipelines)
		one := e.service(t, "i1")
		two := e.service(t, "i2")
		b, ids := e.blocked(t, one, "twice", 3)

		start := make(chan struct{})
		errs := make([]error, 2)
		var wg sync.WaitGroup
		for i, svc := range []*batch.Service{one, two} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				errs[i] = svc.Settle(bg, b.ID, "ops@example.com")
			}()
		}
		close(start)
		wg.Wait()
		won := 0
		for _, err := range errs {
			switch {
			case err == nil:
				won++
			case errors.Is(err, store.ErrPreempted), errors.Is(err, batch.ErrSettled), errors.Is(err, batch.ErrBusy):
			default:
				t.Fatalf("unexpected answer: %v", err)
			}
		}
		if won == 0 {
			t.Fatalf("no settlement was accepted: %v", errs)
		}
		if got := e.settled(t, b.ID); got.Status != state.BatchFailed {
			t.Fatalf("batch: %+v", got)
		}
		for _, id := range ids {
			e.expect(t, id, state.StatusCreateFailed, state.StepBatchAbandoned, state.NextWaitManual)
			if n := e.count(t, "SELECT COUNT(*) FROM operation_step WHERE operation_id = ? AND status = ?", id, state.StatusCreateFailed); n != 1 {
				t.Errorf("%s: the failure was written %d times", id, n)
			}
		}
		if n := e.count(t, "SELECT COUNT(*) FROM merge_batch_request WHERE batch_id = ?", b.ID); n != 0 {
			t.Fatalf("%d processing rows left", n)
		}
		if st := e.gl.MergeRequestState(projectA, b.MRIID); st != "closed" {
			t.Fatalf("MR %s", st)
		}
		if err := one.Settle(bg, b.ID, "ops"); !errors.Is(err, batch.ErrSettled) {
			t.Fatalf("settling a settled batch: %v", err)
		}
		if err := one.Resume(bg, b.ID); !errors.Is(err, batch.ErrSettled) {
			t.Fatalf("resuming a settled batch: %v", err)
		}
		if err := one.Settle(bg, 999, "ops"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("settling an unknown batch: %v", err)
		}
	})
}

// The BLOCKED window of a batch ends while an operator settles it: the operator's action, racing
// the running settle step, is refused with ErrBusy (a plain 409 in the API), never an error; the
// batch is settled once and nothing is logged as a fault.
func TestAnOperatorRacingTheSettleStepIsToldItRunsNow(t *testing.T) {
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		e := setup(t, db, slowPipelines)
		svc := e.service(t, "i1")
		other := e.service(t, "i2")
		b, ids := e.blocked(t, svc, "lost", 2)
		var answer atomic.Value
		var fired atomic.Bool
		settle := func() {
			if fired.CompareAndSwap(false, true) {
				answer.Store(fmt.Sprint(other.Settle(bg, b.ID, "ops@example.com")))
			}
		}
		e.beforeClose.Store(&settle) // the operator settles while the settle step closes the MR
		// The batch logs "batch blocked" after its write: wait for it before forgetting the setup.
		waitFor(t, "the batch to block", func() bool { return len(e.logs.Lines("batch blocked")) > 0 })
		e.logs.Reset()
		e.dueNow(t, b.ID)

		if got := e.settled(t, b.ID); got.Status != state.BatchFailed || !strings.Contains(got.Note, "blockedTimeout") {
			t.Fatalf("batch: %+v", got)
		}
		if a, _ := answer.Load().(string); !strings.Contains(a, batch.ErrBusy.Error()) {
			t.Fatalf("the operator's answer: %q", a)
		}
		for _, id := range ids {
			if n := e.count(t, "SELECT COUNT(*) FROM operation_step WHERE operation_id = ? AND status = ?", id, state.StatusCreateFailed); n != 1 {
				t.Errorf("%s: the failure was written %d times", id, n)
			}
		}
		for _, level := range []string{"level=WARN", "level=ERROR"} {
			if l := e.logs.Lines(level, fmt.Sprintf("ref=%d ", b.ID)); len(l) > 0 {
				t.Fatalf("the race logged a fault: %s", l)
			}
		}
	})
}

// An operator settles a batch whose settlement does not go through (GitLab fails the close): the
// failure decided first is kept — the members show why the batch really failed — with the
// operator's name once, however many operators tried; once GitLab is back it is settled so.
func TestAnOperatorsSettlementKeepsTheDecidedFailure(t *testing.T) {
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		e := setup(t, db, settings{})
		svc, ids, pending := e.unsettleableBatch(t, "manual")
		for _, who := range []string{"ops@example.com", "oncall@example.com"} {
			e.settleSoon(t, svc, pending.ID, who)
		}
		waitFor(t, "the operators' settlement to be tried", func() bool {
			b, _ := db.Batch(bg, pending.ID)
			return strings.Contains(batch.PendingFailure(b), "settled by oncall@example.com") && strings.Contains(b.LastError, "HTTP 500")
		})
		if b, _ := db.Batch(bg, pending.ID); b.Status != state.BatchRunning || strings.Count(batch.PendingFailure(b), "settled by") != 1 {
			t.Fatalf("batch after two operators: %+v (%q)", b, batch.PendingFailure(b))
		}
		e.failClose.Store(false)
		if b := e.settled(t, pending.ID); b.Status != state.BatchFailed || b.Failing != "" {
			t.Fatalf("batch: %+v", b)
		}
		for _, id := range ids {
			e.expect(t, id, state.StatusHandleFailed, state.StepHandleApproveFailed, state.NextWaitManual)
		}
	})
}

// settleSoon is an operator who settles batch id, trying again while a step of it runs (the API
// answers 409 "running right now; look again in a moment").
func (e *env) settleSoon(t *testing.T, svc *batch.Service, id int64, who string) {
	t.Helper()
	waitFor(t, who+"'s settlement to be accepted", func() bool {
		err := svc.Settle(bg, id, who)
		if err != nil && !errors.Is(err, batch.ErrBusy) && !errors.Is(err, store.ErrPreempted) {
			t.Fatalf("settle: %v", err)
		}
		return err == nil
	})
}

// mergeNow approves and merges the MR as a person would, at once (one merge action after
// another, no engine).
func (e *env) mergeNow(iid int64) error {
	if _, err := e.runner.Approve(bg, projectA, iid); err != nil {
		return err
	}
	mr, err := e.runner.GitLab.GetMergeRequest(bg, projectA, iid)
	if err != nil {
		return err
	}
	_, err = e.runner.GitLab.Merge(bg, projectA, iid, gitlab.MergeOptions{SHA: mr.SHA})
	return err
}

// Write-ahead settlement: the batch's failure is recorded before its MR is closed, so a crash
// between the close and the settlement's write changes nothing about why it failed — the instance
// that resumes it finds the MR closed and settles it with the decided cause, not as "closed
// outside bindery".
func TestACrashBetweenTheCloseAndTheSettlementKeepsTheDecidedFailure(t *testing.T) {
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		e := setup(t, db, settings{})
		f := e.gl.Faults()
		f.DeniedApprovers, f.DeniedApproveStatus = []string{sim.ReviewerUsername(0)}, 403
		e.gl.SetFaults(f)
		a, engA := e.held(t, "instance-a")
		var once sync.Once
		crash := func() { once.Do(func() { go engA.Kill() }) } // dies while GitLab closes the MR
		e.beforeClose.Store(&crash)
		if err := engA.Start(bg); err != nil {
			t.Fatal(err)
		}
		ids := e.admitMany(t, "crash", "t1", 2)
		o := e.round(t, a, projectA)
		waitFor(t, "the close to reach GitLab", func() bool { return e.gl.MergeRequestState(projectA, 1) == "closed" })
		e.beforeClose.Store(nil)
		if b, _ := db.Batch(bg, o.BatchID); b.Status != state.BatchRunning || b.Failing == "" {
			t.Fatalf("after the crash: %+v (want RUNNING with the decided failure)", b)
		}
		e.dueNow(t, o.BatchID) // the dead instance's claim expired
		e.service(t, "instance-b")
		if b := e.settled(t, o.BatchID); b.Status != state.BatchFailed {
			t.Fatalf("batch: %+v", b)
		}
		e.failedOnApprove(t, store.Batch{MRIID: 1}, ids) // the approve step's failure, not HANDLE_MR_CLOSED
	})
}

// GitLab is merging the MR right now (it is "locked") when an operator settles the batch: locked
// is undecided, so the settlement looks again instead of calling it "not merged" — and when the
// merge lands, the batch succeeds with its members MERGED.
func TestALockedMRIsNeverSettledAsNotMerged(t *testing.T) {
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		e := setup(t, db, settings{})
		f := e.gl.Faults()
		f.MergeDuration = 2 * time.Second // GitLab takes its time to merge
		e.gl.SetFaults(f)
		svc := e.service(t, "i1")
		ids := e.admitMany(t, "locked", "t1", 2)
		o := e.round(t, svc, projectA)
		waitFor(t, "GitLab to be merging the MR", func() bool { return e.gl.MergeRequestState(projectA, 1) == "locked" })
		e.settleSoon(t, svc, o.BatchID, "ops@example.com")
		if b := e.settled(t, o.BatchID); b.Status != state.BatchSucceeded {
			t.Fatalf("batch: %+v (the merge landed: it must win)", b)
		}
		for _, id := range ids {
			e.expect(t, id, state.StatusMerged, state.StepHandleMerged, state.NextWait)
		}
		if st := e.gl.MergeRequestState(projectA, 1); st != "merged" {
			t.Fatalf("MR %s", st)
		}
	})
}

// An MR created on GitLab whose answer never reached bindery (every answer to the creation is
// lost) is not left open when the batch is settled: the settlement finds it by the batch's branch
// and closes it.
func TestAnMRTheBatchNeverRecordedIsFoundAndClosed(t *testing.T) {
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		e := setup(t, db, settings{pollInterval: time.Hour}) // the creation's retries wait long
		e.gl.Inject("create_mr", sim.FaultDrop, 100)
		svc := e.service(t, "i1")
		e.admitMany(t, "unrecorded", "t1", 2)
		o := e.round(t, svc, projectA)
		waitFor(t, "the MR to exist on GitLab", func() bool { return e.gl.MergeRequestState(projectA, 1) == "opened" })
		waitFor(t, "the batch to wait before trying again", func() bool { return e.task(t, o.BatchID).Failures > 0 })
		if b, _ := db.Batch(bg, o.BatchID); b.MRIID != 0 {
			t.Fatalf("the MR was recorded after all: %+v", b)
		}
		e.settleSoon(t, svc, o.BatchID, "ops@example.com")
		if b := e.settled(t, o.BatchID); b.Status != state.BatchFailed {
			t.Fatalf("batch: %+v", b)
		}
		if st := e.gl.MergeRequestState(projectA, 1); st != "closed" {
			t.Fatalf("the unrecorded MR is %s", st)
		}
	})
}
