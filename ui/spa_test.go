//go:build e2e

package ui_test

import (
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/cdproto/fetch"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"

	"bindery/api"
	"bindery/internal/sim"
	"bindery/internal/testkit"
	"bindery/internal/vocab/state"
)

// dropFirstApplyAnswer makes the browser lose the first answer to POST /api/apply after the
// server recorded the application: the realistic way a person ends up sending a form twice.
func dropFirstApplyAnswer(b *browser) {
	b.t.Helper()
	var dropped atomic.Int32
	b.answers("*/api/apply", func(e *fetch.EventRequestPaused) {
		if e.ResponseStatusCode != 0 && dropped.Add(1) == 1 {
			chromedp.Call(b.ctx, fetch.FailRequest, fetch.FailRequestParams{RequestID: e.RequestID, ErrorReason: network.ErrorReasonConnectionReset})
			return
		}
		chromedp.Call(b.ctx, fetch.ContinueRequest, fetch.ContinueRequestParams{RequestID: e.RequestID})
	})
}

// resubmitAfterLostAnswer checks the form survived a lost answer with its operationId, sends
// it again with the keyboard, and checks DUPLICATE_SUBMIT keeps it locked.
func resubmitAfterLostAnswer(b *browser, op string) {
	b.t.Helper()
	b.waitFor("the lost-answer error", `document.querySelector('#apply-error')`, 10*time.Second)
	if !strings.Contains(evalJS[string](b, `document.querySelector('#apply-error').innerText`), "Submitting again is safe") {
		b.t.Fatalf("error does not say a retry is safe:\n%s", b.pageText())
	}
	if same := evalJS[string](b, `document.querySelector('#apply-form').dataset.operationId`); same != op {
		b.t.Fatalf("after a lost answer the form's operationId changed %s → %s; a retry would apply twice", op, same)
	}
	// Submit again with the keyboard: focus the button, press Enter.
	b.do("resubmit with the keyboard", chromedp.Focus(chromedp.CSS("#submit")), chromedp.KeyEvent("\r"))
	b.waitFor("the DUPLICATE_SUBMIT notice", `document.querySelector('#apply-duplicate')`, 10*time.Second)
	locked := evalJS[bool](b, `(() => {
		const f = document.querySelector('#apply-form');
		return f.querySelector('fieldset').disabled && document.querySelector('#submit').matches(':disabled') &&
			document.querySelector('#reason').matches(':disabled') && [...f.querySelectorAll('input[name=target]')].every(i => i.matches(':disabled'));
	})()`)
	if !locked {
		b.t.Fatal("the form is editable after DUPLICATE_SUBMIT")
	}
	// Even a scripted submit of the locked form sends nothing more. The submit handler calls
	// fetch synchronously, so counting the calls around requestSubmit is exact.
	sent := evalJS[int](b, `(() => {
		let n = 0;
		const real = window.fetch;
		window.fetch = (...args) => { if (String(args[0]).includes('/api/apply')) n++; return real(...args); };
		try { document.querySelector('#apply-form').requestSubmit(); } finally { window.fetch = real; }
		return n;
	})()`)
	if sent != 0 {
		b.t.Fatalf("a locked form sent another application (%d)", sent)
	}
}

func TestDuplicateSubmitKeepsTheFormLocked(t *testing.T) {
	t.Parallel()
	s := startSite(t)
	b := newBrowser(t, 1280, 900)
	signInAs(b, s.URL, "alice")

	dropFirstApplyAnswer(b)
	b.do("open the apply page", chromedp.Navigate(s.URL+"/"))
	op := applyFor(b, "grafana-editor", "dashboards for the incident review")
	resubmitAfterLostAnswer(b, op)
	if got := s.appliesSent(); len(got) != 2 || got[0] != op || got[1] != op {
		t.Fatalf("applications %v, want the same operationId twice", got)
	}
	if n := len(s.myRequests("alice")); n != 1 {
		t.Fatalf("%d requests recorded, want 1", n)
	}

	// A new form is a new operationId.
	b.do("start a new request", chromedp.Click(chromedp.CSS(`#apply-duplicate button`)))
	b.waitFor("a fresh form", `document.querySelector('#apply-form') && !document.querySelector('#apply-form fieldset').disabled`, 10*time.Second)
	if fresh := evalJS[string](b, `document.querySelector('#apply-form').dataset.operationId`); fresh == op || len(fresh) != 36 {
		t.Fatalf("new form operationId %q, want a fresh UUID (old %s)", fresh, op)
	}
}

