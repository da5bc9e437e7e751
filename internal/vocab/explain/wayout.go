package explain

import (
	"strings"

	"bindery/internal/vocab/state"
)

// Failed is what bindery knows of a request that stopped at a failure, for the words its
// requester and an operator read of it (WayOut, ForOperator).
type Failed struct {
	Step state.Step // the failure's step
	Note string     // the note recorded with it (only its safe details reach the requester: Told)
	// Job is the failed job of the pipeline that failed, as "name #id" ("": none known).
	Job string
	// Contact is support.contact: where to ask ("": the operators of bindery).
	Contact string
	// Links gives the web address of a merge request or pipeline by its number (nil: none).
	Links func(kind string, id int64) string
}

// Isolated reports whether a bisection isolated the request as the change that makes the
// pipeline fail (bindery's note of the batch that failed it alone says so).
func (f Failed) Isolated() bool { return isolatedRef.MatchString(f.Note) }

// Cause is what bindery knows of the cause, in a requester's words, without the final period:
// "your change made the pipeline fail" when a bisection isolated it, else the step's fixed
// sentence and its safe details; the failed job when one is known.
func (f Failed) Cause() string {
	cause := strings.TrimSuffix(Told(f.Step, f.Note, f.Links), ".")
	if f.Isolated() {
		cause = "Your change made the pipeline fail: " + SafeDetails(f.Note, f.Links)
	}
	if cause == "" {
		cause = "It failed at " + strings.ToLower(Label(f.Step))
	}
	if f.Job != "" {
		cause += " (failed job: " + f.Job + ")"
	}
	return cause
}

// WayOut is what a requester reads of their failed request: the cause as bindery knows it, and
// both ways out — withdraw the request and apply again, or ask the maintainers (where
// support.contact says). A failure waiting will not fix says so; another one can also be retried
// by the operators.
func WayOut(f Failed) string {
	next := "Operators can retry it"
	switch {
	case f.Step.Deterministic():
		next = "Waiting will not fix it"
	case f.Step == state.StepBatchAbandoned:
		next = "Nothing tries it again by itself; an operator can retry it"
	}
	return f.Cause() + ". " + next + ". You can withdraw this request and apply again, or ask " + contact(f.Contact) + "."
}

// ForOperator is what an operator reads of a failed request: its cause, and the operator's two
// actions — never "contact support": the operators are the support.
func ForOperator(f Failed) string {
	retry := "Retry it"
	if f.Step.Deterministic() {
		retry = "A failure of the change itself: a retry (a new merge request, or the same one again) fails the same way unless the change or its pipeline was fixed"
	}
	return f.Cause() + ". " + retry + "; or withdraw it, which closes it for its requester, who can then apply again."
}

// contact names where a requester asks: support.contact, a URL as "the maintainers: <url>".
func contact(c string) string {
	switch {
	case c == "":
		return "the operators of bindery"
	case strings.HasPrefix(c, "http://") || strings.HasPrefix(c, "https://"):
		return "the maintainers: " + c
	}
	return c
}

// How a CLOSED request ended, for its words (Closed).
const (
	EndRevoked   = "revoked"
	EndExpired   = "expired"
	EndWithdrawn = "withdrawn"
)

// Closed is what a requester reads of a CLOSED request: which end it was — revoked (by whom),
// expired, or withdrawn after a failure (by whom) — and that a new application works.
func Closed(end, by string) string {
	switch end {
	case EndRevoked:
		who := ""
		if by != "" {
			who = " by " + by
		}
		return "Revoked" + who + ": the binding's file was removed and the removal is deployed. You can apply again."
	case EndExpired:
		return "Expired: the binding's time ran out, its file was removed and the removal is deployed. You can apply again."
	case EndWithdrawn:
		who := ""
		if by != "" {
			who = " by " + by
		}
		return "Withdrawn" + who + " after it failed: nothing of it is in effect. You can apply again."
	}
	return "The binding was in effect and has been removed. You can apply again."
}

// Rejected is what a requester reads of a rejected request: the decision as bindery recorded it
// — who decided and their comment, when the approval system sent them ("Rejected by carol: not
// this quarter") — and that a new application works.
func Rejected(decision string) string {
	if !strings.HasPrefix(decision, "Rejected") && !strings.HasPrefix(decision, "Withdrawn") {
		decision = "Rejected by the approvers"
	}
	if !strings.HasSuffix(decision, ".") && !strings.HasSuffix(decision, "!") && !strings.HasSuffix(decision, "?") {
		decision += "."
	}
	return decision + " This request is finished without effect. You can apply again."
}

// Removing is what a requester reads while their binding's removal runs (revoked or expired):
// it stays in effect until the deploy that includes the removal's merge; merged says the
// removal merged already.
func Removing(merged bool) string {
	if merged {
		return "Removal merged, waiting for the deploy: the binding stays in effect until the deploy pipeline reports the removal deployed."
	}
	return "The binding is being removed: it stays in effect until the removal is merged and deployed."
}
