package workflow_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"bindery/api"
	"bindery/internal/platform/config"
	"bindery/internal/sim"
	"bindery/internal/vocab/state"
	"bindery/internal/work/change"
	"bindery/store"
	"bindery/store/storetest"
)

// A binding in effect with an expiry says how long it has left, on its page and in "My
// requests", in the words shown beside Renew.
func TestABindingInEffectSaysWhenItExpires(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		h := setup(t, db, options{})
		op := h.validated("alice", "db-read") // ttl 720h
		h.waitFor("its expiry", func() bool { return h.view(op).ExpiresAt != nil })
		if v := h.view(op); v.ExpiresIn != "expires in 30 days" {
			t.Fatalf("the page says %q", v.ExpiresIn)
		}
		var mine api.Page[api.RequestSummary]
		if code := h.api("GET", "/api/my/requests", "alice", "", &mine); code != 200 || len(mine.Items) != 1 ||
			mine.Items[0].ExpiresIn != "expires in 30 days" || mine.Items[0].ExpiresAt == nil {
			t.Fatalf("my requests: %d %+v", code, mine.Items)
		}
	})
}

// renewTargets: a target renewed at once within a bound, one whose bound leaves no room, and
// db-read, renewed through the approval system (the default).
const renewTargets = fastSims + `
targets:
  - key: db-read
    title: DB read
    project: infra/access-config
    path: bindings/db-read/{subject}.yaml
    ttl: 720h
  - key: db-auto
    title: DB auto
    project: infra/access-config
    path: bindings/db-auto/{subject}.yaml
    ttl: 720h
    maxTtl: 1000h
    renewal: auto
  - key: db-capped
    title: DB capped
    project: infra/access-config
    path: bindings/db-capped/{subject}.yaml
    ttl: 720h
    maxTtl: 720h
    renewal: auto
`

// renew posts a renewal as user and returns the status code, the view and the error code.
func (h *harness) renew(op, user, id string) (int, api.RequestView, string) {
	h.t.Helper()
	var raw json.RawMessage
	code := h.api("POST", "/api/requests/"+op+"/renew", user, `{"operationId":"`+id+`"}`, &raw)
	var v api.RequestView
	var e struct{ Code, Message string }
	_ = json.Unmarshal(raw, &v)
	_ = json.Unmarshal(raw, &e)
	return code, v, e.Code
}

// Renewing a binding of a target with renewal: auto moves its expiry to now plus the ttl at once,
// without leaving effect; the timeline says who renewed it until when; a second renewal right
// after moves nothing and is refused; a repeat of the same call replays its answer. A binding
// whose target's maxTtl leaves no room, one not in effect and someone else's are refused.
func TestARenewalKeepsTheBindingInEffectWithALaterExpiry(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		h := setup(t, db, options{extra: renewTargets})
		op, before := h.expiringSoon("alice", "db-auto")
		code, v, _ := h.renew(op, "alice", "rn-1")
		if code != 202 || v.Status != state.StatusValidated || v.ExpiresAt == nil || !v.ExpiresAt.After(before.Add(27*24*time.Hour)) ||
			v.Renewal == nil || v.Renewal.Status != store.RenewalRenewed || !v.Renewable {
			t.Fatalf("renew: %d %+v (before %s)", code, v, before)
		}
		if last := v.Timeline[len(v.Timeline)-1]; !strings.HasPrefix(last.Note, "Renewed by alice@example.com: now expires ") || last.Status != state.StatusValidated {
			t.Fatalf("the timeline's last note %+v", last)
		}
		if code, again, _ := h.renew(op, "alice", "rn-1"); code != 202 || !again.ExpiresAt.Equal(*v.ExpiresAt) {
			t.Fatalf("a repeat of the call: %d %v", code, again.ExpiresAt)
		}
		if code, _, e := h.renew(op, "alice", "rn-2"); code != 409 || e != "CONFLICT" {
			t.Fatalf("a second renewal at once: %d %s", code, e)
		}
		if code, _, _ := h.renew(op, "bob", "rn-3"); code != 404 {
			t.Fatalf("someone else's: %d", code)
		}

		capped := h.validated("bob", "db-capped")
		h.waitFor("its expiry", func() bool { return h.view(capped).ExpiresAt != nil })
		if code, _, e := h.renew(capped, "ops", "rn-4"); code != 409 || e != "CONFLICT" {
			t.Fatalf("past maxTtl: %d %s", code, e)
		}
		waiting := h.apply("bob", "db-auto")
		h.waitState(waiting, state.StatusApprovalSent, 0)
		if code, _, e := h.renew(waiting, "bob", "rn-5"); code != 409 || e != "CONFLICT" {
			t.Fatalf("not in effect: %d %s", code, e)
		}
		if n := countRows(t, db, "SELECT COUNT(*) FROM audit_log WHERE action = 'renew'"); n < 2 {
			t.Fatalf("%d renewals audited", n)
		}
	})
}

