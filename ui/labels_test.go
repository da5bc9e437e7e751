//go:build e2e

package ui_test

import (
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"bindery/internal/vocab/explain"
	"bindery/internal/vocab/state"
)

// rawCode is what a requester never reads: a binding status, a step name, an identifier with an
// underscore.
var rawCode = func() *regexp.Regexp {
	words := []string{`\b[A-Z][A-Z0-9]*(_[A-Z0-9]+)+\b`}
	for _, s := range state.AllStatuses {
		words = append(words, `\b`+string(s)+`\b`)
	}
	for _, s := range state.Steps() {
		words = append(words, `\b`+s.String()+`\b`)
	}
	return regexp.MustCompile(strings.Join(words, "|"))
}()

// A requester reads one label per state: on the request page the badge says the state's label
// (the server's sentence table), the current step of the timeline says the same, the stage
// chip marks the stage the badge belongs to, and the list of requests names each request by the
// same label — with no status or step code anywhere. The same page read by an operator shows
// the raw status and step beside the words.
func TestARequesterReadsOneLabelPerStateAndNoCode(t *testing.T) {
	t.Parallel()
	s := startSite(t, withTargets(readwriteTarget), culpritSettings[0])
	// The ones that need batch rounds first: a round takes every request waiting in its project.
	failed, _ := s.failedInCI("alice", "payments-db-admin", "bob", "payments-db-readonly")
	merged := s.merged("alice", "payments-db-readwrite", "on-call rotation")
	inCI := s.inCI("alice", "grafana-editor", "on-call rotation")
	queued := s.queued("alice", "payments-db-readonly", "on-call rotation")
	b := newBrowser(t, 1280, 900)
	signInAs(b, s.URL, "alice")

	cases := []struct {
		op     string
		status state.BindingStatus
		step   state.Step
		stage  string
	}{
		{queued, state.StatusMRCreating, state.StepQueued, "batch"},
		{inCI, state.StatusMRCreating, state.StepCreateStarted, "ci"},
		{failed, state.StatusCreateFailed, state.StepCreatePipelineFailed, "ci"},
		{merged, state.StatusMerged, state.StepHandleMerged, "deploy"},
	}
	labels := map[string]string{}
	for _, c := range cases {
		want := explain.Sentence(c.status, c.step, state.NextActionFor(c.status, c.step)).Label
		labels[c.op] = want
		b.do("open the request", chromedp.Navigate(s.URL+"/requests/"+c.op))
		b.waitFor("its state", `document.querySelector('#state-badge') && document.querySelector('#timeline li.current')`, 20*time.Second)
		badge := evalJS[string](b, `document.querySelector('#state-badge').innerText`)
		step := evalJS[string](b, `document.querySelector('#timeline li.current .tl-head strong').innerText`)
		chip := evalJS[string](b, `document.querySelector('#stage-track li[aria-current="step"]').dataset.stage`)
		badgeStage := evalJS[string](b, `document.querySelector('#state-badge').dataset.stageBadge`)
		text := evalJS[string](b, `document.querySelector('main').innerText`)
		if badge != want || step != want {
			t.Errorf("%s %s: badge %q, current step %q, want both %q", c.status, c.step, badge, step, want)
		}
		if chip != c.stage || badgeStage != c.stage {
			t.Errorf("%s %s: the stage chip marks %q, the badge is of %q, want %q", c.status, c.step, chip, badgeStage, c.stage)
		}
		if m := rawCode.FindString(text); m != "" {
			t.Errorf("%s %s: the requester's page shows %q:\n%s", c.status, c.step, m, text)
		}
		if evalJS[bool](b, `!!document.querySelector('#current-step, main code[data-status], .badge[data-status] code')`) {
			t.Errorf("%s %s: the requester's page shows the status or the step code", c.status, c.step)
		}
	}
	if t.Failed() {
		return
	}

	b.do("open the list", chromedp.Navigate(s.URL+"/requests"))
	b.waitFor("the list", `document.querySelectorAll('tr[data-operation-id]').length >= 4`, 20*time.Second)
	for op, want := range labels {
		if got := evalJS[string](b, `document.querySelector('tr[data-operation-id="`+op+`"] [data-state]').innerText`); got != want {
			t.Errorf("the list names %s %q, its page %q", op, got, want)
		}
	}
	if text := evalJS[string](b, `document.querySelector('main').innerText`); rawCode.MatchString(text) {
		t.Errorf("the requester's list shows %q:\n%s", rawCode.FindString(text), text)
	}

	// An operator reads the same page with the raw status and step.
	ops := newBrowser(t, 1280, 900)
	signInAs(ops, s.URL, "ops")
	ops.do("open the failed request", chromedp.Navigate(s.URL+"/requests/"+failed))
	ops.waitFor("its state", `document.querySelector('#state-badge')`, 20*time.Second)
	card := evalJS[string](ops, `document.querySelector('#status-card').innerText`)
	for _, want := range []string{labels[failed], "CREATE_FAILED", "CREATE_PIPELINE_FAILED"} {
		if !strings.Contains(card, want) {
			t.Errorf("an operator's status card lacks %q:\n%s", want, card)
		}
	}
	if !strings.Contains(evalJS[string](ops, `document.querySelector('#timeline').innerText`), "MR_CREATING") {
		t.Error("an operator's timeline shows no raw status")
	}
}
