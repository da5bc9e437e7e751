package notify

import (
	"context"
	"errors"
	"slices"
	"strings"

	"bindery/api"
	"bindery/internal/platform/config"
	"bindery/internal/vocab/apperr"
	"bindery/internal/vocab/state"
	"bindery/store"
)

// What people see of bindery telling them: their choice of emails, what was sent about a
// request, and the operators' view of every receiver. The HTTP layer calls these (its
// Notifications seam).

// requesterTypes are the event types a person may choose to be emailed about, in journey order.
var requesterTypes = []state.EventType{
	state.EventRequestAccepted, state.EventRequestApproved, state.EventRequestRejected, state.EventRequestInCI,
	state.EventRequestNeedsAttention, state.EventRequestFailed, state.EventRequestMerged, state.EventRequestInEffect,
	state.EventRequestClosed, state.EventBindingExpiring, state.EventBindingDrifted,
	state.EventReviewStarted, state.EventReviewDue,
}

// EmailPrefs is the settings page of subject.
func (n *Notifier) EmailPrefs(ctx context.Context, subject string) (api.EmailPrefs, error) {
	chosen, ok, err := n.db.EmailPrefs(ctx, subject)
	if err != nil {
		return api.EmailPrefs{}, err
	}
	snap := n.cfg.Current()
	p := api.EmailPrefs{Events: chosen, Defaults: !ok, Address: AddressOf(snap, subject), EmailOn: n.email(snap).On()}
	for _, t := range requesterTypes {
		d := t.Info().EmailByDefault
		p.Choices = append(p.Choices, api.EventChoice{Event: t, Label: choiceWords(t), Default: d})
		if !ok && d {
			p.Events = append(p.Events, t)
		}
	}
	if p.Events == nil {
		p.Events = []state.EventType{}
	}
	return p, nil
}

// choiceWords is an event type on the settings page.
func choiceWords(t state.EventType) string {
	if t == state.EventRequestNeedsAttention {
		return "needs you: your request waits for a person"
	}
	return Words(t)
}

// SetEmailPrefs records subject's choice: types a requester may be emailed about, else
// INVALID_ARGUMENT.
func (n *Notifier) SetEmailPrefs(ctx context.Context, subject string, types []state.EventType) (api.EmailPrefs, error) {
	for _, t := range types {
		if !slices.Contains(requesterTypes, t) {
			return api.EmailPrefs{}, apperr.Invalid("events", "%q is not an event a requester is emailed about", t)
		}
	}
	if err := n.db.SetEmailPrefs(ctx, subject, types); err != nil {
		return api.EmailPrefs{}, err
	}
	// Routed from now on, on this instance; the others read the choices at their next look.
	if err := n.refreshChosen(ctx); err != nil {
		n.log.Warn("people's email choices not read again", "err", err)
	}
	return n.EmailPrefs(ctx, subject)
}

// Sent lists what was sent about a request: its requester's emails, and with all (an operator)
// every delivery.
func (n *Notifier) Sent(ctx context.Context, operationID string, all bool) ([]api.Sent, error) {
	ds, err := n.db.SentAbout(ctx, operationID)
	if err != nil {
		return nil, err
	}
	evs, err := n.db.EventsOf(ctx, operationID, 500)
	if err != nil {
		return nil, err
	}
	types := map[string]state.EventType{}
	for _, e := range evs {
		types[e.ID] = e.Type
	}
	out := []api.Sent{}
	for _, d := range ds {
		if !all && d.Channel != ChannelEmail {
			continue
		}
		at := d.UpdatedAt
		if d.DoneAt != nil {
			at = *d.DoneAt
		}
		to := d.Target
		if to == "" {
			to = d.Endpoint
		}
		t := types[d.EventID]
		out = append(out, api.Sent{Event: t, Label: Words(t), Channel: d.Channel, To: to, Status: d.Status, At: at, Note: d.LastError})
	}
	return out, nil
}

// shownDeliveries is how many of its latest deliveries each receiver shows.
const shownDeliveries = 10

