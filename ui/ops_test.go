//go:build e2e

package ui_test

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/fetch"
	"github.com/chromedp/chromedp"

	"bindery/api"
	"bindery/internal/vocab/state"
)

// The ops console speaks in words: a round's notice says what each project's round did (every
// outcome the server can answer, none as its code) and when; the audit log lists an action's
// parameters without the reserved ones; the configuration names the address the process
// listens on, set by the -addr flag.
func TestTheOpsConsoleSaysWhatHappenedInWords(t *testing.T) {
	t.Parallel()
	// One car at a time: a round claims everything waiting in a project.
	s := startSite(t, set("batch.train", 1))
	op := s.stuck("bob", "payments-db-readonly", "on-call rotation")
	var claimed []string
	for _, who := range []string{"carol@example.com", "dave@example.com", "erin@example.com"} {
		claimed = append(claimed, s.queued(who, "grafana-editor", "dashboards"))
	}
	b := newBrowser(t, 1280, 900)
	openOpsConsole(b, s.URL)

	// A real round: it claims the three requests waiting for infra/observability-config.
	b.click("#run-round")
	b.waitFor("the round's notice", `[...document.querySelectorAll('.notice')].some(n => n.innerText.includes('Batch round done'))`, 20*time.Second)
	batch := s.request(claimed[0]).BatchID
	notice := evalJS[string](b, `[...document.querySelectorAll('.notice')].find(n => n.innerText.includes('Batch round done')).innerText`)
	if !strings.Contains(notice, "started batch #"+itoa(batch)+" with 3 requests") {
		t.Errorf("round notice lacks the batch it started: %s", notice)
	}
	if !evalJS[bool](b, `[...document.querySelectorAll('.notice')].find(n => n.innerText.includes('Batch round done')).querySelector('.notice-time time[datetime]') !== null`) {
		t.Errorf("round notice has no time: %s", notice)
	}
	// Every outcome the server can answer, in one round: the real one answers ERROR only when the
	// database fails for a project, and NOTHING_WAITING only when a concurrent round took the
	// requests first, so this round's answer is given to the page (the page's words are checked).
	var every api.RoundResult
	for i, o := range api.RoundOutcomes {
		p := api.PartitionRound{Partition: "infra/project-" + string(rune('a'+i)), Outcome: o}
		if o == "CLAIMED" {
			p.BatchID, p.Claimed = 77, 3
		}
		every.Partitions = append(every.Partitions, p)
	}
	answerNextRound(b, every)
	b.do("close the notices", chromedp.Evaluate[chromedp.Void](`document.querySelectorAll('.notice').forEach(n => n.remove())`))
	b.click("#run-round")
	b.waitFor("the round's notice", `[...document.querySelectorAll('.notice')].some(n => n.innerText.includes('Batch round done'))`, 20*time.Second)
	notice = evalJS[string](b, `[...document.querySelectorAll('.notice')].find(n => n.innerText.includes('Batch round done')).innerText`)
	for _, want := range []string{"started batch #77 with 3 requests", "the merge train of this project is full", "nothing was waiting", "not enough to fill a batch", "the round failed here"} {
		if !strings.Contains(notice, want) {
			t.Errorf("round notice lacks %q: %s", want, notice)
		}
	}
	for _, code := range api.RoundOutcomes {
		if strings.Contains(notice, code) {
			t.Errorf("round notice shows the code %s: %s", code, notice)
		}
	}

	b.click(`#stuck [data-retry="` + op + `"]`)
	// The newest entry (the rounds' entries are below it).
	b.waitFor("the retry's audit entry", `document.querySelector('#audit tbody tr dl.params') && document.querySelector('#audit tbody tr').innerText.includes('Retried')`, 20*time.Second)
	audit := evalJS[string](b, `document.querySelector('#audit tbody tr').innerText`)
	for _, want := range []string{"Retried a request", "request", op, "operationId"} {
		if !strings.Contains(audit, want) {
			t.Errorf("audit row lacks %q: %s", want, audit)
		}
	}
	for _, not := range []string{"__authenticatedOperator", "{"} {
		if strings.Contains(audit, not) {
			t.Errorf("audit row shows %q: %s", not, audit)
		}
	}

	b.waitFor("the listen address", `document.querySelector('#config-listen')`, 20*time.Second)
	if listen := evalJS[string](b, `document.querySelector('#config-listen').innerText`); !strings.Contains(listen, strings.TrimPrefix(s.API, "http://")) || !strings.Contains(listen, "-addr flag") {
		t.Errorf("config view: %s", listen)
	}
	if source := evalJS[string](b, `document.querySelector('#config [data-source="flag"]').textContent`); !strings.Contains(source, "command-line flag") {
		t.Errorf("server.addr source: %s", source)
	}
}

