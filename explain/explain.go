// Package explain is what people read of a request's state: the label of each step, what a
// request waits for at it, the fixed sentence a requester reads of a failure, what the client is
// told to do next — and the one place that turns a recorded note into text a requester may read
// (Told). The store keeps what bindery recorded; this package decides what of it people see.
package explain

import "bindery/state"

// stepText is the words of one step.
type stepText struct {
	// label is the step in plain words, as the request page's timeline shows it.
	label string
	// waiting is what the request waits for at this step, in plain words; {mr} stands for the
	// merge request ("merge request !12"), {note} for the step's note. "": the status says it.
	waiting string
	// told is what a requester reads of a failure at this step: a fixed sentence. The step's
	// note is then the cause as bindery recorded it (an error's classified text: the system,
	// the endpoint, the HTTP status, "database error"), for operators and the log only (Told).
	// "": the step's notes are bindery's own words with safe details, shown as written.
	told string
}

// Label is the step in plain words ("" for a step without words: its name is shown).
func Label(s state.Step) string { return stepWords[s].label }

// Waiting is what a request waits for at step s, with {mr} and {note} placeholders; "": the
// status says it.
func Waiting(s state.Step) string { return stepWords[s].waiting }

// Failure is the fixed sentence a requester reads of a failure at step s ("": s is not a
// failure step; its notes are bindery's own words).
func Failure(s state.Step) string { return stepWords[s].told }

// NextActionText is the plain-words explanation of a next action the SPA shows.
func NextActionText(a state.NextAction) string {
	switch a {
	case state.NextWait:
		return "Your request is progressing; nothing to do."
	case state.NextWaitManual:
		return "Your request stopped at a step that can be retried. You can keep waiting: operators will retry it."
	case state.NextContactSupport:
		return "Your request hit a failure that waiting will not fix. Please contact the maintainers."
	case state.NextReapply:
		return "This request is finished without effect. You can apply again."
	case state.NextNone:
		return "Done: the binding is in effect."
	}
	return ""
}
