//go:build e2e

package ui_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"bindery/api"
	"bindery/internal/testkit"
	"bindery/internal/vocab/state"
)

// shortTarget is a target of the sample's infra/access-config whose bindings last 30 days,
// renewed at once, and reviewed by alice.
var shortTarget = map[string]any{"key": "payments-db-short", "title": "Payments DB (short)", "project": "infra/access-config",
	"branch": "main", "path": "bindings/payments-db-short/{subject}.yaml", "ruleCodes": []string{}, "ttl": "30d", "maxTtl": "60d",
	"renewal": "auto", "owners": []string{"alice@example.com"}}

// The reminder email links the request page, which says "expires in 30 days — Renew"; Renew
// keeps the binding in effect with a later expiry, and "My requests" offers the same. The page
// then follows the file with the new expiry through a batch to its deploy. The
// reminder is due ten seconds after the grant (a reminder only comes for a binding granted for
// longer than it), so that the watch's next look sends it.
func TestRenewFromTheReminderEmailsLink(t *testing.T) {
	t.Parallel()
	s := startSite(t, withTargets(shortTarget), set("notify.expiryReminders", []string{"719h59m50s"}))
	op := s.validated("bob", "payments-db-short", "on-call rotation")
	// The expiry is written right after the validation's commit, not with it: wait for it.
	before := s.waitRequest(op, "its expiry", func(v api.RequestView) bool { return v.ExpiresAt != nil }).ExpiresAt

	b := newBrowser(t, 1280, 900)
	b.do("sign in as bob", chromedp.Navigate(s.URL+"/"), chromedp.Evaluate[chromedp.Void](`document.cookie = 'bindery_user=bob; Path=/'`))
	b.do("open my requests", chromedp.Navigate(s.URL+"/requests"))
	b.waitFor("expires in 30 days — Renew", `document.querySelector('[data-expires="`+op+`"]') && document.querySelector('[data-expires="`+op+`"]').innerText.includes('expires in 30 days') && document.querySelector('[data-renew="`+op+`"]')`, 20*time.Second)

	// The watch reminds at its period: the email arrives in the demo's mailbox.
	b.do("open the mailbox", chromedp.Navigate(s.URL+"/mailbox"))
	b.waitFor("the reminder", `[...document.querySelectorAll('[data-email]')].some((m) => m.innerText.includes('renew it to keep it'))`, 90*time.Second)
	link := evalJS[string](b, `(() => { const m = [...document.querySelectorAll('[data-email]')].find((m) => m.innerText.includes('renew it to keep it'));
		const x = /https?:\/\/\S+\/requests\/\S+/.exec(m.querySelector('pre').textContent); return x ? x[0] : ''; })()`)
	if !strings.Contains(link, "/requests/"+op) {
		t.Fatalf("the reminder's link %q", link)
	}
	b.do("follow the reminder's link", chromedp.Navigate(s.URL+link[strings.Index(link, "/requests/"):]))
	b.waitFor("expires in 30 days — Renew", `document.querySelector('#expires-in') && document.querySelector('#expires-in').innerText === 'expires in 30 days' && document.querySelector('#renew-request')`, 20*time.Second)
	b.click(`#renew-request`)
	b.click(`#action-confirm-yes`)
	b.waitFor("renewed", `document.querySelector('#action-notice') && document.querySelector('#action-notice').innerText.includes('Renewal asked')`, 10*time.Second)
	v := s.waitRequest(op, "the later expiry", func(v api.RequestView) bool { return v.ExpiresAt != nil && v.ExpiresAt.After(*before) })
	if v.Status != state.StatusValidated || v.Renewal == nil || v.Renewal.RequestedBy != "bob@example.com" {
		t.Fatalf("after Renew: %+v", v)
	}
	// The target's file carries the expiry: the page follows the file with the new expiry
	// through a batch to its deploy, the binding in effect throughout.
	b.waitFor("the renewal's file on its way", `document.querySelector('#renewal-file') && document.querySelector('#renewal-file').innerText.includes('your access goes on meanwhile')`, 20*time.Second)
	s.roundsUntil(op, "the renewal's file in effect", func(v api.RequestView) bool {
		return v.Renewal != nil && v.Renewal.File != nil && v.Renewal.File.State == "done"
	})
	b.waitFor("the renewal's file in effect", `document.querySelector('#renewal-file') && document.querySelector('#renewal-file').dataset.state === 'done' && document.querySelector('#expires-in')`, 60*time.Second)
}

