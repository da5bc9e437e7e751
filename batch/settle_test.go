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
	"bindery/change"
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
	if b.Status != store.BatchBlocked || b.MRIID == 0 {
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
		svc := e.service("i1", e.pool(t, 2, 10))
		b, ids := e.blocked(t, svc, "race", 3)
		e.clock.Advance(11 * time.Minute) // the pipeline passed: the MR can be merged

		var once sync.Once
		var mergeErr error
		merge := func() {
			once.Do(func() {
				if _, err := e.runner.Approve(bg, projectA, b.MRIID); err != nil {
					mergeErr = err
					return
				}
				stages := change.Stages{Short: time.Millisecond, ShortCount: 5, Long: 5 * time.Millisecond, Timeout: 5 * time.Second}
				_, mergeErr = e.runner.Merge(bg, change.MergeInput{Spec: change.Spec{Project: projectA}, IID: b.MRIID, Stages: stages})
			})
		}
		e.beforeClose.Store(&merge) // the merge lands between settlement's read and its close

		if err := svc.Settle(bg, b.ID, "ops@example.com"); err != nil {
			t.Fatal(err)
		}
		if mergeErr != nil {
			t.Fatalf("the racing merge: %v", mergeErr)
		}
		if got, _ := db.Batch(bg, b.ID); got.Status != store.BatchSucceeded {
			t.Fatalf("batch: %+v", got)
		}
		for i, id := range ids {
			e.expect(t, id, store.StatusMerged, store.StepHandleMerged, store.NextWait)
			if !e.onMain(t, "t1", fmt.Sprintf("user-race-%02d", i)) {
				t.Errorf("%s: file not on main", id)
			}
		}
		if st := e.gl.MergeRequestState(projectA, b.MRIID); st != "merged" {
			t.Fatalf("MR %s", st)
		}
	})
}

// Two operators (or an operator and the sweep) settle the same batch at once: one settlement
// happens, the other is refused; the members' failure is written once, the MR is closed and the
// waiting set no longer holds them.
func TestTwoSettlersAtOnceSettleOnce(t *testing.T) {
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		e := setup(t, db, slowPipelines)
		one := e.service("i1", e.pool(t, 2, 10))
		two := e.service("i2", e.pool(t, 2, 10))
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
			case errors.Is(err, store.ErrPreempted), errors.Is(err, batch.ErrSettled):
			default:
				t.Fatalf("unexpected answer: %v", err)
			}
		}
		if won != 1 {
			t.Fatalf("%d settlements succeeded (%v), want exactly 1", won, errs)
		}
		if got, _ := db.Batch(bg, b.ID); got.Status != store.BatchFailed {
			t.Fatalf("batch: %+v", got)
		}
		for _, id := range ids {
			e.expect(t, id, store.StatusCreateFailed, store.StepCreateFailed, store.NextWaitManual)
			if n := e.count(t, "SELECT COUNT(*) FROM operation_step WHERE operation_id = ? AND status = ?", id, store.StatusCreateFailed); n != 1 {
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

// The sweep takes over a batch BLOCKED too long and settles it, while an operator settles it at
// the same moment and wins: the sweep's guarded write is preempted. That is no failure of the
// sweep — it reports no error, logs nothing above info for the batch, and the members' failure
// is written once (the operator's).
func TestASweepThatLosesTheSettlementToAnOperatorIsNoError(t *testing.T) {
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		e := setup(t, db, slowPipelines)
		svc := e.service("i1", e.pool(t, 2, 10))
		other := e.service("i2", e.pool(t, 2, 10))
		b, ids := e.blocked(t, svc, "lost", 2)
		e.expireLease(t, b.ID)
		var fired atomic.Bool
		settle := func() {
			if fired.CompareAndSwap(false, true) {
				if err := other.Settle(bg, b.ID, "ops@example.com"); err != nil {
					t.Errorf("the operator's settlement: %v", err)
				}
			}
		}
		e.beforeClose.Store(&settle) // the operator settles while the sweep closes the MR
		// The runner logs "batch blocked" after its write: wait for it before forgetting the setup.
		waitFor(t, "the runner to stop", func() bool { return len(e.logs.Lines("batch blocked")) > 0 })
		e.logs.Reset()

		if n, err := svc.Sweep(bg); err != nil || n != 1 {
			t.Fatalf("sweep: %d %v", n, err)
		}
		if got, _ := db.Batch(bg, b.ID); got.Status != store.BatchFailed || !strings.Contains(got.Note, "ops@example.com") {
			t.Fatalf("batch: %+v", got)
		}
		for _, id := range ids {
			if n := e.count(t, "SELECT COUNT(*) FROM operation_step WHERE operation_id = ? AND status = ?", id, store.StatusCreateFailed); n != 1 {
				t.Errorf("%s: the failure was written %d times", id, n)
			}
		}
		for _, level := range []string{"level=WARN", "level=ERROR"} {
			if l := e.logs.Lines(level, fmt.Sprintf("batch=%d ", b.ID)); len(l) > 0 {
				t.Fatalf("a lost settlement logged as a fault: %s", l)
			}
		}
	})
}

// An operator's settlement that fails (GitLab fails the close) is recorded on the batch like the
// runner's; settling it again once GitLab is back keeps the failure decided first, so the
// members show why the batch really failed.
func TestAnOperatorsFailedSettlementIsRecordedAndKeepsTheDecidedFailure(t *testing.T) {
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		e := setup(t, db, settings{})
		svc, ids, pending := e.unsettleableBatch(t, "manual")
		if err := svc.Settle(bg, pending.ID, "ops@example.com"); err == nil {
			t.Fatal("a settlement whose close failed reported success")
		}
		if b, _ := db.Batch(bg, pending.ID); b.Status != store.BatchRunning || !strings.Contains(b.LastError, "HTTP 500") ||
			!strings.Contains(batch.PendingFailure(b), "settled by ops@example.com") {
			t.Fatalf("batch after the failed settlement: %+v", b)
		}
		// A second operator's attempt fails too: the note names who settled last, once.
		if err := svc.Settle(bg, pending.ID, "oncall@example.com"); err == nil {
			t.Fatal("a settlement whose close failed reported success")
		}
		if b, _ := db.Batch(bg, pending.ID); strings.Count(batch.PendingFailure(b), "settled by") != 1 ||
			!strings.Contains(batch.PendingFailure(b), "settled by oncall@example.com") {
			t.Fatalf("pending failure after two attempts: %q", batch.PendingFailure(b))
		}
		e.failClose.Store(false)
		if err := svc.Settle(bg, pending.ID, "ops@example.com"); err != nil {
			t.Fatal(err)
		}
		if b, _ := db.Batch(bg, pending.ID); b.Status != store.BatchFailed || b.Failing != "" {
			t.Fatalf("batch: %+v", b)
		}
		for _, id := range ids {
			e.expect(t, id, store.StatusHandleFailed, store.StepHandleApproveFailed, store.NextWaitManual)
		}
	})
}
