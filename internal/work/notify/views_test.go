package notify

import (
	"net/http"
	"strings"
	"testing"

	"bindery/internal/vocab/apperr"
	"bindery/internal/vocab/state"
	"bindery/store"
	"bindery/store/storetest"
)

// What people see: the settings page with the defaults and then the choice, what was sent about
// a request (the requester's emails; an operator's everything), every receiver with its health
// and its deliveries' attempts, and the operators' actions on them.
func TestWhatPeopleSeeOfTheDeliveries(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		rc := newReceiver(t, func(n int, w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusGone) })
		mp := startMailpit(t)
		e := newEnv(t, db, webhookConfig("ci", rc.URL+"/hooks/T0KEN/abc?k=secret", "[request.in_effect]")+"  email: {smtp: \""+mp.smtp+"\", from: \"b@example.com\", starttls: none}\n")
		p, err := e.n.EmailPrefs(bg, "alice@example.com")
		if err != nil || !p.Defaults || len(p.Events) != 8 || p.Address != "alice@example.com" || !p.EmailOn || len(p.Choices) != len(requesterTypes) {
			t.Fatalf("prefs %+v %v", p, err)
		}
		if _, err := e.n.SetEmailPrefs(bg, "alice@example.com", []state.EventType{state.EventBatchBlocked}); apperr.CodeOf(err) != apperr.InvalidArgument {
			t.Fatalf("an operators' event chosen: %v", err)
		}
		apply(t, db, "op-1", "alice@example.com", toInEffect...)
		settled(t, db)
		sent, err := e.n.Sent(bg, "op-1", false)
		if err != nil || len(sent) != 1 || sent[0].Channel != ChannelEmail || sent[0].Status != store.DeliveryDelivered || sent[0].Label != "in effect" {
			t.Fatalf("the requester's sent %+v %v", sent, err)
		}
		all, _ := e.n.Sent(bg, "op-1", true)
		if len(all) != 2 {
			t.Fatalf("the operator's sent %+v", all)
		}
		es, err := e.n.Endpoints(bg)
		if err != nil || len(es) != 2 {
			t.Fatalf("endpoints %+v %v", es, err)
		}
		hook := es[0]
		if hook.Name != "webhook:ci" || hook.URL != "http://"+rc.Listener.Addr().String()+"/hooks/…" || hook.DisabledAt == nil || len(hook.Deliveries) != 1 ||
			len(hook.Deliveries[0].Tries) != 1 || hook.Deliveries[0].Tries[0].Code != 410 || hook.Deliveries[0].OperationID != "op-1" {
			t.Fatalf("webhook endpoint %+v", hook)
		}
		// Sending again to a disabled receiver would send nothing: enable it first.
		if _, err := e.n.Resend(bg, hook.Deliveries[0].ID); apperr.CodeOf(err) != apperr.Conflict || !strings.Contains(err.Error(), "enable the receiver first") {
			t.Fatalf("resend to a disabled receiver: %v", err)
		}
		if _, err := e.n.Enable(bg, "webhook:ci"); err != nil {
			t.Fatalf("enable: %v", err)
		}
		if _, err := e.n.Resend(bg, hook.Deliveries[0].ID); err != nil {
			t.Fatalf("resend: %v", err)
		}
		if _, err := e.n.Resend(bg, es[1].Deliveries[0].ID); apperr.CodeOf(err) != apperr.Conflict {
			t.Fatalf("resend of a delivered one: %v", err)
		}
		if _, err := e.n.Resend(bg, 9999); apperr.CodeOf(err) != apperr.NotFound {
			t.Fatalf("resend of none: %v", err)
		}
		// The resent delivery meets the 410 again and disables the receiver again: let it end
		// before the enables, or it could disable the receiver between them.
		settled(t, db)
		if _, err := e.n.Enable(bg, "webhook:ci"); err != nil {
			t.Fatalf("enable: %v", err)
		}
		if _, err := e.n.Enable(bg, "webhook:ci"); apperr.CodeOf(err) != apperr.Conflict {
			t.Fatalf("enable twice: %v", err)
		}
	})
}
