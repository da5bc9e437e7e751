//go:build e2e

package ui_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"bindery/api"
	"bindery/internal/vocab/state"
)

// A failed request is no dead end for its owner: the page says what bindery knows of the cause
// (bisection isolated the change, the failed job) and offers both ways out; the apply form
// sends the owner there. Withdrawing asks first (cancel sends nothing), then the request is
// closed and can be applied for again.
func TestAFailedRequestOffersItsOwnerAWayOut(t *testing.T) {
	t.Parallel()
	s := startSite(t, culpritSettings...)
	op, _ := s.failedInCI("alice", "grafana-editor", "bob", "grafana-editor")
	failed := s.request(op)
	b := newBrowser(t, 1280, 900)
	signInAs(b, s.URL, "alice")

	b.do("open the apply page", chromedp.Navigate(s.URL+"/"))
	b.waitFor("the failed target on the form", `document.querySelector('label[for="target-grafana-editor"] [data-yours]')`, 20*time.Second)
	if txt := evalJS[string](b, `document.querySelector('label[for="target-grafana-editor"] [data-yours]').innerText`); !strings.Contains(txt, "Your request for this failed: withdraw it on its page, then apply again.") {
		t.Errorf("the apply form says %q of a failed request", txt)
	}

	b.do("open the request", chromedp.Navigate(s.URL+"/requests/"+op))
	b.waitFor("the ways out", `document.querySelector('#ways-out #withdraw-request')`, 20*time.Second)
	next := evalJS[string](b, `document.querySelector('#next-action-text').innerText`)
	for _, want := range []string{"Your change made the pipeline fail: batch " + itoa(failed.BatchID) + " isolated this request as the change that fails, after 1 bisection",
		"(failed job: test #" + itoa(failed.FailedJob.ID) + ")", "Waiting will not fix it.", "You can withdraw this request and apply again, or ask the operators of bindery."} {
		if !strings.Contains(next, want) {
			t.Errorf("the failure's words lack %q: %s", want, next)
		}
	}
	if strings.Contains(strings.ToLower(next), "contact") || evalJS[bool](b, `!!document.querySelector('#retry-request')`) {
		t.Errorf("the requester is told to contact support, or offered an operator's retry: %s", next)
	}
	b.screenshot("request-failed-way-out-laptop.png")

	b.click("#withdraw-request")
	b.waitFor("the confirmation", `document.querySelector('#action-confirm').open`, 10*time.Second)
	if focused := evalJS[string](b, `document.activeElement.id`); focused != "action-confirm-no" {
		t.Errorf("focus on %q, want Cancel", focused)
	}
	if txt := evalJS[string](b, `document.querySelector('#action-confirm').innerText`); !strings.Contains(txt, "You can then apply again") {
		t.Errorf("the confirmation says %q", txt)
	}
	b.click("#action-confirm-no")
	b.waitFor("the dialog closed", `!document.querySelector('#action-confirm').open`, 10*time.Second)
	if got := s.audited("withdraw"); len(got) != 0 || s.request(op).Status != state.StatusCreateFailed {
		t.Fatalf("cancelled, yet withdrawn: %v", got)
	}
	b.click("#withdraw-request")
	b.waitFor("the confirmation again", `document.querySelector('#action-confirm').open`, 10*time.Second)
	b.click("#action-confirm-yes")
	b.waitFor("the closed request", `document.querySelector('#status-card [data-status="CLOSED"]')`, 10*time.Second)
	text := evalJS[string](b, `document.querySelector('main').innerText`)
	for _, want := range []string{"Withdrawn. You can apply again.", "Withdrawn by alice@example.com after it failed: nothing of it is in effect. You can apply again.", "Apply again"} {
		if !strings.Contains(text, want) {
			t.Errorf("the withdrawn request's page lacks %q:\n%s", want, text)
		}
	}
	// Withdrawn, where it stopped: the badge names the state, the stage track marks the stage.
	if badge, at := evalJS[string](b, `document.querySelector('#state-badge').innerText`), evalJS[string](b, `document.querySelector('#stage-track li[aria-current="step"]').className + ' ' + document.querySelector('#stage-track li[aria-current="step"]').dataset.stage`); badge != "Withdrawn" || at != "failed ci" {
		t.Errorf("the withdrawn request reads %q at %q", badge, at)
	}
	if evalJS[bool](b, `!!document.querySelector('#ways-out') || !!document.querySelector('#failure')`) {
		t.Error("a withdrawn request still offers its ways out")
	}
	if got := s.audited("withdraw"); len(got) != 1 || got[0] != op+" by alice@example.com" {
		t.Fatalf("withdrawals %v", got)
	}
	b.click(`#status-card a.button[href^="/?target="]`)
	b.waitFor("the apply form with the target free", `document.querySelector('#target-grafana-editor:not(:disabled)')`, 20*time.Second)
}

