package state

import "slices"

// EventType names a piece of news bindery tells people (docs/notifications.md): what happened
// to a request, a batch or bindery itself. The types are stored with each event and sent as the
// "type" of a webhook: never rename one.
type EventType string

// The requester's events: what became of their request.
const (
	EventRequestAccepted EventType = "request.accepted"  // the application was recorded
	EventRequestApproved EventType = "request.approved"  // the approvers said yes
	EventRequestRejected EventType = "request.rejected"  // the approvers said no (or withdrew it)
	EventRequestInCI     EventType = "request.in_ci"     // its merge request is open, its pipeline runs
	EventRequestFailed   EventType = "request.failed"    // it stopped at a failure; the event says what to do
	EventRequestMerged   EventType = "request.merged"    // its change is merged, the deploy is awaited
	EventRequestInEffect EventType = "request.in_effect" // deployed: the binding is in effect
	EventRequestClosed   EventType = "request.closed"    // removed again (revoked or expired)
	EventBindingExpiring EventType = "binding.expiring"  // in effect, its expiry nears (notify.expiryReminders)
)

// The reviewers' events: an access review of a target they own (docs/workflow.md, 'Access
// reviews'). The person they concern is the reviewer, as the requester is of a request's.
const (
	EventReviewStarted EventType = "review.started" // a review asks them to keep or remove bindings
	EventReviewDue     EventType = "review.due"     // an open review's due date nears
)

// The operators' events: what needs a person.
const (
	EventBatchBlocked          EventType = "batch.blocked"           // a batch waits for a person in GitLab
	EventRequestNeedsAttention EventType = "request.needs_attention" // a request the stuck list shows
	EventDeployOverdue         EventType = "deploy.overdue"          // a merged request's deploy callback is late
	EventCallbackRefused       EventType = "callback.refused"        // a deploy callback bindery cannot believe
	EventConfigRefused         EventType = "config.refused"          // a configuration file or key was refused
	EventTargetsRemoved        EventType = "config.targets_removed"  // a reload removed targets that bindings still use
	EventEndpointDisabled      EventType = "endpoint.disabled"       // a delivery endpoint was switched off
	EventEndpointTest          EventType = "endpoint.test"           // a test delivery (bindery doctor -send-test), never stored
	// A file in the config repository differs from the bindings bindery holds (docs/drift.md);
	// the requester of a binding whose file was removed is told too.
	EventBindingDrifted EventType = "binding.drifted"
)

// The batch's own events, for its merge request's note (never sent to a webhook or a person).
const (
	EventBatchOpened  EventType = "batch.opened"  // the batch's merge request opened, with its members
	EventBatchCulprit EventType = "batch.culprit" // a bisection isolated the change that fails
)

// Audience is who an event concerns.
type Audience string

const (
	AudienceRequester Audience = "requester" // the person who applied
	AudienceOperators Audience = "operators" // whoever runs bindery
	AudienceBatch     Audience = "batch"     // the batch's merge request (its note)
)

// EventInfo is what bindery knows about an event type.
type EventInfo struct {
	Audience Audience
	// AlsoRequester: an operators' event that concerns the request's requester too (their
	// request waits for a person: "needs you").
	AlsoRequester bool
	// EmailByDefault: a requester is emailed about it unless they chose otherwise.
	EmailByDefault bool
}

var eventTypes = map[EventType]EventInfo{
	EventRequestAccepted:       {Audience: AudienceRequester},
	EventRequestApproved:       {Audience: AudienceRequester},
	EventRequestRejected:       {Audience: AudienceRequester, EmailByDefault: true},
	EventRequestInCI:           {Audience: AudienceRequester},
	EventRequestFailed:         {Audience: AudienceRequester, EmailByDefault: true},
	EventRequestMerged:         {Audience: AudienceRequester},
	EventRequestInEffect:       {Audience: AudienceRequester, EmailByDefault: true},
	EventRequestClosed:         {Audience: AudienceRequester},
	EventBindingExpiring:       {Audience: AudienceRequester, EmailByDefault: true},
	EventReviewStarted:         {Audience: AudienceRequester, EmailByDefault: true},
	EventReviewDue:             {Audience: AudienceRequester, EmailByDefault: true},
	EventBatchBlocked:          {Audience: AudienceOperators},
	EventRequestNeedsAttention: {Audience: AudienceOperators, AlsoRequester: true, EmailByDefault: true},
	EventDeployOverdue:         {Audience: AudienceOperators},
	EventCallbackRefused:       {Audience: AudienceOperators},
	EventConfigRefused:         {Audience: AudienceOperators},
	EventTargetsRemoved:        {Audience: AudienceOperators},
	EventEndpointDisabled:      {Audience: AudienceOperators},
	EventEndpointTest:          {Audience: AudienceOperators},
	EventBindingDrifted:        {Audience: AudienceOperators, AlsoRequester: true, EmailByDefault: true},
	EventBatchOpened:           {Audience: AudienceBatch},
	EventBatchCulprit:          {Audience: AudienceBatch},
}

