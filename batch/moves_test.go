package batch

import (
	"fmt"
	"testing"

	"bindery/internal/vocab/state"
	"bindery/internal/work/change"
)

// A failure recorded on a batch whose settlement did not go through reads back as decided, note
// and all; a hand-edited or garbled record reads as the generic failure with the text as its
// note, so the sweep still settles the batch instead of leaving it active.
func TestARecordedFailureReadsBackAndAGarbledOneIsTheGenericFailure(t *testing.T) {
	t.Parallel()
	decided := change.FailedApprove.With("approve MR !3: HTTP 403; two words")
	if got := decodeFailure(encodeFailure(decided)); got != decided {
		t.Fatalf("round trip: %+v, want %+v", got, decided)
	}
	for _, s := range []string{
		"",
		"not a failure",
		"12",
		"999999 999998 unknown steps",
		"x 1 not a number",
		fmt.Sprintf("%d 999 one step unknown", state.StepCreateFailed),
	} {
		want := change.Failure{Steps: change.Steps{Create: state.StepCreateFailed, Handle: state.StepHandleFailed}, Note: s}
		if got := decodeFailure(s); got != want {
			t.Errorf("decodeFailure(%q) = %+v, want the generic failure %+v", s, got, want)
		}
	}
}
