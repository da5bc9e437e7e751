//go:build e2e

package ui_test

// End to end against the real `bindery demo` (SQLite, in-process GitLab/approval/deploy
// simulators, demo users), booted by `bindery demo`'s own code path from its sample configuration
// at the sample's speed.
// It needs the API handlers, the workflow and the simulators; run it with
//
//	go test -tags e2e ./ui -run E2E

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"bindery/internal/testkit"
)

// The demo signing people in through an identity provider — its own simulated one, as the
// README shows (a team's own works the same way) — in a real browser: a person without a session
// sees "Sign in", signs in at the provider, applies, signs out and is back at "Sign in"; the
// demo's user switcher is off throughout.
func TestE2ESignInApplyAndSignOutInTheRealDemo(t *testing.T) {
	url, configPath := bootDemoAt(t)
	data, err := os.ReadFile(configPath)
	if err != nil {
		t.Fatal(err)
	}
	edited := strings.Replace(string(data), "identity:\n", "identity:\n  oidc: {issuer: \""+url+"/sim/oidc\", clientID: bindery-demo}\n", 1)
	if edited == string(data) {
		t.Fatal("the demo's configuration has no identity section to add the provider to")
	}
	if err := os.WriteFile(configPath, []byte(edited), 0o644); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get(url + "/api/me")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if strings.Contains(string(body), `"loginUrl":"/auth/login"`) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the edited configuration was not taken: %s", body)
		}
		time.Sleep(100 * time.Millisecond) // a poll of the condition above, not a wait for time
	}

	b := newBrowser(t, 1280, 900)
	b.do("open the demo", chromedp.Navigate(url+"/"))
	b.waitFor("the sign-in page", `document.querySelector('#sign-in #sign-in-link') && !document.querySelector('[data-demo-user]')`, 20*time.Second)
	b.click("#sign-in-link")
	b.waitFor("the simulated provider's page", `!!document.querySelector('#sim-login [data-login="bob@example.com"]')`, 20*time.Second)
	b.click(`[data-login="bob@example.com"]`)
	b.waitFor("signed in as bob, no switcher", `document.querySelector('#who-name') && document.querySelector('#who-name').innerText.includes('bob') && document.querySelector('#sign-out') && !document.querySelector('#user-switcher')`, 20*time.Second)
	applyFor(b, "grafana-editor", "dashboards for the incident review")
	b.waitFor("the accepted notice", `document.querySelector('#apply-accepted')`, 20*time.Second)
	b.click("#sign-out")
	b.waitFor("back at Sign in", `document.querySelector('#sign-in #sign-in-link') && !document.querySelector('#sign-out')`, 20*time.Second)
}

func TestE2EApplyApproveInTheInboxAndReachValidatedInTheRealDemo(t *testing.T) {
	t.Parallel()
	url := bootDemo(t)
	b := newBrowser(t, 1280, 900)
	b.do("open the demo", chromedp.Navigate(url+"/"), chromedp.Evaluate[chromedp.Void](`document.cookie = 'bindery_user=alice; Path=/'`), chromedp.Reload())
	op := applyFor(b, "payments-db-readonly", "quarterly revenue report")
	b.waitFor("the accepted notice", `document.querySelector('#apply-accepted')`, 20*time.Second)
	evalJS[bool](b, `window.__sameDocument = true`)

	b.click(`nav a[href="/inbox"]`)
	ticket := `[data-ticket][data-operation-id=` + jsString(op) + `]`
	b.waitFor("the ticket in the approval simulator", `document.querySelector('`+ticket+` [data-decide=APPROVED]')`, 30*time.Second)
	b.click(ticket + ` [data-decide=APPROVED]`)
	b.waitFor("the approval notice", `document.querySelector('.notice a[href="/requests/`+op+`"]')`, 20*time.Second)
	b.click(`.notice a[href="/requests/` + op + `"]`)

	// Batch round, MR, pipeline, merge and the deploy callback (or reconciliation) all run for
	// real; the page follows them without a reload.
	b.waitFor("the request to reach VALIDATED", `document.querySelector('#status-card [data-status="VALIDATED"]')`, 3*time.Minute)
	if !evalJS[bool](b, `window.__sameDocument === true`) {
		t.Fatal("the page reloaded on the way to VALIDATED")
	}
	text := evalJS[string](b, `document.querySelector('main').innerText`)
	for _, want := range []string{"Done: the binding is in effect.", "Merge request !", "Timeline", "Time per stage"} {
		if !strings.Contains(text, want) {
			t.Errorf("request page lacks %q:\n%s", want, text)
		}
	}
	b.click(`nav a[href="/requests"]`)
	b.waitFor("the request in my list", `document.querySelector('tr[data-operation-id=`+jsString(op)+`] [data-status="VALIDATED"]')`, 20*time.Second)

	// The operator sees the batch that carried it, and every console section loads.
	b.do("switch to ops", chromedp.SetValue(chromedp.CSS("#user-switcher"), "ops"),
		chromedp.Evaluate[chromedp.Void](`document.querySelector('#user-switcher').dispatchEvent(new Event('change'))`))
	b.click(`nav a[href="/ops"]`)
	b.waitFor("the batch with the request as a member", `document.querySelector('#batches a[href="/requests/`+op+`"]')`, 30*time.Second)
	b.waitFor("every console section live, none failed",
		`[...document.querySelectorAll('.ops-section .live')].every(l => l.textContent.startsWith('Live')) && !document.querySelector('.ops-section .state.error')`, 30*time.Second)
}

