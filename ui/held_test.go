//go:build e2e

package ui_test

import (
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// "My requests" tells a held request what its request page tells, in the real demo: a request
// whose merge waits for a person (an unresolved discussion, sim.gitlab.mergeBlocker), one waiting
// behind that blocked batch, and one in a queue an operator paused. Each row of the list says the
// page's sentence — who must act or who paused it, why, since when — with the page's label, never
// "Nothing to do".
func TestMyRequestsSaysWhatEachHeldRequestsPageSays(t *testing.T) {
	t.Parallel()
	url, configPath := bootDemoAt(t)
	editDemoConfig(t, url, configPath, "    pipelineDuration: 10s\n", "    pipelineDuration: 1s\n    mergeBlocker: discussions_not_resolved\n", "discussions_not_resolved")

	blocked := demoApply(t, url, "alice", "payments-db-readonly", "quarterly revenue report")
	demoDecide(t, url, blocked, "APPROVED")
	demoWaitFor(t, url, blocked, `"name":"HANDLE_MR_BLOCKED"`)
	behind := demoApply(t, url, "alice", "payments-db-admin", "schema migration for the ledger")
	demoDecide(t, url, behind, "APPROVED")
	// Behind the blocked car, its own car goes on until its turn: approved by the reviewer bots
	// (HANDLE_APPROVED), then it rests. Compared before that, the list and the page could be read
	// on either side of the approval.
	demoWaitFor(t, url, behind, `"name":"HANDLE_APPROVED"`)
	demoWaitFor(t, url, behind, `"behind":true`)
	if code, text := demoCall(t, "POST", url+"/api/ops/trains/pause", "ops",
		`{"operationId":"pause-observability","project":"infra/observability-config","reason":"release freeze until 18:00"}`); code != 200 {
		t.Fatalf("pause: %d %s", code, text)
	}
	paused := demoApply(t, url, "alice", "grafana-editor", "dashboards for the incident review")
	demoDecide(t, url, paused, "APPROVED")
	demoWaitFor(t, url, paused, "release freeze until 18:00")

	b := newBrowser(t, 1280, 900)
	b.do("sign in as alice", chromedp.Navigate(url+"/"), chromedp.Evaluate[chromedp.Void](`document.cookie = 'bindery_user=alice; Path=/'`))
	type told struct{ label, text string }
	page := map[string]told{}
	for _, op := range []string{blocked, behind, paused} {
		b.do("open "+op, chromedp.Navigate(url+"/requests/"+op))
		b.waitFor("its page's sentence", `document.querySelector('#next-action-text') && document.querySelector('#next-action-text').innerText.startsWith('Your request waits')`, 20*time.Second)
		page[op] = told{evalJS[string](b, `document.querySelector('#state-badge').dataset.state`), evalJS[string](b, `document.querySelector('#next-action-text').innerText`)}
		// One time format on the page: the clock in the reader's locale, no second format with
		// seconds beside the sentences' times.
		if secs := evalJS[string](b, `(document.querySelector('main').innerText.match(/\d{1,2}:\d{2}:\d{2}/) || [''])[0]`); secs != "" {
			t.Errorf("%s's page shows a time with seconds (%s) beside its sentences' clock", op, secs)
		}
	}
	b.do("open my requests", chromedp.Navigate(url+"/requests"))
	b.waitFor("the three requests", `document.querySelectorAll('tr[data-operation-id]').length === 3`, 20*time.Second)
	for op, want := range page {
		row := `document.querySelector('tr[data-operation-id=` + jsString(op) + `]')`
		label := evalJS[string](b, row+`.querySelector('[data-state]').dataset.state`)
		next := evalJS[string](b, row+`.querySelector('td[data-label=Next]').innerText`)
		if label != want.label || !strings.Contains(next, want.text) || strings.Contains(next, "Nothing to do") {
			t.Errorf("%s: the list says %q / %q; its page %q / %q", op, label, next, want.label, want.text)
		}
	}
	if next := evalJS[string](b, `document.querySelector('tr[data-operation-id=`+jsString(paused)+`] td[data-label=Next]').innerText`); !strings.Contains(next, "paused by ops@example.com: release freeze until 18:00 (since ") {
		t.Errorf("the paused request's row does not say who paused it, why and since when: %q", next)
	}
}

// demoWaitFor waits until op's view (as an operator reads it) holds want.
func demoWaitFor(t *testing.T, url, op, want string) {
	t.Helper()
	demoWaitAPI(t, url+"/api/requests/"+op, want)
}