// A target renewed through the approval system (the default) opens a ticket; the binding stays
// in effect with its old expiry while it is decided, and a second renewal waits for it. Approved:
// the new expiry, with the approver in the timeline. Rejected: the old expiry stays, and it can
// be asked again.
func TestARenewalThroughTheApprovalSystemKeepsTheOldExpiryUntilApproved(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		h := setup(t, db, options{extra: renewTargets})
		op, before := h.expiringSoon("alice", "db-read")
		code, v, _ := h.renew(op, "alice", "rn-a")
		if code != 202 || v.Renewal == nil || v.Renewal.Status != store.RenewalPending || v.Renewable || !v.ExpiresAt.Equal(before) || v.Status != state.StatusValidated {
			t.Fatalf("renew: %d %+v", code, v.Renewal)
		}
		if code, _, e := h.renew(op, "alice", "rn-b"); code != 409 || e != "CONFLICT" {
			t.Fatalf("a second renewal while one waits: %d %s", code, e)
		}
		tk := h.ticketOf("renew-rn-a")
		if _, err := h.sims.Approval.DecideAs(tk.ID, sim.TicketRejected, "dave", "not now"); err != nil {
			t.Fatal(err)
		}
		h.waitFor("the rejection", func() bool { r := h.view(op).Renewal; return r != nil && r.Status == store.RenewalRejected })
		if v := h.view(op); !v.ExpiresAt.Equal(before) || !v.Renewable || v.Status != state.StatusValidated {
			t.Fatalf("after the rejection: %v %v %s", v.ExpiresAt, v.Renewable, v.Status)
		}
		if code, _, _ := h.renew(op, "alice", "rn-c"); code != 202 {
			t.Fatalf("asked again: %d", code)
		}
		if _, err := h.sims.Approval.DecideAs(h.ticketOf("renew-rn-c").ID, sim.TicketApproved, "erin", ""); err != nil {
			t.Fatal(err)
		}
		h.waitFor("the renewal", func() bool { r := h.view(op).Renewal; return r != nil && r.Status == store.RenewalRenewed })
		v = h.view(op)
		if !v.ExpiresAt.After(before.Add(27*24*time.Hour)) || v.Renewal.DecidedBy != "erin" || !strings.HasPrefix(v.Timeline[len(v.Timeline)-1].Note, "Renewed by erin: ") {
			t.Fatalf("after the approval: %v %+v %q", v.ExpiresAt, v.Renewal, v.Timeline[len(v.Timeline)-1].Note)
		}
	})
}

// expiringSoon takes user's request for target to VALIDATED and moves its expiry to two days
// from now; it returns the request and that expiry.
func (h *harness) expiringSoon(user, target string) (string, time.Time) {
	h.t.Helper()
	op := h.validated(user, target)
	h.waitFor("its expiry", func() bool { return h.view(op).ExpiresAt != nil })
	if _, err := h.db.Raw().Exec("UPDATE binding SET expires_at = "+pastOrFuture(h.db, "+2 days")+" WHERE operation_id = ?", op); err != nil {
		h.t.Fatal(err)
	}
	return op, *h.view(op).ExpiresAt
}

