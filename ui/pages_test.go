//go:build e2e

package ui_test

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// history gives alice a finished, a moving and a rejected request, and bob a stuck one — what
// the main pages look like on an ordinary day — with long data a phone must wrap: a reason with an
// unbroken token, in the inbox and the audit log. It returns alice's moving and finished requests.
func (s *site) ordinaryDay() (inFlight, done string) {
	s.t.Helper()
	// In an order where no batch round takes a request another state needs waiting.
	done = s.validated("alice", "grafana-editor", "edit the on-call dashboards")
	s.decide(s.apply("alice", "payments-db-admin", "schema migration"), "REJECTED", "", "")
	s.stuck("bob", "payments-db-readonly", "on-call rotation")
	inFlight = s.queued("alice", "payments-db-readonly", longReason)
	for _, path := range []string{"/api/ops/trains/pause", "/api/ops/trains/resume"} {
		body, _ := json.Marshal(map[string]string{"operationId": s.opID(), "project": "infra/observability-config", "reason": longReason})
		s.call("POST", path, "ops", string(body), 200, nil)
	}
	s.refusedEdit() // the ops console's configuration error
	return inFlight, done
}

// longReason has a token no line break fits: a ticket number pasted with its whole URL.
const longReason = "quarterly revenue report for finance, see https://tickets.example.com/browse/FIN-20391?focusedCommentId=1234567890123&page=com.atlassian.jira.plugin.system.issuetabpanels"

// TestPagesReadWellOnALaptopAndAPhone opens every main page at laptop and phone widths and
// checks that nothing needs sideways scrolling; with -screenshots it also writes the pictures
// the README shows.
func TestPagesReadWellOnALaptopAndAPhone(t *testing.T) {
	t.Parallel()
	s := startSite(t)
	inFlight, done := s.ordinaryDay()
	tourPages(t, pageTour{url: s.URL, ready: 20 * time.Second, waiting: inFlight, validated: done,
		opsReady: `document.querySelector('#stage-latency li') && document.querySelector('#config-error') && document.querySelector('#batches [data-batch-id]')`})
}

// pageTour is a site to walk through the main pages of: its URL, how long a page may take to
// be ready, a request still waiting and a VALIDATED one (operationIds; alice has three
// requests), and what the ops console shows once it is ready.
type pageTour struct {
	url                string
	ready              time.Duration
	waiting, validated string
	opsReady           string
}

// screenSizes are the screens the pages must read well on: a laptop and a phone.
var screenSizes = []struct {
	name          string
	width, height int
}{{"laptop", 1280, 900}, {"phone", 390, 844}}

// tourPages opens every main page at laptop and phone widths, as alice and then as ops, and
// checks that nothing needs sideways scrolling; with -screenshots it writes the pictures the
// README shows (every page at laptop width, the request page at both).
func tourPages(t *testing.T, p pageTour) {
	t.Helper()
	for _, size := range screenSizes {
		t.Run(size.name, func(t *testing.T) {
			b := newBrowser(t, size.width, size.height)
			// Headless windows have a minimum width; the viewport is what a phone has.
			b.do("size the viewport", chromedp.EmulateViewport(int64(size.width), int64(size.height)))
			page := func(name, path, ready string, prepare func()) {
				t.Helper()
				b.do("open "+path, chromedp.Navigate(p.url+path))
				b.waitFor(name+" ready", ready, p.ready)
				if prepare != nil {
					prepare()
				}
				if !evalJS[bool](b, `document.documentElement.scrollWidth <= innerWidth`) {
					t.Errorf("%s at %dpx scrolls sideways: %dpx wide", name, size.width, evalJS[int](b, `document.documentElement.scrollWidth`))
				}
				if broken := evalJS[[]string](b, wordsBrokenInTables); len(broken) > 0 {
					t.Errorf("%s at %dpx: table cells break inside words: %q", name, size.width, broken)
				}
				if share := evalJS[float64](b, `document.querySelector('header.top').offsetHeight / innerHeight`); share > 0.15 {
					t.Errorf("%s at %dpx: the header takes %.0f%% of the first screen", name, size.width, 100*share)
				}
				if size.name == "laptop" || name == "request" {
					b.screenshot(fmt.Sprintf("%s-%s.png", name, size.name)) // the README's pictures
				}
			}
			b.do("sign in as alice", chromedp.Navigate(p.url+"/"), chromedp.Evaluate[chromedp.Void](`document.cookie = 'bindery_user=alice; Path=/'`))
			page("apply", "/", `document.querySelector('#apply-form')`, func() {
				// alice's targets may all be taken already (in effect, on its way, not hers):
				// the form then says so on each; otherwise the first free one is previewed.
				if !evalJS[bool](b, `!!document.querySelector('input[name=target]:not(:disabled)')`) {
					return
				}
				b.click("input[name=target]:not(:disabled)")
				b.waitFor("preview", `document.querySelector('.preview pre.file')`, 10*time.Second)
				b.do("type a reason", chromedp.SendKeys(chromedp.CSS("#reason"), "quarterly revenue report"))
			})
			page("my-requests", "/requests", `document.querySelectorAll('tr[data-operation-id]').length === 3`, nil)
			page("request", "/requests/"+p.waiting, `document.querySelector('#waiting')`, nil)
			page("request-validated", "/requests/"+p.validated, `document.querySelector('#status-card [data-status="VALIDATED"]')`, nil)
			page("inbox", "/inbox", `document.querySelector('[data-ticket]')`, nil)
			page("settings", "/settings", `document.querySelector('#email-prefs input[type=checkbox]')`, nil)
			page("mailbox", "/mailbox", `[...document.querySelectorAll('main h2')].some((h) => h.textContent.startsWith('Webhooks'))`, nil)
			b.do("sign in as ops", chromedp.Evaluate[chromedp.Void](`document.cookie = 'bindery_user=ops; Path=/'`))
			page("ops", "/ops", p.opsReady, nil)
		})
	}
}

// wordsBrokenInTables lists the words of the page's table cells (buttons included) that the
// browser laid out on more than one line other than after a hyphen, a slash or a URL's ? and &
// ("Retr / y", "bob@examp / le.com"): each character's rendered box is measured, and a word is broken where
// one starts a new line. Text not rendered (a closed <details>) has no box and is not measured.
const wordsBrokenInTables = `(() => {
  const broken = [];
  for (const cell of document.querySelectorAll('main table td, main table th')) {
    const walk = document.createTreeWalker(cell, NodeFilter.SHOW_TEXT);
    for (let n = walk.nextNode(); n; n = walk.nextNode()) {
      for (const m of n.data.matchAll(/\S+/g)) {
        let top = null;
        for (let i = m.index; i < m.index + m[0].length; i++) {
          const r = document.createRange();
          r.setStart(n, i);
          r.setEnd(n, i + 1);
          const box = r.getClientRects()[0];
          if (!box || !box.height) continue;
          if (top !== null && box.top > top + box.height / 2 && !/[-\/?&]/.test(n.data[i - 1])) {
            broken.push(n.data.slice(m.index, i) + ' / ' + n.data.slice(i, m.index + m[0].length));
            break;
          }
          top = box.top;
        }
      }
    }
  }
  return broken;
})()`
