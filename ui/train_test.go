//go:build e2e

package ui_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// The merge trains in the browser: the ops console shows each project's train (cars, members,
// pipelines, what waits) with Pause / Resume and "Merge next"; the request page shows the car a
// request rides in, the cars ahead and the estimate.

// The ops console shows each project's train at the top: its cars in order with their pipeline
// state, members and estimate, and what waits for a car. A pause asks for the reason (an empty one
// is refused before anything is sent), shows who paused and why, puts the project first, and
// every waiting requester reads it; Resume ends it. Both are in the audit log.
func TestTheOpsConsoleShowsEachTrainAndPausesAndResumesItsQueue(t *testing.T) {
	t.Parallel()
	s := startSite(t)
	_, waiting := s.train()
	tr := s.trainOf("infra/access-config")
	if len(tr.Cars) != 2 || tr.Cars[0].MR == nil || tr.Cars[1].MR == nil || tr.Cars[0].Estimate == nil {
		t.Fatalf("the train: %+v", tr)
	}
	first, second := itoa(tr.Cars[0].MR.ID), itoa(tr.Cars[1].MR.ID)
	b := newBrowser(t, 1280, 900)
	openOpsConsole(b, s.URL)

	const access, observability = `#trains [data-project="infra/access-config"]`, `#trains [data-project="infra/observability-config"]`
	b.waitFor("the train of infra/access-config with its two cars", `document.querySelectorAll('`+access+` [data-car]').length === 2`, 20*time.Second)
	if order := evalJS[[]string](b, `[...document.querySelectorAll('main .ops-section')].slice(0, 2).map(s => s.id)`); !slices.Equal(order, []string{"projects", "trains"}) {
		t.Errorf("the console begins with %v, want the projects at a glance, then the trains", order)
	}
	train := evalJS[string](b, `document.querySelector('`+access+`').innerText`)
	// The estimate moves with the clock: the page's words are the API's, read before or after it.
	if later := s.trainOf("infra/access-config"); len(later.Cars) > 0 && later.Cars[0].Estimate != nil &&
		!strings.Contains(train, "merges: "+tr.Cars[0].Estimate.Words) && !strings.Contains(train, "merges: "+later.Cars[0].Estimate.Words) {
		t.Errorf("the first car's estimate is neither %q nor %q:\n%s", tr.Cars[0].Estimate.Words, later.Cars[0].Estimate.Words, train)
	}
	for _, want := range []string{"2 of 3 cars in the train", "2 waiting for a car", "Car 1 of 2", "Car 2 of 2", "pipeline running", "MR !" + first, "MR !" + second,
		"merges: ", "alice@example.com", "Waiting for a car", "bob0@example.com", "Merge next", "Estimates: " + tr.Pipelines + "."} {
		if !strings.Contains(train, want) {
			t.Errorf("the train lacks %q:\n%s", want, train)
		}
	}
	if !strings.Contains(train, "W"+tr.Cars[0].WaitingFor[1:]) {
		t.Errorf("the first car does not say what it waits for (%q):\n%s", tr.Cars[0].WaitingFor, train)
	}
	if n := evalJS[int](b, `document.querySelectorAll('`+access+` [data-car] a[href^="/requests/"]').length`); n != 2 {
		t.Errorf("%d members link their request, want 2", n)
	}

	// Pause the other project's queue: the reason is asked for first.
	b.click(observability + ` [data-pause]`)
	b.waitFor("the pause dialog", `document.querySelector('#pause-dialog').open`, 10*time.Second)
	b.screenshot("ops-pause-laptop.png")
	b.click("#pause-confirm")
	b.waitFor("the empty reason refused", `document.querySelector('#pause-error').textContent.includes('Say why')`, 10*time.Second)
	if sent := s.audited("ops.trains.pause"); len(sent) != 0 || s.trainOf("infra/observability-config").Paused != nil {
		t.Fatalf("an empty reason was sent: %v", sent)
	}
	b.do("type the reason", chromedp.SendKeys(chromedp.CSS("#pause-reason"), "release freeze until 18:00"))
	b.click("#pause-confirm")
	b.waitFor("the paused project first, saying who paused it and why", `document.querySelector('#trains li.train').dataset.project === 'infra/observability-config' && document.querySelector('`+observability+` [data-paused]')`, 20*time.Second)
	if note := evalJS[string](b, `document.querySelector('`+observability+` [data-paused]').innerText`); !strings.Contains(note, "Paused by ops@example.com") || !strings.Contains(note, "release freeze until 18:00") {
		t.Errorf("the pause says: %s", note)
	}
	b.waitFor("the pause in the audit log", `[...document.querySelectorAll('#audit tbody tr')].some(r => r.innerText.includes('Paused a queue'))`, 20*time.Second)

	// Resume it.
	b.click(observability + ` [data-resume]`)
	b.waitFor("the pause gone", `!document.querySelector('`+observability+` [data-paused]') && document.querySelector('`+observability+` [data-pause]')`, 20*time.Second)
	b.waitFor("the resume in the audit log", `[...document.querySelectorAll('#audit tbody tr')].some(r => r.innerText.includes('Resumed a queue'))`, 20*time.Second)

	// Paused, the requesters waiting for infra/access-config read why.
	b.click(access + ` [data-pause]`)
	b.waitFor("the pause dialog", `document.querySelector('#pause-dialog').open`, 10*time.Second)
	b.do("type the reason", chromedp.SendKeys(chromedp.CSS("#pause-reason"), "release freeze until 18:00"))
	b.click("#pause-confirm")
	b.waitFor("infra/access-config paused", `document.querySelector('`+access+` [data-paused]')`, 20*time.Second)
	b.screenshot("ops-train-paused-laptop.png")
	b.do("open a waiting request", chromedp.Navigate(s.URL+"/requests/"+waiting[0]))
	b.waitFor("the waiting card", `document.querySelector('#waiting')`, 20*time.Second)
	page := evalJS[string](b, `document.querySelector('main').innerText`)
	if !strings.Contains(page, "paused by ops@example.com: release freeze until 18:00") || strings.Contains(strings.ToLower(page), "nothing to do") {
		t.Errorf("the waiting requester does not read why the queue is paused:\n%s", page)
	}
}