func TestE2EDuplicateSubmitKeepsTheFormLockedInTheRealDemo(t *testing.T) {
	t.Parallel()
	url := bootDemo(t)
	b := newBrowser(t, 1280, 900)
	dropFirstApplyAnswer(b)
	b.do("open the demo", chromedp.Navigate(url+"/"), chromedp.Evaluate[chromedp.Void](`document.cookie = 'bindery_user=bob; Path=/'`), chromedp.Reload())
	op := applyFor(b, "grafana-editor", "dashboards for the incident review")
	resubmitAfterLostAnswer(b, op)
}

// After a lost answer the requester edits the form: the real server refuses the form's id with
// other content (422). For the target of the request the first submission made, which is on its
// way, the page says a second one cannot be sent; for another target "Submit the edited text as
// a new request" sends the edit under a new id, which the real server accepts.
func TestE2EAnEditAfterALostAnswerIsSentAsANewRequestInTheRealDemo(t *testing.T) {
	t.Parallel()
	url := bootDemo(t)
	b := newBrowser(t, 1280, 900)
	dropFirstApplyAnswer(b)
	b.do("open the demo", chromedp.Navigate(url+"/"), chromedp.Evaluate[chromedp.Void](`document.cookie = 'bindery_user=alice; Path=/'`), chromedp.Reload())
	op := applyFor(b, "grafana-editor", "dashboards")
	b.waitFor("the lost-answer error", `document.querySelector('#apply-error')`, 20*time.Second)
	b.do("edit the reason", chromedp.SendKeys(chromedp.CSS("#reason"), " for the incident review"))
	b.click("#submit")
	b.waitFor("the same target said to be taken", `document.querySelector('#apply-error #same-target-active') && document.querySelector('#arrived-request[href="/requests/`+op+`"]')`, 20*time.Second)
	b.click("#target-payments-db-readonly")
	b.waitFor("the offer to send the edit as a new request", `document.querySelector('#apply-error #submit-as-new')`, 20*time.Second)
	fresh := evalJS[string](b, `document.querySelector('#apply-form').dataset.operationId`)
	if fresh == op {
		t.Fatal("the form kept the refused operationId")
	}
	b.click("#submit-as-new")
	b.waitFor("the edit accepted as a new request", `document.querySelector('#apply-accepted')`, 20*time.Second)
	status, body := demoCall(t, "GET", url+"/api/requests/"+fresh, "alice", "")
	if status != 200 || !strings.Contains(body, `"targetKey":"payments-db-readonly"`) || !strings.Contains(body, "dashboards for the incident review") {
		t.Fatalf("the new request %s: %d %s", fresh, status, body)
	}
}

