package workflow_test

import (
	"testing"

	"bindery/internal/work/engine/steptest"
)

// Every step of a request is a row of its step table, and no step is named by a raw string.
func TestEveryRequestStepIsInItsTable(t *testing.T) {
	steptest.Check(t, ".", "Step", "steps")
}