// Endpoints is the ops console's view of every receiver: those configured (with their health)
// and those only the history knows, each with its latest deliveries and their attempts.
func (n *Notifier) Endpoints(ctx context.Context) ([]api.NotifyEndpoint, error) {
	snap := n.cfg.Current()
	var out []api.NotifyEndpoint
	seen := map[string]bool{}
	add := func(name, channel, url string, configured bool) {
		if seen[name] {
			return
		}
		seen[name] = true
		out = append(out, api.NotifyEndpoint{Name: name, Channel: channel, URL: url, Configured: configured, Deliveries: []api.DeliveryVw{}})
	}
	for _, w := range n.webhooks(snap) {
		add(config.EndpointKey(ChannelWebhook, w.Name), ChannelWebhook, redactURL(w.URL), true)
	}
	for _, c := range snap.Chats() {
		add(config.EndpointKey(ChannelChat, c.Name), ChannelChat, redactURL(c.URL), true)
	}
	if n.email(snap).On() {
		add(ChannelEmail, ChannelEmail, "smtp://"+n.email(snap).SMTP, true)
	}
	if n.notes != nil && snap.MRNotes() {
		add(ChannelMRNote, ChannelMRNote, "", true)
	}
	health, err := n.db.Endpoints(ctx)
	if err != nil {
		return nil, err
	}
	for _, h := range health {
		channel, _, _ := strings.Cut(h.Endpoint, ":")
		add(h.Endpoint, channel, "", false)
	}
	byName := map[string]store.Endpoint{}
	for _, h := range health {
		byName[h.Endpoint] = h
	}
	for i := range out {
		e := &out[i]
		if h, ok := byName[e.Name]; ok {
			e.FailingSince, e.LastSuccess, e.DisabledAt, e.DisabledReason = h.FailingSince, h.LastSuccess, h.DisabledAt, h.DisabledReason
		}
		ds, err := n.db.Deliveries(ctx, store.DeliveryFilter{Endpoint: e.Name, Limit: shownDeliveries})
		if err != nil {
			return nil, err
		}
		for _, d := range ds {
			v, err := n.deliveryView(ctx, d)
			if err != nil {
				return nil, err
			}
			e.Deliveries = append(e.Deliveries, v)
		}
	}
	return out, nil
}

func (n *Notifier) deliveryView(ctx context.Context, d store.Delivery) (api.DeliveryVw, error) {
	v := api.DeliveryVw{ID: d.ID, EventID: d.EventID, To: d.Target, Status: d.Status, Attempts: d.Attempts, LastCode: d.LastCode,
		LastError: d.LastError, NextAt: d.NextAt, CreatedAt: d.CreatedAt, Tries: []api.AttemptVw{}}
	if e, err := n.db.EventByID(ctx, d.EventID); err == nil {
		v.Event, v.OperationID = e.Type, e.OperationID
	} else if !errors.Is(err, store.ErrNotFound) {
		return api.DeliveryVw{}, err
	}
	as, err := n.db.Attempts(ctx, d.ID)
	if err != nil {
		return api.DeliveryVw{}, err
	}
	for _, a := range as {
		v.Tries = append(v.Tries, api.AttemptVw{At: a.At, Code: a.Code, LatencyMs: a.Latency.Milliseconds(), Class: a.Class, Error: a.Error})
	}
	return v, nil
}

// Resend sends a failed or skipped delivery again, from a fresh schedule (an operator's action).
func (n *Notifier) Resend(ctx context.Context, id int64) (api.DeliveryVw, error) {
	// A disabled receiver gets nothing: its delivery would end at once, skipped, and "sent
	// again" would be a claim that nothing backs. The operator enables the receiver first.
	if d, err := n.db.Delivery(ctx, id); err == nil {
		e, err := n.db.EndpointHealth(ctx, d.Endpoint)
		if err != nil {
			return api.DeliveryVw{}, err
		}
		if e.DisabledAt != nil {
			return api.DeliveryVw{}, apperr.New(apperr.Conflict, "%s is disabled: enable the receiver first, then send the delivery again.", d.Endpoint)
		}
	}
	err := n.db.Resend(ctx, id)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return api.DeliveryVw{}, apperr.Wrap(err, apperr.NotFound, "No such delivery.")
	case errors.Is(err, store.ErrPreempted):
		return api.DeliveryVw{}, apperr.Wrap(err, apperr.Conflict, "Only a failed or skipped delivery can be sent again; this one is pending or delivered.")
	case err != nil:
		return api.DeliveryVw{}, err
	}
	n.engine.Nudge(state.NotifyLane)
	d, err := n.db.Delivery(ctx, id)
	if err != nil {
		return api.DeliveryVw{}, err
	}
	return n.deliveryView(ctx, d)
}

// Enable switches a disabled receiver on again (an operator's action).
func (n *Notifier) Enable(ctx context.Context, endpoint string) (api.NotifyEndpoint, error) {
	ok, err := n.db.EnableEndpoint(ctx, endpoint)
	if err != nil {
		return api.NotifyEndpoint{}, err
	}
	if !ok {
		return api.NotifyEndpoint{}, apperr.New(apperr.Conflict, "%s is not disabled.", endpoint)
	}
	all, err := n.Endpoints(ctx)
	if err != nil {
		return api.NotifyEndpoint{}, err
	}
	for _, e := range all {
		if e.Name == endpoint {
			return e, nil
		}
	}
	return api.NotifyEndpoint{Name: endpoint, Deliveries: []api.DeliveryVw{}}, nil
}

// redactURL shows where a receiver is without what may be its secret: the scheme and host, and
// the path cut after its first segment (incoming webhook URLs carry their token in the path).
func redactURL(u string) string {
	scheme, rest, ok := strings.Cut(u, "://")
	if !ok {
		return ""
	}
	host, path, _ := strings.Cut(rest, "/")
	if i := strings.IndexAny(host, "@"); i >= 0 {
		host = host[i+1:]
	}
	first, more, _ := strings.Cut(path, "/")
	out := scheme + "://" + host
	if first != "" {
		out += "/" + strings.SplitN(first, "?", 2)[0]
	}
	if more != "" || strings.Contains(path, "?") {
		out += "/…"
	}
	return out
}