// The README's pictures, taken from the real demo at the sample's speed:
//
//	go test -tags e2e ./ui -run TestE2EScreenshots -screenshots ../docs/screenshots
//
// Without -screenshots the same pages are still opened and checked (they render the real
// product's data without an exception and without sideways scrolling).
func TestE2EScreenshotsOfTheRealDemo(t *testing.T) {
	t.Parallel()
	url := bootDemo(t)
	validated := demoApply(t, url, "alice", "payments-db-readonly", "quarterly revenue report")
	inFlight := demoApply(t, url, "alice", "grafana-editor", "dashboards for the incident review")
	waiting := demoApply(t, url, "alice", "payments-db-admin", "schema migration for the ledger")
	demoDecide(t, url, validated, "APPROVED")
	demoDecide(t, url, inFlight, "APPROVED")
	demoWait(t, url, validated, "VALIDATED")

	tourPages(t, pageTour{url: url, ready: 60 * time.Second, waiting: waiting, validated: validated,
		opsReady: `document.querySelector('#stage-latency li') && document.querySelector('#batches [data-batch-id]')`})
}

// The demo runs a merge train (batch.train: 3, merge commits): with a steady stream of approved
// requests to one project, the ops console shows more than one car of it in CI at once, each
// request rides in a car with an estimate, and the stream merges. With -screenshots it takes the
// ops console's train view.
func TestE2EAStreamToOneProjectFillsSeveralCarsInTheRealDemo(t *testing.T) {
	t.Parallel()
	url := bootDemo(t)
	b := newBrowser(t, 1280, 900)
	openOpsConsole(b, url)
	const train = `#trains [data-project="infra/access-config"]`
	b.waitFor("the train of infra/access-config", `document.querySelector('`+train+`')`, 30*time.Second)

	// The stream: a request every second and a half from another person, approved in the approval
	// simulator's inbox (autoApprove is off in the demo).
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	streamed := make(chan string, 100)
	failed := make(chan error, 1)
	go func() {
		defer close(streamed)
		for i := 0; ctx.Err() == nil && i < 60; i++ {
			op, err := streamOne(url, i)
			if err != nil {
				failed <- err
				return
			}
			streamed <- op
			select {
			case <-ctx.Done():
			case <-time.After(1500 * time.Millisecond):
			}
		}
	}()

	inCI := `document.querySelectorAll('` + train + ` [data-car][data-pipeline="running"]').length`
	b.waitFor("more than one car of infra/access-config in CI at once", inCI+` >= 2`, 3*time.Minute)
	select {
	case err := <-failed:
		t.Fatalf("the stream: %v", err)
	default:
	}
	b.screenshot("ops-train-laptop.png")
	text := evalJS[string](b, `document.querySelector('`+train+`').innerText`)
	for _, want := range []string{"Car 1 of", "Car 2 of", "pipeline running", "MR !", "of 3 cars in the train"} {
		if !strings.Contains(text, want) {
			t.Errorf("the train lacks %q:\n%s", want, text)
		}
	}
	stop()
	var ops []string
	for op := range streamed {
		ops = append(ops, op)
	}

	// Pause the project's queue from the console: the reason is asked for.
	b.click(train + ` [data-pause]`)
	b.waitFor("the pause dialog", `document.querySelector('#pause-dialog').open`, 10*time.Second)
	b.do("type the reason", chromedp.SendKeys(chromedp.CSS("#pause-reason"), "release freeze until 18:00"))
	b.click("#pause-confirm")
	b.waitFor("the train paused", `document.querySelector('`+train+` [data-paused]')`, 20*time.Second)

	// Requests approved now wait (nothing is claimed); one is sent into the next car.
	var waiting []string
	for i := 100; i < 102; i++ {
		op, err := streamOne(url, i)
		if err != nil {
			t.Fatal(err)
		}
		waiting = append(waiting, op)
	}
	hotfix := waiting[1]
	b.click(train + ` [data-merge-next=` + jsString(hotfix) + `]`)
	b.waitFor("the request sent next, first in the queue", `document.querySelector('`+train+` [data-sent-next=`+jsString(hotfix)+`]') && document.querySelector('`+train+` [data-queued]').dataset.queued === `+jsString(hotfix), 30*time.Second)

	// Its page: what holds it (the pause, with its reason), who sent it next, an estimate that
	// makes nothing up.
	b.do("open the request sent next", chromedp.Navigate(url+"/requests/"+hotfix))
	b.waitFor("its waiting card with the pause and the estimate", `document.querySelector('#waiting') && document.querySelector('#estimate')`, 30*time.Second)
	page := evalJS[string](b, `document.querySelector('main').innerText`)
	for _, want := range []string{"paused by ops@example.com: release freeze until 18:00", "no estimate yet", "sent into the next car of infra/access-config by ops@example.com"} {
		if !strings.Contains(page, want) {
			t.Errorf("the request page lacks %q:\n%s", want, page)
		}
	}
	// A request of the stream in a car: which car, and the pause that holds it.
	inCar := ""
	for _, op := range ops {
		_, body := demoCall(t, "GET", url+"/api/requests/"+op, "ops", "")
		var v struct {
			Waiting *struct {
				Car      *struct{ Position, Of int }
				Estimate *struct{ Words, Basis string }
			}
		}
		if err := json.Unmarshal([]byte(body), &v); err != nil {
			t.Fatal(err)
		}
		if w := v.Waiting; w != nil && w.Car != nil && w.Estimate != nil {
			if w.Car.Position < 1 || w.Car.Position > w.Car.Of || w.Estimate.Words != "no estimate yet" || !strings.Contains(w.Estimate.Basis, "paused") {
				t.Fatalf("%s in a car of a paused train: %s", op, body)
			}
			inCar = op
		}
	}
	if inCar == "" {
		t.Fatal("no request of the stream is in a car while the queue is paused")
	}
	b.do("open a request in a car", chromedp.Navigate(url+"/requests/"+inCar))
	b.waitFor("its car", `/^car \d+ of \d+/.test(document.querySelector('#car').innerText)`, 30*time.Second)

	// Resume: everything merges, the hotfix too.
	openOpsConsole(b, url)
	b.click(train + ` [data-resume]`)
	b.waitFor("the pause gone", `!document.querySelector('`+train+` [data-paused]')`, 20*time.Second)
	for _, op := range append(ops[:2], hotfix) {
		demoWait(t, url, op, "VALIDATED")
	}
}

