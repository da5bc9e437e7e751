package batch

import (
	"testing"

	"bindery/internal/vocab/state"
	"bindery/store"
)

// A car's pipeline state is read from the batch and its task: what the request view and the ops
// console show for the cars of a train.
func TestACarsPipelineStateIsWhatItsBatchAndTaskSay(t *testing.T) {
	built := store.Batch{Status: state.BatchRunning, HeadSHA: "h2"}
	passed := built
	passed.TestedSHA = "h2"
	blocked := passed
	blocked.Status = state.BatchBlocked
	failing := built
	failing.Failing = "pipeline failed"
	task := func(step Step, note string) *store.Task { return &store.Task{Step: string(step), Note: note} }
	for _, c := range []struct {
		name string
		b    store.Batch
		t    *store.Task
		want string
	}{
		{"claimed, branch not written yet", store.Batch{Status: state.BatchRunning}, task(stepOpen, ""), CarBuilding},
		{"rebuilt on the car ahead: its old head passed", passed, task(stepOpen, "rebuilding"), CarBuilding},
		{"in CI", built, task(stepPipeline, "pipeline 7 is running"), CarRunning},
		{"in CI, its task not read", built, nil, CarRunning},
		{"a failure held behind an untested car", built, task(stepPipeline, "pipeline 7 failed"+heldFailure), CarFailed},
		{"a decided failure", failing, task(stepSettle, ""), CarFailed},
		{"passed, waiting for its turn", passed, task(stepTurn, "waiting for car 3 ahead of it to merge"), CarPassed},
		{"rebased in the merge: the new head untested", store.Batch{Status: state.BatchRunning, HeadSHA: "h3", TestedSHA: "h2"}, task(stepMergePipeline, ""), CarRunning},
		{"blocked on its MR", blocked, task(stepMergeBlocked, ""), CarBlocked},
	} {
		if got := CarState(c.b, c.t); got != c.want {
			t.Errorf("%s: %s, want %s", c.name, got, c.want)
		}
	}
}
