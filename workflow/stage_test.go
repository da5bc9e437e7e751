package workflow_test

import (
	"testing"

	"bindery/store"
	"bindery/workflow"
)

// The stage view's stage follows the journey: approval, the batch wait, CI, merge, deploy, in
// effect, revoking, revoked; a failure stays at the stage it stopped in.
func TestTheStageViewFollowsTheJourney(t *testing.T) {
	for _, c := range []struct {
		status store.BindingStatus
		step   store.Step
		last   string
		want   string
	}{
		{store.StatusApprovalSending, store.StepApprovalSending, "approval", "approval"},
		{store.StatusApprovalSent, store.StepApprovalSent, "approval", "approval"},
		{store.StatusRejected, store.StepApprovalRejected, "approval", "approval"},
		{store.StatusMRCreating, store.StepQueued, "batch", "batch"},
		{store.StatusMRCreating, store.StepBatched, "ci", "ci"},
		{store.StatusMRCreating, store.StepCreateStarted, "ci", "ci"},
		{store.StatusMRCreating, store.StepCreatePipelinePending, "ci", "ci"},
		{store.StatusMRCreated, store.StepCreateSucceeded, "ci", "merge"},
		{store.StatusMerging, store.StepHandleStarted, "merge", "merge"},
		{store.StatusMerging, store.StepHandlePipelinePending, "merge", "merge"},
		{store.StatusMerged, store.StepHandleMerged, "deploy", "deploy"},
		{store.StatusValidated, store.StepCalledBack, "deploy", workflow.StageEffect},
		{store.StatusValidated, store.StepCloseStarted, "close", "close"},
		{store.StatusClosed, store.StepCloseSucceeded, "close", workflow.StageRevoked},
		{store.StatusCreateFailed, store.StepCreatePipelineFailed, "ci", "ci"},
		{store.StatusHandleFailed, store.StepHandleMergeFailed, "merge", "merge"},
		{store.StatusHandleFailed, store.StepCloseFailed, "close", "close"},
	} {
		if got := workflow.CurrentStage(c.status, c.step, c.last); got != c.want {
			t.Errorf("%s/%s: stage %q, want %q", c.status, c.step, got, c.want)
		}
	}
}

// Every step has plain words for the timeline, and the view carries them.
func TestEveryStepHasPlainWords(t *testing.T) {
	for s := store.Step(10001); s < 10601; s++ {
		if !s.Known() {
			continue
		}
		if v := workflow.StepOf(s); v.Label == "" || v.Name != s.String() || v.Code != int(s) {
			t.Errorf("step %d: view %+v, want its name and a label", s, v)
		}
	}
}
