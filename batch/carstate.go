package batch

import (
	"strings"

	"bindery/internal/vocab/state"
	"bindery/store"
)

// heldFailure ends the note of a car whose pipeline failed while a car ahead of it was untested:
// the failure may be that car's, so it is not decided yet (the pipeline step).
const heldFailure = "; decided once the batches ahead of it in the merge train passed (their changes are in its branch)"

// Pipeline states of a car, for people (the request view's cars ahead, the ops console's trains).
const (
	CarBuilding = "building" // its branch is being written (or rebuilt): no pipeline of it yet
	CarRunning  = "running"
	CarPassed   = "passed"  // passed for the head it carries
	CarFailed   = "failed"  // failed: decided (being settled or bisected), or held behind an untested car
	CarBlocked  = "blocked" // BLOCKED: a person or an operator must act
)

// CarState says what car b's pipeline is doing, from the batch and its task (nil: none read).
func CarState(b store.Batch, t *store.Task) string {
	switch {
	case b.Status == state.BatchBlocked:
		return CarBlocked
	case b.Failing != "":
		return CarFailed
	case t != nil && Step(t.Step) == stepOpen, b.HeadSHA == "":
		return CarBuilding
	case b.Passed():
		return CarPassed
	case t != nil && Step(t.Step) == stepPipeline && strings.HasSuffix(t.Note, heldFailure):
		return CarFailed
	}
	return CarRunning
}
