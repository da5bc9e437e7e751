//go:build e2e

package ui_test

// End to end against the real `bindery demo` (SQLite, in-process GitLab/approval/deploy
// simulators, demo users): the same browser flows as the fake-API tests, with nothing faked.
// It needs the API handlers, the workflow and the simulators; run it with
//
//	go test -tags e2e ./ui -run E2E

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"bindery/app"
	"bindery/schema"
	"bindery/ui"
)

// bootDemo starts the product exactly as `bindery demo` does, on :0 in a fresh data directory.
func bootDemo(t *testing.T) string {
	t.Helper()
	configPath, dsn, err := app.PrepareDemo(filepath.Join(t.TempDir(), "demo"))
	if err != nil {
		t.Fatal(err)
	}
	logs := &bytes.Buffer{}
	a, err := app.New(context.Background(), app.Options{Mode: app.ModeDemo, ConfigPath: configPath, Addr: "127.0.0.1:0", DSN: dsn,
		Assets: app.Assets{Schema: schema.FS, UI: ui.Dist()}, LogOutput: logs})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("demo stopped with %v", err)
		}
		if t.Failed() {
			t.Logf("demo log:\n%s", logs.String())
		}
	})
	return a.URL()
}

func TestE2EApplyApproveInTheInboxAndReachValidatedInTheRealDemo(t *testing.T) {
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
	url := bootDemo(t)
	b := newBrowser(t, 1280, 900)
	dropFirstApplyAnswer(b)
	b.do("open the demo", chromedp.Navigate(url+"/"), chromedp.Evaluate[chromedp.Void](`document.cookie = 'bindery_user=bob; Path=/'`), chromedp.Reload())
	op := applyFor(b, "grafana-editor", "dashboards for the incident review")
	resubmitAfterLostAnswer(b, op)
}
