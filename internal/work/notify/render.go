package notify

import (
	"fmt"
	"strings"

	"bindery/api"
	"bindery/internal/platform/config"
	"bindery/internal/vocab/explain"
	"bindery/internal/vocab/state"
	"bindery/store"
)

// Rendering: an event's facts, as recorded at the change, into what people read — the same words
// the request page uses (explain), so that an email, a webhook and the page never disagree.

// eventWords is each event type in plain words: the settings page's choices, an email's subject,
// the request page's "emailed you: …".
var eventWords = map[state.EventType]string{
	state.EventRequestAccepted:       "accepted",
	state.EventRequestApproved:       "approved",
	state.EventRequestRejected:       "rejected",
	state.EventRequestInCI:           "merge request opened, pipeline running",
	state.EventRequestFailed:         "failed",
	state.EventRequestMerged:         "merged, waiting for the deploy",
	state.EventRequestInEffect:       "in effect",
	state.EventRequestClosed:         "removed (revoked or expired)",
	state.EventBindingExpiring:       "expires soon: renew to keep it",
	state.EventReviewStarted:         "an access review asks you to decide",
	state.EventReviewDue:             "an access review is due soon",
	state.EventBatchBlocked:          "batch blocked: a person must act",
	state.EventRequestNeedsAttention: "needs a person",
	state.EventDeployOverdue:         "deploy callback overdue",
	state.EventCallbackRefused:       "callback refused",
	state.EventConfigRefused:         "configuration refused",
	state.EventTargetsRemoved:        "targets in use removed from the catalog",
	state.EventEndpointDisabled:      "delivery endpoint disabled",
	state.EventEndpointTest:          "test delivery",
	state.EventBindingDrifted:        "changed outside bindery",
	state.EventBatchOpened:           "batch merge request opened",
	state.EventBatchCulprit:          "culprit isolated",
}

// Words is an event type in plain words.
func Words(t state.EventType) string {
	if w, ok := eventWords[t]; ok {
		return w
	}
	return string(t)
}

// news is what e reports, as its audience reads it.
func news(e store.Event, snap *config.Snapshot, l explain.Links) any {
	f := e.Facts
	switch e.Type.Info().Audience {
	case state.AudienceRequester:
		return requestNews(e, snap, l)
	case state.AudienceBatch:
		return &api.BatchNews{BatchID: f.BatchID, Project: f.Project, MR: l.MR(f.Project, f.MRIID), Why: f.Why, Members: f.Members, Culprit: f.Culprit, URL: l.Ops()}
	}
	switch e.Type {
	case state.EventRequestNeedsAttention, state.EventDeployOverdue:
		return requestNews(e, snap, l)
	case state.EventBatchBlocked:
		return &api.BatchNews{BatchID: f.BatchID, Project: f.Project, MR: l.MR(f.Project, f.MRIID), Why: f.Why, URL: l.Ops()}
	}
	if e.Type == state.EventBindingDrifted {
		return &api.OpsNews{Why: DriftWords(e, snap), Project: f.Project, SHA: f.SHA, URL: l.Ops()}
	}
	n := &api.OpsNews{Why: f.Why, Project: f.Project, MRIID: f.MRIID, SHA: f.SHA, Refused: f.Refused, Endpoint: f.Endpoint, Instance: f.Instance, URL: l.Ops()}
	for _, t := range f.Targets {
		n.Targets = append(n.Targets, api.TargetUse(t))
	}
	if e.Type == state.EventConfigRefused && f.Note != "" {
		n.Keys = strings.Split(f.Note, ",")
	}
	return n
}

func requestNews(e store.Event, snap *config.Snapshot, l explain.Links) *api.RequestNews {
	f := e.Facts
	title := f.TargetKey
	if t, ok := snap.Target(f.TargetKey); ok && t.Title != "" {
		title = t.Title
	}
	action := state.NextActionFor(f.Status, f.Step)
	n := &api.RequestNews{
		OperationID: f.OperationID, Subject: f.Subject, TargetKey: f.TargetKey, TargetTitle: title, Project: f.Project,
		Status: f.Status, PreviousStatus: f.From,
		Step: api.StepView{Code: int(f.Step), Name: f.Step.String(), Label: explain.Label(f.Step)},
		Note: explain.Told(f.Step, f.Note, l.Of(f.Project)), NextAction: action, NextActionText: explain.NextActionText(f.Status, f.Step, action),
		MR: l.MR(f.Project, f.MRIID), Pipeline: l.Pipeline(f.Project, f.PipelineID), BatchID: f.BatchID, Reason: f.Reason,
		URL: l.Request(f.OperationID),
	}
	if e.Type == state.EventBindingExpiring && f.ExpiresAt != nil {
		// The reminder says when and how: the request page's Renew.
		n.ExpiresAt, n.NextActionText = f.ExpiresAt, explain.Expiring(title, *f.ExpiresAt, f.Left)
	}
	if f.Review != 0 && f.Due != nil {
		// A reviewer's news: the review's page, where they keep or remove each binding.
		n.Step, n.NextAction, n.URL = api.StepView{}, "", l.Review(f.Review)
		n.NextActionText = explain.ReviewStarted(title, f.Items, *f.Due)
		if e.Type == state.EventReviewDue {
			n.NextActionText = explain.ReviewDue(title, *f.Due)
		}
	}
	return n
}

