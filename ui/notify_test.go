//go:build e2e

package ui_test

import (
	"encoding/base64"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"bindery/api"
	"bindery/internal/testkit"
)

// A person chooses their emails on the settings page; a request in effect says what was sent
// about it; the demo's mailbox shows the email and the verified webhook; the ops console lists
// each receiver with its last attempts and sends a failed delivery again.
func TestSettingsMailboxAndWhatWasSent(t *testing.T) {
	t.Parallel()
	// A receiver of the in-effect events that asks never to be called again (410): its delivery
	// fails, for an operator to send again.
	gone := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusGone) }))
	t.Cleanup(gone.Close)
	s := startSite(t, set("notify.webhooks", []map[string]any{{"name": "ci", "url": gone.URL, "events": []string{"request.in_effect"},
		"secrets": []string{"whsec_" + base64.StdEncoding.EncodeToString([]byte("a secret of the webhook receiver"))}}}))
	_, done := s.ordinaryDay()
	var failed int64
	testkit.Eventually(t, "the failed delivery to webhook:ci", func() bool {
		var eps []api.NotifyEndpoint
		s.call("GET", "/api/ops/notify", "ops", "", 200, &eps)
		for _, e := range eps {
			for _, d := range e.Deliveries {
				if e.Name == "webhook:ci" && d.Status == "failed" {
					failed = d.ID
					return true
				}
			}
		}
		return false
	})
	b := newBrowser(t, 1280, 900)
	b.do("sign in as alice", chromedp.Navigate(s.URL+"/"), chromedp.Evaluate[chromedp.Void](`document.cookie = 'bindery_user=alice; Path=/'`))
	b.do("open settings", chromedp.Navigate(s.URL+"/settings"))
	b.waitFor("the choices", `document.querySelectorAll('#email-prefs input[type=checkbox]').length === 13`, 20*time.Second)
	if got := evalJS[int](b, `document.querySelectorAll('#email-prefs input:checked').length`); got != 8 {
		t.Fatalf("%d defaults checked, want 8", got)
	}
	b.click(`#ev-request\.accepted`)
	b.click(`#email-prefs button[type=submit]`)
	b.waitFor("saved", `[...document.querySelectorAll('.notice')].some((n) => n.innerText.includes('Saved: you are emailed about 9'))`, 10*time.Second)

	b.do("open the validated request", chromedp.Navigate(s.URL+"/requests/"+done))
	b.waitFor("what was sent", `document.querySelector('#sent [data-sent="request.in_effect"]')`, 20*time.Second)
	if txt := evalJS[string](b, `document.querySelector('#sent li').innerText`); !strings.Contains(txt, "emailed you at") || !strings.Contains(txt, "in effect") {
		t.Fatalf("sent line %q", txt)
	}

	b.do("open the mailbox", chromedp.Navigate(s.URL+"/mailbox"))
	b.waitFor("an email and a webhook", `document.querySelector('[data-email]') && document.querySelector('[data-webhook] .tone-ok')`, 20*time.Second)

	b.do("sign in as ops", chromedp.Evaluate[chromedp.Void](`document.cookie = 'bindery_user=ops; Path=/'`), chromedp.Navigate(s.URL+"/ops"))
	resend := `#notify [data-endpoint="webhook:ci"] [data-resend="` + itoa(failed) + `"]`
	// A 410 disables the receiver: Send again is offered once it is enabled, not before.
	b.waitFor("the disabled receiver with its failed delivery", `document.querySelector('#notify [data-endpoint="webhook:ci"] [data-resend-after-enable]')`, 20*time.Second)
	b.click(`[data-enable="webhook:ci"]`)
	b.waitFor("the receiver with its failed delivery", `document.querySelector('`+resend+`')`, 20*time.Second)
	b.click(resend)
	b.waitFor("sent again", `[...document.querySelectorAll('.notice')].some((n) => n.innerText.includes('sent again'))`, 10*time.Second)
}