func TestAReleaseThatRemovedAPageChunkReloadsOnceThenOffersARefreshButton(t *testing.T) {
	t.Parallel()
	s := startSite(t)
	b := newBrowser(t, 1280, 900)
	signInAs(b, s.URL, "alice")
	b.do("open the apply page", chromedp.Navigate(s.URL+"/"))
	b.waitFor("the apply form", `document.querySelector('#apply-form')`, 20*time.Second)
	evalJS[bool](b, `window.__firstDocument = true`)

	// The release: the chunk of "My requests", which this open page has not loaded yet, is gone.
	s.files.remove(t, `^requests-.*\.js$`)
	b.click(`nav a[href="/requests"]`)

	// One automatic reload with a cache-busting parameter; the new document fails again on the
	// same chunk within 30 s, so it shows the button instead of reloading a second time.
	b.waitFor("the Refresh page button", `document.querySelector('#recovery button')`, 20*time.Second)
	loads := s.pageLoads()
	if len(loads) != 2 || !strings.Contains(loads[1], "_r=") || !strings.HasPrefix(loads[1], "/requests") {
		t.Fatalf("page loads %v, want the first and exactly one cache-busting reload of /requests", loads)
	}
	if evalJS[bool](b, `window.__firstDocument === true`) {
		t.Fatal("the page did not reload")
	}
	if label := evalJS[string](b, `document.querySelector('#recovery button').textContent`); label != "Refresh page" {
		t.Fatalf("button %q", label)
	}
	if !evalJS[bool](b, `document.activeElement === document.querySelector('#recovery button')`) {
		t.Error("the Refresh page button does not have the keyboard focus")
	}
	if evalJS[string](b, `location.search`) != "" {
		t.Error("the cache-busting parameter stays in the address bar")
	}
	if got := len(s.pageLoads()); got != 2 {
		t.Fatalf("%d page loads, want no second automatic reload", got)
	}

	// The deployment is whole again: the button loads the page.
	s.files.restore()
	b.do("press Refresh page", chromedp.Focus(chromedp.CSS("#recovery button")), chromedp.KeyEvent("\r"))
	b.waitFor("my requests after the refresh", `document.querySelector('main h1') && document.querySelector('main h1').textContent === 'My requests' && !document.querySelector('#recovery')`, 20*time.Second)

	// 30 s later the guard has expired (set back rather than waited for): a failure reloads
	// automatically again.
	before := len(s.pageLoads())
	evalJS[bool](b, `sessionStorage.setItem('bindery.autoReloadAt', String(Date.now() - 31000)), true`)
	s.files.remove(t, `^request-.*\.js$`)
	b.click(`nav a[href="/inbox"]`) // load the inbox first: its link to a request is an in-app link
	b.do("navigate to a request page", chromedp.Evaluate[chromedp.Void](`history.pushState(null, '', '/requests/x'); dispatchEvent(new PopStateEvent('popstate'))`))
	b.waitFor("a second automatic reload", `document.querySelector('#recovery button')`, 20*time.Second)
	if got := len(s.pageLoads()); got != before+1 {
		t.Fatalf("%d page loads after the guard expired, want exactly one more automatic reload (%d)", got, before+1)
	}
}

func TestAMissingStylesheetAlsoReloadsOnceThenOffersTheButton(t *testing.T) {
	t.Parallel()
	s := startSite(t)
	b := newBrowser(t, 1280, 900)
	signInAs(b, s.URL, "alice")
	s.files.remove(t, `^app-.*\.css$`) // an index names a stylesheet the deployment lacks
	b.do("open the apply page", chromedp.Navigate(s.URL+"/"))
	b.waitFor("the Refresh page button", `document.querySelector('#recovery button')`, 20*time.Second)
	if loads := s.pageLoads(); len(loads) != 2 || !strings.Contains(loads[1], "_r=") {
		t.Fatalf("page loads %v, want one cache-busting reload", loads)
	}
}

