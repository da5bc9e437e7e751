package ui_test

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// A merge held for a person is one story: the request page's badge names the blocker, its text
// and "Why is it waiting?" say who must act and where with a link to the merge request; the ops
// console's stuck list tells the same and offers the merge request and settling, not Retry; a
// request behind the blocked batch says since when and why, and is not "next" in line.
func TestABlockedMergeIsOneStoryOnThePageAndInTheOpsConsole(t *testing.T) {
	t.Parallel()
	fake := newFakeAPI()
	const blockedOp, behindOp = "5f0c3a52-7d1e-4a8b-9c2d-bbbbbbbbbbb1", "5f0c3a52-7d1e-4a8b-9c2d-bbbbbbbbbbb2"
	batch := fake.seedBlockedMerge(blockedOp, "alice@example.com", "payments-db-readonly", time.Now().Add(-40*time.Minute))
	fake.seedBehindBlocked(behindOp, "alice@example.com", "payments-db-admin", time.Now().Add(-10*time.Minute), batch)
	story := batch.Blocker.Text
	if !strings.HasPrefix(story, "merge request !64 has an unresolved discussion: a maintainer of infra/access-config must resolve it in GitLab; bindery merges within a minute after") {
		t.Fatalf("the seeded story: %q", story)
	}
	s := startSite(t, fake)
	b := newBrowser(t, 1280, 900)

	_, badge, text := stageView(t, b, s.URL, blockedOp)
	if badge != "Merge blocked: unresolved discussion" {
		t.Errorf("blocked: badge %q", badge)
	}
	if next := evalJS[string](b, `document.querySelector('#next-action-text').innerText`); !strings.Contains(next, story) {
		t.Errorf("blocked: the status text does not tell the story: %q", next)
	}
	if w := evalJS[string](b, `document.querySelector('#waiting').innerText`); !strings.Contains(w, story) {
		t.Errorf("blocked: the waiting card does not tell the story:\n%s", w)
	}
	if !evalJS[bool](b, `!!document.querySelector('#blocker a.external[href$="/-/merge_requests/64"]')`) {
		t.Errorf("blocked: no link to the merge request to act on:\n%s", text)
	}
	for _, not := range []string{"waiting for an operator", "Operators will retry", "nothing to do"} {
		if strings.Contains(text, not) {
			t.Errorf("blocked: the page says %q:\n%s", not, text)
		}
	}
	b.screenshot("request-blocked-laptop.png")

	_, badge, text = stageView(t, b, s.URL, behindOp)
	if !strings.HasSuffix(badge, ": behind blocked batch #"+itoa(batch.ID)) {
		t.Errorf("behind: badge %q", badge)
	}
	if next := evalJS[string](b, `document.querySelector('#next-action-text').innerText`); !strings.HasPrefix(next, "Your request waits behind blocked batch "+itoa(batch.ID)+" since ") || !strings.Contains(next, story) {
		t.Errorf("behind: the status text: %q", next)
	}
	place := evalJS[string](b, `document.querySelector('#place').innerText`)
	if strings.Contains(place, "next") || !strings.Contains(place, "held behind blocked batch #"+itoa(batch.ID)) {
		t.Errorf("behind: place in line %q", place)
	}
	if strings.Contains(text, "nothing to do") {
		t.Errorf("behind: the page says nothing to do:\n%s", text)
	}
	b.screenshot("request-behind-blocked-laptop.png")

	openOpsConsole(b, s.URL)
	row := `#stuck tr[data-operation-id="` + blockedOp + `"]`
	b.waitFor("the blocked request in the stuck list", `document.querySelector('`+row+` [data-blocker]')`, 20*time.Second)
	if got := evalJS[string](b, `document.querySelector('`+row+`').innerText`); !strings.Contains(got, story) || !strings.Contains(got, "Merge blocked: unresolved discussion") || strings.Contains(got, "Retry") {
		t.Errorf("stuck list row: %q", got)
	}
	if !evalJS[bool](b, `!!document.querySelector('`+row+` a.external[href$="/-/merge_requests/64"]') && !!document.querySelector('`+row+` [data-stuck-settle="`+itoa(batch.ID)+`"]') && !document.querySelector('`+row+` [data-retry]')`) {
		t.Errorf("stuck list row offers the wrong actions: %s", evalJS[string](b, `document.querySelector('`+row+`').innerHTML`))
	}
	b.waitFor("the blocked batch", `document.querySelector('[data-batch-blocker="`+itoa(batch.ID)+`"]')`, 20*time.Second)
	if got := evalJS[string](b, `document.querySelector('[data-batch-blocker="`+itoa(batch.ID)+`"]').innerText`); got != story {
		t.Errorf("batch list: %q", got)
	}
	// Settling from the stuck list settles the batch.
	b.do("settle from the stuck list", chromedp.Evaluate[chromedp.Void](`window.confirm = () => true`))
	b.click(row + ` [data-stuck-settle]`)
	b.waitFor("the batch settled", `[...document.querySelectorAll('.notice')].some(n => n.innerText.includes('Batch #`+itoa(batch.ID)+` settled'))`, 20*time.Second)
}

// A request the batch round holds for more requests says until when; a request awaiting its
// approval says how long approvals of its target usually take, and not when bindery next looks.
func TestWaitingSaysUntilWhenAndHowLongApprovalsTake(t *testing.T) {
	t.Parallel()
	fake := newFakeAPI()
	const held, approving = "5f0c3a52-7d1e-4a8b-9c2d-bbbbbbbbbbb3", "5f0c3a52-7d1e-4a8b-9c2d-bbbbbbbbbbb4"
	until := time.Now().Add(7 * time.Minute)
	fake.seedHeld(held, "alice@example.com", "payments-db-readonly", time.Now().Add(-3*time.Minute), until)
	fake.mu.Lock()
	t0, _ := fake.cfg.Target("grafana-editor")
	fake.add(approving, "alice@example.com", t0, "dashboards", time.Now().Add(-time.Hour))
	fake.mu.Unlock()
	s := startSite(t, fake)
	b := newBrowser(t, 1280, 900)

	stageView(t, b, s.URL, held)
	clock := until.UTC().Format("15:04") + " UTC"
	if next := evalJS[string](b, `document.querySelector('#next-action-text').innerText`); !strings.Contains(next, "waits until "+clock+" for more requests to share a pipeline") {
		t.Errorf("held: %q", next)
	}
	if !evalJS[bool](b, `!!document.querySelector('#held-until time[datetime]')`) {
		t.Errorf("held: no time it is batched by:\n%s", evalJS[string](b, `document.querySelector('#waiting').innerText`))
	}

	stageView(t, b, s.URL, approving)
	w := evalJS[string](b, `document.querySelector('#waiting').innerText`)
	if got := evalJS[string](b, `document.querySelector('#approval-takes').innerText`); got != "approvals of this target usually take about 2 h (median of the last 20)" {
		t.Errorf("approval: %q", got)
	}
	if strings.Contains(w, "looks again") {
		t.Errorf("approval: the next look is shown as a wait:\n%s", w)
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
