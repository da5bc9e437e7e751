package batch_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"bindery/batch"
	"bindery/store"
	"bindery/store/storetest"
	"bindery/worker"
)

// gated is a pool whose workers are all held until release is closed, with room for queue
// tasks behind them.
func (e *env) gated(t *testing.T, workers, queue int, release <-chan struct{}) *worker.Pool {
	t.Helper()
	p := e.pool(t, workers, max(queue, 1))
	started := make(chan struct{}, workers)
	for range workers {
		if err := p.Submit("gate", func(ctx context.Context) {
			started <- struct{}{}
			select {
			case <-release:
			case <-ctx.Done():
			}
		}); err != nil {
			t.Fatal(err)
		}
		<-started // this worker is held; the queue is free again
	}
	return p
}

// expireLease makes batch id's lease expire now, as if its TTL passed without renewal.
func (e *env) expireLease(t *testing.T, id int64) {
	t.Helper()
	if _, err := e.db.Raw().ExecContext(bg, "UPDATE merge_batch SET lease_until = '2000-01-01 00:00:00' WHERE id = ?", id); err != nil {
		t.Fatal(err)
	}
}

// Rounds from several instances and goroutines at once (every instance's cron plus manual
// triggers) while the runners are held: one active batch per partition, re-checked in SQL while
// they run and after; each request claimed once; every claimed member BATCHED. Released, every
// request lands.
func TestConcurrentRoundsOpenOneActiveBatchPerPartition(t *testing.T) {
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		e := setup(t, db, settings{maxRequests: 5})
		release := make(chan struct{})
		var once sync.Once
		let := func() { once.Do(func() { close(release) }) }
		defer let()
		var services []*batch.Service
		for i := range 3 {
			services = append(services, e.service(fmt.Sprintf("i%d", i), e.gated(t, 1, 50, release)))
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
							case o.Result == store.RoundClaimed:
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
		if n := e.count(t, "SELECT COUNT(*) FROM operation WHERE batch_id IS NOT NULL AND step <> ?", store.StepBatched); n != 0 {
			t.Fatalf("%d claimed requests not BATCHED", n)
		}
		if n := e.count(t, "SELECT COUNT(*) FROM operation WHERE batch_id IS NOT NULL"); n != 10 {
			t.Fatalf("%d requests claimed, want 2 batches of batch.maxRequests (5)", n)
		}

		let()
		for _, p := range []string{projectA, projectB} {
			waitFor(t, "the first batches to finish", func() bool {
				return e.count(t, "SELECT COUNT(*) FROM merge_batch WHERE partition_key = ? AND status IN ('RUNNING', 'BLOCKED')", p) == 0
			})
			e.drain(t, services[0], p)
		}
		for _, id := range append(a, g...) {
			e.expect(t, id, store.StatusMerged, store.StepHandleMerged, store.NextWait)
		}
	})
}

// The instance running a batch stops mid-step (its pool shut down: the runner's context is
// cancelled while it waits for the pipeline). Nothing is written — no failure — and the batch
// stays RUNNING under its lease. Once the lease expired, another instance's sweep takes the
// batch over and finishes it on the same MR.
func TestARunnerStoppedMidStepIsFinishedByAnotherInstancesSweep(t *testing.T) {
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		e := setup(t, db, settings{manualClock: true, pipelineTime: 10 * time.Minute, pollTimeout: time.Hour})
		poolA := worker.NewPool(1, 10, slog.New(slog.DiscardHandler), nil)
		a := e.service("instance-a", poolA)
		ids := e.admitMany(t, "crash", "t1", 3)
		o := e.round(t, a, projectA)
		waitFor(t, "the runner to wait for the pipeline", func() bool {
			r, err := db.Request(bg, ids[0])
			return err == nil && r.Operation.Step == store.StepCreateStarted
		})

		cancelled, cancel := context.WithCancel(bg)
		cancel()
		_ = poolA.Shutdown(cancelled) // the process stops: running tasks are cancelled
		b, _ := db.Batch(bg, o.BatchID)
		if b.Status != store.BatchRunning || b.LeaseOwner != "instance-a" {
			t.Fatalf("after the stop: %+v", b)
		}
		for _, id := range ids {
			e.expect(t, id, store.StatusMRCreating, store.StepCreateStarted, store.NextWait)
		}

		other := e.service("instance-b", e.pool(t, 2, 10))
		if n, err := other.Sweep(bg); err != nil || n != 0 {
			t.Fatalf("a live lease was swept: %d %v", n, err)
		}
		e.expireLease(t, b.ID)
		e.clock.Advance(11 * time.Minute) // the pipeline finished while nobody watched
		if n, err := other.Sweep(bg); err != nil || n != 1 {
			t.Fatalf("sweep: %d %v", n, err)
		}
		e.landedOnOneMR(t, b.ID, ids)
	})
}

