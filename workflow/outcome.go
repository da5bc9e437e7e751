package workflow

import (
	"fmt"
	"strings"

	"bindery/api"
	"bindery/internal/vocab/explain"
	"bindery/internal/vocab/state"
	"bindery/store"
)

// The words of a request that ended, stopped or is being removed: how a CLOSED request ended
// (revoked by whom, expired, withdrawn), that a removal keeps the binding in effect until its
// deploy, and for a failed one what bindery knows of the cause with both ways out
// — the requester's (withdraw and apply again, or ask where support.contact says) and the
// operator's (retry or withdraw).

// outcome says with what bindery knows of it what the sentence table says of a request that
// ended or failed (explain.Sentence): the cause, who ended it, the approvers' comment.
func (w *Workflow) outcome(v *api.RequestView, d store.RequestDetail, status state.BindingStatus) {
	op := d.Operation
	switch {
	case status == state.StatusRejected:
		rejected(v, d.Steps)
	case status == state.StatusClosed:
		v.NextActionText = explain.Closed(ending(d.Steps))
		v.ExpiresAt = nil // removed: nothing expires any more
	case state.Withdrawable(status, op.Step):
		f := explain.Failed{Step: op.Step, Contact: w.cfg.Current().SupportContact(), Links: w.links(op.Project)}
		if n := len(d.Steps); n > 0 {
			f.Note = d.Steps[n-1].Note
		}
		if v.FailedJob != nil {
			f.Job = fmt.Sprintf("%s #%d", v.FailedJob.Name, v.FailedJob.ID)
		}
		v.Withdrawable = true
		v.NextActionText, v.OperatorText = explain.WayOut(f), explain.ForOperator(f)
	}
}

// ending says how a CLOSED request ended and by whom, from its history: the withdrawal, or the
// close phase's first step after the request was last in effect ("Revoked by alice." or
// "Expired.", as close.go writes them).
func ending(steps []store.StepRecord) (end, by string) {
	start := -1
	for i := len(steps) - 1; i >= 0; i-- {
		switch s := steps[i]; s.Step {
		case state.StepWithdrawn:
			by, _ := strings.CutPrefix(strings.TrimSuffix(s.Note, "."), withdrawnBy)
			return explain.EndWithdrawn, by
		case state.StepCloseStarted:
			start = i
		case state.StepCalledBack:
			i = -1 // the close phase started after this
		}
	}
	if start < 0 {
		return "", ""
	}
	note := strings.TrimSuffix(steps[start].Note, ".")
	if by, ok := strings.CutPrefix(note, revokedBy); ok {
		return explain.EndRevoked, by
	}
	if note == expiredNote {
		return explain.EndExpired, ""
	}
	return "", ""
}

// The notes that say who ended a request, as written and read back (ending).
const (
	revokedBy   = "Revoked by "
	withdrawnBy = "Withdrawn by "
	expiredNote = "Expired"
)
