package state

import (
	"testing"
)

func TestTransitionTableCoversEveryStatus(t *testing.T) {
	reachable := map[BindingStatus]bool{}
	for from, tos := range bindingTransitions {
		if from != "" && !contains(AllStatuses, from) {
			t.Errorf("table names unknown status %q", from)
		}
		for _, to := range tos {
			if !contains(AllStatuses, to) {
				t.Errorf("%s → unknown %q", from, to)
			}
			reachable[to] = true
		}
	}
	for _, s := range AllStatuses {
		if !reachable[s] {
			t.Errorf("%s is unreachable", s)
		}
		if _, ok := bindingTransitions[s]; !ok {
			t.Errorf("%s has no outgoing row (even terminal rows must be listed)", s)
		}
	}
}

func TestIllegalTransitionsAreRefused(t *testing.T) {
	for _, c := range []struct {
		from, to BindingStatus
		ok       bool
	}{
		{"", StatusApprovalSending, true},
		{"", StatusValidated, true}, // an adoption (docs/drift.md)
		{"", StatusMerged, false},
		{StatusClosed, StatusValidated, false},
		{StatusMerged, StatusValidated, true},
		{StatusValidated, StatusMerged, false},
		{StatusRejected, StatusApprovalSending, true},
		{StatusValidated, StatusApprovalSending, false}, // only REAPPLIABLE rows reset
		{StatusHandleFailed, StatusApprovalSending, false},
		{StatusMerging, StatusMerging, true},
		{StatusApprovalSent, StatusRejected, true},
	} {
		if got := CanTransition(c.from, c.to); got != c.ok {
			t.Errorf("%q → %q: %v, want %v", c.from, c.to, got, c.ok)
		}
	}
}

func TestNextActionFollowsStatusAndStep(t *testing.T) {
	for _, c := range []struct {
		status BindingStatus
		step   Step
		want   NextAction
	}{
		{StatusApprovalSent, StepApprovalSent, NextWait},
		{StatusMerging, StepHandlePipelinePending, NextWaitManual},
		{StatusHandleFailed, StepHandlePipelineFailed, NextContactSupport},
		{StatusHandleFailed, StepHandleApproveFailed, NextWaitManual},
		{StatusCreateFailed, StepApprovalSendFailed, NextWaitManual},
		{StatusRejected, StepApprovalRejected, NextReapply},
		{StatusClosed, StepCloseSucceeded, NextReapply},
		{StatusValidated, StepCalledBack, NextNone},
		{StatusValidated, StepCloseStarted, NextWait},
	} {
		if got := NextActionFor(c.status, c.step); got != c.want {
			t.Errorf("%s/%s: %s, want %s", c.status, c.step, got, c.want)
		}
	}
}

func TestStepsStayInTheirPhaseRanges(t *testing.T) {
	names := map[string]Step{}
	for s, info := range steps {
		if s < 10001 || s > 10600 || info.Name == "" {
			t.Errorf("step %d %q out of range", s, info.Name)
		}
		if s.Pending() != (s >= 10501) {
			t.Errorf("%s pending = %v", s, s.Pending())
		}
		if info.Pending && info.Deterministic {
			t.Errorf("%s is pending and deterministic", s)
		}
		if other, dup := names[info.Name]; dup {
			t.Errorf("%s and %d share the name %s", s, other, info.Name)
		}
		names[info.Name] = s
	}
	if got := Step(10999).String(); got != "STEP_10999" {
		t.Errorf("unknown step name %q", got)
	}
}

func contains(list []BindingStatus, s BindingStatus) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// Every step is one a request can be at in some status, every status has its steps, and a
// failure step sits in a failure status (what people read of a state walks these pairs).
func TestEveryStepBelongsToAStatus(t *testing.T) {
	at := map[Step][]BindingStatus{}
	for _, status := range AllStatuses {
		if len(StepsAt(status)) == 0 {
			t.Errorf("%s has no step", status)
		}
		for _, s := range StepsAt(status) {
			if !s.Known() {
				t.Errorf("%s lists an unknown step %d", status, s)
			}
			at[s] = append(at[s], status)
		}
	}
	for _, s := range Steps() {
		if len(at[s]) == 0 {
			t.Errorf("step %s is at no status", s)
		}
		if s.Deterministic() {
			for _, status := range at[s] {
				if !status.Failed() {
					t.Errorf("the deterministic failure %s is listed at %s", s, status)
				}
			}
		}
	}
}