// pastOrFuture is the database's clock moved by a SQLite modifier ("+2 days"), in either dialect.
func pastOrFuture(db *store.DB, modifier string) string {
	if db.Dialect() == store.MySQL {
		var n int
		var unit string
		fmt.Sscanf(modifier, "%d %s", &n, &unit)
		return fmt.Sprintf("NOW(6) + INTERVAL %d %s", n, strings.ToUpper(strings.TrimSuffix(unit, "s")))
	}
	return "datetime('now', '" + modifier + "')"
}

// countRows is the count a query answers.
func countRows(t *testing.T, db *store.DB, q string) int {
	t.Helper()
	var n int
	if err := db.Raw().QueryRow(q).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// A renewal whose decision's callback never gets through is decided all the same: its ticket is
// read every approval.pollAfter, as an application's, and the decision found is applied as the
// callback would have been — no renewal waits for ever.
func TestARenewalWhoseCallbackIsLostIsDecidedFromItsTicket(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		h := setup(t, db, options{extra: renewTargets})
		c := strings.Replace(configFor(false, renewTargets), "approval:\n", "approval:\n  pollAfter: 200ms\n", 1)
		c = strings.Replace(c, "sim:\n", "sim:\n  approval:\n    callbackLossRate: 1\n", 1)
		h.cfg.Replace(config.MustParse(c))
		op, before := h.expiringSoon("alice", "db-read")
		if code, _, _ := h.renew(op, "alice", "rn-lost"); code != 202 {
			t.Fatalf("renew: %d", code)
		}
		if _, err := h.sims.Approval.DecideAs(h.ticketOf("renew-rn-lost").ID, sim.TicketApproved, "erin", ""); err != nil {
			t.Fatal(err)
		}
		h.waitFor("the renewal read from its ticket", func() bool { r := h.view(op).Renewal; return r != nil && r.Status == store.RenewalRenewed })
		if v := h.view(op); !v.ExpiresAt.After(before) || v.Renewal.DecidedBy != "erin" || v.Status != state.StatusValidated {
			t.Fatalf("after the poll: %v %+v %s", v.ExpiresAt, v.Renewal, v.Status)
		}
		// The poll ends its task in the transaction after the decision's own (the decision is the
		// callback's code, in its own transaction): the view may show the renewal before it ends.
		h.waitFor("the renewal's poll to end after its decision", func() bool { _, ok := h.task(op); return !ok })
	})
}

// renewalFile is op's latest renewal's file write as its page shows it (nil: none).
func (h *harness) renewalFile(op string) *api.RenewalFile {
	h.t.Helper()
	if r := h.view(op).Renewal; r != nil {
		return r.File
	}
	return nil
}

// fileExpiry reads the expiry the binding file at path on main carries.
func (h *harness) fileExpiry(path string) time.Time {
	h.t.Helper()
	content, ok := h.sims.GitLab.File(project, "main", path)
	if !ok {
		h.t.Fatalf("%s is not on main", path)
	}
	var f change.BindingFile
	if err := yaml.Unmarshal([]byte(content), &f); err != nil || f.ExpiresAt == nil {
		h.t.Fatalf("%s: %v %q", path, err, content)
	}
	return *f.ExpiresAt
}

