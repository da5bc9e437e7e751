//go:build e2e

package ui_test

import (
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// The small things a requester meets on the way: the form after a submission starts from the
// catalog as it is now, expiry reads in days, the phone shows every item of the navigation, and
// a revoke's confirmation and outcome appear where the reader is.

// "Start a new request" reads the catalog again: the target just applied for is on its way, so
// the new form says so and cannot pick it; the catalog's expiry reads in days ("30d").
func TestStartingANewRequestReadsTheCatalogAgainAndExpiryReadsInDays(t *testing.T) {
	t.Parallel()
	s := startSite(t)
	b := newBrowser(t, 1280, 900)
	signInAs(b, s.URL, "alice")
	b.do("open the apply page", chromedp.Navigate(s.URL+"/"))
	b.waitFor("the catalog", `document.querySelector('#apply-form .target')`, 20*time.Second)
	if got := evalJS[string](b, `document.querySelector('label[for="target-payments-db-readonly"]').innerText`); !strings.Contains(got, "expires 30 days after you apply") {
		t.Errorf("the expiry of payments-db-readonly reads: %s", got)
	}
	if got := evalJS[string](b, `document.querySelector('label[for="target-payments-db-admin"]').innerText`); !strings.Contains(got, "expires 7 days after you apply") {
		t.Errorf("the expiry of payments-db-admin reads: %s", got)
	}
	op := applyFor(b, "payments-db-readonly", "quarterly revenue report")
	b.waitFor("the accepted notice", `document.querySelector('#apply-accepted')`, 10*time.Second)
	b.do("start a new request", chromedp.Evaluate[chromedp.Void](`[...document.querySelectorAll('#apply-accepted button')].find(x => x.textContent === 'Start a new request').click()`))
	b.waitFor("the new form, knowing the request on its way", `document.querySelector('#target-payments-db-readonly') && document.querySelector('#target-payments-db-readonly').disabled`, 10*time.Second)
	if !evalJS[bool](b, `!!document.querySelector('label[for="target-payments-db-readonly"] [data-yours=IN_FLIGHT] a[href="/requests/`+op+`"]')`) {
		t.Errorf("the new form does not lead to the request on its way:\n%s", b.pageText())
	}
	if evalJS[string](b, `document.querySelector('#apply-form').dataset.operationId`) == op {
		t.Error("the new form kept the submitted form's operationId")
	}
}

// At 390 px the header shows every item of an operator's navigation (seven, and the attention
// count) whole and on screen: none scrolled out of sight or clipped.
func TestThePhoneNavigationShowsEveryItem(t *testing.T) {
	t.Parallel()
	s := startSite(t)
	s.stuck("bob", "payments-db-readonly", "on-call rotation") // what the attention count counts
	b := newBrowser(t, 390, 844)
	b.do("size the viewport", chromedp.EmulateViewport(390, 844))
	openOpsConsole(b, s.URL)
	b.waitFor("the navigation with the count", `document.querySelectorAll('nav a').length === 7 && document.querySelector('#attention-count')`, 20*time.Second)
	hidden := evalJS[[]string](b, `[...document.querySelectorAll('nav a')].filter(a => {
		const r = a.getBoundingClientRect();
		if (r.left < 0 || r.right > innerWidth || r.top < 0 || r.bottom > innerHeight || !r.width) return true;
		const at = document.elementFromPoint(r.left + r.width / 2, r.top + r.height / 2);
		return !at || !a.contains(at);
	}).map(a => a.textContent)`)
	if len(hidden) > 0 {
		t.Errorf("navigation items not whole on screen at 390px: %q", hidden)
	}
	if share := evalJS[float64](b, `document.querySelector('header.top').offsetHeight / innerHeight`); share > 0.2 {
		t.Errorf("the header takes %.0f%% of the first screen", 100*share)
	}
}

// The revoke button is at the foot of a long page: its confirmation opens on the screen the
// reader looks at, and the outcome is told there, scrolled into view — not at the top of the page.
func TestARevokesConfirmationAndOutcomeAppearWhereTheReaderIs(t *testing.T) {
	t.Parallel()
	s := startSite(t)
	op := s.validated("alice", "grafana-editor", "edit the on-call dashboards")
	b := newBrowser(t, 1280, 600)
	b.do("size the viewport", chromedp.EmulateViewport(1280, 600))
	signInAs(b, s.URL, "alice")
	b.do("open the request in effect", chromedp.Navigate(s.URL+"/requests/"+op))
	b.waitFor("the revoke button", `document.querySelector('#revoke-request')`, 20*time.Second)
	b.do("scroll to the revoke button", chromedp.Evaluate[chromedp.Void](`document.querySelector('#revoke-request').scrollIntoView({block: 'center'})`))
	if evalJS[float64](b, `scrollY`) < 100 {
		t.Fatalf("the page is too short for this test: scrolled %v", evalJS[float64](b, `scrollY`))
	}
	b.click("#revoke-request")
	b.waitFor("the confirmation", `document.querySelector('#action-confirm').open`, 10*time.Second)
	onScreen := func(sel string) bool {
		return evalJS[bool](b, `(() => { const r = document.querySelector('`+sel+`').getBoundingClientRect(); return r.height > 0 && r.top >= 0 && r.bottom <= innerHeight; })()`)
	}
	if !onScreen("#action-confirm") {
		t.Error("the confirmation is not on the screen the reader looks at")
	}
	b.click("#action-confirm-yes")
	b.waitFor("the outcome", `document.querySelector('#action-notice')`, 10*time.Second)
	if !onScreen("#action-notice") {
		t.Errorf("the outcome is out of sight (top %v, scrolled %v)", evalJS[float64](b, `document.querySelector('#action-notice').getBoundingClientRect().top`), evalJS[float64](b, `scrollY`))
	}
	if !evalJS[bool](b, `!!(document.querySelector('#status-card').compareDocumentPosition(document.querySelector('#action-notice')) & Node.DOCUMENT_POSITION_FOLLOWING)`) {
		t.Error("the outcome is told above the status, at the top of the page, not where the revoke button was")
	}
	if got := evalJS[string](b, `document.activeElement.id`); got != "action-notice" {
		t.Errorf("focus on %q, want the outcome", got)
	}
}