// A pool that rejects the hand-off: the claimed batch stays RUNNING with its members BATCHED
// (visible, with their batch) and its lease already expired, so the next sweep — here another
// instance's — takes it over and finishes it. No request is left in an invisible state.
func TestARejectedHandOffLeavesAVisibleBatchTheSweepFinishes(t *testing.T) {
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		e := setup(t, db, settings{})
		release := make(chan struct{})
		defer close(release)
		full := e.gated(t, 1, 1, release)
		if err := full.Submit("filler", func(context.Context) {}); err != nil { // the queue is full now
			t.Fatal(err)
		}
		a := e.service("instance-a", full)
		ids := e.admitMany(t, "rejected", "t1", 3)
		o := e.round(t, a, projectA)
		if o.Result != store.RoundClaimed || !errors.Is(o.Err, worker.ErrPoolFull) {
			t.Fatalf("round: %+v", o)
		}
		for _, id := range ids {
			e.expect(t, id, store.StatusMRCreating, store.StepBatched, store.NextWait)
			if r := e.request(t, id); r.Operation.BatchID != o.BatchID {
				t.Fatalf("%s does not show its batch", id)
			}
		}
		if n := e.sink.count(`bindery_batch_handoffs_rejected_total{project="infra/access-config"}`); n != 1 {
			t.Fatalf("rejections counted: %d", n)
		}
		waitFor(t, "the rejected batch's lease to be expired", func() bool {
			ex, err := db.ExpiredBatches(bg, 10)
			return err == nil && len(ex) == 1 && ex[0].ID == o.BatchID
		})
		other := e.service("instance-b", e.pool(t, 2, 10))
		if n, err := other.Sweep(bg); err != nil || n != 1 {
			t.Fatalf("sweep: %d %v", n, err)
		}
		if b := e.stopped(t, o.BatchID); b.Status != store.BatchSucceeded {
			t.Fatalf("batch: %+v", b)
		}
		for _, id := range ids {
			e.expect(t, id, store.StatusMerged, store.StepHandleMerged, store.NextWait)
		}
	})
}

// A BLOCKED batch nobody resolved within batch.blockedTimeout (its lease) is settled by the
// sweep: MR closed, members failed (operators can retry them), the partition free again.
func TestTheSweepSettlesABatchBlockedTooLong(t *testing.T) {
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		e := setup(t, db, slowPipelines)
		svc := e.service("i1", e.pool(t, 2, 10))
		b, ids := e.blocked(t, svc, "forgotten", 2)
		if n, err := svc.Sweep(bg); err != nil || n != 0 {
			t.Fatalf("a batch inside its blocked window was swept: %d %v", n, err)
		}
		e.expireLease(t, b.ID)
		if n, err := svc.Sweep(bg); err != nil || n != 1 {
			t.Fatalf("sweep: %d %v", n, err)
		}
		if got, _ := db.Batch(bg, b.ID); got.Status != store.BatchFailed {
			t.Fatalf("batch: %+v", got)
		}
		for _, id := range ids {
			e.expect(t, id, store.StatusCreateFailed, store.StepCreateFailed, store.NextWaitManual)
		}
		if st := e.gl.MergeRequestState(projectA, b.MRIID); st != "closed" {
			t.Fatalf("MR %s", st)
		}
	})
}
