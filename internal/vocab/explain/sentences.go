package explain

import (
	"slices"
	"strings"

	"bindery/internal/vocab/state"
)

// Row is one line of the table of what people read of a state (docs/states.md, 'What people
// read of each state'): a status, a step it can be at and a next action, with the requester's
// label and sentence and the operator's sentence. The request view, the lists and the news read
// it; where they know more (a failure's cause, who revoked, the approvers' comment, the merge
// request a person must act on) they say the same with those details.
type Row struct {
	Status state.BindingStatus
	Step   state.Step
	Action state.NextAction
	// Label names the state for its requester: the request page's badge and current step and
	// the list's status all say it.
	Label string
	// Requester is what the requester reads: what happened and what happens next.
	Requester string
	// Operator is what an operator reads: the same, for whoever acts on it.
	Operator string
	// Retries: a task of bindery's looks again or tries again by itself.
	Retries bool
	// Alerted: operators were told — a request.needs_attention, batch.blocked or deploy.overdue
	// event is written for this state (state.EventsOf, the watch).
	Alerted bool
}

// Actions lists the next actions a request at status and step can be told: the one its status
// and step give (state.NextActionFor), and WAIT_MANUAL where the request view knows more — a
// merged grant or removal whose deploy report is overdue (reconcile.deployOverdue), a request
// in its project's waiting set behind a blocked batch.
func Actions(status state.BindingStatus, step state.Step) []state.NextAction {
	out := []state.NextAction{state.NextActionFor(status, step)}
	if (state.AwaitsDeploy(status, step) || behindBlockedAt(status, step)) && out[0] != state.NextWaitManual {
		out = append(out, state.NextWaitManual)
	}
	return out
}

// behindBlockedAt: the steps of a request in the waiting set (to add its file, or to remove it).
func behindBlockedAt(status state.BindingStatus, step state.Step) bool {
	return status == state.StatusMRCreating && step == state.StepQueued || status == state.StatusValidated && step == state.StepCloseStarted
}

// sentences is the table, built once from the rules below for every reachable combination.
var sentences = func() map[key]Row {
	m := map[key]Row{}
	for _, status := range state.AllStatuses {
		for _, step := range state.StepsAt(status) {
			for _, a := range Actions(status, step) {
				m[key{status, step, a}] = sentence(status, step, a)
			}
		}
	}
	return m
}()

type key struct {
	status state.BindingStatus
	step   state.Step
	action state.NextAction
}

// Sentences is the whole table: every status, each step it can be at (state.StepsAt) and each
// next action there (Actions), in that order.
func Sentences() []Row {
	out := make([]Row, 0, len(sentences))
	for _, r := range sentences {
		out = append(out, r)
	}
	order := func(s state.BindingStatus) int { return slices.Index(state.AllStatuses, s) }
	slices.SortFunc(out, func(a, b Row) int {
		if d := order(a.Status) - order(b.Status); d != 0 {
			return d
		}
		if d := int(a.Step) - int(b.Step); d != 0 {
			return d
		}
		return strings.Compare(string(a.Action), string(b.Action))
	})
	return out
}

// Sentence is the table's row for a request at status and step told action. A combination the
// table has no row for (a row written by an older version) reads as the rules say.
func Sentence(status state.BindingStatus, step state.Step, action state.NextAction) Row {
	if r, ok := sentences[key{status, step, action}]; ok {
		return r
	}
	return sentence(status, step, action)
}

// Sentences of progress end with what the requester does about it: nothing.
const nothingToDo = " Nothing to do."

