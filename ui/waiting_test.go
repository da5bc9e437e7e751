//go:build e2e

package ui_test

import (
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"bindery/api"
)

// A merge held for a person is one story: the request page's badge names the blocker, its text
// and "Why is it waiting?" say who must act and where with a link to the merge request; the ops
// console's stuck list tells the same and offers the merge request and settling, not Retry; a
// request behind the blocked batch says since when and why, and is not "next" in line.
func TestABlockedMergeIsOneStoryOnThePageAndInTheOpsConsole(t *testing.T) {
	t.Parallel()
	s := startSite(t)
	blockedOp := s.blockedMerge("alice", "payments-db-readonly", "on-call rotation", "discussions_not_resolved")
	// Approved after its project's batch was BLOCKED: first in the waiting set, held behind it.
	behindOp := s.queued("alice", "payments-db-admin", "release on-call")
	batch := s.batchOf(blockedOp)
	if batch.Blocker == nil || batch.MR == nil {
		t.Fatalf("the blocked batch tells no blocker: %+v", batch)
	}
	story := batch.Blocker.Text
	if !strings.HasPrefix(story, "merge request !"+itoa(batch.MR.ID)+" has an unresolved discussion: a maintainer of infra/access-config must resolve it in GitLab; bindery merges within") {
		t.Fatalf("the blocked batch's story: %q", story)
	}
	b := newBrowser(t, 1280, 900)
	signInAs(b, s.URL, "alice")

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
	if !evalJS[bool](b, `!!document.querySelector('#blocker a.external[href$="/-/merge_requests/`+itoa(batch.MR.ID)+`"]')`) {
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
	if !evalJS[bool](b, `!!document.querySelector('`+row+` a.external[href$="/-/merge_requests/`+itoa(batch.MR.ID)+`"]') && !!document.querySelector('`+row+` [data-stuck-settle="`+itoa(batch.ID)+`"]') && !document.querySelector('`+row+` [data-retry]')`) {
		t.Errorf("stuck list row offers the wrong actions: %s", evalJS[string](b, `document.querySelector('`+row+`').innerHTML`))
	}
	b.waitFor("the blocked batch", `document.querySelector('[data-batch-blocker="`+itoa(batch.ID)+`"]')`, 20*time.Second)
	if got := evalJS[string](b, `document.querySelector('[data-batch-blocker="`+itoa(batch.ID)+`"]').innerText`); got != story {
		t.Errorf("batch list: %q", got)
	}
	// Settling from the stuck list settles the batch (again after "look again in a moment" when
	// the batch's own step ran at the click).
	b.do("settle from the stuck list", chromedp.Evaluate[chromedp.Void](`window.confirm = () => true`))
	b.clickUntil("the batch settled", row+` [data-stuck-settle]`, `[...document.querySelectorAll('.notice')].some(n => n.innerText.includes('Batch #`+itoa(batch.ID)+` settled'))`, 20*time.Second)
}

// A request the batch round holds for more requests says until when; a request awaiting its
// approval says how long approvals of its target usually take, and not when bindery next looks.
func TestWaitingSaysUntilWhenAndHowLongApprovalsTake(t *testing.T) {
	t.Parallel()
	// A round holds what waits for more requests to share a pipeline, up to batch.maxWait.
	s := startSite(t, set("batch.maxWait", "7m"))
	held := s.queued("alice", "payments-db-readonly", "on-call rotation")
	s.round()
	v := s.waitRequest(held, held+" held for more requests", func(v api.RequestView) bool { return v.Waiting != nil && v.Waiting.HeldUntil != nil })
	until := *v.Waiting.HeldUntil
	// Approvals of grafana-editor decided before: what its usual approval time stands on.
	for _, who := range []string{"carol@example.com", "dave@example.com", "erin@example.com"} {
		s.decide(s.apply(who, "grafana-editor", "dashboards"), "APPROVED", "", "")
	}
	approving := s.apply("alice", "grafana-editor", "dashboards")
	b := newBrowser(t, 1280, 900)
	signInAs(b, s.URL, "alice")

	stageView(t, b, s.URL, held)
	// The server's "08:15 UTC", as the page shows every time: in the reader's locale and zone.
	clock := evalJS[string](b, `new Date(`+jsString(until.UTC().Format(time.RFC3339))+`).toLocaleTimeString([], {hour: '2-digit', minute: '2-digit', timeZoneName: 'short'})`)
	if next := evalJS[string](b, `document.querySelector('#next-action-text').innerText`); !strings.Contains(next, "waits until "+clock+" for more requests to share a pipeline") {
		t.Errorf("held: %q", next)
	}
	if !evalJS[bool](b, `!!document.querySelector('#held-until time[datetime]')`) {
		t.Errorf("held: no time it is batched by:\n%s", evalJS[string](b, `document.querySelector('#waiting').innerText`))
	}

	stageView(t, b, s.URL, approving)
	w := evalJS[string](b, `document.querySelector('#waiting').innerText`)
	if got := evalJS[string](b, `document.querySelector('#approval-takes').innerText`); !regexp.MustCompile(`^approvals of this target usually take about \d+ s \(median of the last 3\)$`).MatchString(got) {
		t.Errorf("approval: %q", got)
	}
	if strings.Contains(w, "looks again") {
		t.Errorf("approval: the next look is shown as a wait:\n%s", w)
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