// "Merge next" from the ops console's queue and from the request page (operators only): the
// request is sent ahead of the queue, says so, and the button is gone; a requester never sees it.
func TestMergeNextFromTheOpsConsoleAndFromTheRequestPage(t *testing.T) {
	t.Parallel()
	s := startSite(t)
	_, waiting := s.train()
	b := newBrowser(t, 1280, 900)
	openOpsConsole(b, s.URL)

	b.click(`#trains [data-merge-next="` + waiting[1] + `"]`)
	b.waitFor("the request sent next, first in the queue", `document.querySelector('#trains [data-queued]').dataset.queued === `+jsString(waiting[1])+` && document.querySelector('#trains [data-sent-next=`+jsString(waiting[1])+`]')`, 20*time.Second)
	if sent := evalJS[string](b, `document.querySelector('#trains [data-sent-next]').innerText`); !strings.Contains(sent, "sent by ops@example.com") {
		t.Errorf("the queue says: %s", sent)
	}
	if !evalJS[bool](b, `[...document.querySelectorAll('.notice')].some(n => n.innerText.includes('goes into the next car of infra/access-config'))`) {
		t.Error("no notice of the merge next")
	}

	// The request page, as its owner: no button.
	b.do("open the other waiting request as its owner", chromedp.Evaluate[chromedp.Void](`document.cookie = 'bindery_user=bob0@example.com; Path=/'`),
		chromedp.Navigate(s.URL+"/requests/"+waiting[0]))
	b.waitFor("the waiting card", `document.querySelector('#waiting')`, 20*time.Second)
	if evalJS[bool](b, `!!document.querySelector('#merge-next')`) {
		t.Fatal("a requester sees the operators' Merge next")
	}
	// As an operator: the button sends it.
	b.do("open it as ops", chromedp.Evaluate[chromedp.Void](`document.cookie = 'bindery_user=ops; Path=/'`), chromedp.Navigate(s.URL+"/requests/"+waiting[0]))
	b.click("#merge-next")
	b.waitFor("the request sent ahead of the queue", `document.querySelector('#waiting').innerText.includes('sent ahead of the queue by ops@example.com') && !document.querySelector('#merge-next')`, 20*time.Second)
	if tl := evalJS[string](b, `document.querySelector('#timeline').innerText`); !strings.Contains(tl, "sent into the next car of infra/access-config by ops@example.com") {
		t.Errorf("the timeline does not say it:\n%s", tl)
	}
	if nexts := s.audited("ops.requests.next"); len(nexts) != 2 || nexts[0] != waiting[1]+" by ops@example.com" || nexts[1] != waiting[0]+" by ops@example.com" {
		t.Fatalf("merge nexts: %v", nexts)
	}
}

