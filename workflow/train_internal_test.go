package workflow

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"testing"

	"bindery/api"
	"bindery/batch"
	"bindery/store"
)

// Every request view of a project within trainCacheTTL shares one read of its train — many at once
// too — so a page of thousands of waiting requesters costs the database one train read per
// project and instance, beside each status read's two queries; an operator's action drops it, and
// a view that misses its car reads again.
func TestTheViewsOfOneProjectShareOneReadOfItsTrain(t *testing.T) {
	t.Parallel()
	var c trainCache
	var reads atomic.Int32
	read := func(_ context.Context, partition string) (trainSnapshot, error) {
		reads.Add(1)
		return trainSnapshot{cars: []store.Batch{{ID: int64(reads.Load()), Partition: partition}}}, nil
	}
	ctx := context.Background()
	var wg sync.WaitGroup
	for range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := c.get(ctx, "infra/a", false, read); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if n := reads.Load(); n != 1 {
		t.Fatalf("50 views read the train %d times, want once", n)
	}
	if _, err := c.get(ctx, "infra/b", false, read); err != nil || reads.Load() != 2 {
		t.Fatalf("another project: %d reads, %v", reads.Load(), err)
	}
	if s, _ := c.get(ctx, "infra/a", true, read); reads.Load() != 3 || s.cars[0].ID != 3 {
		t.Fatalf("a fresh read: %d reads, %+v", reads.Load(), s.cars)
	}
	c.drop("infra/a")
	for range 2 {
		if _, err := c.get(ctx, "infra/a", false, read); err != nil {
			t.Fatal(err)
		}
	}
	if n := reads.Load(); n != 4 {
		t.Fatalf("after a drop, twice: %d reads, want one more", n)
	}
}

// The console's trains come in the order an operator acts on them: a BLOCKED car, a failed
// pipeline, a pause, then the projects with work, then the idle ones.
func TestTrainsNeedingAnOperatorComeFirst(t *testing.T) {
	t.Parallel()
	idle := api.Train{Project: "a/idle"}
	busy := api.Train{Project: "b/busy", Waiting: 2}
	paused := api.Train{Project: "c/paused", Paused: &api.TrainPause{By: "ops"}}
	failed := api.Train{Project: "d/failed", Cars: []api.TrainCar{{PipelineState: batch.CarRunning}, {PipelineState: batch.CarFailed}}}
	blocked := api.Train{Project: "e/blocked", Blocked: &api.TrainBlock{BatchID: 7}}
	trains := []api.Train{idle, busy, paused, failed, blocked}
	slices.SortStableFunc(trains, func(a, b api.Train) int { return trainRank(a) - trainRank(b) })
	var got []string
	for _, tr := range trains {
		got = append(got, tr.Project)
	}
	if want := []string{"e/blocked", "d/failed", "c/paused", "b/busy", "a/idle"}; !slices.Equal(got, want) {
		t.Errorf("order %v, want %v", got, want)
	}
}