func TestAnOperatorRetriesAStuckRequestFromTheConsole(t *testing.T) {
	t.Parallel()
	s := startSite(t)
	op := s.stuck("bob", "payments-db-readonly", "on-call rotation")
	mr := s.request(op).MR
	s.refusedEdit()
	b := newBrowser(t, 1280, 900)
	signInAs(b, s.URL, "alice")
	b.do("open bindery", chromedp.Navigate(s.URL+"/"))
	b.waitFor("the user switcher", `document.querySelector('#user-switcher')`, 20*time.Second)
	if evalJS[bool](b, `!!document.querySelector('nav a[href="/ops"]')`) {
		t.Fatal("alice sees the ops console")
	}
	b.do("switch to the ops user", chromedp.SetValue(chromedp.CSS("#user-switcher"), "ops"),
		chromedp.Evaluate[chromedp.Void](`document.querySelector('#user-switcher').dispatchEvent(new Event('change'))`))
	b.click(`nav a[href="/ops"]`)

	retry := `#stuck [data-retry="` + op + `"]`
	b.waitFor("the stuck request with its retry button", `document.querySelector('`+retry+`')`, 10*time.Second)
	row := evalJS[string](b, `document.querySelector('#stuck tr[data-operation-id]').innerText`)
	for _, want := range []string{"payments-db-readonly", "bob@example.com", "The pipeline gave no answer in time" /* the step in words */} {
		if !strings.Contains(row, want) {
			t.Errorf("stuck row lacks %q: %s", want, row)
		}
	}
	// The next action in an operator's words: they are the ones who retry.
	if badge := evalJS[string](b, `document.querySelector('#stuck tr[data-operation-id] [data-next-action]').innerText`); badge != "Retry" {
		t.Errorf("the stuck row's next action reads %q, want Retry", badge)
	}
	b.waitFor("the blocked batch with its MR link and settle button", `document.querySelector('#batches [data-settle]') && document.querySelector('#batches a.external[href$="merge_requests/`+itoa(mr.ID)+`"]')`, 10*time.Second)
	b.waitFor("the config error", `document.querySelector('#config-error')`, 10*time.Second)
	b.waitFor("per-stage latency", `document.querySelector('#stage-latency li')`, 10*time.Second)

	b.click(retry)
	b.waitFor("the retry confirmation", `[...document.querySelectorAll('.notice')].some(n => n.innerText.includes('Retry started'))`, 10*time.Second)
	if got := s.audited("ops.requests.retry"); len(got) != 1 || got[0] != op+" by ops@example.com" {
		t.Fatalf("retries %v", got)
	}
	b.waitFor("the request to leave the stuck list", `!document.querySelector('`+retry+`') && document.querySelector('#stuck .empty')`, 10*time.Second)
}

// A merged request whose deploy callback is overdue is in the stuck list; its button says it
// confirms the deploy, and the request leaves the list validated.
func TestAnOperatorConfirmsAnOverdueDeployFromTheConsole(t *testing.T) {
	t.Parallel()
	// Its deploy callback lost, and overdue a second after its merge.
	s := startSite(t, set("reconcile.deployOverdue", "1s"))
	op := s.merged("bob", "payments-db-readonly", "on-call rotation")
	s.waitRequest(op, "the deploy of "+op+" overdue", func(v api.RequestView) bool { return v.NextAction == state.NextWaitManual })
	b := newBrowser(t, 1280, 900)
	signInAs(b, s.URL, "alice")
	b.do("open bindery", chromedp.Navigate(s.URL+"/"))
	b.waitFor("the user switcher", `document.querySelector('#user-switcher')`, 20*time.Second)
	b.do("switch to the ops user", chromedp.SetValue(chromedp.CSS("#user-switcher"), "ops"),
		chromedp.Evaluate[chromedp.Void](`document.querySelector('#user-switcher').dispatchEvent(new Event('change'))`))
	b.click(`nav a[href="/ops"]`)

	confirm := `#stuck [data-retry="` + op + `"]`
	b.waitFor("the merged request with its confirm button", `document.querySelector('`+confirm+`')`, 10*time.Second)
	if label := evalJS[string](b, `document.querySelector('`+confirm+`').innerText`); !strings.HasPrefix(label, "Confirm deploy") {
		t.Fatalf("button %q, want Confirm deploy", label)
	}
	row := evalJS[string](b, `document.querySelector('#stuck tr[data-operation-id="`+op+`"]').innerText`)
	if !strings.Contains(row, "Merged, waiting for deploy") || evalJS[string](b, `document.querySelector('#stuck tr[data-operation-id="`+op+`"] [data-next-action]').innerText`) != "Retry" {
		t.Errorf("stuck row: %s", row)
	}
	b.click(confirm)
	b.waitFor("the confirmation", `[...document.querySelectorAll('.notice')].some(n => n.innerText.includes('Deploy confirmed for'))`, 10*time.Second)
	if got := s.audited("ops.requests.retry"); len(got) != 1 || got[0] != op+" by ops@example.com" {
		t.Fatalf("retries %v", got)
	}
	b.waitFor("the request to leave the stuck list", `!document.querySelector('`+confirm+`')`, 10*time.Second)
	if v := s.request(op); v.Status != state.StatusValidated {
		t.Fatalf("a confirmed deploy left the request %s", v.Status)
	}
}