// docs/workflow.md, 'Expiry, reminders and renewal' (The file): a renewal of a target whose file
// carries the expiry rewrites the file with the new expiry through a batch, the train and CI,
// while the binding stays in effect; the drift round leaves the file alone on its way and finds
// nothing once it is in effect. A second renewal while the first's file still waits for a batch
// gives that file its newer expiry (one write). A restore asked while a renewal's file is on its
// way is refused, and the finding closes by itself once the renewal's file is in effect; a
// renewal while an operator's restore of the file is on its way waits for it (renew_file) and then
// goes through. A renewal's file whose batch fails CI says so, and the drift round reports the
// file's old expiry as a change although the branch did not move.
func TestARenewalRewritesTheFileThroughTheTrain(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		h := setup(t, db, options{extra: renewTargets, realBatch: true})
		op := h.validated("alice", "db-auto")
		h.waitFor("its expiry", func() bool { return h.view(op).ExpiresAt != nil })
		path := "bindings/db-auto/alice@example.com.yaml"
		granted := h.fileExpiry(path)
		h.drift()
		backdate := func() { // the next renewal is not "just renewed" (renewAgainAfter)
			if _, err := db.Raw().Exec("UPDATE renewal SET decided_at = "+pastOrFuture(db, "-2 minutes")+" WHERE operation_id = ?", op); err != nil {
				t.Fatal(err)
			}
		}

		code, v, _ := h.renew(op, "alice", "rn-1")
		if code != 202 || v.Renewal == nil || v.Renewal.File == nil || v.Renewal.File.State != store.RestoreWaiting || v.Status != state.StatusValidated {
			t.Fatalf("renew: %d %+v", code, v.Renewal)
		}
		backdate()
		code, v, _ = h.renew(op, "alice", "rn-2")
		if code != 202 || v.Renewal.File == nil || v.Renewal.File.State != store.RestoreWaiting {
			t.Fatalf("the second renewal while the first's file waits: %d %+v", code, v.Renewal)
		}
		renewed := *v.ExpiresAt
		if n := h.count("SELECT COUNT(*) FROM merge_batch_request WHERE operation_id = ? AND action = 'RENEW'", op); n != 1 {
			t.Fatalf("%d renewal writes waiting, want one", n)
		}
		if _, opened := h.drift(); opened != 0 {
			t.Fatalf("the drift round reported a renewal on its way: %v", findings(t, db))
		}
		h.roundUntil("the renewal's file in effect", func() bool { f := h.renewalFile(op); return f != nil && f.State == store.RestoreDone })
		if f := h.renewalFile(op); f.MRIID == 0 || !strings.Contains(f.Text, "is in effect") {
			t.Fatalf("done: %+v", f)
		}
		if got := h.fileExpiry(path); !got.Equal(renewed.UTC().Truncate(time.Millisecond)) || !got.After(granted) {
			t.Fatalf("the file carries %s; the binding expires %s (granted with %s)", got, renewed, granted)
		}
		if v := h.view(op); v.Status != state.StatusValidated || v.Step.Code != int(state.StepCalledBack) {
			t.Fatalf("after the renewal's deploy: %s %+v", v.Status, v.Step)
		}
		if _, opened := h.drift(); opened != 0 {
			got, _ := h.sims.GitLab.File(project, "main", path)
			o, _ := db.Operation(bg, op)
			t.Fatalf("the renewed file is reported as drift: %v\nfile %q\nop %v", findings(t, db), got, o.FileExpiresAt)
		}

		// Changed outside bindery: a renewal's file on its way refuses a restore (one write of a
		// file at a time), and once it is in effect the finding closes by itself.
		outside := func() int64 {
			t.Helper()
			if _, err := h.sims.GitLab.PushToBranch(project, "main", path, "subject: alice@example.com\n"); err != nil {
				t.Fatal(err)
			}
			if _, opened := h.drift(); opened != 1 {
				t.Fatalf("the outside change: %v", findings(t, db))
			}
			return findings(t, db)["alice@example.com"].ID
		}
		restore := func(id int64, opID string) int {
			return h.api("POST", fmt.Sprintf("/api/ops/drift/%d/restore", id), "ops", `{"operationId":"`+opID+`"}`, nil)
		}
		id := outside()
		backdate()
		if code, _, _ := h.renew(op, "alice", "rn-3"); code != 202 {
			t.Fatalf("renew: %d", code)
		}
		if code := restore(id, "rst-1"); code != 409 {
			t.Fatalf("a restore while the renewal's file is on its way: %d", code)
		}
		h.roundUntil("the renewal's file over the outside change", func() bool { f := h.renewalFile(op); return f != nil && f.State == store.RestoreDone })
		if h.drift(); findings(t, db)["alice@example.com"].State != store.DriftClosed {
			t.Fatalf("the finding the renewal's file repaired: %+v", findings(t, db)["alice@example.com"])
		}

		// Changed again and restored by an operator; a renewal meanwhile waits for the restore
		// (renew_file) and then writes its own file.
		id = outside()
		if code := restore(id, "rst-2"); code != 202 {
			t.Fatalf("restore: %d", code)
		}
		backdate()
		code, v, _ = h.renew(op, "alice", "rn-4")
		if code != 202 || v.Renewal.File == nil || v.Renewal.File.State != store.RestoreWaiting {
			t.Fatalf("a renewal while the restore is on its way: %d %+v", code, v.Renewal)
		}
		if task, ok := h.task(op); !ok || task.Step != "renew_file" {
			t.Fatalf("the renewal's file does not wait in renew_file: %+v %v", task, ok)
		}
		renewed = *v.ExpiresAt
		h.roundUntil("the renewal's file after the restore", func() bool { f := h.renewalFile(op); return f != nil && f.State == store.RestoreDone })
		if got := h.fileExpiry(path); !got.Equal(renewed.UTC().Truncate(time.Millisecond)) {
			t.Fatalf("the file carries %s after the restore and the renewal, want %s", got, renewed)
		}
		if h.drift(); findings(t, db)["alice@example.com"].State != store.DriftClosed {
			t.Fatalf("the restored finding: %+v", findings(t, db)["alice@example.com"])
		}

		// A renewal's file whose batch fails: the page says so, a restore asked meanwhile was
		// refused, and the drift round then finds the file's old expiry.
		h.sims.GitLab.FailNextPipelines(100)
		backdate()
		if code, _, _ := h.renew(op, "alice", "rn-5"); code != 202 {
			t.Fatalf("renew: %d", code)
		}
		h.roundUntil("the renewal's failed batch", func() bool { f := h.renewalFile(op); return f != nil && f.State == store.RestoreFailed })
		h.sims.GitLab.FailNextPipelines(0)
		if f := h.renewalFile(op); !strings.Contains(f.Text, "did not merge") {
			t.Fatalf("failed: %+v", f)
		}
		if v := h.view(op); v.Status != state.StatusValidated {
			t.Fatalf("after the failed file: %s", v.Status)
		}
		if h.drift(); findings(t, db)["alice@example.com"].State != store.DriftOpen || findings(t, db)["alice@example.com"].Kind != store.DriftChanged {
			t.Fatalf("the file's old expiry is not found: %+v", findings(t, db)["alice@example.com"])
		}
	})
}

