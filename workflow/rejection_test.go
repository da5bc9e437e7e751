package workflow_test

import (
	"strings"
	"testing"
	"unicode/utf8"

	"bindery/api"
	"bindery/internal/vocab/state"
	"bindery/store"
	"bindery/store/storetest"
)

// A rejection shows who decided and their comment when the approval system sends them: the
// approver types a comment in the simulator's inbox, which sends it in the signed callback;
// bindery keeps it with the rejection and the request page shows it — in the timeline and in
// what the requester reads next. Without them, the page says the approvers rejected it.
func TestARejectionShowsWhoDecidedAndTheirComment(t *testing.T) {
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		h := setup(t, db, options{approvalFirst: true})
		op := h.apply("alice", "db-read")
		h.waitState(op, state.StatusApprovalSent, 0)
		body := `{"decision":"REJECTED","decidedBy":"carol@example.com","comment":"Not for this team:\nask your lead first."}`
		if code := h.api("POST", "/sim/approvals/"+h.ticketOf(op).ID+"/decide", "", body, nil); code != 200 {
			t.Fatalf("the inbox's decision: %d", code)
		}
		h.waitState(op, state.StatusRejected, state.StepApprovalRejected)
		var v api.RequestView
		h.api("GET", "/api/requests/"+op, "alice", "", &v)
		decision := "Rejected by carol@example.com: Not for this team: ask your lead first."
		if last := v.Timeline[len(v.Timeline)-1]; last.Note != decision {
			t.Fatalf("the rejection's timeline note %q, want %q", last.Note, decision)
		}
		if want := decision + " This request is finished without effect. You can apply again."; v.NextActionText != want || v.NextAction != state.NextReapply {
			t.Fatalf("the requester reads %q, want %q", v.NextActionText, want)
		}

		// A decision without a name or comment: the approvers rejected it.
		other := h.apply("bob", "db-read")
		h.decide(other, "REJECTED")
		h.waitState(other, state.StatusRejected, 0)
		var mine api.RequestView // as its requester reads it
		if code := h.api("GET", "/api/requests/"+other, "bob", "", &mine); code != 200 ||
			mine.NextActionText != "Rejected by the approvers. This request is finished without effect. You can apply again." {
			t.Fatalf("without a name: %d %q", code, mine.NextActionText)
		}
	})
}

// What a rejection keeps of a callback's name and comment is bounded and printable: control
// characters become spaces, a long comment is cut with an ellipsis; nothing is refused for it
// (a refused callback would lose the decision).
func TestARejectionsCommentIsKeptPrintableAndBounded(t *testing.T) {
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		h := setup(t, db, options{approvalFirst: true})
		op := h.apply("alice", "db-read")
		h.waitState(op, state.StatusApprovalSent, 0)
		long := strings.Repeat("é", 1000)
		code, res := h.callback(api.ApprovalCallback{CallbackID: "cb-long", OperationID: op, Result: "REJECTED", DecidedBy: "dave\x00\x1b[31m", Comment: "a\tb\r\n" + long}, "test-approval-secret")
		if code != 200 || res != api.CallbackAccepted {
			t.Fatalf("callback: %d %s", code, res)
		}
		v := h.waitState(op, state.StatusRejected, 0)
		note := v.Timeline[len(v.Timeline)-1].Note
		if !strings.HasPrefix(note, "Rejected by dave [31m: a b "+strings.Repeat("é", 10)) || !strings.HasSuffix(note, "é…") ||
			strings.ContainsAny(note, "\x00\x1b\t\r\n") || len(note) > 512 || !utf8.ValidString(note) {
			t.Fatalf("note (%d characters): %q", utf8.RuneCountInString(note), note)
		}
	})
}
