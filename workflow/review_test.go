package workflow_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"bindery/api"
	"bindery/internal/sim"
	"bindery/internal/vocab/apperr"
	"bindery/internal/vocab/state"
	"bindery/store"
	"bindery/store/storetest"
	"bindery/workflow"
)

// reviewTargets: db-read, owned by alice and the group dba; db-write, owned by alice, which
// nobody holds; db-auto, reviewed by itself every 90 days.
const reviewTargets = fastSims + `
targets:
  - key: db-read
    title: DB read
    project: infra/access-config
    path: bindings/db-read/{subject}.yaml
    ttl: 720h
    renewal: auto
    owners: [alice@example.com, "group:dba"]
  - key: db-write
    title: DB write
    project: infra/access-config
    path: bindings/db-write/{subject}.yaml
    owners: [alice@example.com]
  - key: db-auto
    title: DB auto
    project: infra/access-config
    path: bindings/db-auto/{subject}.yaml
    owners: [alice@example.com]
    reviews:
      every: 90d
      due: 2h
`

// startReview posts a review of target as user; the status code, the answer and the error code.
func (h *harness) startReview(user, op, target string, due time.Time) (int, api.ReviewStarted, string) {
	h.t.Helper()
	var raw json.RawMessage
	code := h.api("POST", "/api/reviews", user, fmt.Sprintf(`{"operationId":%q,"targetKey":%q,"due":%q}`, op, target, due.UTC().Format(time.RFC3339)), &raw)
	var out api.ReviewStarted
	var e struct{ Code string }
	_ = json.Unmarshal(raw, &out)
	_ = json.Unmarshal(raw, &e)
	return code, out, e.Code
}

// reviewCall posts body to a review's path as user; the status code, the review and the error code.
func (h *harness) reviewCall(user, path, body string) (int, api.ReviewView, string) {
	h.t.Helper()
	var raw json.RawMessage
	method := "GET"
	if body != "" {
		method = "POST"
	}
	code := h.api(method, path, user, body, &raw)
	var v api.ReviewView
	var e struct{ Code string }
	_ = json.Unmarshal(raw, &v)
	_ = json.Unmarshal(raw, &e)
	return code, v, e.Code
}

// validatedBy is validated with approver deciding the ticket.
func (h *harness) validatedBy(user, target, approver string) string {
	h.t.Helper()
	op := h.apply(user, target)
	h.waitState(op, state.StatusApprovalSent, 0)
	if _, err := h.sims.Approval.DecideAs(h.ticketOf(op).ID, sim.TicketApproved, approver, "fine"); err != nil {
		h.t.Fatal(err)
	}
	h.waitState(op, state.StatusValidated, state.StepCalledBack)
	return op
}

// itemOf is the item of v whose holder is subject.
func itemOf(t *testing.T, v api.ReviewView, subject string) api.ReviewItem {
	t.Helper()
	for _, it := range v.Items {
		if it.Subject == subject {
			return it
		}
	}
	t.Fatalf("no item of %s in %+v", subject, v.Items)
	return api.ReviewItem{}
}

