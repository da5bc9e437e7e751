//go:build e2e

package ui_test

import (
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// stageView opens a request and returns the stage track's state per stage ("approval:done …"),
// the badge and the page's text.
func stageView(t *testing.T, b *browser, base, op string) (track, badge, text string) {
	t.Helper()
	b.do("open the request", chromedp.Navigate(base+"/requests/"+op))
	b.waitFor("the stage view", `document.querySelector('#stage-track li')`, 20*time.Second)
	track = evalJS[string](b, `[...document.querySelectorAll('#stage-track li')].map(li => li.dataset.stage + ':' + li.className).join(' ')`)
	badge = evalJS[string](b, `document.querySelector('[data-stage-badge]').innerText`)
	return track, badge, evalJS[string](b, `document.querySelector('main').innerText`)
}

// Each stage of the way is shown as the server's stage says: CI with its pipeline link and live
// duration, a finished failure as finished (no waiting card, no running bar) with the failing
// pipeline and the bisection, a removal as Removing and then Removed — never "without effect".
func TestTheStageViewShowsWhereEachRequestIs(t *testing.T) {
	t.Parallel()
	s := startSite(t, withTargets(readwriteTarget), culpritSettings[0])
	// In an order where no batch round takes a request another state needs waiting: a round takes
	// every request waiting, and a car behind a hung one does not merge.
	failedOp, _ := s.failedInCI("alice", "payments-db-admin", "bob", "payments-db-readonly")
	revoked := s.revoked("alice", "payments-db-readwrite", revokeDeployed)
	inCI := s.inCI("alice", "grafana-editor", "on-call rotation")
	revoking := s.revoked("alice", "payments-db-readonly", revokeQueued)
	ci, failed := s.request(inCI), s.request(failedOp)
	if failed.FailedJob == nil || failed.Pipeline == nil || failed.Ticket == nil || ci.Pipeline == nil {
		t.Fatalf("the failed request names no job or pipeline, or the request in CI no pipeline:\n%+v\n%+v", failed, ci)
	}
	b := newBrowser(t, 1280, 900)
	signInAs(b, s.URL, "alice")

	track, badge, text := stageView(t, b, s.URL, inCI)
	if want := "approval:done batch:done ci:current merge:todo deploy:todo effect:todo"; track != want {
		t.Errorf("in CI: track %q, want %q", track, want)
	}
	if badge != "Merge request opened, pipeline running" {
		t.Errorf("in CI: badge %q", badge)
	}
	if !evalJS[bool](b, `!!document.querySelector('#stage-track li.current a.external[href$="/-/pipelines/`+itoa(ci.Pipeline.ID)+`"]')`) {
		t.Errorf("in CI: the current stage does not link the pipeline:\n%s", text)
	}
	if !strings.Contains(evalJS[string](b, `document.querySelector('#stage-track li.current').innerText`), "so far") {
		t.Error("in CI: the current stage shows no live duration")
	}
	b.screenshot("request-ci-laptop.png")

	track, badge, text = stageView(t, b, s.URL, failedOp)
	if want := "approval:done batch:done ci:failed merge:todo deploy:todo effect:todo"; track != want {
		t.Errorf("failed: track %q, want %q", track, want)
	}
	if badge != "Pipeline failed" {
		t.Errorf("failed: badge %q", badge)
	}
	if evalJS[bool](b, `!!document.querySelector('#waiting') || !!document.querySelector('.bar.running')`) || strings.Contains(text, "so far") {
		t.Errorf("a finished failure is shown as still waiting or running:\n%s", text)
	}
	if !evalJS[bool](b, `!!document.querySelector('#failure a.external[href$="/-/pipelines/`+itoa(failed.Pipeline.ID)+`"]')`) {
		t.Errorf("the failure card does not link the pipeline that failed:\n%s", text)
	}
	if !evalJS[bool](b, `!!document.querySelector('#failed-job a.external[href$="/-/jobs/`+itoa(failed.FailedJob.ID)+`"]')`) {
		t.Errorf("the failure card does not link the job that failed:\n%s", text)
	}
	if !evalJS[bool](b, `[...document.querySelectorAll('#status-card a.external')].some(a => a.href === `+jsString(failed.Ticket.URL)+` && a.innerText.includes('Approval ticket '+`+jsString(failed.Ticket.ID)+`))`) {
		t.Errorf("the approval ticket is not a link:\n%s", text)
	}
	if !strings.Contains(evalJS[string](b, `document.querySelector('#failure').innerText`), "isolated this request as the change that fails, after 1 bisection") {
		t.Errorf("the failure card does not say what the bisection did:\n%s", text)
	}
	if !evalJS[bool](b, `!!document.querySelector('#timeline a.external[href*="/-/pipelines/"]')`) {
		t.Error("a pipeline address in the timeline is plain text")
	}
	for _, internal := range []string{"Create started", "Handle merged", "Called back", "CREATE_STARTED\n"} {
		if strings.Contains(text, internal) {
			t.Errorf("the page names a step by its internal name %q", internal)
		}
	}
	if !strings.Contains(text, "Merge request opened, pipeline running") {
		t.Errorf("the timeline lacks the plain step words:\n%s", text)
	}
	b.screenshot("request-failed-laptop.png")

	track, badge, _ = stageView(t, b, s.URL, revoking)
	if want := "approval:done batch:done ci:done merge:done deploy:done effect:done close:current revoked:todo"; track != want {
		t.Errorf("revoking: track %q, want %q", track, want)
	}
	if badge != "Revoking: the file is being removed" {
		t.Errorf("revoking: badge %q", badge)
	}

	track, badge, text = stageView(t, b, s.URL, revoked)
	if !strings.HasSuffix(track, "close:done revoked:done current") || badge != "Removed: the removal is deployed" {
		t.Errorf("revoked: track %q, badge %q", track, badge)
	}
	if strings.Contains(text, "without effect") {
		t.Errorf("a revoked binding is called finished without effect:\n%s", text)
	}

	// On a phone every stage view fits the width (long notes and addresses wrap).
	phone := newBrowser(t, 390, 844)
	phone.do("size the viewport", chromedp.EmulateViewport(390, 844))
	signInAs(phone, s.URL, "alice")
	for _, op := range []string{inCI, failedOp, revoking, revoked} {
		stageView(t, phone, s.URL, op)
		if !evalJS[bool](phone, `document.documentElement.scrollWidth <= innerWidth`) {
			t.Errorf("request %s at 390px scrolls sideways: %dpx wide", op, evalJS[int](phone, `document.documentElement.scrollWidth`))
		}
		if op == failedOp {
			phone.screenshot("request-failed-phone.png")
		}
	}
}
