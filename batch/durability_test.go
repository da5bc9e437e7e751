package batch_test

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"bindery/batch"
	"bindery/internal/vocab/state"
	"bindery/internal/work/engine"
	"bindery/store"
	"bindery/store/storetest"
)

// Rounds from several instances and goroutines at once (every instance's cron plus manual
// triggers) while no instance runs the batches yet: one active batch per partition, re-checked in
// SQL while they run and after; each request claimed once; every claimed member BATCHED, every
// claimed batch work that is due. Started, every request lands.
func TestConcurrentRoundsOpenOneActiveBatchPerPartition(t *testing.T) {
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		e := setup(t, db, settings{maxRequests: 5})
		release := make(chan struct{})
		var once sync.Once
		let := func() { once.Do(func() { close(release) }) }
		defer let()
		var services []*batch.Service
		var engines []*engine.Engine
		for i := range 3 {
			svc, eng := e.held(t, fmt.Sprintf("i%d", i))
			services, engines = append(services, svc), append(engines, eng)
		}
		a := e.admitMany(t, "a", "t1", 12)
		g := e.admitMany(t, "g", "g1", 12)
		e.claimable(t)

		var maxActive atomic.Int32
		stop := make(chan struct{})
		sampled := make(chan struct{})
		go func() {
			defer close(sampled)
			for {
				select {
				case <-stop:
					return
				default:
				}
				var n int32
				if err := db.Raw().QueryRowContext(bg, "SELECT COALESCE(MAX(c), 0) FROM (SELECT COUNT(*) AS c FROM merge_batch WHERE status IN ('RUNNING', 'BLOCKED') GROUP BY partition_key) x").Scan(&n); err == nil && n > maxActive.Load() {
					maxActive.Store(n)
				}
			}
		}()
		var wg sync.WaitGroup
		var claimed atomic.Int32
		for _, svc := range services {
			for range 2 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for range 10 {
						outs, err := svc.Round(bg)
						if err != nil {
							t.Error(err)
							return
						}
						for _, o := range outs {
							switch {
							case o.Err != nil:
								t.Errorf("round %s: %v", o.Partition, o.Err)
							case o.Result == state.RoundClaimed:
								claimed.Add(1)
							}
						}
					}
				}()
			}
		}
		wg.Wait()
		close(stop)
		<-sampled
		if maxActive.Load() > 1 || claimed.Load() != 2 {
			t.Fatalf("%d batches claimed, at most %d active in a partition; want 2 and 1", claimed.Load(), maxActive.Load())
		}
		for _, p := range []string{projectA, projectB} {
			if n := e.count(t, "SELECT COUNT(*) FROM merge_batch WHERE partition_key = ? AND status = 'RUNNING'", p); n != 1 {
				t.Fatalf("%s: %d running batches", p, n)
			}
		}
		if n := e.count(t, "SELECT COUNT(*) FROM (SELECT request_id FROM merge_batch_member GROUP BY request_id HAVING COUNT(*) > 1) x"); n != 0 {
			t.Fatalf("%d requests claimed twice", n)
		}
		if n := e.count(t, "SELECT COUNT(*) FROM operation WHERE batch_id IS NOT NULL AND step <> ?", state.StepBatched); n != 0 {
			t.Fatalf("%d claimed requests not BATCHED", n)
		}
		if n := e.count(t, "SELECT COUNT(*) FROM operation WHERE batch_id IS NOT NULL"); n != 10 {
			t.Fatalf("%d requests claimed, want 2 batches of batch.maxRequests (5)", n)
		}
		if n := e.count(t, "SELECT COUNT(*) FROM task WHERE kind = 'batch'"); n != 2 {
			t.Fatalf("%d batch tasks for 2 claimed batches", n)
		}

		let()
		for _, eng := range engines {
			if err := eng.Start(bg); err != nil {
				t.Fatal(err)
			}
		}
		for _, p := range []string{projectA, projectB} {
			waitFor(t, "the first batches to finish", func() bool {
				return e.count(t, "SELECT COUNT(*) FROM merge_batch WHERE partition_key = ? AND status IN ('RUNNING', 'BLOCKED')", p) == 0
			})
			e.drain(t, services[0], p)
		}
		for _, id := range append(a, g...) {
			e.expect(t, id, state.StatusMerged, state.StepHandleMerged, state.NextWait)
		}
	})
}