// docs/workflow.md, 'Access reviews': an owner reviews every binding of a target in effect; the
// removals decided go through the batch path as revocations once the review is completed, and
// the review's record says who decided what and when each removal took effect. A stranger is
// refused, a target with nothing in effect has nothing to review, decisions and completion are
// final (a repeat answers again, another call is a conflict), and a binding that leaves effect
// on its own while under review is skipped: nothing is removed twice.
func TestAReviewRemovesWhatItsOwnersDecidedThroughTheBatchPath(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		h := setup(t, db, options{extra: reviewTargets, realBatch: true})
		alice, bob, opsOp := h.validated("alice", "db-read"), h.validatedBy("bob", "db-read", "erin@example.com"), h.validated("ops", "db-read")
		// alice renewed hers: the review shows when.
		h.waitFor("alice's expiry", func() bool { return h.view(alice).ExpiresAt != nil })
		if _, err := db.Raw().Exec("UPDATE binding SET expires_at = "+pastOrFuture(db, "+2 days")+" WHERE operation_id = ?", alice); err != nil {
			t.Fatal(err)
		}
		if code, _, _ := h.renew(alice, "alice", "rn-alice"); code != 202 {
			t.Fatalf("alice renews: %d", code)
		}
		due := time.Now().Add(7 * 24 * time.Hour)

		if code, _, e := h.startReview("bob", "rv-bob", "db-read", due); code != 403 || e != "ACCESS_DENIED" {
			t.Fatalf("a reviewer who is not an owner: %d %s", code, e)
		}
		if code, _, e := h.startReview("alice", "rv-empty", "db-write", due); code != 409 || e != "CONFLICT" {
			t.Fatalf("a target with no bindings: %d %s", code, e)
		}
		if code, _, e := h.startReview("alice", "rv-past", "db-read", time.Now().Add(-time.Hour)); code != 400 || e != "INVALID_ARGUMENT" {
			t.Fatalf("a due date in the past: %d %s", code, e)
		}
		code, started, _ := h.startReview("alice", "rv-1", "db-read", due)
		if code != 201 || started.ID == 0 || started.Items != 3 {
			t.Fatalf("start: %d %+v", code, started)
		}
		if code, again, _ := h.startReview("alice", "rv-1", "db-read", due); code != 201 || again.ID != started.ID {
			t.Fatalf("a repeat of the call: %d %+v", code, again)
		}
		if code, _, e := h.startReview("ops", "rv-2", "db-read", due); code != 409 || e != "CONFLICT" {
			t.Fatalf("a second open review of the target: %d %s", code, e)
		}
		base := fmt.Sprintf("/api/reviews/%d", started.ID)
		if code, _, _ := h.reviewCall("bob", base, ""); code != 403 {
			t.Fatalf("a stranger reads the review: %d", code)
		}
		code, v, _ := h.reviewCall("alice", base, "")
		if code != 200 || v.Status != store.ReviewOpen || len(v.Items) != 3 || v.Undecided != 3 {
			t.Fatalf("the review: %d %+v", code, v)
		}
		a := itemOf(t, v, "bob@example.com")
		if !a.InEffect || a.Since == nil || a.ApprovedBy != "erin@example.com" || a.OperationID != bob || a.ExpiresAt == nil {
			t.Fatalf("bob's item: %+v", a)
		}
		b, d := itemOf(t, v, "alice@example.com"), itemOf(t, v, "ops@example.com")
		if b.RenewedAt == nil || a.RenewedAt != nil {
			t.Fatalf("last renewals: alice %v, bob %v", b.RenewedAt, a.RenewedAt)
		}
		decide := func(user string, item int64, op, decision, comment string) (int, api.ReviewView, string) {
			return h.reviewCall(user, fmt.Sprintf("%s/items/%d/decide", base, item), fmt.Sprintf(`{"operationId":%q,"decision":%q,"comment":%q}`, op, decision, comment))
		}
		if code, v, _ = decide("alice", a.ID, "d-1", "remove", "left the team"); code != 200 || itemOf(t, v, "bob@example.com").Decision != "remove" {
			t.Fatalf("decide: %d %+v", code, v)
		}
		if code, _, _ := decide("alice", a.ID, "d-1", "remove", "left the team"); code != 200 {
			t.Fatalf("a repeat of the decision: %d", code)
		}
		if code, _, e := decide("ops", a.ID, "d-2", "keep", ""); code != 409 || e != "CONFLICT" {
			t.Fatalf("deciding otherwise: %d %s", code, e)
		}
		if code, _, e := decide("bob", b.ID, "d-3", "keep", ""); code != 403 || e != "ACCESS_DENIED" {
			t.Fatalf("a stranger decides: %d %s", code, e)
		}
		if code, _, _ := decide("alice", b.ID, "d-4", "keep", "=HYPERLINK(\"x\")"); code != 200 {
			t.Fatalf("keep: %d", code)
		}
		if code, _, _ := decide("ops", d.ID, "d-5", "remove", "no longer needed"); code != 200 {
			t.Fatalf("an operator decides: %d", code)
		}
		// The operator's own binding leaves effect on its own while under review: its item says so.
		if code := h.api("POST", "/api/requests/"+opsOp+"/revoke", "ops", `{"operationId":"rv-ops"}`, nil); code != 202 {
			t.Fatalf("ops revokes: %d", code)
		}
		if _, v, _ = h.reviewCall("alice", base, ""); itemOf(t, v, "ops@example.com").InEffect || itemOf(t, v, "ops@example.com").Note == "" {
			t.Fatalf("the item while its binding closes: %+v", itemOf(t, v, "ops@example.com"))
		}

		code, v, _ = h.reviewCall("alice", base+"/complete", `{"operationId":"c-1"}`)
		if code != 200 || v.Status != store.ReviewCompleted || v.CompletedBy != "alice@example.com" {
			t.Fatalf("complete: %d %+v", code, v)
		}
		if it := itemOf(t, v, "bob@example.com"); it.Removal != store.RemovalStarted || it.RemovalStartedAt == nil {
			t.Fatalf("bob's removal: %+v", it)
		}
		if it := itemOf(t, v, "ops@example.com"); it.Removal != store.RemovalSkipped {
			t.Fatalf("the skipped removal: %+v", it)
		}
		if code, _, _ := h.reviewCall("alice", base+"/complete", `{"operationId":"c-1"}`); code != 200 {
			t.Fatalf("a repeat of the completion: %d", code)
		}
		if code, _, e := h.reviewCall("ops", base+"/complete", `{"operationId":"c-2"}`); code != 409 || e != "CONFLICT" {
			t.Fatalf("completing again: %d %s", code, e)
		}
		if code, _, e := decide("alice", b.ID, "d-6", "remove", ""); code != 409 || e != "CONFLICT" {
			t.Fatalf("deciding after completion: %d %s", code, e)
		}

		h.roundUntil("the removals in effect", func() bool {
			return h.view(bob).Status == state.StatusClosed && h.view(opsOp).Status == state.StatusClosed
		})
		if st := h.view(alice).Status; st != state.StatusValidated {
			t.Fatalf("alice, kept, is %s", st)
		}
		found := false
		for _, e := range h.view(bob).Timeline {
			found = found || strings.HasPrefix(e.Note, fmt.Sprintf("Removed by access review %d, decided by alice@example.com: left the team", started.ID))
		}
		if !found {
			t.Fatalf("bob's timeline does not say the review removed it: %+v", h.view(bob).Timeline)
		}
		_, v, _ = h.reviewCall("alice", base, "")
		if it := itemOf(t, v, "bob@example.com"); it.RemovedAt == nil || it.RemovedAt.Before(*it.RemovalStartedAt) {
			t.Fatalf("when bob's removal took effect: %+v", it)
		}
		// Nothing was removed twice: the operator's binding closed by its own revocation alone.
		if n := countRows(t, db, fmt.Sprintf("SELECT COUNT(*) FROM operation_step WHERE operation_id = '%s' AND note LIKE 'Removed by access review%%'", opsOp)); n != 0 {
			t.Fatalf("the review started removing a binding already closing (%d steps)", n)
		}
		if n := countRows(t, db, fmt.Sprintf("SELECT COUNT(*) FROM operation_step WHERE operation_id = '%s' AND step = %d", opsOp, state.StepCloseSucceeded)); n != 1 {
			t.Fatalf("the binding was removed %d times", n)
		}

		var csv string
		if code := h.apiText("GET", base+"/export?format=csv", "alice", &csv); code != 200 ||
			!strings.HasPrefix(csv, "review,target,item,request,subject,since,approvedBy,decision,comment,decidedBy,decidedAt,removal,removedAt\n") ||
			!strings.Contains(csv, "left the team") || !strings.Contains(csv, `"'=HYPERLINK(""x"")"`) || strings.Count(csv, "\n") != 4 {
			t.Fatalf("the CSV export: %d\n%s", code, csv)
		}
		var nd string
		if code := h.apiText("GET", base+"/export?format=ndjson", "ops", &nd); code != 200 || strings.Count(nd, "\n") != 3 || !strings.Contains(nd, `"removedAt"`) {
			t.Fatalf("the NDJSON export: %d\n%s", code, nd)
		}
		if n := countRows(t, db, "SELECT COUNT(*) FROM audit_log WHERE action IN ('review.start', 'review.decide', 'review.complete')"); n < 6 {
			t.Fatalf("%d review actions audited", n)
		}
		// The owner who is a person was told; a group has no address of its own.
		if n := countRows(t, db, "SELECT COUNT(*) FROM notify_event WHERE type = 'review.started'"); n != 1 {
			t.Fatalf("%d review.started events", n)
		}
	})
}

