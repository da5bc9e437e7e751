package workflow_test

import (
	"strings"
	"testing"

	"bindery/api"
	"bindery/internal/sim"
	"bindery/internal/vocab/state"
	"bindery/store"
	"bindery/store/storetest"
)

// validated takes one legacy request of user to VALIDATED and returns it.
func (h *harness) validated(user, target string) string {
	h.t.Helper()
	op := h.apply(user, target)
	h.waitState(op, state.StatusApprovalSent, 0)
	h.decide(op, sim.TicketApproved)
	h.waitState(op, state.StatusValidated, state.StepCalledBack)
	return op
}

// docs/workflow.md, 'Closing a binding': revoking (owner or ops) removes the binding's file through
// the batch path and ends CLOSED, which is re-appliable; a request that is not VALIDATED cannot be
// revoked (409).
func TestRevokeClosesThroughTheBatchPath(t *testing.T) {
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		h := setup(t, db, options{realBatch: true})
		op := h.validated("alice", "db-read")
		path := "bindings/db-read/alice@example.com.yaml"
		if _, ok := h.sims.GitLab.File(project, "main", path); !ok {
			t.Fatal("no file to remove")
		}
		if code := h.api("POST", "/api/requests/"+op+"/revoke", "bob", `{"operationId":"rv-bob"}`, nil); code != 404 { // like an unknown id
			t.Fatalf("revoke by someone else: %d", code)
		}
		var v api.RequestView
		if code := h.api("POST", "/api/requests/"+op+"/revoke", "alice", `{"operationId":"rv-1","reason":"done"}`, &v); code != 202 {
			t.Fatalf("revoke: %d", code)
		}
		wantState(t, v, state.StatusValidated, state.StepCloseStarted, state.NextWait)
		if v.Waiting == nil || v.Waiting.Stage != "close" || v.Waiting.Position != 1 {
			t.Fatalf("waiting: %+v", v.Waiting)
		}
		if code := h.api("POST", "/api/requests/"+op+"/revoke", "ops", `{"operationId":"rv-2"}`, &v); code != 202 || v.Step.Code != int(state.StepCloseStarted) {
			t.Fatalf("revoking again while closing: %d %+v", code, v.Step)
		}
		h.roundUntil("closed", func() bool { return h.view(op).Status == state.StatusClosed })
		v = h.view(op)
		wantState(t, v, state.StatusClosed, state.StepCloseSucceeded, state.NextReapply)
		if _, ok := h.sims.GitLab.File(project, "main", path); ok {
			t.Fatal("the file is still on main")
		}
		var conflict struct{ Code string }
		if code := h.api("POST", "/api/requests/"+op+"/revoke", "alice", `{"operationId":"rv-3"}`, &conflict); code != 409 || conflict.Code != "CONFLICT" {
			t.Fatalf("revoking a closed request: %d %+v", code, conflict)
		}
		// CLOSED is re-appliable.
		again := h.apply("alice", "db-read")
		h.waitState(again, state.StatusApprovalSent, 0)
	})
}

// Expiry: a VALIDATED binding whose ttl passed is closed by the expiry cron, through the same
// batch path; running the cron again (or on another instance) admits it once.
func TestExpiredBindingsAreClosed(t *testing.T) {
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		h := setup(t, db, options{realBatch: true})
		op := h.validated("alice", "db-read")
		keep := h.validated("bob", "db-read")
		h.waitFor("expiries", func() bool { return h.view(op).ExpiresAt != nil && h.view(keep).ExpiresAt != nil })
		past := "datetime('now', '-1 minute')"
		if db.Dialect() == store.MySQL {
			past = "NOW(6) - INTERVAL 1 MINUTE"
		}
		if _, err := db.Raw().Exec("UPDATE binding SET expires_at = "+past+" WHERE operation_id = ?", op); err != nil {
			t.Fatal(err)
		}
		for range 3 {
			if _, err := h.wf.Expire(bg); err != nil {
				t.Fatal(err)
			}
		}
		v := h.view(op)
		wantState(t, v, state.StatusValidated, state.StepCloseStarted, state.NextWait)
		if note := v.Timeline[len(v.Timeline)-1].Note; !strings.Contains(note, "Expired") {
			t.Fatalf("note %q", note)
		}
		h.roundUntil("closed", func() bool { return h.view(op).Status == state.StatusClosed })
		if v := h.view(keep); v.Status != state.StatusValidated || v.Step.Code != int(state.StepCalledBack) {
			t.Fatalf("an unexpired binding changed: %s/%s", v.Status, v.Step.Name)
		}
	})
}

// A validation whose expiry write was lost (a crash right after the commit) gets its expiry from
// the expiry cron's repair.
func TestAMissingExpiryIsRepaired(t *testing.T) {
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		h := setup(t, db, options{})
		op := h.validated("alice", "db-read")
		h.waitFor("the expiry", func() bool { return h.view(op).ExpiresAt != nil })
		if _, err := db.Raw().Exec("UPDATE binding SET expires_at = NULL WHERE operation_id = ?", op); err != nil {
			t.Fatal(err)
		}
		if _, err := h.wf.Expire(bg); err != nil {
			t.Fatal(err)
		}
		if v := h.view(op); v.ExpiresAt == nil || v.Status != state.StatusValidated {
			t.Fatalf("after the repair: %+v", v)
		}
	})
}
