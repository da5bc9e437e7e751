//go:build e2e

package ui_test

import (
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"bindery/internal/testkit"
)

// A first visit to the real demo, by keyboard: the "Continue as" choices stand apart and say who
// is who (alice holds payments-admin, ops is the operator); after applying, Enter on "Follow your
// request" puts the focus on the request page's heading, not on the body; and a request that is
// not there stops asking what was sent about it.
func TestAFirstVisitPicksAUserAppliesAndFollowsTheRequestByKeyboard(t *testing.T) {
	t.Parallel()
	url := bootDemo(t)
	b := newBrowser(t, 390, 844)
	b.do("open the demo", chromedp.Navigate(url+"/"))
	b.waitFor("the demo's users", `document.querySelectorAll('.demo-users [data-demo-user]').length === 3`, 20*time.Second)
	who := map[string]string{}
	for _, u := range []string{"alice", "bob", "ops"} {
		who[u] = evalJS[string](b, `document.querySelector('[data-demo-user="`+u+`"]').closest('li').innerText`)
	}
	if !strings.Contains(who["alice"], "holds payments-admin") || !strings.Contains(who["ops"], "the operator") || !strings.Contains(who["bob"], "a requester") {
		t.Errorf("who is who: %v", who)
	}
	// The buttons do not touch: each one's box is clear of the next one's by a visible gap.
	if gap := evalJS[float64](b, `(() => { const r = [...document.querySelectorAll('[data-demo-user]')].map((x) => x.getBoundingClientRect());
		return Math.min(...r.slice(1).map((x, i) => Math.max(x.top - r[i].bottom, x.left - r[i].right))); })()`); gap < 8 {
		t.Errorf("the Continue as buttons are %.0f px apart", gap)
	}
	b.click(`[data-demo-user="bob"]`)
	applyFor(b, "grafana-editor", "dashboards for the incident review")
	b.waitFor("the accepted notice", `document.querySelector('#apply-accepted [data-focus=follow]')`, 20*time.Second)
	b.do("follow the request with Enter", chromedp.Focus(chromedp.CSS(`#apply-accepted [data-focus=follow]`)), chromedp.KeyEvent("\r"))
	b.waitFor("the focus on the request page's heading", `document.activeElement && document.activeElement.tagName === 'H1' && location.pathname.startsWith('/requests/') && document.querySelector('#status-card')`, 20*time.Second)
	b.waitFor("the focus kept through a live refresh", `document.querySelector('#next-action-text') && performance.getEntriesByType('resource').filter((e) => /\/api\/requests\/[^/]+$/.test(e.name)).length >= 2 && document.activeElement.tagName === 'H1'`, 20*time.Second)

	b.do("open a request that is not there", chromedp.Navigate(url+"/requests/no-such-request"))
	b.waitFor("Request not found", `[...document.querySelectorAll('h1')].some((x) => x.innerText === 'Request not found')`, 20*time.Second)
	sent := `performance.getEntriesByType('resource').filter((e) => e.name.includes('/sent')).length`
	// The page's first look may still be in flight when the heading shows (a resource is listed
	// once its answer came): the count is read once it stood still for 2 s.
	before := evalJS[int](b, sent)
	for deadline := time.Now().Add(testkit.Timeout()); time.Now().Before(deadline); {
		time.Sleep(2 * time.Second) // a window shorter than the old poll's 5 s, so a poll still shows below
		n := evalJS[int](b, sent)
		if n == before {
			break
		}
		before = n
	}
	time.Sleep(6 * time.Second) // the behaviour under test: a window in which nothing may be asked (the list of sent things was polled every 5 s)
	if after := evalJS[int](b, sent); after != before {
		t.Fatalf("the not-found page asked what was sent %d more times", after-before)
	}
}
