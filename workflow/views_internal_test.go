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