// A removal that starts while a renewal's file waits for a batch takes that file out of the
// waiting set (the file goes away; one batch would otherwise change its path twice): the
// binding is removed through one batch and ends CLOSED, its file gone.
func TestARevocationDropsARenewalsFileStillWaiting(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		h := setup(t, db, options{extra: renewTargets, realBatch: true})
		op := h.validated("alice", "db-auto")
		h.waitFor("its expiry", func() bool { return h.view(op).ExpiresAt != nil })
		if code, _, _ := h.renew(op, "alice", "rn-1"); code != 202 {
			t.Fatalf("renew: %d", code)
		}
		if code := h.api("POST", "/api/requests/"+op+"/revoke", "alice", `{"operationId":"rv-1"}`, nil); code != 202 {
			t.Fatalf("revoke: %d", code)
		}
		if n := h.count("SELECT COUNT(*) FROM merge_batch_request WHERE operation_id = ? AND action = 'RENEW'", op); n != 0 {
			t.Fatalf("the renewal's file still waits beside the removal: %d", n)
		}
		h.roundUntil("closed", func() bool { return h.view(op).Status == state.StatusClosed })
		if _, ok := h.sims.GitLab.File(project, "main", "bindings/db-auto/alice@example.com.yaml"); ok {
			t.Fatal("the file is still on main")
		}
	})
}