// An operator reads a failed request in an operator's words and acts on it: on its page Retry
// and Withdraw, never "contact support"; on the console the next action reads "Retry or
// withdraw", and the withdrawal is confirmed first and audited.
func TestAnOperatorRetriesOrWithdrawsAFailedRequest(t *testing.T) {
	t.Parallel()
	s := startSite(t, culpritSettings...)
	op, _ := s.failedInCI("bob", "payments-db-readonly", "alice", "payments-db-readonly")
	b := newBrowser(t, 1280, 900)
	signInAs(b, s.URL, "ops")

	b.do("open bob's request", chromedp.Navigate(s.URL+"/requests/"+op))
	b.waitFor("the operator's actions", `document.querySelector('#ways-out #retry-request') && document.querySelector('#ways-out #withdraw-request')`, 20*time.Second)
	text := evalJS[string](b, `document.querySelector('main').innerText`)
	if strings.Contains(strings.ToLower(text), "contact") || !strings.Contains(text, "or withdraw it, which closes it for its requester") {
		t.Errorf("the operator's page:\n%s", text)
	}

	openOpsConsole(b, s.URL)
	withdraw := `#stuck [data-withdraw="` + op + `"]`
	b.waitFor("the failed request with its withdraw button", `document.querySelector('`+withdraw+`') && document.querySelector('#stuck [data-retry="`+op+`"]')`, 20*time.Second)
	if badge := evalJS[string](b, `document.querySelector('#stuck tr[data-operation-id="`+op+`"] [data-next-action]').innerText`); badge != "Retry or withdraw" {
		t.Errorf("the console's next action reads %q", badge)
	}
	b.click(withdraw)
	b.waitFor("the confirmation", `document.querySelector('#retry-confirm').open`, 10*time.Second)
	if txt := evalJS[string](b, `document.querySelector('#retry-confirm').innerText`); !strings.Contains(txt, "bob@example.com can apply again") {
		t.Errorf("the confirmation says %q", txt)
	}
	b.click("#withdraw-confirm-yes")
	b.waitFor("the withdrawal's notice", `[...document.querySelectorAll('.notice')].some(n => n.innerText.includes('Withdrawn for its requester'))`, 10*time.Second)
	b.waitFor("its audit entry", `[...document.querySelectorAll('#audit tbody tr')].some(r => r.innerText.includes('Withdrew a failed request'))`, 20*time.Second)
	got, status := s.audited("withdraw"), s.request(op).Status
	if len(got) != 1 || got[0] != op+" by ops@example.com" || status != state.StatusClosed {
		t.Fatalf("withdrawals %v, status %s", got, status)
	}
}

