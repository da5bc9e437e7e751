package state

import (
	"slices"
	"testing"
)

// The pure mapping from a binding transition to its news, for each journey of the two flows.
func TestEventsOfTransitions(t *testing.T) {
	cases := []struct {
		name string
		m    Move
		want []EventType
	}{
		{"application", Move{To: StatusApprovalSending, Step: StepApprovalSending}, []EventType{EventRequestAccepted}},
		{"legacy application", Move{To: StatusMRCreating, Step: StepCreateStarted}, []EventType{EventRequestAccepted}},
		{"re-application", Move{From: StatusRejected, To: StatusApprovalSending, Step: StepApprovalSending}, []EventType{EventRequestAccepted}},
		{"ticket sent", Move{From: StatusApprovalSending, To: StatusApprovalSent, FromStep: StepApprovalSending, Step: StepApprovalSent}, nil},
		{"approved, queued", Move{From: StatusApprovalSent, To: StatusMRCreating, FromStep: StepApprovalSent, Step: StepQueued}, []EventType{EventRequestApproved}},
		{"legacy approved", Move{From: StatusApprovalSent, To: StatusMerging, FromStep: StepApprovalSent, Step: StepHandleStarted}, []EventType{EventRequestApproved}},
		{"rejected", Move{From: StatusApprovalSent, To: StatusRejected, Step: StepApprovalRejected}, []EventType{EventRequestRejected}},
		{"batched", Move{From: StatusMRCreating, To: StatusMRCreating, FromStep: StepQueued, Step: StepBatched}, nil},
		{"MR opened", Move{From: StatusMRCreating, To: StatusMRCreating, FromStep: StepBatched, Step: StepCreateStarted, MR: true}, []EventType{EventRequestInCI}},
		{"restarted without MR", Move{From: StatusMRCreating, To: StatusMRCreating, FromStep: StepCreatePipelinePending, Step: StepCreateStarted}, nil},
		{"merged", Move{From: StatusMerging, To: StatusMerged, Step: StepHandleMerged}, []EventType{EventRequestMerged}},
		{"in effect", Move{From: StatusMerged, To: StatusValidated, Step: StepCalledBack}, []EventType{EventRequestInEffect}},
		{"close started", Move{From: StatusValidated, To: StatusValidated, FromStep: StepCalledBack, Step: StepCloseStarted}, nil},
		{"closed", Move{From: StatusValidated, To: StatusClosed, Step: StepCloseSucceeded}, []EventType{EventRequestClosed}},
		{"failed", Move{From: StatusMRCreating, To: StatusCreateFailed, Step: StepCreatePipelineFailed}, []EventType{EventRequestFailed, EventRequestNeedsAttention}},
		{"pending", Move{From: StatusMerging, To: StatusMerging, FromStep: StepHandleApproved, Step: StepHandlePipelinePending}, []EventType{EventRequestNeedsAttention}},
		{"blocked MR", Move{From: StatusMerging, To: StatusMerging, FromStep: StepHandleApproved, Step: StepHandleMRBlocked}, []EventType{EventRequestNeedsAttention}},
		{"retried", Move{From: StatusCreateFailed, To: StatusMRCreating, FromStep: StepCreateFailed, Step: StepQueued}, nil},
	}
	for _, c := range cases {
		if got := EventsOf(c.m); !slices.Equal(got, c.want) {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}

// Every event type has an audience; the defaults of the person concerned (a requester, a
// reviewer) are the documented ones; the batch's own events never leave bindery.
func TestEventTable(t *testing.T) {
	var defaults []EventType
	for _, e := range EventTypes() {
		i := e.Info()
		if i.Audience == "" {
			t.Errorf("%s has no audience", e)
		}
		if i.EmailByDefault {
			defaults = append(defaults, e)
			if !e.ConcernsRequester() {
				t.Errorf("%s emails a requester by default but does not concern them", e)
			}
		}
	}
	want := []EventType{EventBindingDrifted, EventBindingExpiring, EventRequestFailed, EventRequestInEffect, EventRequestNeedsAttention, EventRequestRejected, EventReviewDue, EventReviewStarted}
	if !slices.Equal(defaults, want) {
		t.Errorf("email defaults %v, want %v", defaults, want)
	}
	if EventBatchOpened.Public() || EventBatchCulprit.Public() || !EventBatchBlocked.Public() || EventType("nope").Public() {
		t.Error("public types")
	}
}