// streamOne applies for payments-db-readonly as the i-th person of a stream and approves the
// ticket in the approval simulator; it returns the operationId. (It runs beside the test's own
// goroutine: errors are returned, never t.Fatal.)
func streamOne(url string, i int) (string, error) {
	call := func(method, path, user, body string) (int, []byte, error) {
		return demoSend(method, url+path, user, body)
	}
	op := fmt.Sprintf("stream-%d-%d", i, time.Now().UnixNano())
	body := fmt.Sprintf(`{"operationId":%q,"targetKey":"payments-db-readonly","reason":"a steady stream of requests"}`, op)
	if code, text, err := call("POST", "/api/apply", fmt.Sprintf("stream-%d@example.com", i), body); err != nil || code != 202 {
		return "", fmt.Errorf("apply %s: %d %s %v", op, code, text, err)
	}
	var failed error
	if testkit.Poll(testkit.Timeout(), func() bool {
		_, text, err := call("GET", "/sim/approvals", "", "")
		if err != nil {
			failed = err
			return true
		}
		var inbox struct {
			Items []struct{ ID, OperationID string }
		}
		if err := json.Unmarshal(text, &inbox); err != nil {
			failed = err
			return true
		}
		for _, tk := range inbox.Items {
			if tk.OperationID == op {
				if code, text, err := call("POST", "/sim/approvals/"+tk.ID+"/decide", "", `{"decision":"APPROVED"}`); err != nil || code != 200 {
					failed = fmt.Errorf("decide %s: %d %s %v", op, code, text, err)
				}
				return true
			}
		}
		return false
	}) != nil {
		return "", fmt.Errorf("no ticket for %s", op)
	}
	if failed != nil {
		return "", failed
	}
	return op, nil
}