// Summary is one line about e for people: a chat message's first line, an email's subject.
func Summary(e store.Event, snap *config.Snapshot) string {
	f := e.Facts
	switch e.Type {
	case state.EventBatchBlocked:
		return fmt.Sprintf("Batch %d of %s is BLOCKED: %s", f.BatchID, f.Project, blockedWhy(f.Why, f.Project, snap))
	case state.EventCallbackRefused:
		return fmt.Sprintf("A deploy callback for %s was refused: %s", f.Project, f.Why)
	case state.EventConfigRefused:
		return "The configuration was refused: " + f.Why
	case state.EventTargetsRemoved:
		return TargetsRemovedWords(f.Targets)
	case state.EventEndpointDisabled:
		return fmt.Sprintf("Delivery endpoint %s was disabled: %s", f.Endpoint, f.Why)
	case state.EventEndpointTest:
		return fmt.Sprintf("A test delivery to %s: bindery's notifications reach it (%s)", f.Endpoint, f.Why)
	case state.EventDeployOverdue:
		return fmt.Sprintf("Request %s (%s) merged, but its deploy has not been reported in time", f.OperationID, f.TargetKey)
	case state.EventReviewStarted, state.EventReviewDue:
		return fmt.Sprintf("Access review %d of %s: %s", f.Review, f.TargetKey, Words(e.Type))
	case state.EventRequestNeedsAttention:
		return fmt.Sprintf("Request %s (%s) needs a person: %s", f.OperationID, f.TargetKey, attentionWords(f, snap))
	case state.EventBindingExpiring:
		title := f.TargetKey
		if t, ok := snap.Target(f.TargetKey); ok && t.Title != "" {
			title = t.Title
		}
		return explain.ExpiringSummary(title, f.Left)
	case state.EventBindingDrifted:
		return DriftWords(e, snap)
	case state.EventBatchOpened:
		return fmt.Sprintf("Batch %d opened with %d changes", f.BatchID, len(f.Members))
	case state.EventBatchCulprit:
		return fmt.Sprintf("Batch %d isolated the change that fails: %s", f.BatchID, f.Culprit)
	}
	title := f.TargetKey
	if t, ok := snap.Target(f.TargetKey); ok && t.Title != "" {
		title = t.Title
	}
	return fmt.Sprintf("Your request for %s: %s", title, Words(e.Type))
}

// TargetsRemovedWords tells operators of targets that left the catalog while bindings use them —
// the same words in a notification and on the ops console.
func TargetsRemovedWords(ts []store.TargetUse) string {
	parts := make([]string, len(ts))
	for i, t := range ts {
		parts[i] = fmt.Sprintf("%s (%d in flight, %d in effect)", t.Key, t.InFlight, t.InEffect)
	}
	what, them := "Targets", "them"
	if len(ts) == 1 {
		what, them = "A target", "it"
	}
	return fmt.Sprintf("%s left the catalog while bindings use %s: %s. They finish, and stay until revoked or expired, with the target as it was when they were accepted; new applications for %s are refused. If the configuration file was cut short, restore it (replace the file in one rename).",
		what, them, strings.Join(parts, ", "), them)
}

// blockedWhy is a blocked batch's reason: the story of a merge held for a person as the request
// page and the ops console tell it (explain.MergeBlocked), or the reason as recorded.
func blockedWhy(why, project string, snap *config.Snapshot) string {
	short, _, long, _ := snap.PollStages()
	if b, ok := explain.MergeBlocked(why, project, max(short, long)); ok {
		return b.Text()
	}
	return why
}

// attentionWords says why a request needs a person.
// shortAttention is attentionWords in a few words, for a subject line.
func shortAttention(f store.EventFacts) string {
	switch f.Reason {
	case store.AttentionFailed:
		return "it failed"
	case store.AttentionApproval:
		return "its approval is taking long"
	case store.AttentionDeploy:
		return "its deploy is overdue"
	}
	if f.Step == state.StepHandleMRBlocked {
		return "someone must act on its merge request in GitLab"
	}
	return strings.ToLower(explain.Label(f.Step))
}

func attentionWords(f store.EventFacts, snap *config.Snapshot) string {
	switch f.Reason {
	case store.AttentionFailed:
		return "it failed (" + explain.Label(f.Step) + ")"
	case store.AttentionApproval:
		return "its approval has been waiting longer than approval.timeout"
	case store.AttentionDeploy:
		return "its deploy callback is overdue"
	}
	if f.Step == state.StepHandleMRBlocked {
		if w := blockedWhy(f.Note, f.Project, snap); w != f.Note {
			return w
		}
		return "someone must act on its merge request in GitLab"
	}
	return explain.Label(f.Step)
}

// DriftWords is a binding.drifted event in words: to the requester of a binding whose file was
// removed (the event names them), the removal; to operators, the finding.
func DriftWords(e store.Event, snap *config.Snapshot) string {
	f := e.Facts
	if e.SubjectID != "" && f.Reason == store.DriftMissing {
		title := f.TargetKey
		if t, ok := snap.Target(f.TargetKey); ok && t.Title != "" {
			title = t.Title
		}
		return explain.DriftRemoved(title, f.SHA, f.Author, f.At)
	}
	return explain.DriftFound(f.Reason, f.TargetKey, f.Subject, f.Path, f.SHA, f.Author)
}
