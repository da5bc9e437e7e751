package ui_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"bindery/api"
)

// The ops console speaks in words: a round's notice says what each project's round did (every
// outcome the server can answer, none as its code) and when; the audit log lists an action's
// parameters without the reserved ones; the configuration names the address the process
// listens on, set by the -addr flag.
func TestTheOpsConsoleSaysWhatHappenedInWords(t *testing.T) {
	t.Parallel()
	fake := newFakeAPI()
	for i, o := range api.RoundOutcomes {
		p := api.PartitionRound{Partition: "infra/project-" + string(rune('a'+i)), Outcome: o}
		if o == "CLAIMED" {
			p.BatchID, p.Claimed = 77, 3
		}
		fake.rounds = append(fake.rounds, p)
	}
	fake.listenAddr = "0.0.0.0:9123"
	const op = "5f0c3a52-7d1e-4a8b-9c2d-777777777777"
	fake.seedStuck(op, "bob@example.com", "payments-db-readonly", time.Now().Add(-2*time.Hour))
	s := startSite(t, fake)
	b := newBrowser(t, 1280, 900)
	openOpsConsole(b, s.URL)

	b.click("#run-round")
	b.waitFor("the round's notice", `[...document.querySelectorAll('.notice')].some(n => n.innerText.includes('Batch round done'))`, 20*time.Second)
	notice := evalJS[string](b, `[...document.querySelectorAll('.notice')].find(n => n.innerText.includes('Batch round done')).innerText`)
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
	if !evalJS[bool](b, `[...document.querySelectorAll('.notice')].find(n => n.innerText.includes('Batch round done')).querySelector('.notice-time time[datetime]') !== null`) {
		t.Errorf("round notice has no time: %s", notice)
	}

	b.click(`#stuck [data-retry="` + op + `"]`)
	b.waitFor("the retry's audit entry", `document.querySelector('#audit dl.params')`, 20*time.Second)
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
	if listen := evalJS[string](b, `document.querySelector('#config-listen').innerText`); !strings.Contains(listen, "0.0.0.0:9123") || !strings.Contains(listen, "-addr flag") {
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
	fake := newFakeAPI()
	const op = "5f0c3a52-7d1e-4a8b-9c2d-888888888888"
	fake.seedFailedInCI(op, "bob@example.com", "payments-db-readonly", time.Now().Add(-time.Hour))
	s := startSite(t, fake)
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
	if _, got, _ := fake.seen(); len(got) != 0 {
		t.Fatalf("cancelled, yet retried: %v", got)
	}

	b.click(retry)
	b.waitFor("the confirmation again", `document.querySelector('#retry-confirm').open`, 10*time.Second)
	b.click("#retry-confirm-yes")
	b.waitFor("the retry's notice", `[...document.querySelectorAll('.notice')].some(n => n.innerText.includes('Retry started') && n.innerText.includes('new merge request'))`, 10*time.Second)
	if _, got, _ := fake.seen(); len(got) != 1 || got[0] != op+" by ops@example.com" {
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
	fake := newFakeAPI()
	now := time.Now()
	fake.seedTrain("infra/access-config", now.Add(-20*time.Minute))
	const stuck = "5f0c3a52-7d1e-4a8b-9c2d-999999999999"
	fake.seedStuck(stuck, "bob@example.com", "payments-db-readonly", now.Add(-2*time.Hour))
	failed, culprit, moved := fake.seedBisected("grafana-editor", now.Add(-3*time.Hour))
	fake.paused["infra/observability-config"] = &api.TrainPause{By: "carol@example.com", Reason: "release freeze until 18:00", Since: now.Add(-10 * time.Minute)}
	fake.removedTargets = []api.TargetUse{{Key: "legacy-vpn", InFlight: 3, InEffect: 12}}
	var blocked, later int64
	for id, b := range fake.batches {
		switch {
		case b.Status == "BLOCKED":
			blocked = id
		case b.Status == "SUCCEEDED" && b.Partition == "infra/observability-config":
			later = id
		}
	}
	s := startSite(t, fake)
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
		!strings.Contains(banner, "previous configuration stays in force") || !strings.Contains(banner, "apply.window") {
		t.Errorf("the banner says: %s", banner)
	}
	// A reload that removed a target bindings still use is told there too, with the counts and
	// what becomes of them.
	if removed := evalJS[string](b, `(document.querySelector('#config-banner [data-targets-removed]') || {}).innerText || ''`); !strings.Contains(removed, "A target left the catalog while bindings use it") ||
		!strings.Contains(removed, "legacy-vpn (3 in flight, 12 in effect)") || !strings.Contains(removed, "new applications for it are refused") || !strings.Contains(removed, "cut short, restore it") {
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
	for _, want := range []string{"BLOCKED", fmt.Sprintf("Batch #%d", blocked), "car 1 of 3", "pipeline running", "Pipeline #8900", "pipeline still running after the polling timeout"} {
		if !strings.Contains(access, want) {
			t.Errorf("the row of infra/access-config lacks %q:\n%s", want, access)
		}
	}
	if n := evalJS[string](b, `document.querySelector('#projects tr[data-glance="infra/access-config"] [data-waiting]').dataset.waiting`); n != "2" {
		t.Errorf("infra/access-config: %s waiting, want 2", n)
	}
	if link := evalJS[string](b, `document.querySelector('#projects tr[data-glance="infra/access-config"] a[href*="/pipelines/8900"]').href`); link == "" {
		t.Error("the pipeline in CI is not linked")
	}
	observability := evalJS[string](b, `document.querySelector('#projects tr[data-glance="infra/observability-config"]').innerText`)
	for _, want := range []string{"nothing in CI", "by carol@example.com", "release freeze until 18:00"} {
		if !strings.Contains(observability, want) {
			t.Errorf("the row of infra/observability-config lacks %q:\n%s", want, observability)
		}
	}

	// Two requests need an operator (the blocked one, the culprit) and one batch is blocked.
	if n := evalJS[string](b, `document.querySelector('#attention-count').dataset.attention`); n != "3" {
		t.Errorf("the navigation counts %s, want 3", n)
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
