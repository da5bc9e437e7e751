package workflow

import (
	"strings"
	"unicode"
	"unicode/utf8"

	"bindery/api"
	"bindery/internal/vocab/explain"
	"bindery/internal/vocab/state"
	"bindery/store"
)

// A rejection keeps who decided and what they wrote, when the approval system sends them: the
// note of the rejection's step says it in the requester's words ("Rejected by carol: not this
// quarter."), and the request page shows it (rejected).

// Bounds of what a rejection's note keeps of the callback, in bytes: the note is at most 512
// (store's operation_step.note), and what is cut says so with an ellipsis.
const (
	maxDecidedBy = 100
	maxComment   = 380
)

// rejectionNote is the note of a rejection (or a withdrawal in the approval system): who decided
// and their comment when the callback names them, else the decision alone.
func rejectionNote(cb api.ApprovalCallback) string {
	by, comment := oneLine(cb.DecidedBy, maxDecidedBy), oneLine(cb.Comment, maxComment)
	verb := "Rejected"
	if cb.Result == api.ApprovalWithdrawn {
		verb = "Withdrawn in the approval system"
	}
	switch {
	case by == "" && comment == "":
		return "Decision: " + strings.ToLower(cb.Result) + "."
	case by != "":
		verb += " by " + by
	}
	if comment == "" {
		return verb + "."
	}
	return verb + ": " + comment
}

// oneLine is a text someone typed elsewhere, as a note keeps it: control characters (line
// breaks too) become spaces, runs of spaces one, cut to max bytes (on a character boundary)
// with an ellipsis.
func oneLine(s string, max int) string {
	s = strings.Join(strings.Fields(strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return ' '
		}
		return r
	}, s)), " ")
	if len(s) <= max {
		return s
	}
	cut := max - len("…")
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

// rejected sets the words of a REJECTED request: the decision as its note records it (who and
// their comment), and that a new application works.
func rejected(v *api.RequestView, steps []store.StepRecord) {
	decision := ""
	for i := len(steps) - 1; i >= 0; i-- {
		if steps[i].Step == state.StepApprovalRejected {
			decision = steps[i].Note
			break
		}
	}
	v.NextActionText = explain.Rejected(decision)
}
