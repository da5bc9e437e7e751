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
	t.Parallel()
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		h := setup(t, db, options{approvalFirst: true})
		op := inboxDecides(t, h, `{"decision":"REJECTED","decidedBy":"carol@example.com","comment":"Not for this team:\nask your lead first."}`)
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
	t.Parallel()
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

// An approval keeps who approved and their comment like a rejection does: the timeline's note
// says it, the request view names the approver, and the operation keeps them for the audit export.
func TestAnApprovalKeepsWhoApproved(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		h := setup(t, db, options{approvalFirst: true})
		op := inboxDecides(t, h, `{"decision":"APPROVED","decidedBy":"dave@example.com","comment":"fine for Q3"}`)
		v := h.waitState(op, state.StatusMRCreating, state.StepQueued)
		if v.DecidedBy != "dave@example.com" {
			t.Fatalf("the view's approver %q", v.DecidedBy)
		}
		found := false
		for _, e := range v.Timeline {
			found = found || e.Note == "Approved by dave@example.com: fine for Q3. Waiting for a batch."
		}
		if !found {
			t.Fatalf("no timeline note names the approver: %+v", v.Timeline)
		}
		if o, err := db.Operation(t.Context(), op); err != nil || o.DecidedBy != "dave@example.com" {
			t.Fatalf("the operation keeps %q (%v)", o.DecidedBy, err)
		}

		// Without a name the approval reads as before, and nobody is named.
		other := h.apply("bob", "db-read")
		h.decide(other, "APPROVED")
		if v := h.waitState(other, state.StatusMRCreating, state.StepQueued); v.DecidedBy != "" ||
			v.Timeline[len(v.Timeline)-1].Note != "Approved. Waiting for a batch." {
			t.Fatalf("without a name: %q %q", v.DecidedBy, v.Timeline[len(v.Timeline)-1].Note)
		}
	})
}

// inboxDecides applies for alice and decides her ticket in the approval simulator's inbox with
// body (the decision, who and their comment); it returns the request's operationId.
func inboxDecides(t *testing.T, h *harness, body string) string {
	op := h.apply("alice", "db-read")
	h.waitState(op, state.StatusApprovalSent, 0)
	if code := h.api("POST", "/sim/approvals/"+h.ticketOf(op).ID+"/decide", "", body, nil); code != 200 {
		t.Fatalf("the inbox's decision: %d", code)
	}
	return op
}