// A revocation reads as what it is until its deploy: the removal merged, still in effect, the
// page says what it waits for; once deployed the page says who revoked it, shows no expiry and
// no longer the "Revocation started" notice.
func TestARevocationEndsWithItsDeploy(t *testing.T) {
	t.Parallel()
	s := startSite(t)
	merged := s.revoked("alice", "payments-db-admin", revokeMerged)
	live := s.validated("alice", "payments-db-readonly", "on-call rotation")
	removal := s.request(merged).MR
	b := newBrowser(t, 1280, 900)
	signInAs(b, s.URL, "alice")

	b.do("open the merged removal", chromedp.Navigate(s.URL+"/requests/"+merged))
	b.waitFor("its waiting card", `document.querySelector('#waiting')`, 20*time.Second)
	text := evalJS[string](b, `document.querySelector('main').innerText`)
	for _, want := range []string{"Removal merged, waiting for the deploy: the binding stays in effect until the deploy pipeline reports the removal deployed.", "the deploy pipeline to report that the removal (merge request !" + itoa(removal.ID) + ") is deployed; until then the binding is still in effect"} {
		if !strings.Contains(text, want) {
			t.Errorf("the merged removal's page lacks %q:\n%s", want, text)
		}
	}
	if badge := evalJS[string](b, `document.querySelector('#state-badge').innerText`); badge != "Removal merged, waiting for the deploy" {
		t.Errorf("the merged removal's badge reads %q", badge)
	}
	b.screenshot("request-removal-merged-laptop.png")

	b.do("open the request in effect", chromedp.Navigate(s.URL+"/requests/"+live))
	b.click("#revoke-request")
	b.waitFor("the confirmation", `document.querySelector('#action-confirm').open`, 10*time.Second)
	b.click("#action-confirm-yes")
	b.waitFor("the notice", `document.querySelector('#action-notice')`, 10*time.Second)
	// The batch round that takes the removal, as an operator (or the cron) runs it.
	s.roundsUntil(live, "the removal of "+live+" deployed", func(v api.RequestView) bool { return v.Status == state.StatusClosed })
	b.waitFor("the removal deployed", `document.querySelector('#status-card [data-status="CLOSED"]')`, 30*time.Second)
	text = evalJS[string](b, `document.querySelector('main').innerText`)
	if !strings.Contains(text, "Revoked by alice@example.com: the binding's file was removed and the removal is deployed. You can apply again.") {
		t.Errorf("the closed page does not say who revoked it:\n%s", text)
	}
	for _, stale := range []string{"Revocation started", "Expires"} {
		if strings.Contains(text, stale) {
			t.Errorf("the closed page still shows %q:\n%s", stale, text)
		}
	}
}

// A rejection's page shows who decided and their comment, typed in the approval inbox.
func TestARejectionShowsWhoDecidedAndTheirComment(t *testing.T) {
	t.Parallel()
	s, b, op := aliceAppliedInTheBrowser(t)

	signInAs(b, s.URL, "ops")
	b.do("open the inbox", chromedp.Navigate(s.URL+"/inbox"))
	ticket := `[data-ticket][data-operation-id=` + jsString(op) + `]`
	b.waitFor("the ticket with a comment box", `document.querySelector('`+ticket+` [data-comment]')`, 20*time.Second)
	// A refresh that brings nothing new leaves the list as it is: the comment box being typed in
	// is the same element two polls later (drawn again, it lost the caret every 2 s).
	evalJS[bool](b, `(document.querySelector('`+ticket+` [data-comment]').dataset.probe = 'kept', true)`)
	polls := `performance.getEntriesByType('resource').filter(e => e.name.includes('/sim/approvals')).length`
	n := evalJS[float64](b, polls)
	b.waitFor("two more polls of the tickets", fmt.Sprintf(`%s >= %v`, polls, n+2), 20*time.Second)
	if !evalJS[bool](b, `document.querySelector('`+ticket+` [data-comment]').dataset.probe === 'kept'`) {
		t.Fatal("the inbox drew the unchanged ticket list again: the comment box was replaced")
	}
	b.do("type a comment", chromedp.SendKeys(chromedp.CSS(ticket+` [data-comment]`), "read-only access is enough for reports"))
	b.click(ticket + ` [data-decide=REJECTED]`)
	b.waitFor("the decided ticket with its comment", `[...document.querySelectorAll('[data-decision-comment]')].some(p => p.innerText.includes('read-only access is enough'))`, 20*time.Second)

	signInAs(b, s.URL, "alice")
	b.do("open the request", chromedp.Navigate(s.URL+"/requests/"+op))
	b.waitFor("the decision", `document.querySelector('#decision')`, 20*time.Second)
	decision := "Rejected by ops@example.com: read-only access is enough for reports"
	if got := evalJS[string](b, `document.querySelector('#decision blockquote').innerText`); got != decision {
		t.Errorf("the decision card shows %q, want %q", got, decision)
	}
	if got := evalJS[string](b, `document.querySelector('#next-action-text').innerText`); got != decision+". This request is finished without effect. You can apply again." {
		t.Errorf("the next action reads %q", got)
	}
}
