package ui_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"bindery/api"
	"bindery/internal/vocab/state"
)

// seedHistory gives alice a finished, a moving and a rejected request, and bob a stuck one:
// what the main pages look like on an ordinary day.
func seedHistory(f *fakeAPI) (inFlight string) {
	now := time.Now()
	f.seedStuck("5f0c3a52-7d1e-4a8b-9c2d-111111111111", "bob@example.com", "payments-db-readonly", now.Add(-3*time.Hour))
	f.mu.Lock()
	defer f.mu.Unlock()

	t, _ := f.cfg.Target("grafana-editor")
	at := now.Add(-26 * time.Hour)
	done := f.add("0b7e6a10-2f44-4c55-8e61-222222222222", "alice@example.com", t, "edit the on-call dashboards", at)
	done.enter("batch", at.Add(18*time.Minute))
	done.move(state.StatusMRCreating, state.StepQueued, at.Add(18*time.Minute))
	f.nextID++
	done.view.BatchID = f.nextID
	f.batches[f.nextID] = &api.BatchView{ID: f.nextID, Partition: t.Project, Status: "SUCCEEDED", CreatedAt: at.Add(20 * time.Minute), UpdatedAt: at.Add(41 * time.Minute),
		MR: &api.Link{ID: 52, URL: "https://gitlab.example.com/infra/observability-config/-/merge_requests/52"}}
	done.view.MR = f.batches[f.nextID].MR
	done.move(state.StatusMRCreating, state.StepBatched, at.Add(20*time.Minute))
	done.enter("ci", at.Add(21*time.Minute))
	done.move(state.StatusMRCreated, state.StepCreateSucceeded, at.Add(33*time.Minute))
	done.enter("merge", at.Add(33*time.Minute))
	done.move(state.StatusMerging, state.StepHandleApproved, at.Add(34*time.Minute))
	done.move(state.StatusMerged, state.StepHandleMerged, at.Add(35*time.Minute))
	done.enter("deploy", at.Add(35*time.Minute))
	done.move(state.StatusValidated, state.StepCalledBack, at.Add(41*time.Minute))
	done.enter("", at.Add(41*time.Minute))
	done.view.Waiting = nil

	t, _ = f.cfg.Target("payments-db-admin")
	at = now.Add(-50 * time.Hour)
	rej := f.add("9a1d2c3b-4e5f-4a6b-8c7d-333333333333", "alice@example.com", t, "schema migration", at)
	rej.enter("", at.Add(3*time.Hour))
	rej.move(state.StatusRejected, state.StepApprovalRejected, at.Add(3*time.Hour))
	rej.view.Waiting = nil

	t, _ = f.cfg.Target("payments-db-readonly")
	at = now.Add(-47 * time.Minute)
	moving := f.add("c4d5e6f7-0a1b-4c2d-9e3f-444444444444", "alice@example.com", t, longReason, at)
	// Long data a phone must wrap: a reason with an unbroken token, in the inbox and the audit log.
	f.tickets = append(f.tickets, &fakeTicket{ID: "T7", OperationID: moving.view.OperationID, Subject: "alice@example.com", TargetKey: t.Key,
		Reason: longReason, Status: "PENDING", CreatedAt: at})
	f.audit = append(f.audit, map[string]any{"at": now.Add(-time.Hour), "actor": "ops@example.com", "action": "request.retry",
		"params": map[string]string{"operationId": moving.view.OperationID, "reason": longReason}, "requestId": "r-0123456789abcdef0123456789abcdef"})
	moving.enter("batch", at.Add(12*time.Minute))
	moving.move(state.StatusMRCreating, state.StepQueued, at.Add(12*time.Minute))
	moving.view.Waiting = &api.Waiting{Stage: "batch", WaitingFor: "the running batch of infra/access-config to finish; the next round takes this request", Since: at.Add(12 * time.Minute), Position: 3, Ahead: 2}
	return moving.view.OperationID
}

// longReason has a token no line break fits: a ticket number pasted with its whole URL.
const longReason = "quarterly revenue report for finance, see https://tickets.example.com/browse/FIN-20391?focusedCommentId=1234567890123&page=com.atlassian.jira.plugin.system.issuetabpanels"

// TestPagesReadWellOnALaptopAndAPhone opens every main page at laptop and phone widths and
// checks that nothing needs sideways scrolling; with -screenshots it also writes the pictures
// the README shows.
func TestPagesReadWellOnALaptopAndAPhone(t *testing.T) {
	fake := newFakeAPI()
	inFlight := seedHistory(fake)
	s := startSite(t, fake)
	tourPages(t, pageTour{url: s.URL, ready: 20 * time.Second, waiting: inFlight, validated: "0b7e6a10-2f44-4c55-8e61-222222222222",
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