// A deterministic failure (the pipeline of the change failed) is retried only after the page
// said what that does — a new merge request, likely failing the same way — and the operator
// confirmed; cancelling sends nothing.
func TestRetryingADeterministicFailureAsksFirstAndSaysItOpensANewMR(t *testing.T) {
	t.Parallel()
	s := startSite(t, culpritSettings...)
	op, _ := s.failedInCI("bob", "payments-db-readonly", "alice", "payments-db-readonly")
	b := newBrowser(t, 1280, 900)
	openOpsConsole(b, s.URL)
	retry := `#stuck [data-retry="` + op + `"]`
	b.waitFor("the failed request with its retry button", `document.querySelector('`+retry+`')`, 20*time.Second)

	b.click(retry)
	b.waitFor("the confirmation", `document.querySelector('#retry-confirm').open`, 10*time.Second)
	b.screenshot("ops-retry-confirm-laptop.png")
	text := evalJS[string](b, `document.querySelector('#retry-confirm').innerText`)
	for _, want := range []string{"Pipeline failed", "a failure of the change itself", "opens a new merge request", "fails the same way"} {
		if !strings.Contains(text, want) {
			t.Errorf("confirmation lacks %q: %s", want, text)
		}
	}
	if focused := evalJS[string](b, `document.activeElement.id`); focused != "retry-confirm-no" {
		t.Errorf("focus on %q, want the Cancel button", focused)
	}
	b.click("#retry-confirm-no")
	b.waitFor("the dialog closed", `!document.querySelector('#retry-confirm').open`, 10*time.Second)
	if got := s.audited("ops.requests.retry"); len(got) != 0 {
		t.Fatalf("cancelled, yet retried: %v", got)
	}

	b.click(retry)
	b.waitFor("the confirmation again", `document.querySelector('#retry-confirm').open`, 10*time.Second)
	b.click("#retry-confirm-yes")
	b.waitFor("the retry's notice", `[...document.querySelectorAll('.notice')].some(n => n.innerText.includes('Retry started') && n.innerText.includes('new merge request'))`, 10*time.Second)
	if got := s.audited("ops.requests.retry"); len(got) != 1 || got[0] != op+" by ops@example.com" {
		t.Fatalf("retries %v", got)
	}
}

