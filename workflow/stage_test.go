package workflow_test

import (
	"testing"

	"bindery/internal/vocab/state"
	"bindery/workflow"
)

// The stage view's stage follows the journey: approval, the batch wait, CI, merge, deploy, in
// effect, revoking, revoked; a failure stays at the stage it stopped in.
func TestTheStageViewFollowsTheJourney(t *testing.T) {
	for _, c := range []struct {
		status state.BindingStatus
		step   state.Step
		last   string
		want   string
	}{
		{state.StatusApprovalSending, state.StepApprovalSending, "approval", "approval"},
		{state.StatusApprovalSent, state.StepApprovalSent, "approval", "approval"},
		{state.StatusRejected, state.StepApprovalRejected, "approval", "approval"},
		{state.StatusMRCreating, state.StepQueued, "batch", "batch"},
		{state.StatusMRCreating, state.StepBatched, "ci", "ci"},
		{state.StatusMRCreating, state.StepCreateStarted, "ci", "ci"},
		{state.StatusMRCreating, state.StepCreatePipelinePending, "ci", "ci"},
		{state.StatusMRCreated, state.StepCreateSucceeded, "ci", "merge"},
		{state.StatusMerging, state.StepHandleStarted, "merge", "merge"},
		{state.StatusMerging, state.StepHandlePipelinePending, "merge", "merge"},
		{state.StatusMerged, state.StepHandleMerged, "deploy", "deploy"},
		{state.StatusValidated, state.StepCalledBack, "deploy", workflow.StageEffect},
		{state.StatusValidated, state.StepCloseStarted, "close", "close"},
		{state.StatusClosed, state.StepCloseSucceeded, "close", workflow.StageRevoked},
		{state.StatusCreateFailed, state.StepCreatePipelineFailed, "ci", "ci"},
		{state.StatusHandleFailed, state.StepHandleMergeFailed, "merge", "merge"},
		{state.StatusHandleFailed, state.StepCloseFailed, "close", "close"},
	} {
		if got := workflow.CurrentStage(c.status, c.step, c.last); got != c.want {
			t.Errorf("%s/%s: stage %q, want %q", c.status, c.step, got, c.want)
		}
	}
}

// Every step has plain words for the timeline, and the view carries them.
func TestEveryStepHasPlainWords(t *testing.T) {
	for s := state.Step(10001); s < 10601; s++ {
		if !s.Known() {
			continue
		}
		if v := workflow.StepOf(s); v.Label == "" || v.Name != s.String() || v.Code != int(s) {
			t.Errorf("step %d: view %+v, want its name and a label", s, v)
		}
	}
}
