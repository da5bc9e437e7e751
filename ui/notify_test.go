package ui_test

import (
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// A person chooses their emails on the settings page; a request in effect says what was sent
// about it; the demo's mailbox shows the email and the verified webhook; the ops console lists
// each receiver with its last attempts and sends a failed delivery again.
func TestSettingsMailboxAndWhatWasSent(t *testing.T) {
	t.Parallel()
	fake := newFakeAPI()
	seedHistory(fake)
	s := startSite(t, fake)
	b := newBrowser(t, 1280, 900)
	b.do("sign in as alice", chromedp.Navigate(s.URL+"/"), chromedp.Evaluate[chromedp.Void](`document.cookie = 'bindery_user=alice; Path=/'`))
	b.do("open settings", chromedp.Navigate(s.URL+"/settings"))
	b.waitFor("the choices", `document.querySelectorAll('#email-prefs input[type=checkbox]').length === 9`, 20*time.Second)
	if got := evalJS[int](b, `document.querySelectorAll('#email-prefs input:checked').length`); got != 4 {
		t.Fatalf("%d defaults checked, want 4", got)
	}
	b.click(`#ev-request\.accepted`)
	b.click(`#email-prefs button[type=submit]`)
	b.waitFor("saved", `[...document.querySelectorAll('.notice')].some((n) => n.innerText.includes('Saved: you are emailed about 5'))`, 10*time.Second)

	b.do("open the validated request", chromedp.Navigate(s.URL+"/requests/0b7e6a10-2f44-4c55-8e61-222222222222"))
	b.waitFor("what was sent", `document.querySelector('#sent [data-sent="request.in_effect"]')`, 20*time.Second)
	if txt := evalJS[string](b, `document.querySelector('#sent li').innerText`); !strings.Contains(txt, "emailed you at") || !strings.Contains(txt, "in effect") {
		t.Fatalf("sent line %q", txt)
	}

	b.do("open the mailbox", chromedp.Navigate(s.URL+"/mailbox"))
	b.waitFor("an email and a webhook", `document.querySelector('[data-email]') && document.querySelector('[data-webhook] .tone-ok')`, 20*time.Second)

	b.do("sign in as ops", chromedp.Evaluate[chromedp.Void](`document.cookie = 'bindery_user=ops; Path=/'`), chromedp.Navigate(s.URL+"/ops"))
	b.waitFor("the failing receiver with its failed delivery", `document.querySelector('#notify [data-endpoint="webhook:ci"] [data-resend="7"]')`, 20*time.Second)
	b.click(`#notify [data-resend="7"]`)
	b.waitFor("sent again", `[...document.querySelectorAll('.notice')].some((n) => n.innerText.includes('sent again'))`, 10*time.Second)
}
