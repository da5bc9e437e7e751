package server

import (
	"context"
	"slices"
	"sync"

	"bindery/api"
	"bindery/internal/vocab/apperr"
	"bindery/internal/vocab/state"
)

// fakeNotifications behaves like the notifier's contract: a choice per person among the events
// a requester may be emailed about, one receiver with one delivery (7) that may be sent again,
// one disabled receiver (webhook:ci) that may be enabled.
type fakeNotifications struct {
	mu    sync.Mutex
	prefs map[string][]state.EventType
	calls []string
}

var _ Notifications = (*fakeNotifications)(nil)

var fakeChoosable = []state.EventType{
	state.EventRequestAccepted, state.EventRequestApproved, state.EventRequestRejected, state.EventRequestInCI,
	state.EventRequestNeedsAttention, state.EventRequestFailed, state.EventRequestMerged, state.EventRequestInEffect, state.EventRequestClosed,
}

func newFakeNotifications() *fakeNotifications {
	return &fakeNotifications{prefs: map[string][]state.EventType{}}
}

func (f *fakeNotifications) EmailPrefs(_ context.Context, subject string) (api.EmailPrefs, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	ev, ok := f.prefs[subject]
	if !ok {
		ev = []state.EventType{state.EventRequestRejected, state.EventRequestNeedsAttention, state.EventRequestFailed, state.EventRequestInEffect}
	}
	p := api.EmailPrefs{Events: append([]state.EventType{}, ev...), Defaults: !ok, Address: subject, EmailOn: true}
	for _, t := range fakeChoosable {
		p.Choices = append(p.Choices, api.EventChoice{Event: t, Label: string(t), Default: t.Info().EmailByDefault})
	}
	return p, nil
}

func (f *fakeNotifications) SetEmailPrefs(ctx context.Context, subject string, events []state.EventType) (api.EmailPrefs, error) {
	for _, e := range events {
		if !slices.Contains(fakeChoosable, e) {
			return api.EmailPrefs{}, apperr.Invalid("events", "%q is not an event a requester is emailed about", e)
		}
	}
	f.mu.Lock()
	f.prefs[subject] = append([]state.EventType{}, events...)
	f.calls = append(f.calls, "SetEmailPrefs "+subject)
	f.mu.Unlock()
	return f.EmailPrefs(ctx, subject)
}

func (f *fakeNotifications) Sent(_ context.Context, operationID string, all bool) ([]api.Sent, error) {
	out := []api.Sent{{Event: state.EventRequestInEffect, Label: "in effect", Channel: "email", To: "alice@example.com", Status: "delivered", At: t0}}
	if all {
		out = append(out, api.Sent{Event: state.EventRequestInEffect, Label: "in effect", Channel: "webhook", To: "webhook:ci", Status: "failed", At: t0, Note: "the receiver answered 500"})
	}
	return out, nil
}

func (f *fakeNotifications) delivery() api.DeliveryVw {
	return api.DeliveryVw{ID: 7, Event: state.EventRequestInEffect, EventID: "evt_x", Status: "pending", CreatedAt: t0, Tries: []api.AttemptVw{}}
}

func (f *fakeNotifications) Endpoints(context.Context) ([]api.NotifyEndpoint, error) {
	return []api.NotifyEndpoint{{Name: "webhook:ci", Channel: "webhook", URL: "https://hooks.example.com/…", Configured: true, DisabledAt: &t0,
		DisabledReason: "it answered 410 Gone", Deliveries: []api.DeliveryVw{f.delivery()}}}, nil
}

func (f *fakeNotifications) Resend(_ context.Context, id int64) (api.DeliveryVw, error) {
	if id != 7 {
		return api.DeliveryVw{}, apperr.New(apperr.NotFound, "No such delivery.")
	}
	return f.delivery(), nil
}

func (f *fakeNotifications) Enable(_ context.Context, endpoint string) (api.NotifyEndpoint, error) {
	if endpoint != "webhook:ci" {
		return api.NotifyEndpoint{}, apperr.New(apperr.Conflict, "%s is not disabled.", endpoint)
	}
	return api.NotifyEndpoint{Name: endpoint, Channel: "webhook", Configured: true, Deliveries: []api.DeliveryVw{}}, nil
}
