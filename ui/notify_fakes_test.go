package ui_test

import (
	"encoding/json"
	"net/http"
	"sync"
	"time"

	"bindery/api"
	"bindery/internal/vocab/state"
)

// The fake API's notification routes, as the server answers them (api/notify.go): a person's
// choice, what was sent about a request, the receivers, and the demo's mailbox.
type fakeNotify struct {
	mu    sync.Mutex
	prefs map[string][]state.EventType
}

var choosable = []state.EventType{
	state.EventRequestAccepted, state.EventRequestApproved, state.EventRequestRejected, state.EventRequestInCI,
	state.EventRequestNeedsAttention, state.EventRequestFailed, state.EventRequestMerged, state.EventRequestInEffect, state.EventRequestClosed,
}

func (n *fakeNotify) register(mux *http.ServeMux, f *fakeAPI) {
	n.prefs = map[string][]state.EventType{}
	mux.HandleFunc("GET /api/my/notifications", func(w http.ResponseWriter, r *http.Request) {
		_, id := identity(r)
		reply(w, 200, n.view(id))
	})
	mux.HandleFunc("POST /api/my/notifications", func(w http.ResponseWriter, r *http.Request) {
		_, id := identity(r)
		var b struct {
			Events []state.EventType `json:"events"`
		}
		if err := json.NewDecoder(r.Body).Decode(&b); err != nil || b.Events == nil {
			fail(w, 400, "INVALID_ARGUMENT", "events is required")
			return
		}
		n.mu.Lock()
		n.prefs[id] = b.Events
		n.mu.Unlock()
		reply(w, 200, n.view(id))
	})
	mux.HandleFunc("GET /api/requests/{id}/sent", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		fr := f.reqs[r.PathValue("id")]
		f.mu.Unlock()
		if fr == nil {
			fail(w, 404, "NOT_FOUND", "No such request.")
			return
		}
		out := []api.Sent{}
		if fr.view.Status == state.StatusValidated {
			out = append(out, api.Sent{Event: state.EventRequestInEffect, Label: "in effect", Channel: "email", To: fr.view.Subject, Status: "delivered", At: fr.view.UpdatedAt})
		}
		reply(w, 200, out)
	})
	mux.HandleFunc("GET /api/ops/notify", f.opsOnly(func(w http.ResponseWriter, r *http.Request) {
		at := time.Now().Add(-time.Hour)
		reply(w, 200, []api.NotifyEndpoint{
			{Name: "webhook:ci", Channel: "webhook", URL: "https://hooks.example.com/…", Configured: true, FailingSince: &at, Deliveries: []api.DeliveryVw{
				{ID: 7, Event: state.EventRequestInEffect, EventID: "evt_x", Status: "failed", Attempts: 10, LastCode: 500, LastError: "the receiver answered 500", CreatedAt: at,
					Tries: []api.AttemptVw{{At: at, Code: 500, LatencyMs: 12, Class: "status", Error: "the receiver answered 500"}}}}},
			{Name: "email", Channel: "email", URL: "smtp://mail.example.com:587", Configured: true, LastSuccess: &at, Deliveries: []api.DeliveryVw{}},
		})
	}))
	mux.HandleFunc("POST /api/ops/notify/deliveries/{id}/resend", f.opsOnly(func(w http.ResponseWriter, r *http.Request) {
		reply(w, 200, api.DeliveryVw{ID: 7, Event: state.EventRequestInEffect, EventID: "evt_x", Status: "pending", CreatedAt: time.Now(), Tries: []api.AttemptVw{}})
	}))
	mux.HandleFunc("GET /sim/mailbox", func(w http.ResponseWriter, r *http.Request) {
		reply(w, 200, map[string]any{"smtp": "127.0.0.1:2525",
			"emails": []map[string]any{{"at": time.Now(), "from": "bindery <bindery@demo.example>", "to": []string{"alice@example.com"},
				"subject": "[bindery] Your request for Grafana (editor): in effect", "messageId": "<evt_a@bindery>", "inReplyTo": "<request-x@bindery>",
				"text": "Your request for Grafana (editor): in effect.\n"}},
			"webhooks": []map[string]any{{"at": time.Now(), "endpoint": "demo-mailbox", "id": "evt_a", "type": "request.in_effect", "verified": true, "repeat": 1,
				"body": map[string]any{"type": "request.in_effect"}}}})
	})
}

func (n *fakeNotify) view(id string) api.EmailPrefs {
	n.mu.Lock()
	defer n.mu.Unlock()
	ev, ok := n.prefs[id]
	if !ok {
		ev = []state.EventType{state.EventRequestRejected, state.EventRequestNeedsAttention, state.EventRequestFailed, state.EventRequestInEffect}
	}
	p := api.EmailPrefs{Events: ev, Defaults: !ok, Address: id, EmailOn: true}
	for _, t := range choosable {
		p.Choices = append(p.Choices, api.EventChoice{Event: t, Label: string(t), Default: t.Info().EmailByDefault})
	}
	return p
}
