package server

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"bindery/api"
	"bindery/internal/vocab/state"
)

// The notification routes: a person's choice is theirs (an event they cannot choose is a 400),
// what was sent about a request is its owner's (emails only) or an operator's (everything) and a
// stranger's 404, and the operators' actions are audited like every ops action.
func TestNotificationRoutes(t *testing.T) {
	h := setup(t, options{})
	h.wf.put(api.RequestView{OperationID: "op-a", Subject: "alice@example.com", TargetKey: "public-a", Status: state.StatusValidated})

	rec := h.do(call{method: "GET", path: "/api/my/notifications", user: "alice"})
	var p api.EmailPrefs
	if rec.Code != 200 || json.Unmarshal(rec.Body.Bytes(), &p) != nil || !p.Defaults || len(p.Events) != 4 || len(p.Choices) != 9 {
		t.Fatalf("GET prefs: %d %s", rec.Code, rec.Body)
	}
	rec = h.do(call{method: "POST", path: "/api/my/notifications", user: "alice", body: `{"events":["request.accepted","request.in_effect"]}`})
	p = api.EmailPrefs{}
	if rec.Code != 200 || json.Unmarshal(rec.Body.Bytes(), &p) != nil || p.Defaults || len(p.Events) != 2 {
		t.Fatalf("POST prefs: %d %s", rec.Code, rec.Body)
	}
	for _, bad := range []string{`{"events":["batch.blocked"]}`, `{"events":["nope"]}`, `{}`, `{"events":null}`} {
		if rec := h.do(call{method: "POST", path: "/api/my/notifications", user: "alice", body: bad}); rec.Code != 400 {
			t.Fatalf("POST %s: %d %s", bad, rec.Code, rec.Body)
		}
	}
	// Bob's choice is bob's: alice's did not touch it.
	rec = h.do(call{method: "GET", path: "/api/my/notifications", user: "bob"})
	p = api.EmailPrefs{}
	if json.Unmarshal(rec.Body.Bytes(), &p) != nil || !p.Defaults {
		t.Fatalf("bob's prefs %s", rec.Body)
	}

	var sent []api.Sent
	rec = h.do(call{method: "GET", path: "/api/requests/op-a/sent", user: "alice"})
	if rec.Code != 200 || json.Unmarshal(rec.Body.Bytes(), &sent) != nil || len(sent) != 1 || sent[0].Channel != "email" {
		t.Fatalf("owner's sent: %d %s", rec.Code, rec.Body)
	}
	rec = h.do(call{method: "GET", path: "/api/requests/op-a/sent", user: "ops"})
	if rec.Code != 200 || json.Unmarshal(rec.Body.Bytes(), &sent) != nil || len(sent) != 2 {
		t.Fatalf("operator's sent: %d %s", rec.Code, rec.Body)
	}
	if rec := h.do(call{method: "GET", path: "/api/requests/op-a/sent", user: "bob"}); rec.Code != 404 {
		t.Fatalf("a stranger's sent: %d", rec.Code)
	}

	if rec := h.do(call{method: "GET", path: "/api/ops/notify", user: "bob"}); rec.Code != 403 {
		t.Fatalf("a non-operator's console: %d", rec.Code)
	}
	rec = h.do(call{method: "GET", path: "/api/ops/notify", user: "ops"})
	if rec.Code != 200 || !strings.Contains(rec.Body.String(), `"disabledReason":"it answered 410 Gone"`) {
		t.Fatalf("ops notify: %d %s", rec.Code, rec.Body)
	}
	if rec := h.do(call{method: "POST", path: "/api/ops/notify/deliveries/7/resend", user: "ops", body: `{"operationId":"rs-1"}`}); rec.Code != 200 {
		t.Fatalf("resend: %d %s", rec.Code, rec.Body)
	}
	if rec := h.do(call{method: "POST", path: "/api/ops/notify/deliveries/8/resend", user: "ops", body: `{"operationId":"rs-2"}`}); rec.Code != 404 {
		t.Fatalf("resend of an unknown delivery: %d %s", rec.Code, rec.Body)
	}
	if rec := h.do(call{method: "POST", path: "/api/ops/notify/endpoints/webhook:ci/enable", user: "ops", body: `{"operationId":"en-1"}`}); rec.Code != 200 {
		t.Fatalf("enable: %d %s", rec.Code, rec.Body)
	}
	if rec := h.do(call{method: "POST", path: "/api/ops/notify/endpoints/webhook:other/enable", user: "ops", body: `{"operationId":"en-2"}`}); rec.Code != http.StatusConflict {
		t.Fatalf("enable of a receiver that is on: %d %s", rec.Code, rec.Body)
	}
	if rec := h.do(call{method: "POST", path: "/api/ops/notify/endpoints/Bad%20Name/enable", user: "ops", body: `{"operationId":"en-3"}`}); rec.Code != 400 {
		t.Fatalf("enable of a bad name: %d %s", rec.Code, rec.Body)
	}
	entries, err := h.db.ListAudit(context.Background(), 0, 10)
	if err != nil || len(entries) < 3 {
		t.Fatalf("audit %v %v", entries, err)
	}
}
