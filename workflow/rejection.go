package workflow

import (
	"strings"
	"unicode"

	"bindery/api"
	"bindery/internal/vocab/explain"
	"bindery/internal/vocab/state"
	"bindery/internal/vocab/text"
	"bindery/store"
)

// A decision keeps who decided and what they wrote, when the approval system sends them: the
// note of the decision's step says it in the requester's words ("Rejected by carol: not this
// quarter.", "Approved by dave: fine for Q3."), the request page shows it (rejected), and the
// operation keeps who decided (store.Change.DecidedBy) for the audit export.

// Bounds of what a rejection's note keeps of the callback, in bytes: the note is at most 512
// (store's operation_step.note), and what is cut says so with an ellipsis.
const (
	maxDecidedBy = 100
	maxComment   = 380
)

// rejectionNote is the note of a rejection (or a withdrawal in the approval system): who decided
// and their comment when the callback names them, else the decision alone.
func rejectionNote(cb api.ApprovalCallback) string {
	verb := "Rejected"
	if cb.Result == api.ApprovalWithdrawn {
		verb = "Withdrawn in the approval system"
	}
	return decisionNote(cb, verb)
}

// approvalNote is the note of an approval: who approved and their comment when the callback
// names them ("Approved by dave: fine for Q3."), else "Approved.".
func approvalNote(cb api.ApprovalCallback) string {
	if oneLine(cb.DecidedBy, maxDecidedBy) == "" && oneLine(cb.Comment, maxComment) == "" {
		return "Approved."
	}
	note := decisionNote(cb, "Approved")
	if !strings.HasSuffix(note, ".") && !strings.HasSuffix(note, "!") && !strings.HasSuffix(note, "?") {
		note += "." // a sentence follows it in the step's note
	}
	return note
}

// decisionNote is verb with who decided and their comment.
func decisionNote(cb api.ApprovalCallback, verb string) string {
	by, comment := oneLine(cb.DecidedBy, maxDecidedBy), oneLine(cb.Comment, maxComment)
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
// breaks too) become spaces, runs of spaces one, cut to max bytes (the note
// of 512 holds both texts and the words around them) with an ellipsis.
func oneLine(s string, max int) string {
	s = strings.Join(strings.Fields(strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return ' '
		}
		return r
	}, s)), " ")
	return text.Clip(s, max, text.Bytes, text.Ellipsis)
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