// The request page of a request in a car says which car ("car 2 of 2"), the cars ahead with their
// pipeline state, and the estimate with what it stands on; one waiting for a car without enough
// pipelines recorded says "no estimate yet" — at laptop and phone widths, without sideways
// scrolling.
func TestTheRequestPageShowsItsCarTheCarsAheadAndTheEstimate(t *testing.T) {
	t.Parallel()
	s := startSite(t)
	inCar, _ := s.train()
	// A request waiting for a car of a project with no pipeline recorded: no estimate yet.
	waiting := s.queued("bob@example.com", "grafana-editor", "dashboards")
	v := s.request(inCar)
	carAhead := s.request(s.trainOf("infra/access-config").Cars[0].Members[0].OperationID)
	if v.Waiting == nil || v.Waiting.Estimate == nil || carAhead.MR == nil {
		t.Fatalf("the request in car 2: %+v", v)
	}
	estimate := v.Waiting.Estimate
	for _, size := range screenSizes {
		t.Run(size.name, func(t *testing.T) {
			b := newBrowser(t, size.width, size.height)
			b.do("size the viewport", chromedp.EmulateViewport(int64(size.width), int64(size.height)))
			b.do("open alice's request", chromedp.Navigate(s.URL+"/"), chromedp.Evaluate[chromedp.Void](`document.cookie = 'bindery_user=alice; Path=/'`),
				chromedp.Navigate(s.URL+"/requests/"+inCar))
			b.waitFor("the car", `document.querySelector('#car')`, 20*time.Second)
			if car := evalJS[string](b, `document.querySelector('#car').innerText`); car != "car 2 of 2" {
				t.Errorf("car: %q", car)
			}
			ahead := evalJS[string](b, `document.querySelector('#cars-ahead').innerText`)
			for _, want := range []string{"Batch #", "MR !" + itoa(carAhead.MR.ID), "pipeline running"} {
				if !strings.Contains(ahead, want) {
					t.Errorf("the cars ahead lack %q: %s", want, ahead)
				}
			}
			text := evalJS[string](b, `document.querySelector('#estimate').innerText`)
			// The car ahead's pipeline may have outrun the median since the first read (the
			// estimate is then "later than estimated"): the page agrees with the server's read
			// of the same moment.
			if now := s.request(inCar).Waiting; now != nil && now.Estimate != nil && now.Estimate.Words != estimate.Words {
				estimate = now.Estimate
			}
			if !strings.Contains(text, estimate.Words) || !strings.Contains(text, estimate.Basis) || !strings.HasPrefix(estimate.Basis, "median of the last 3 pipelines of infra/access-config: ") ||
				!evalJS[bool](b, `!!document.querySelector('#estimate time[datetime]')`) {
				t.Errorf("estimate: %s (the server's: %+v)", text, estimate)
			}
			if !evalJS[bool](b, `document.documentElement.scrollWidth <= innerWidth`) {
				t.Errorf("the request page scrolls sideways at %dpx", size.width)
			}
			b.screenshot("request-train-" + size.name + ".png")

			b.do("open a waiting request as ops", chromedp.Evaluate[chromedp.Void](`document.cookie = 'bindery_user=ops; Path=/'`), chromedp.Navigate(s.URL+"/requests/"+waiting))
			b.waitFor("the estimate", `document.querySelector('#estimate')`, 20*time.Second)
			if e := evalJS[string](b, `document.querySelector('#estimate').innerText`); !strings.Contains(e, "no estimate yet") || !strings.Contains(e, "an estimate needs at least 3") ||
				evalJS[bool](b, `!!document.querySelector('#estimate time')`) || evalJS[bool](b, `!!document.querySelector('#car')`) {
				t.Errorf("a request without an estimate: %s", e)
			}
		})
	}
}
