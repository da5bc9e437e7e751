package explain

import (
	"bindery/internal/vocab/state"
	"fmt"
	"strings"
	"testing"
)

// A failure step tells the requester its fixed sentence and the numbers of the batch, the merge
// request and the pipeline — nothing else of the recorded note; bindery's own words are shown
// as written.
func TestToldKeepsOnlyTheSafeDetailsOfAFailure(t *testing.T) {
	links := func(kind string, id int64) string {
		return fmt.Sprintf("https://gitlab.example.com/p/-/%s/%d", kind, id)
	}
	cases := []struct {
		step       state.Step
		note, want string
	}{
		{state.StepCreateFailed, "Failed: gitlab create_mr: HTTP 502.", "bindery could not prepare the merge request."},
		{state.StepHandleApproveFailed, "sql: connection refused 127.0.0.1:3306; panic: x.go:12 for MR !7",
			"bindery's reviewer accounts could not approve the merge request (merge request !7: https://gitlab.example.com/p/-/mr/7)."},
		{state.StepCreatePipelineFailed, "batch 5 isolated the culprit op-1 after 1 bisection (bisection of batch 3): pipeline 55 (https://evil.example/x) failed",
			"The pipeline of the merge request failed (batch 5 isolated this request as the change that fails, after 1 bisection; pipeline 55: https://gitlab.example.com/p/-/pipeline/55)."},
		{state.StepCreateFailed, "batch 12: HTTP 500 !abc pipeline x", "bindery could not prepare the merge request (batch 12)."},
		{state.StepHandleMerged, "MR !3 merged", "MR !3 merged"},
		{state.StepQueued, "returned to the waiting set: batch 12 is bisected", "returned to the waiting set: batch 12 is bisected"},
	}
	for _, c := range cases {
		if got := Told(c.step, c.note, links); got != c.want {
			t.Errorf("Told(%s, %q) = %q, want %q", c.step, c.note, got, c.want)
		}
	}
	if got := Told(state.StepHandleMRClosed, "MR !4 was closed", nil); got != "The merge request was closed outside bindery (merge request !4)." {
		t.Errorf("without links: %q", got)
	}
}

// Every failure step — a failure status's step, a deterministic one — has its sentence for the
// requester: its note holds a cause.
func TestEveryFailureStepHasItsSentence(t *testing.T) {
	for _, s := range state.Steps() {
		i, told := s.Info(), Failure(s)
		failure := strings.HasSuffix(i.Name, "_FAILED") || strings.HasSuffix(i.Name, "_REJECTED") && s != state.StepApprovalRejected ||
			i.Deterministic || s == state.StepHandleMRClosed
		if failure && told == "" {
			t.Errorf("step %s: a failure without a sentence for the requester", i.Name)
		}
		if told != "" && strings.HasSuffix(told, ".") {
			t.Errorf("step %s: its sentence %q ends with a period (Told adds it after the details)", i.Name, told)
		}
	}
}

// Every step that says what a request waits for counts its time for a stage, and every step has
// its label.
func TestWordsGoWithTheVocabulary(t *testing.T) {
	for _, s := range state.Steps() {
		if Waiting(s) != "" && s.Info().Stage == "" {
			t.Errorf("%s says what it waits for but counts for no stage", s)
		}
		if Label(s) == "" {
			t.Errorf("%s has no label", s)
		}
	}
	for s := range stepWords {
		if !s.Known() {
			t.Errorf("words for an unknown step %d", s)
		}
	}
}
