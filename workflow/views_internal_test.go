package workflow

import (
	"strings"
	"testing"
	"time"

	"bindery/api"
	"bindery/internal/vocab/state"
	"bindery/internal/work/engine"
	"bindery/store"
)

// A request whose first step waits for a free worker says how many are ahead of it, and past the
// status read's count (store.QueueCounted) that more are: the words and the fields agree.
func TestAQueuedRequestSaysHowManyAreAheadOrThatMoreAre(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		ahead int
		more  bool
		words string
	}{
		{3, false, "queued behind 3 requests"},
		{1, false, "queued behind 1 request)"},
		{store.QueueCounted, true, "queued behind more than 100 requests"},
	} {
		d := store.RequestDetail{
			Operation: store.Operation{OperationID: "op-1", Status: state.StatusApprovalSending, Step: state.StepApprovalSending, UpdatedAt: at},
			Steps:     []store.StepRecord{{OperationID: "op-1", Step: state.StepApprovalSending, Status: state.StatusApprovalSending, At: at}},
			Task:      &store.Task{Lane: engine.LaneFirst, DueAt: at},
			Ahead:     c.ahead, AheadMore: c.more,
		}
		w := (&Workflow{}).waitingFor(d, state.StatusApprovalSending, state.NextWait, false, api.RequestView{})
		if w == nil || w.QueuedBehind != c.ahead || w.QueuedBehindMore != c.more || !strings.Contains(w.WaitingFor, c.words) {
			t.Errorf("%d ahead (more: %t): %+v, want %q in the words", c.ahead, c.more, w, c.words)
		}
	}
}

// While the pipeline that failed runs once more (a flaky retry), the page says so, not "its
// pipeline to pass" as if nothing had happened.
func TestAFlakyRetrySaysThePipelineFailedAndRunsOnceMore(t *testing.T) {
	at := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	note := "pipeline 12 (https://gitlab.example.com/p/-/pipelines/12) failed; trying it once more on the same commit (flaky retry 1 of 1)"
	d := store.RequestDetail{
		Operation: store.Operation{OperationID: "op-1", Status: state.StatusMRCreating, Step: state.StepCreateStarted, UpdatedAt: at},
		Steps: []store.StepRecord{
			{OperationID: "op-1", Step: state.StepCreateStarted, Status: state.StatusMRCreating, At: at, Note: "MR !3 opened"},
			{OperationID: "op-1", Step: state.StepCreateStarted, Status: state.StatusMRCreating, At: at.Add(time.Minute), Note: note},
		},
	}
	w := (&Workflow{}).waitingFor(d, state.StatusMRCreating, state.NextWait, false, api.RequestView{})
	if w == nil || !strings.Contains(w.WaitingFor, "its pipeline's new run to pass — "+note) || !w.Since.Equal(at.Add(time.Minute)) {
		t.Fatalf("during a flaky retry: %+v", w)
	}
}