// A batch whose failure was decided but whose settlement did not go through (GitLab or the
// database failed while settling) says so on the ops console, with the error, until bindery's
// next try or an operator settles it.
func TestTheOpsConsoleShowsASettlementThatDidNotGoThrough(t *testing.T) {
	t.Parallel()
	// A change that fails its pipeline, alone in its batch: the failure is decided at once, and
	// closing the batch's merge request is what settling does first — which GitLab answers 502.
	s := startSite(t, culpritSettings...)
	s.sims().GitLab.Inject("update_mr", sim.FaultStatus(http.StatusBadGateway, "502 Bad Gateway"), 1000)
	op := s.queued("bob", "payments-db-readonly", "on-call rotation "+breaksCI)
	s.roundTaking(op)
	var batch api.BatchView
	testkit.Eventually(t, "a settlement that did not go through", func() bool {
		batch = s.batchOf(op)
		return batch.Failing != "" && batch.LastError != ""
	})
	id := batch.ID
	b := newBrowser(t, 1280, 900)
	openOpsConsole(b, s.URL)
	notice := fmt.Sprintf(`#batches [data-failing="%d"]`, id)
	b.waitFor("the failing batch's notice", `document.querySelector('`+notice+`')`, 20*time.Second)
	text := evalJS[string](b, `document.querySelector('`+notice+`').innerText`)
	for _, want := range []string{"Settling as failed (" + batch.Failing + ") did not go through", batch.LastError, "bindery tries again"} {
		if !strings.Contains(text, want) {
			t.Errorf("notice lacks %q: %s", want, text)
		}
	}
}

// A fresh browser on the demo has no user yet: the first page offers the demo users instead of a
// dead end ("Please sign in" with nothing to click), and picking one signs in and shows the page.
func TestAFreshBrowserOnTheDemoPicksAUser(t *testing.T) {
	t.Parallel()
	s := startSite(t)
	b := newBrowser(t, 1280, 900)
	b.do("open the demo in a fresh browser", chromedp.Navigate(s.URL+"/"))
	b.waitFor("the demo users", `document.querySelectorAll('[data-demo-user]').length === 3`, 20*time.Second)
	if text := evalJS[string](b, `document.querySelector('main').innerText`); strings.Contains(text, "Sign in and reload") {
		t.Fatalf("a dead end: %s", text)
	}
	b.click(`[data-demo-user="bob"]`)
	b.waitFor("signed in as bob", `document.querySelector('#user-switcher') && document.querySelector('#user-switcher').value === 'bob'`, 20*time.Second)
	b.waitFor("the apply page", `!document.querySelector('[data-demo-user]') && document.querySelector('main h1') !== null`, 20*time.Second)
}

// openOpsConsole signs the browser in as ops and opens the console.
func openOpsConsole(b *browser, base string) {
	b.do("open the ops console as ops", chromedp.Navigate(base+"/"), chromedp.Evaluate[chromedp.Void](`document.cookie = 'bindery_user=ops; Path=/'`),
		chromedp.Navigate(base+"/ops"))
}

// The operator narrows the batch list to the blocked ones (the page asks the API for that status)
// and back; a status with no batch says so.
func TestTheOpsConsoleFiltersBatchesByStatus(t *testing.T) {
	t.Parallel()
	s := startSite(t)
	s.stuck("bob", "payments-db-readonly", "on-call rotation")
	s.inCI("alice", "grafana-editor", "on-call rotation")
	b := newBrowser(t, 1280, 900)
	openOpsConsole(b, s.URL)
	count := `document.querySelectorAll('#batches li.batch').length`
	b.waitFor("both batches", count+` === 2`, 20*time.Second)
	pick := func(v string) {
		b.do("pick "+v, chromedp.SetValue(chromedp.CSS(`#batch-status`), v),
			chromedp.Evaluate[chromedp.Void](`document.querySelector('#batch-status').dispatchEvent(new Event('change'))`))
	}
	pick("BLOCKED")
	b.waitFor("only the blocked batch", count+` === 1 && document.querySelector('#batches li.batch').innerText.includes('BLOCKED') || false`, 20*time.Second)
	pick("FAILED")
	b.waitFor("the empty list's words", `document.querySelector('#batches').innerText.includes('No failed batches.')`, 20*time.Second)
	pick("")
	b.waitFor("both batches again", count+` === 2`, 20*time.Second)
}

// A request whose batch waits for its pipeline says what it waits for and what bindery does
// about it: it looks at the pipeline again at a time the page shows.
func TestARequestInCIShowsWhenBinderyLooksAgain(t *testing.T) {
	t.Parallel()
	s := startSite(t)
	op := s.inCI("alice", "payments-db-readonly", "on-call rotation")
	mr := s.request(op).MR
	b := newBrowser(t, 1280, 900)
	signInAs(b, s.URL, "alice")
	b.do("open the request", chromedp.Navigate(s.URL+"/requests/"+op))
	// Between two looks (a loaded machine may show the look itself, due now, for a moment).
	b.waitFor("when bindery looks again", `document.querySelector('#waiting .work') && document.querySelector('#waiting').innerText.includes('looks again at')`, 20*time.Second)
	text := evalJS[string](b, `document.querySelector('#waiting').innerText`)
	for _, want := range []string{"the pipeline of merge request !" + itoa(mr.ID) + " to pass", "looks again at"} {
		if !strings.Contains(text, want) {
			t.Errorf("waiting card lacks %q:\n%s", want, text)
		}
	}
}