// EventTypes lists every event type, sorted.
func EventTypes() []EventType {
	out := make([]EventType, 0, len(eventTypes))
	for t := range eventTypes {
		out = append(out, t)
	}
	slices.Sort(out)
	return out
}

// Known reports whether t is an event type.
func (t EventType) Known() bool { _, ok := eventTypes[t]; return ok }

// Info is t's row of the event table (zero for an unknown type).
func (t EventType) Info() EventInfo { return eventTypes[t] }

// Public reports whether t may be sent outside bindery (a webhook, a chat, an email): every type
// but the batch's own.
func (t EventType) Public() bool { return t.Known() && t.Info().Audience != AudienceBatch }

// ConcernsRequester reports whether the request's requester is told of t.
func (t EventType) ConcernsRequester() bool {
	i := t.Info()
	return i.Audience == AudienceRequester || i.AlsoRequester
}

// Move is one binding transition as the store writes it: from and to status, the step it
// enters and the step it leaves, and whether it records a merge request.
type Move struct {
	From, To BindingStatus
	FromStep Step // the step before ("" status, 0: a new application)
	Step     Step
	MR       bool // the transition records the request's merge request
}

// EventsOf is the news a binding transition means, in the order it is told: nothing for most
// steps (a request's progress inside a stage is on its page, not in anyone's mailbox). It is
// pure: the store calls it in the transaction of the transition and writes what it returns.
func EventsOf(m Move) []EventType {
	var out []EventType
	switch {
	case m.To.AwaitingApproval() && (m.From == "" || m.From.Reappliable()),
		m.To == StatusMRCreating && m.Step == StepCreateStarted && (m.From == "" || m.From.Reappliable()):
		out = append(out, EventRequestAccepted)
	case m.From.AwaitingApproval() && (m.To == StatusMRCreating && m.Step == StepQueued || m.To == StatusMerging):
		out = append(out, EventRequestApproved)
	case m.To == StatusRejected && m.From != StatusRejected:
		out = append(out, EventRequestRejected)
	case m.To == StatusMRCreating && m.Step == StepCreateStarted && m.MR:
		out = append(out, EventRequestInCI)
	case m.To.Failed() && (m.From != m.To || m.FromStep != m.Step):
		out = append(out, EventRequestFailed)
	case m.To == StatusMerged && m.From != StatusMerged:
		out = append(out, EventRequestMerged)
	case m.To == StatusValidated && m.Step == StepCalledBack && m.From != StatusValidated:
		out = append(out, EventRequestInEffect)
	case m.To == StatusClosed && m.From != StatusClosed:
		out = append(out, EventRequestClosed)
	}
	if NeedsAttention(m.To, m.Step) && !NeedsAttention(m.From, m.FromStep) || m.Step.Pending() && m.Step != m.FromStep {
		out = append(out, EventRequestNeedsAttention)
	}
	return out
}

// NeedsAttention reports a request the ops stuck list shows for its status and step alone: a
// failure status or a pending step (an overdue approval or deploy is a matter of time, found by
// the watch).
func NeedsAttention(status BindingStatus, step Step) bool {
	return status.Failed() || step.Pending()
}

// The notify kind's vocabulary: its lane (a lane of its own, so that a slow receiver never
// delays a request's steps) and its steps (an event is routed once to its receivers, then each
// delivery is sent, one attempt per run).
const (
	NotifyLane  = "notify"
	NotifyRoute = "route"
	NotifySend  = "send"
)