// sentence is the rule that writes a row.
func sentence(status state.BindingStatus, step state.Step, action state.NextAction) Row {
	r := Row{Status: status, Step: step, Action: action, Label: Label(step)}
	if r.Label == "" {
		r.Label = "In progress"
	}
	manual := action == state.NextWaitManual
	switch {
	case status == state.StatusRejected:
		r.Requester = Rejected("")
		r.Operator = "Rejected in the approval system; its requester may apply again."
	case status == state.StatusClosed && step == state.StepWithdrawn:
		r.Requester = Closed(EndWithdrawn, "")
		r.Operator = "Withdrawn after a failure; nothing of it is in effect, and its requester may apply again."
	case status == state.StatusClosed:
		r.Requester = "Removed: the binding was revoked or expired, and the deploy that removes its file is done. You can apply again."
		r.Operator = "Closed: its removal is deployed; its requester may apply again."
	case status == state.StatusValidated && step == state.StepCalledBack:
		r.Requester = "Done: the binding is in effect."
		r.Operator = "In effect: the deploy that includes its merge was reported."
	case state.AwaitsDeploy(status, step) && manual:
		r.Label, r.Alerted = "Merged, the deploy report is overdue", true
		what := "The merge request is merged"
		if status == state.StatusValidated {
			r.Label, what = "Removal merged, the deploy report is overdue", "The removal is merged (the binding stays in effect until its deploy)"
		}
		r.Requester = what + ", but the deploy pipeline has not reported it deployed in the expected time. Operators have been alerted: they check the deploy pipeline and can confirm the deploy."
		r.Operator = "Its deploy callback is overdue (reconcile.deployOverdue): check the project's deploy pipeline, then confirm the deploy (Retry) — reconciliation cannot infer it until a later merge is reported."
	case status == state.StatusValidated && step == state.StepCloseMerged:
		r.Requester = Removing(true)
		r.Operator = "Its removal merged; CLOSED when the deploy that includes it is reported (a callback or reconciliation by merge order)."
	case behindBlockedAt(status, step) && manual:
		r.Label, r.Alerted = "Approved, waiting behind a blocked batch", true
		what := "Approved, but"
		if status == state.StatusValidated {
			r.Label, what = "Removal waiting behind a blocked batch", "The binding stays in effect; its removal waits because"
		}
		r.Requester = what + " nothing of its project is merged until a blocked batch ahead of it is resolved. Operators have been alerted; your request goes on by itself once that batch is resolved."
		r.Operator = "In the waiting set behind a BLOCKED batch of its project: resume or settle that batch."
	case status == state.StatusValidated && step == state.StepCloseStarted:
		r.Requester = Removing(false)
		r.Operator = "Its removal goes through the batch path like any change: the waiting set, a batch, its merge, then the deploy."
	case step == state.StepCloseFailed:
		r.Alerted = true
		r.Requester = "Removing the binding's file failed: the binding is still in effect. Operators have been alerted and can retry the removal."
		r.Operator = "Its removal failed; the binding is still in effect. Retry it: it goes back to the waiting set."
	case status.Failed():
		r.Alerted = true // request.needs_attention, on the way into a failure status
		r.Requester, r.Operator = WayOut(Failed{Step: step}), ForOperator(Failed{Step: step})
	case step == state.StepHandleMRBlocked:
		r.Retries, r.Alerted = true, true
		r.Requester = "Its merge request waits for a person to act in GitLab (this page says what). bindery looks again by itself and goes on once that is done; operators have been alerted."
		r.Operator = "Something only a person can clear keeps GitLab from merging it; bindery looks again every poll. Settle the batch if nobody will clear it."
	case step.Pending():
		r.Alerted = true // request.needs_attention, on the way into a pending step
		r.Requester = strings.TrimSuffix(Label(step), ".") + ". Operators have been alerted and can run it again; your request waits until then."
		r.Operator = strings.TrimSuffix(Label(step), ".") + " (poll.timeout, also after a new pipeline): retry once CI or GitLab answers again — the same merge request is used."
	default:
		r.Requester, r.Operator, r.Retries = progress(status, step)
	}
	return r
}

// progress is what a request on its way reads: bindery itself takes it further (its task looks
// again or retries an unavailable system by itself).
func progress(status state.BindingStatus, step state.Step) (requester, operator string, retries bool) {
	switch step {
	case state.StepApprovalSending:
		return "Your request is being sent to the approval system." + nothingToDo,
			"The ticket is being sent to the approval system; an unavailable approval system is tried again.", true
	case state.StepApprovalSent:
		return "Your request waits for the approvers' decision in the approval system." + nothingToDo,
			"Waits for the approvers; bindery reads the ticket every approval.pollAfter, and lists it once approval.timeout passed.", true
	case state.StepQueued:
		return "Approved: your request waits to be taken into the next batch of its project, one merge request for several requests." + nothingToDo,
			"Approved, in its project's waiting set until a batch round claims it.", false
	case state.StepBatched:
		return "Your request was taken into a batch; bindery opens its merge request." + nothingToDo,
			"Claimed by a batch; the batch's open step builds its branch and its merge request.", true
	case state.StepCreateStarted:
		return "The merge request that carries your change is being opened and tested by its pipeline." + nothingToDo,
			"Its merge request (the batch's, or a legacy request's own) is opened and its pipeline runs; bindery looks at it every poll.", true
	case state.StepCreateSucceeded:
		return "The pipeline of its merge request passed; bindery goes on with it." + nothingToDo,
			"The pipeline passed; next the merge phase (a legacy request: its approval).", true
	case state.StepHandleStarted:
		return "The reviewer bots approve and merge the merge request." + nothingToDo,
			"The merge phase: the reviewer accounts approve, then the merge in the project's order.", true
	case state.StepHandleApproved:
		return "Approved by the reviewer bots; the merge request is being merged." + nothingToDo,
			"Approved by the reviewer accounts; the merge runs in the project's order.", true
	case state.StepHandleMerged:
		return "Merged: your change takes effect when the deploy pipeline reports the deploy." + nothingToDo,
			"Merged; VALIDATED when the deploy that includes the merge is reported (a callback or reconciliation by merge order).", false
	}
	return "Your request is on its way." + nothingToDo, "In progress: " + string(status) + " at " + step.String() + ".", false
}