// apiText calls the API as user and reads the answer as text.
func (h *harness) apiText(method, path, user string, out *string) int {
	h.t.Helper()
	req, _ := http.NewRequest(method, h.url+path, nil)
	req.Header.Set("X-Bindery-User", user)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		h.t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	*out = string(data)
	return resp.StatusCode
}

// An open review past its due date is in the operators' attention count; a target with
// reviews.every is reviewed by itself (once however often the job runs), and its reviewers are
// reminded once before the due date.
func TestReviewsStartByThemselvesAndAreRemindedAndOverdueNeedsAttention(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		h := setup(t, db, options{extra: reviewTargets})
		h.validated("bob", "db-auto")
		h.validated("bob", "db-read")
		ctx := context.Background()
		for range 2 {
			if _, err := h.wf.RunReviews(ctx); err != nil {
				t.Fatal(err)
			}
		}
		if n := countRows(t, db, "SELECT COUNT(*) FROM review WHERE target_key = 'db-auto'"); n != 1 {
			t.Fatalf("%d reviews of db-auto started by themselves", n)
		}
		// Due within two hours: its reviewer is reminded, once.
		if n := countRows(t, db, "SELECT COUNT(*) FROM notify_event WHERE type = 'review.due'"); n != 1 {
			t.Fatalf("%d reminders", n)
		}
		if n := countRows(t, db, "SELECT COUNT(*) FROM review WHERE target_key = 'db-read'"); n != 0 {
			t.Fatalf("db-read, without reviews.every, was reviewed by itself")
		}

		var att api.Attention
		if code := h.api("GET", "/api/ops/attention", "ops", "", &att); code != 200 || att.Reviews != 0 {
			t.Fatalf("attention before the due date: %d %+v", code, att)
		}
		past := "datetime('now', '-1 minute')"
		if db.Dialect() == store.MySQL {
			past = "NOW(6) - INTERVAL 1 MINUTE"
		}
		if _, err := db.Raw().Exec("UPDATE review SET due_at = " + past + " WHERE target_key = 'db-auto'"); err != nil {
			t.Fatal(err)
		}
		if code := h.api("GET", "/api/ops/attention", "ops", "", &att); code != 200 || att.Reviews != 1 || att.Total < 1 {
			t.Fatalf("attention past the due date: %d %+v", code, att)
		}
		var list struct{ Items []api.ReviewSummary }
		if code := h.api("GET", "/api/reviews", "alice", "", &list); code != 200 || len(list.Items) != 1 || !list.Items[0].Overdue {
			t.Fatalf("alice's reviews: %d %+v", code, list)
		}
		if code := h.api("GET", "/api/reviews", "bob", "", &list); code != 200 || len(list.Items) != 0 {
			t.Fatalf("bob's reviews: %d %+v", code, list)
		}
	})
}

