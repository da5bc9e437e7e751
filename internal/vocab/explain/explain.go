// Package explain is what people read of a request's state: the label of each step, what a
// request waits for at it, the fixed sentence a requester reads of a failure, what the client is
// told to do next — and the one place that turns a recorded note into text a requester may read
// (Told). The store keeps what bindery recorded; this package decides what of it people see.
package explain

import "bindery/internal/vocab/state"

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

// NextActionText is what the requester reads of a request at status and step told action: the
// sentence table's (Sentence), for the news and the lists that know no more of it.
func NextActionText(status state.BindingStatus, step state.Step, a state.NextAction) string {
	return Sentence(status, step, a).Requester
}
