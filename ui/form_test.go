//go:build e2e

package ui_test

import (
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// The apply form knows the user before anything is typed: a target they may not apply for, one
// in effect and one on its way are said (with links to the requests) and cannot be picked; the
// preview shows the typed reason, a counter the limit; a 409 links to the active request and
// the focus moves to the error summary.
func TestTheApplyFormKnowsTheUser(t *testing.T) {
	t.Parallel()
	s := startSite(t)
	// bob: the demo's permission rules give alice payments-admin, not him.
	inFlight := s.apply("bob", "grafana-editor", "dashboards") // on its way: awaiting its approval
	b := newBrowser(t, 1280, 900)
	signInAs(b, s.URL, "bob")
	b.do("open the apply page", chromedp.Navigate(s.URL+"/"))
	b.waitFor("the catalog", `document.querySelector('#apply-form .target')`, 20*time.Second)

	if !evalJS[bool](b, `document.querySelector('#target-payments-db-admin').disabled && !!document.querySelector('[data-may-apply=false] [data-denied]')`) {
		t.Errorf("a target bob may not apply for can be picked:\n%s", b.pageText())
	}
	if !evalJS[bool](b, `document.querySelector('#target-grafana-editor').disabled && !!document.querySelector('[data-yours=IN_FLIGHT] a[href="/requests/`+inFlight+`"]')`) {
		t.Errorf("the request on its way is not said with a link:\n%s", b.pageText())
	}

	b.click("#target-payments-db-readonly")
	b.waitFor("the preview", `document.querySelector('.preview pre.file')`, 10*time.Second)
	b.do("type a reason", chromedp.SendKeys(chromedp.CSS("#reason"), "quarterly revenue report"))
	if got := evalJS[string](b, `document.querySelector('.preview pre.file').textContent`); !strings.Contains(got, "reason: quarterly revenue report") {
		t.Errorf("the preview does not show the typed reason:\n%s", got)
	}
	if got := evalJS[string](b, `document.querySelector('#reason-count').textContent`); got != "24 / 1000 characters" {
		t.Errorf("counter %q", got)
	}
	if !strings.Contains(evalJS[string](b, `document.querySelector('#apply-form').innerText`), "after you apply") {
		t.Error("the expiry is not worded as the file's expiresAt (request time + ttl)")
	}

	// Another tab applied for the same target meanwhile: submitting is refused (409), and the
	// answer leads to that request, with the focus on the error summary.
	if !evalJS[bool](b, `(() => { const x = new XMLHttpRequest(); x.open('POST', '/api/apply', false); x.setRequestHeader('Content-Type', 'application/json');
		x.send(JSON.stringify({operationId: 'other-tab-1', targetKey: 'payments-db-readonly', reason: 'x'})); return x.status === 202; })()`) {
		t.Fatal("the other tab's application was not accepted")
	}
	b.click("#submit")
	b.waitFor("the link to the active request", `document.querySelector('#apply-error #active-request[href="/requests/other-tab-1"]')`, 10*time.Second)
	if !evalJS[bool](b, `document.activeElement === document.querySelector('#apply-error')`) {
		t.Errorf("focus is on %s, not the error summary", evalJS[string](b, `document.activeElement.tagName + '#' + document.activeElement.id`))
	}
}

// After a lost answer the requester edits the form and submits again: the server refuses the
// form's id with other content (422). The page says the first submission arrived (with a link
// to it), keeps the edited text, and sends it as a new request — a new operationId — when asked.
// For the same target, where the first is active and a new request would be refused, the page
// says so instead of offering it; picking another target offers it again, and it is accepted.
func TestAnEditAfterALostAnswerIsKeptAndSentAsANewRequest(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name, target string
		accepted     bool
	}{{"for another target", "payments-db-readonly", true}, {"for the same target", "grafana-editor", false}} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			s := startSite(t)
			b := newBrowser(t, 1280, 900)
			signInAs(b, s.URL, "alice")
			dropFirstApplyAnswer(b)
			b.do("open the apply page", chromedp.Navigate(s.URL+"/"))
			op := applyFor(b, "grafana-editor", "dashboards")
			b.waitFor("the lost-answer error", `document.querySelector('#apply-error')`, 10*time.Second)

			if c.target != "grafana-editor" {
				b.click("#target-" + c.target)
			}
			b.do("edit the reason", chromedp.SendKeys(chromedp.CSS("#reason"), " for the incident review"))
			b.click("#submit")
			if !c.accepted {
				b.waitFor("the same target said to be taken", `document.querySelector('#apply-error #same-target-active') && document.querySelector('#apply-error #arrived-request')`, 10*time.Second)
				if evalJS[bool](b, `!!document.querySelector('#submit-as-new')`) {
					t.Error("a new request for the target of the active one is offered")
				}
				b.click("#target-payments-db-readonly")
			}
			b.waitFor("the offer to send the edit as a new request", `document.querySelector('#apply-error #submit-as-new') && document.querySelector('#apply-error #arrived-request')`, 10*time.Second)
			notice := evalJS[string](b, `document.querySelector('#apply-error').innerText`)
			if !strings.Contains(notice, "already reached bindery") || strings.Contains(notice, "reset") {
				t.Errorf("422 notice: %s", notice)
			}
			if href := evalJS[string](b, `document.querySelector('#arrived-request').getAttribute('href')`); href != "/requests/"+op {
				t.Errorf("the arrived request links %s, want /requests/%s", href, op)
			}
			if got := evalJS[string](b, `document.querySelector('#reason').value`); got != "dashboards for the incident review" {
				t.Fatalf("the edit was lost: reason %q", got)
			}
			fresh := evalJS[string](b, `document.querySelector('#apply-form').dataset.operationId`)
			if fresh == op {
				t.Fatal("the form kept the refused operationId")
			}

			b.click("#submit-as-new")
			b.waitFor("the new request accepted", `document.querySelector('#apply-accepted')`, 10*time.Second)
			v := s.request(fresh)
			if v.TargetKey != "payments-db-readonly" || v.Reason != "dashboards for the incident review" {
				t.Fatalf("new request %s for %s with %q", fresh, v.TargetKey, v.Reason)
			}
			if got := s.appliesSent(); len(got) != 3 || got[0] != op || got[1] != op || got[2] != fresh {
				t.Fatalf("applications %v, want %s twice then %s", got, op, fresh)
			}
		})
	}
}
