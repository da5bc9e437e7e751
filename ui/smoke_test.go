package ui_test

// The browser smoke of the everyday suite (`go test ./...`): one person's whole journey in a real
// Chromium against a real demo site. The other browser flows are behind the e2e build tag, beside
// the other long runs (`go test -tags e2e ./ui`; CI runs them all under -race): they are most of
// the everyday suite's time (DEVELOPERS.md 'Tests').

import (
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// applyFor fills and submits the apply form for target with the mouse, returning the form's
// operationId.
func applyFor(b *browser, target, reason string) string {
	b.t.Helper()
	b.waitFor("the apply form", `document.querySelector('#apply-form')`, 20*time.Second)
	b.click("#target-" + target)
	b.waitFor("the preview of the change", `document.querySelector('.preview pre.file')`, 10*time.Second)
	b.do("type the reason", chromedp.SendKeys(chromedp.CSS("#reason"), reason))
	op := evalJS[string](b, `document.querySelector('#apply-form').dataset.operationId`)
	b.click("#submit")
	return op
}

// aliceAppliedInTheBrowser starts a site and a browser in which alice applied for
// payments-db-readonly with the form, and returns them with the form's operationId once the
// page said the application was accepted.
func aliceAppliedInTheBrowser(t *testing.T) (*site, *browser, string) {
	t.Helper()
	s := startSite(t)
	b := newBrowser(t, 1280, 900)
	signInAs(b, s.URL, "alice")
	b.do("open the apply page", chromedp.Navigate(s.URL+"/"))
	op := applyFor(b, "payments-db-readonly", "quarterly revenue report")
	b.waitFor("the accepted notice", `document.querySelector('#apply-accepted')`, 10*time.Second)
	return s, b, op
}

func TestApplyApproveInTheInboxAndWatchTheRequestReachValidatedWithoutReload(t *testing.T) {
	t.Parallel()
	s, b, op := aliceAppliedInTheBrowser(t)
	if got := s.myRequests("alice"); len(got) != 1 || got[0] != op {
		t.Fatalf("requests recorded %v, want exactly the form's %s", got, op)
	}
	// A marker on the window dies with the document: it proves nothing below reloads the page.
	evalJS[bool](b, `window.__sameDocument = true`)

	b.click(`nav a[href="/inbox"]`)
	ticket := `[data-ticket][data-operation-id=` + jsString(op) + `]`
	b.waitFor("the ticket in the inbox", `document.querySelector('`+ticket+` [data-decide=APPROVED]')`, 10*time.Second)
	b.click(ticket + ` [data-decide=APPROVED]`)
	b.waitFor("the approval notice", `[...document.querySelectorAll('.notice a')].some(a => a.textContent.includes('Follow the request'))`, 10*time.Second)
	b.click(`.notice a[href="/requests/` + op + `"]`)

	b.waitFor("the waiting explanation", `document.querySelector('#waiting')`, 10*time.Second)
	// The batch round an operator (or the cron) runs; the rest — MR, pipeline, merge, deploy
	// callback — runs by itself, and the page follows it without a reload.
	s.roundTaking(op)
	b.waitFor("the request to reach VALIDATED", `document.querySelector('#status-card [data-status="VALIDATED"]')`, 60*time.Second)
	if !evalJS[bool](b, `window.__sameDocument === true`) {
		t.Fatal("the page reloaded on the way to VALIDATED")
	}
	if loads := s.pageLoads(); len(loads) != 1 {
		t.Fatalf("page loads %v, want only the first", loads)
	}
	text := evalJS[string](b, `document.querySelector('main').innerText`)
	for _, want := range []string{"Done: the binding is in effect.", "Merge request !", "Pipeline #", "Deployed: in effect", "Merged, waiting for the deploy", "Timeline", "Time per stage"} {
		if !strings.Contains(text, want) {
			t.Errorf("request page lacks %q:\n%s", want, text)
		}
	}
	if n := evalJS[int](b, `document.querySelectorAll('#timeline li').length`); n < 7 {
		t.Errorf("timeline shows %d steps, want every step from APPROVAL_SENDING to CALLED_BACK", n)
	}
	if evalJS[bool](b, `!!document.querySelector('#waiting')`) {
		t.Error("a validated request still explains why it is waiting")
	}

	// My requests lists it, live, with the same status.
	b.click(`nav a[href="/requests"]`)
	b.waitFor("the request in my list", `document.querySelector('tr[data-operation-id=`+jsString(op)+`] [data-status="VALIDATED"]')`, 10*time.Second)
}
