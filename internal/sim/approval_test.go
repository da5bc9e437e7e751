package sim_test

import (
	"encoding/json"
	"net/http"
	"sort"
	"strings"
	"testing"
	"time"

	"bindery/api"
	"bindery/internal/remote/approval"
	"bindery/internal/sim"
)

// The approval simulator's HTTP formats (the shared formats of the brief) and its callbacks.

func (e *env) raw(t *testing.T, method, path, body string) answer {
	t.Helper()
	req, _ := http.NewRequest(method, e.url+path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	return send(t, req)
}

func TestApprovalInboxFormats(t *testing.T) {
	e := newEnv(t, "", nil)
	ticket := `{"operationId":"op-1","subject":"alice@example.com","targetKey":"t1","title":"T1","reason":"why","callbackUrl":"` +
		e.bindery + `/hooks/approval","ext":{"mrId":"7"}}`
	a := e.raw(t, "POST", "/sim/approval/tickets", ticket)
	if a.status != 201 || !strings.HasPrefix(a.body, `{"ticketId":"T-`) {
		t.Fatalf("open: %d %s", a.status, a.body)
	}
	id := a.json(t)["ticketId"].(string)
	if again := e.raw(t, "POST", "/sim/approval/tickets", ticket); again.status != 200 || again.json(t)["ticketId"] != id {
		t.Fatalf("repeat: %d %s", again.status, again.body)
	}
	for _, bad := range []string{`nope`, `{"operationId":"x","subject":"s","targetKey":"t"}`, `{"operationId":"x","subject":"s","targetKey":"t","callbackUrl":"ftp://x"}`} {
		if a := e.raw(t, "POST", "/sim/approval/tickets", bad); a.status != 400 {
			t.Errorf("open %s: %d", bad, a.status)
		}
	}
	list := e.raw(t, "GET", "/sim/approvals", "")
	var page struct {
		Items []map[string]any `json:"items"`
	}
	if err := json.Unmarshal([]byte(list.body), &page); err != nil || len(page.Items) != 1 {
		t.Fatalf("list: %s", list.body)
	}
	var keys []string
	for k := range page.Items[0] {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	if got := strings.Join(keys, ","); got != "createdAt,decidedAt,id,operationId,reason,status,subject,targetKey" {
		t.Fatalf("ticket keys %s", got)
	}
	if page.Items[0]["status"] != "PENDING" || page.Items[0]["decidedAt"] != nil {
		t.Fatalf("pending ticket %v", page.Items[0])
	}
	for _, tc := range []struct {
		path, body string
		status     int
	}{
		{"/sim/approvals/" + id + "/decide", `{"decision":"MAYBE"}`, 400},
		{"/sim/approvals/T-999999/decide", `{"decision":"APPROVED"}`, 404},
		{"/sim/approvals/" + id + "/decide", `{"decision":"APPROVED"}`, 200},
		{"/sim/approvals/" + id + "/decide", `{"decision":"REJECTED"}`, 409},
	} {
		if a := e.raw(t, "POST", tc.path, tc.body); a.status != tc.status {
			t.Errorf("decide %s %s: %d %s", tc.path, tc.body, a.status, a.body)
		} else if a.status == 200 && (a.json(t)["status"] != "APPROVED" || a.json(t)["decidedAt"] == nil) {
			t.Errorf("decided ticket %s", a.body)
		}
	}
	reqs, bodies := waitHooks(t, e, 1)
	if reqs[0].URL.Path != "/hooks/approval" {
		t.Fatalf("callback path %s", reqs[0].URL.Path)
	}
	if err := approval.Verify([]byte("approval-secret"), reqs[0].Header.Get(approval.TimestampHeader), reqs[0].Header.Get(approval.SignatureHeader), bodies[0], time.Now(), time.Minute); err != nil {
		t.Fatalf("signature: %v", err)
	}
	var cb api.ApprovalCallback
	if err := json.Unmarshal(bodies[0], &cb); err != nil || cb.OperationID != "op-1" || cb.Result != "APPROVED" || cb.Ext["mrId"] != "7" || cb.CallbackID == "" {
		t.Fatalf("callback %s", bodies[0])
	}
}

func TestApprovalSimulatorTransportFaults(t *testing.T) {
	e := newEnv(t, strings.Replace(simConfig, "  deploy:", "  approval:\n    errorRate: 1\n    faultEndpoints: [list]\n  deploy:", 1), nil)
	if a := e.raw(t, "GET", "/sim/approvals", ""); a.status != 500 {
		t.Fatalf("list with errorRate 1: %d", a.status)
	}
	if a := e.raw(t, "POST", "/sim/approval/tickets", `{}`); a.status != 400 {
		t.Fatalf("open is not a faulted endpoint: %d", a.status)
	}
	e.sims.Approval.SetFaults(sim.ApprovalFaults{})
	if a := e.raw(t, "GET", "/sim/approvals", ""); a.status != 200 || a.body != "{\"items\":[]}\n" {
		t.Fatalf("list without faults: %d %s", a.status, a.body)
	}
}

// A lost callback (sim.approval.callbackLossRate) never reaches bindery; the decision is on the
// ticket, where GET /sim/approval/tickets/:id shows it with the id its callback would have carried.
func TestALostApprovalCallbackLeavesTheDecisionOnTheTicket(t *testing.T) {
	e := newEnv(t, "", nil)
	e.sims.Approval.SetFaults(sim.ApprovalFaults{CallbackLossRate: 1})
	ticket := `{"operationId":"op-lost","subject":"alice@example.com","targetKey":"t1","title":"T1","reason":"why","callbackUrl":"` + e.bindery + `/hooks/approval"}`
	id := e.raw(t, "POST", "/sim/approval/tickets", ticket).json(t)["ticketId"].(string)
	if _, err := e.sims.Approval.Decide(id, sim.TicketApproved); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for len(e.sims.Approval.Callbacks()) == 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	cbs := e.sims.Approval.Callbacks()
	if got, _ := e.hook.requests(); len(got) != 0 || len(cbs) != 1 || cbs[0].Attempts != 0 || cbs[0].Status != 0 {
		t.Fatalf("a lost callback was delivered: %d requests, records %+v", len(got), cbs)
	}
	if n := e.sims.FaultCounts()["approval"]["callback_lost"]; n != 1 {
		t.Fatalf("fault counts %v", e.sims.FaultCounts())
	}
	var st approval.TicketState
	if a := e.raw(t, "GET", "/sim/approval/tickets/"+id, ""); a.status != 200 || json.Unmarshal([]byte(a.body), &st) != nil ||
		st.Status != sim.TicketApproved || st.RequestID != cbs[0].CallbackID || st.OperationID != "op-lost" {
		t.Fatalf("ticket: %d %s", a.status, a.body)
	}
	if a := e.raw(t, "GET", "/sim/approval/tickets/T-404", ""); a.status != 404 {
		t.Fatalf("unknown ticket: %d", a.status)
	}
}
