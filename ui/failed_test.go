//go:build e2e

package ui_test

import (
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// A request whose pipeline keeps failing, in the real demo: its flaky retry is no secret (the
// timeline shows both runs), the failure's sentence names its pipeline as a link on the words
// "pipeline N" — no raw address that breaks mid-word on a phone, no word broken at all — and the
// ops console's projects at a glance show the project whose request just failed.
func TestAFailedRequestSaysSoInWordsOnAPhoneAndAtAGlance(t *testing.T) {
	t.Parallel()
	url, configPath := bootDemoAt(t)
	editDemoConfig(t, url, configPath, "    pipelineDuration: 10s\n    rebaseDuration: 3s\n    pipelineFailRate: 0\n",
		"    pipelineDuration: 1s\n    rebaseDuration: 3s\n    pipelineFailRate: 1\n", `"key":"sim.gitlab.pipelineFailRate","effective":"1"`)
	op := demoApply(t, url, "alice", "payments-db-readonly", "quarterly revenue report")
	demoDecide(t, url, op, "APPROVED")
	demoWaitFor(t, url, op, `"withdrawable":true`)

	_, view := demoCall(t, "GET", url+"/api/requests/"+op, "alice", "")
	if n := strings.Count(view, `"name":"CREATE_STARTED"`); n != 2 || !strings.Contains(view, "failed; trying it once more on the same commit (flaky retry 1 of 1)") {
		t.Errorf("the timeline shows %d runs of the pipeline, want both, the second told as a flaky retry: %s", n, view)
	}

	phone := newBrowser(t, 390, 844)
	phone.do("open the failed request as alice", chromedp.Navigate(url+"/"), chromedp.Evaluate[chromedp.Void](`document.cookie = 'bindery_user=alice; Path=/'`),
		chromedp.Navigate(url+"/requests/"+op))
	phone.waitFor("the failure's sentence", `document.querySelector('#next-action-text a.external')`, 20*time.Second)
	sentence := evalJS[string](phone, `document.querySelector('#next-action-text').innerText`)
	links := evalJS[[]string](phone, `[...document.querySelectorAll('#next-action-text a.external')].map((a) => a.innerText)`)
	if strings.Contains(sentence, "http") || len(links) == 0 || !strings.HasPrefix(links[len(links)-1], "pipeline ") {
		t.Errorf("the failure's sentence %q, its links %q: want the pipeline linked on its words", sentence, links)
	}
	// No word of the sentence is split over two lines.
	if broken := evalJS[[]string](phone, `(() => {
		const el = document.querySelector('#next-action-text'), out = [];
		const walk = document.createTreeWalker(el, NodeFilter.SHOW_TEXT);
		for (let n; (n = walk.nextNode());) {
			for (const m of n.data.matchAll(/\S+/g)) {
				const r = document.createRange();
				r.setStart(n, m.index);
				r.setEnd(n, m.index + m[0].length);
				const lines = new Set([...r.getClientRects()].filter((x) => x.width > 0).map((x) => Math.round(x.top)));
				if (lines.size > 1) out.push(m[0]);
			}
		}
		return out;
	})()`); len(broken) > 0 {
		t.Errorf("words broken over two lines at 390 px: %q", broken)
	}

	b := newBrowser(t, 1280, 900)
	openOpsConsole(b, url)
	b.waitFor("the project whose request failed, at a glance", `document.querySelector('#projects [data-glance="infra/access-config"] [data-glance-failed]')`, 30*time.Second)
	if first := evalJS[string](b, `document.querySelector('#projects [data-glance]').dataset.glance`); first != "infra/access-config" {
		t.Errorf("the first project at a glance is %s, want the one whose request failed", first)
	}
}