// A target's owner may be a group (owners: group:NAME): a member named by their identity
// provider (the session's groups, compared case-insensitively) starts and decides a review like
// an owner named by identity; a member of another group may not, nor see the review.
func TestAGroupOwnersMemberReviewsAndAnotherGroupsMemberCannot(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		h := setup(t, db, options{extra: reviewTargets})
		bob := h.validated("bob", "db-read")
		dba := workflow.Reviewer{ID: "dave@example.com", Groups: []string{"web", "DBA"}}
		web := workflow.Reviewer{ID: "erin@example.com", Groups: []string{"web"}}
		due := time.Now().Add(7 * 24 * time.Hour)

		if _, err := h.wf.StartReview(bg, web, "rv-web", "db-read", due); apperr.CodeOf(err) != apperr.AccessDenied {
			t.Fatalf("another group's member starts a review: %v", err)
		}
		started, err := h.wf.StartReview(bg, dba, "rv-dba", "db-read", due)
		if err != nil || started.Items != 1 {
			t.Fatalf("the dba group's member starts a review: %+v %v", started, err)
		}
		if _, err := h.wf.Review(bg, web, started.ID); err == nil {
			t.Fatal("another group's member reads the review")
		}
		v, err := h.wf.Review(bg, dba, started.ID)
		if err != nil || len(v.Items) != 1 || v.Items[0].OperationID != bob {
			t.Fatalf("the review as the group's member reads it: %+v %v", v, err)
		}
		if _, err := h.wf.DecideReviewItem(bg, web, started.ID, v.Items[0].ID, "d-web", "remove", "no"); err == nil {
			t.Fatal("another group's member decided an item")
		}
		v, err = h.wf.DecideReviewItem(bg, dba, started.ID, v.Items[0].ID, "d-dba", "keep", "still on call")
		if err != nil || v.Items[0].Decision != "keep" || v.Items[0].DecidedBy != "dave@example.com" {
			t.Fatalf("the group's member decides: %+v %v", v.Items, err)
		}
	})
}