// A review from start to its removals in effect: alice, an owner, starts a review of the target
// on the Reviews page, removes bob's binding with a comment and keeps the operator's, completes
// it; the removal goes through a batch and the deploy, and the review page says when it took
// effect.
func TestAReviewFromStartToItsRemovalsInEffect(t *testing.T) {
	t.Parallel()
	s := startSite(t, withTargets(shortTarget))
	bob := s.validated("bob", "payments-db-short", "on-call rotation")
	kept := s.validated("ops", "payments-db-short", "on-call rotation")

	b := newBrowser(t, 1280, 900)
	b.do("sign in as alice", chromedp.Navigate(s.URL+"/"), chromedp.Evaluate[chromedp.Void](`document.cookie = 'bindery_user=alice; Path=/'`))
	b.do("open the reviews", chromedp.Navigate(s.URL+"/reviews"))
	b.waitFor("the start form", `document.querySelector('#review-target option[value="payments-db-short"]')`, 20*time.Second)
	b.do("choose the target", chromedp.SetValue(chromedp.CSS(`#review-target`), "payments-db-short"))
	b.click(`#review-start`)
	b.waitFor("the review's items", `document.querySelectorAll('#review-items tbody tr').length === 2`, 20*time.Second)
	// The owner is emailed about it, with the review's page.
	testkit.Eventually(t, "alice's email about the review", func() bool {
		for _, m := range s.sims().Mailbox.Emails() {
			if strings.Contains(m.Subject, "Access review") && len(m.To) == 1 && m.To[0] == "alice@example.com" &&
				strings.Contains(m.Text, "The review's page: ") && strings.Contains(m.Text, "/reviews/") {
				return true
			}
		}
		return false
	})
	row := func(subject string) string { return `#review-items tr[data-subject="` + subject + `"]` }
	b.do("comment", chromedp.SendKeys(chromedp.CSS(row("bob@example.com")+` input[name=comment]`), "left the team"))
	// The page refreshes every 10 s: what the reviewer typed is still there after a refresh.
	polls := `performance.getEntriesByType('resource').filter(e => /\/api\/reviews\/\d+$/.test(e.name)).length`
	n := evalJS[float64](b, polls)
	b.waitFor("the page's next refresh", fmt.Sprintf(`%s > %v`, polls, n), 20*time.Second)
	if got := evalJS[string](b, `document.querySelector('`+row("bob@example.com")+` input[name=comment]').value`); got != "left the team" {
		t.Fatalf("after a refresh the comment box holds %q", got)
	}
	b.click(row("bob@example.com") + ` [data-decide=remove]`)
	b.waitFor("bob's decision", `document.querySelector('`+row("bob@example.com")+` [data-decision=remove]')`, 10*time.Second)
	b.click(row("ops@example.com") + ` [data-decide=keep]`)
	b.waitFor("the operator's decision", `document.querySelector('`+row("ops@example.com")+` [data-decision=keep]')`, 10*time.Second)
	b.click(`#review-complete`)
	b.waitFor("completed", `document.querySelector('#review-status').innerText.includes('COMPLETED')`, 10*time.Second)

	s.roundsUntil(bob, "bob's removal in effect", func(v api.RequestView) bool { return v.Status == state.StatusClosed })
	b.waitFor("when the removal took effect", `document.querySelector('`+row("bob@example.com")+` [data-removed]')`, 30*time.Second)
	if st := s.request(kept).Status; st != state.StatusValidated {
		t.Fatalf("the kept binding is %s", st)
	}
	var list struct{ Items []api.ReviewSummary }
	s.call("GET", "/api/reviews", "alice", "", 200, &list)
	if len(list.Items) != 1 || list.Items[0].Status != "COMPLETED" {
		t.Fatalf("alice's reviews: %+v", list.Items)
	}
}