// The console at a glance (docs/operations.md, 'The console at a glance'): a refused reload of
// the configuration is a banner above everything; one row per project says what is in CI (batch,
// car, age, pipeline with its link), how many wait, what is blocked since when and why, who
// paused it and why — the BLOCKED project first; the navigation counts what needs an operator on
// every page; the batches list the BLOCKED one first, then the active ones, then history; a
// bisection's note links the culprit's request instead of naming its id, and a member the
// bisection moved out reads "moved to batch N", not the status it has now.
func TestTheOpsConsoleReadsAtAGlance(t *testing.T) {
	t.Parallel()
	legacy := map[string]any{"key": "legacy-vpn", "title": "Legacy VPN", "project": "infra/observability-config", "branch": "main",
		"path": "vpn/{subject}.yaml", "ruleCodes": []string{}, "ttl": "30d"}
	// carol is an operator too (she pauses a queue).
	operators := set("permission.rules", map[string]any{"payments-admin": []string{"alice@example.com"}, "bindery-ops": []string{"ops@example.com", "carol@example.com"}})
	s := startSite(t, append(culpritSettings, withTargets(legacy), operators)...)
	// infra/observability-config: a batch bisected (bob's change the culprit, alice's moved to a
	// later batch), two bindings of legacy-vpn in effect and one on its way; then carol pauses
	// its queue and legacy-vpn leaves the catalog.
	culprit, moved := s.failedInCI("bob", "grafana-editor", "alice", "grafana-editor")
	s.waitRequest(moved, moved+" in effect", func(v api.RequestView) bool { return v.Status == state.StatusValidated })
	failed, later := s.request(culprit).BatchID, s.request(moved).BatchID
	s.validated("vpn-1@example.com", "legacy-vpn", "remote work")
	s.validated("vpn-2@example.com", "legacy-vpn", "remote work")
	s.apply("vpn-3@example.com", "legacy-vpn", "remote work")
	s.call("POST", "/api/ops/trains/pause", "carol@example.com", `{"operationId":"`+s.opID()+`","project":"infra/observability-config","reason":"release freeze until 18:00"}`, 200, nil)
	s.configure(withTargets())
	// infra/access-config: a batch BLOCKED (its pipelines gave no answer), then a train of two
	// cars in CI behind it and two requests waiting for a car.
	stuck := s.stuck("bob", "payments-db-readonly", "on-call rotation")
	blocked := s.request(stuck).BatchID
	s.sims().GitLab.StickNextPipelines(2)
	for _, who := range []string{"carol@example.com", "alice"} {
		op := s.queued(who, "payments-db-readonly", "on-call rotation")
		s.roundTaking(op)
		s.waitRequest(op, op+" in CI", func(v api.RequestView) bool { return v.Stage == "ci" && v.Pipeline != nil })
	}
	for _, who := range []string{"bob0@example.com", "bob1@example.com"} {
		s.queued(who, "payments-db-readonly", "on-call rotation")
	}
	s.refusedEdit()
	refused := s.App.Config().LastError().Message
	tr := s.trainOf("infra/access-config")
	if len(tr.Cars) != 3 || tr.Blocked == nil || tr.Cars[1].Pipeline == nil {
		t.Fatalf("the train of infra/access-config: %+v", tr)
	}
	inCI := itoa(tr.Cars[1].Pipeline.ID) // the first car whose pipeline runs
	b := newBrowser(t, 1280, 900)
	openOpsConsole(b, s.URL)

	b.waitFor("the projects at a glance", `document.querySelectorAll('#projects tr[data-glance]').length === 2`, 20*time.Second)
	b.waitFor("the configuration banner", `document.querySelector('#config-banner [data-config-error]')`, 20*time.Second)
	b.waitFor("the attention count", `document.querySelector('#attention-count')`, 20*time.Second)
	b.screenshotTop("ops-projects-laptop.png")

	if !evalJS[bool](b, `document.querySelector('main h1').nextElementSibling.id === 'config-banner'`) {
		t.Error("the configuration banner is not right under the title")
	}
	if banner := evalJS[string](b, `document.querySelector('#config-banner').innerText`); !strings.Contains(banner, "The configuration reload was refused") ||
		!strings.Contains(banner, "previous configuration stays in force") || !strings.Contains(banner, refused) {
		t.Errorf("the banner says: %s", banner)
	}
	// A reload that removed a target bindings still use is told there too, with the counts and
	// what becomes of them.
	if removed := evalJS[string](b, `(document.querySelector('#config-banner [data-targets-removed]') || {}).innerText || ''`); !strings.Contains(removed, "A target left the catalog while bindings use it") ||
		!strings.Contains(removed, "legacy-vpn (1 in flight, 2 in effect)") || !strings.Contains(removed, "new applications for it are refused") || !strings.Contains(removed, "cut short, restore it") {
		t.Errorf("the banner of the removed targets says: %q", removed)
	}
	if first := evalJS[string](b, `document.querySelector('main .ops-section').id`); first != "projects" {
		t.Errorf("the first section is %q, want the projects at a glance", first)
	}
	rows := evalJS[[]string](b, `[...document.querySelectorAll('#projects tr[data-glance]')].map(r => r.dataset.glance)`)
	if len(rows) != 2 || rows[0] != "infra/access-config" || rows[1] != "infra/observability-config" {
		t.Errorf("project rows %v, want the blocked one first", rows)
	}
	access := evalJS[string](b, `document.querySelector('#projects tr[data-glance="infra/access-config"]').innerText`)
	for _, want := range []string{"BLOCKED", fmt.Sprintf("Batch #%d", blocked), "car 1 of 3", "pipeline running", "Pipeline #" + inCI, tr.Blocked.Why} {
		if !strings.Contains(access, want) {
			t.Errorf("the row of infra/access-config lacks %q:\n%s", want, access)
		}
	}
	if n := evalJS[string](b, `document.querySelector('#projects tr[data-glance="infra/access-config"] [data-waiting]').dataset.waiting`); n != "2" {
		t.Errorf("infra/access-config: %s waiting, want 2", n)
	}
	if link := evalJS[string](b, `document.querySelector('#projects tr[data-glance="infra/access-config"] a[href$="/pipelines/`+inCI+`"]').href`); link == "" {
		t.Error("the pipeline in CI is not linked")
	}
	observability := evalJS[string](b, `document.querySelector('#projects tr[data-glance="infra/observability-config"]').innerText`)
	for _, want := range []string{"nothing in CI", "by carol@example.com", "release freeze until 18:00"} {
		if !strings.Contains(observability, want) {
			t.Errorf("the row of infra/observability-config lacks %q:\n%s", want, observability)
		}
	}

	// Two things need an operator: the culprit, and the blocked batch (its request is that
	// batch's matter, counted once with it). The count is live: it is read until it says so.
	var attention api.Attention
	s.call("GET", "/api/ops/attention", "ops", "", 200, &attention)
	b.waitFor("the navigation counting 2", `document.querySelector('#attention-count').dataset.attention === '2'`, 20*time.Second)
	if attention.Requests != 1 || attention.BlockedBatches != 1 {
		t.Errorf("the server counts %+v, want 1 request and 1 blocked batch", attention)
	}
	b.waitFor("the batches", `document.querySelector('#batches [data-batch-group]')`, 20*time.Second)
	if groups := evalJS[[]string](b, `[...document.querySelectorAll('#batches [data-batch-group]')].map(g => g.dataset.batchGroup)`); !slices.Equal(groups, []string{"blocked", "active", "history"}) {
		t.Errorf("batch groups %v, want blocked, active, history", groups)
	}
	if first := evalJS[string](b, `document.querySelector('#batches li.batch').dataset.batchId`); first != fmt.Sprint(blocked) {
		t.Errorf("the first batch listed is #%s, want the blocked #%d", first, blocked)
	}

	bisected := fmt.Sprintf(`#batches li[data-batch-id="%d"]`, failed)
	text := evalJS[string](b, `document.querySelector('`+bisected+`').innerText`)
	if strings.Contains(text, culprit) {
		t.Errorf("the failed batch names the raw operation id %s:\n%s", culprit, text)
	}
	if n := evalJS[int](b, `[...document.querySelectorAll('`+bisected+` [data-bisection] a, `+bisected+` [data-note] a')].filter(a => a.getAttribute('href') === '/requests/`+culprit+`' && a.textContent === 'grafana-editor (bob@example.com)').length`); n != 2 {
		t.Errorf("%d links of the culprit's request in the note and the bisection line, want 2:\n%s", n, text)
	}
	member := bisected + ` [data-member="` + moved + `"]`
	if got := evalJS[string](b, `document.querySelector('`+member+`').innerText`); !strings.Contains(got, fmt.Sprintf("moved to batch #%d", later)) || strings.Contains(got, "In effect") || strings.Contains(got, "VALIDATED") {
		t.Errorf("the member moved out reads: %s", got)
	}
	if got := evalJS[string](b, `document.querySelector('`+bisected+` [data-member="`+culprit+`"] [data-status]').dataset.status`); got != "CREATE_FAILED" {
		t.Errorf("the culprit ended as %q, want CREATE_FAILED", got)
	}

	// The count is on every page of an operator.
	b.click(`nav a[href="/requests"]`)
	b.waitFor("my requests with the count", `location.pathname === '/requests' && document.querySelector('#attention-count')`, 20*time.Second)
}

// answerNextRound gives the page answer as the server's answer to its next batch round (the
// request still reaches the server, which runs a round).
func answerNextRound(b *browser, answer api.RoundResult) {
	b.t.Helper()
	body, err := json.Marshal(answer)
	if err != nil {
		b.t.Fatal(err)
	}
	b.answers("*/api/ops/batches/run", func(e *fetch.EventRequestPaused) {
		chromedp.Call(b.ctx, fetch.FulfillRequest, fetch.FulfillRequestParams{RequestID: e.RequestID, ResponseCode: 200,
			ResponseHeaders: []*fetch.HeaderEntry{{Name: "Content-Type", Value: "application/json"}}, Body: body})
	})
}