// The instance running a batch dies while the batch waits for its pipeline: nothing is written —
// no failure — and the batch stays RUNNING with its task. Another instance's dispatcher takes the
// work when it falls due and finishes it on the same MR.
func TestABatchWhoseInstanceDiedIsFinishedByAnotherInstance(t *testing.T) {
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		e := setup(t, db, settings{manualClock: true, pipelineTime: 10 * time.Minute, pollTimeout: time.Hour})
		a, engA := e.held(t, "instance-a")
		if err := engA.Start(bg); err != nil {
			t.Fatal(err)
		}
		ids := e.admitMany(t, "crash", "t1", 3)
		o := e.round(t, a, projectA)
		waitFor(t, "the batch to wait for the pipeline", func() bool {
			task, err := db.Task(bg, state.TaskBatch, fmt.Sprint(o.BatchID))
			return err == nil && task.Step == "pipeline" && task.Checks > 0
		})
		engA.Kill() // the process dies
		if b, _ := db.Batch(bg, o.BatchID); b.Status != state.BatchRunning {
			t.Fatalf("after the crash: %+v", b)
		}
		for _, id := range ids {
			e.expect(t, id, state.StatusMRCreating, state.StepCreateStarted, state.NextWait)
		}

		e.clock.Advance(11 * time.Minute) // the pipeline finished while nobody watched
		e.service(t, "instance-b")
		e.landedOnOneMR(t, o.BatchID, ids)
		if l := e.logs.Lines("level=ERROR"); len(l) != 0 {
			t.Fatalf("errors logged: %s", l)
		}
	})
}

// A batch claimed by an instance that never runs it (its workers are all busy, it stopped
// dispatching, it died) is visible — RUNNING, its members BATCHED with their batch — and due:
// another instance's dispatcher runs it. No request waits for the instance that claimed it.
func TestABatchClaimedByAnInstanceThatDoesNotRunItIsRunElsewhere(t *testing.T) {
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		e := setup(t, db, settings{})
		a, _ := e.held(t, "instance-a") // its engine never dispatches
		ids := e.admitMany(t, "unrun", "t1", 3)
		o := e.round(t, a, projectA)
		if o.Result != state.RoundClaimed || o.Err != nil {
			t.Fatalf("round: %+v", o)
		}
		for _, id := range ids {
			e.expect(t, id, state.StatusMRCreating, state.StepBatched, state.NextWait)
			if r := e.request(t, id); r.Operation.BatchID != o.BatchID {
				t.Fatalf("%s does not show its batch", id)
			}
		}
		if task := e.task(t, o.BatchID); !task.Queued() || task.Owner != "" {
			t.Fatalf("the claimed batch's task: %+v", task)
		}
		e.service(t, "instance-b")
		if b := e.stopped(t, o.BatchID); b.Status != state.BatchSucceeded {
			t.Fatalf("batch: %+v", b)
		}
		for _, id := range ids {
			e.expect(t, id, state.StatusMerged, state.StepHandleMerged, state.NextWait)
		}
	})
}

// A BLOCKED batch nobody resolved within batch.blockedTimeout (its task's due time) is settled:
// MR closed, members failed (operators can retry them), the partition free again.
func TestABatchBlockedTooLongIsSettled(t *testing.T) {
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		e := setup(t, db, slowPipelines)
		svc := e.service(t, "i1")
		b, ids := e.blocked(t, svc, "forgotten", 2)
		task := e.task(t, b.ID)
		if task.Step != "blocked" || task.Overdue > -50*time.Minute {
			t.Fatalf("a blocked batch's task is not due at its window's end: %+v", task)
		}
		e.dueNow(t, b.ID) // the window passed
		if got := e.settled(t, b.ID); got.Status != state.BatchFailed {
			t.Fatalf("batch: %+v", got)
		}
		for _, id := range ids {
			e.expect(t, id, state.StatusCreateFailed, state.StepBatchAbandoned, state.NextWaitManual)
		}
		if st := e.gl.MergeRequestState(projectA, b.MRIID); st != "closed" {
			t.Fatalf("MR %s", st)
		}
		if o := e.round(t, svc, projectA); o.Result == state.RoundSlotOccupied {
			t.Fatal("the settled batch still holds the slot")
		}
	})
}
