package ui_test

import (
	"bindery/api"
	"strings"
	"testing"
	"time"
)

// The ops console speaks in words: a round's notice says what each project's round did (every
// outcome the server can answer, none as its code) and when; the audit log lists an action's
// parameters without the reserved ones; the configuration names the address the process
// listens on, set by the -addr flag.
func TestTheOpsConsoleSaysWhatHappenedInWords(t *testing.T) {
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
