package ui_test

import (
	"context"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"regexp"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/fetch"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"bindery/internal/testkit"
)

// The browser tests drive the real SPA bundle (ui/dist), served by the real static handler,
// in headless Chromium. Without Chromium they skip loudly, unless BINDERY_REQUIRE_CHROMIUM=1
// (as in CI) makes that a failure.

var screenshotDir = flag.String("screenshots", "", "write screenshots of the main pages to this directory (go test ./ui -run TestPagesReadWell -screenshots ../docs/screenshots)")

func chromiumPath(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("BINDERY_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("BINDERY_REQUIRE_CHROMIUM") != "" {
		t.Fatal("BINDERY_REQUIRE_CHROMIUM is set but no chromium is installed (apt-get install chromium chromium-driver)")
	}
	t.Skip("\n*** SKIPPING BROWSER TEST: no chromium on PATH (apt-get install chromium; BINDERY_REQUIRE_CHROMIUM=1 makes this fail) ***")
	return ""
}

// browser is one headless Chromium with one tab, started fresh for a test.
type browser struct {
	t   *testing.T
	ctx context.Context

	mu         sync.Mutex
	exceptions []string
	violations []string // content-policy violations the pages reported
}

func newBrowser(t *testing.T, width, height int) *browser {
	t.Helper()
	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(),
		chromedp.ExecPath(chromiumPath(t)),
		chromedp.Flag("headless", true),
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.Flag("disable-quic", true),
		chromedp.NoFirstRun,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("hide-scrollbars", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(width, height),
	)
	ctx, cancel := chromedp.NewContext(alloc)
	b := &browser{t: t, ctx: ctx}
	t.Cleanup(func() {
		cancel()
		cancelAlloc()
	})
	// The first Run starts the browser; it must not carry a timeout (that would end the browser).
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	if err := chromedp.Listen(ctx, func(ev any) {
		if e, ok := ev.(*runtime.EventExceptionThrown); ok {
			b.mu.Lock()
			d := e.ExceptionDetails
			msg := d.Text
			if d.Exception != nil && d.Exception.Description != "" {
				msg += " " + d.Exception.Description
			}
			b.exceptions = append(b.exceptions, fmt.Sprintf("%s (%s:%d)", msg, d.URL, d.LineNumber+1))
			b.mu.Unlock()
		}
	}); err != nil {
		t.Fatal(err)
	}
	// A content-policy violation fails the test: the browser only reports it, and what it
	// refused (a script, a style) otherwise shows, if at all, as a page silently missing a part.
	if err := chromedp.Do(ctx,
		chromedp.ExposeFunc("binderyPolicyViolation", func(_ context.Context, v string) (chromedp.Void, error) {
			b.mu.Lock()
			b.violations = append(b.violations, v)
			b.mu.Unlock()
			return chromedp.Void{}, nil
		}),
		chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
			_, err := cdp.Call(ctx, t, page.AddScriptToEvaluateOnNewDocument, page.AddScriptToEvaluateOnNewDocumentParams{
				Source: `addEventListener('securitypolicyviolation', (e) => window.binderyPolicyViolation(
					e.effectiveDirective + ' refused ' + (e.blockedURI || '(inline)') + ' at ' + e.sourceFile + ':' + e.lineNumber + ' ' + (e.sample || '')))`,
			})
			return err
		}),
	); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		b.mu.Lock()
		defer b.mu.Unlock()
		for _, e := range b.exceptions {
			t.Errorf("uncaught exception in the page: %s", e)
		}
		for _, v := range b.violations {
			t.Errorf("content policy violation: %s", v)
		}
	})
	return b
}

// do runs steps with a deadline (testkit.Timeout, a hang guard), failing the test with what the
// page shows.
func (b *browser) do(what string, steps ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, testkit.Timeout())
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		b.t.Fatalf("%s: %v\npage shows:\n%s", what, err, b.pageText())
	}
}

func evalJS[T any](b *browser, expr string) T {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		b.t.Fatalf("evaluate %s: %v", expr, err)
	}
	return v
}

// waitFor polls a JavaScript condition until it holds. within says how long a passing test
// takes at most on a quiet machine; the deadline is a hang guard, never a timing assertion:
// testkit.Timeout (which a loaded machine stretches), or within when that is longer.
func (b *browser) waitFor(what, cond string, within time.Duration) {
	b.t.Helper()
	within = max(within, testkit.Timeout())
	var err error
	if testkit.Poll(within, func() bool {
		ctx, cancel := context.WithTimeout(b.ctx, 5*time.Second)
		defer cancel()
		var ok bool
		ok, err = chromedp.Run(ctx, chromedp.Evaluate[bool](`(()=>{try{return !!(`+cond+`)}catch(e){return false}})()`))
		return err == nil && ok
	}) != nil {
		b.t.Fatalf("%s: not within %s (%s; last error %v)\npage shows:\n%s", what, within, cond, err, b.pageText())
	}
}

func (b *browser) pageText() string {
	ctx, cancel := context.WithTimeout(b.ctx, 5*time.Second)
	defer cancel()
	s, err := chromedp.Run(ctx, chromedp.Evaluate[string](`location.href + "\n" + (document.body ? document.body.innerText : "(no body)")`))
	if err != nil {
		return "(unavailable: " + err.Error() + ")"
	}
	if len(s) > 3000 {
		s = s[:3000] + "…"
	}
	return s
}

// click clicks the element sel names once it is visible. The click is one turn of the page's
// script (element.click()): the pages re-render their lists at every poll, and a click by mouse
// events — find the node, measure it, press, release — could meet a node replaced in between.
func (b *browser) click(sel string) {
	b.t.Helper()
	b.do("wait for "+sel, chromedp.WaitVisible(chromedp.CSS(sel)))
	b.waitFor("click "+sel, `(()=>{const e=document.querySelector(`+jsString(sel)+`); if(!e) return false; e.click(); return true})()`, 30*time.Second)
}

// clickUntil clicks an operator's action (sel) until the page shows done: when a step of the
// request or batch runs at that moment, bindery answers "… is running right now; look again in
// a moment" (a notice), and the operator clicks again, as a person would.
func (b *browser) clickUntil(what, sel, done string, within time.Duration) {
	b.t.Helper()
	const busy = `[...document.querySelectorAll('.notice')].filter(n => n.innerText.includes('running right now')).length`
	deadline := time.Now().Add(max(within, testkit.Timeout()))
	for {
		before := evalJS[int](b, busy)
		b.click(sel)
		b.waitFor(what, `(`+done+`) || `+busy+` > `+strconv.Itoa(before), within)
		if evalJS[bool](b, `!!(`+done+`)`) {
			return
		}
		if time.Now().After(deadline) {
			b.t.Fatalf("%s: a step was still running after %s of clicks\npage shows:\n%s", what, within, b.pageText())
		}
		time.Sleep(time.Second) // "look again in a moment": the operator's pause before the next click
	}
}

func (b *browser) screenshot(name string) {
	b.t.Helper()
	b.capture(name, true)
}

// screenshotTop is screenshot of the first screen only: what a reader sees on opening the page.
func (b *browser) screenshotTop(name string) {
	b.t.Helper()
	b.capture(name, false)
}

func (b *browser) capture(name string, full bool) {
	b.t.Helper()
	if *screenshotDir == "" {
		return
	}
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	shot := chromedp.CaptureScreenshot()
	if full {
		shot = chromedp.FullScreenshot(100)
	}
	png, err := chromedp.Run(ctx, shot)
	if err != nil {
		b.t.Fatal(err)
	}
	if err := os.MkdirAll(*screenshotDir, 0o755); err != nil {
		b.t.Fatal(err)
	}
	if err := os.WriteFile(path.Join(*screenshotDir, name), png, 0o644); err != nil {
		b.t.Fatal(err)
	}
}

// releasable is the embedded build with files that a test can make disappear, as a release
// does to the hashed assets of the previous one.
type releasable struct {
	fs.FS
	mu   sync.Mutex
	gone map[string]bool
}

func (r *releasable) Open(name string) (fs.File, error) {
	r.mu.Lock()
	gone := r.gone[name]
	r.mu.Unlock()
	if gone {
		return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrNotExist}
	}
	return r.FS.Open(name)
}

// remove makes the assets whose names match pattern disappear and returns their paths.
func (r *releasable) remove(t *testing.T, pattern string) []string {
	t.Helper()
	re := regexp.MustCompile(pattern)
	entries, err := fs.ReadDir(r.FS, "assets")
	if err != nil {
		t.Fatal(err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	var removed []string
	for _, e := range entries {
		if re.MatchString(e.Name()) {
			r.gone["assets/"+e.Name()] = true
			removed = append(removed, "assets/"+e.Name())
		}
	}
	if len(removed) == 0 {
		t.Fatalf("no asset matches %s", pattern)
	}
	return removed
}

func (r *releasable) restore() {
	r.mu.Lock()
	r.gone = map[string]bool{}
	r.mu.Unlock()
}

// answers hands every answer to a request matching pattern (a URL pattern, "*/api/apply") to
// handle, before the page gets it: handle continues, fails or replaces it (fetch.ContinueRequest,
// FailRequest, FulfillRequest); it runs on a goroutine of its own.
func (b *browser) answers(pattern string, handle func(*fetch.EventRequestPaused)) {
	b.t.Helper()
	if err := chromedp.Listen(b.ctx, func(ev any) {
		if e, ok := ev.(*fetch.EventRequestPaused); ok {
			go handle(e)
		}
	}); err != nil {
		b.t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
	defer cancel()
	if _, err := chromedp.Call(ctx, fetch.Enable, fetch.EnableParams{Patterns: []*fetch.RequestPattern{{URLPattern: pattern, RequestStage: fetch.RequestStageResponse}}}); err != nil {
		b.t.Fatal(err)
	}
}

func jsString(s string) string { return fmt.Sprintf("%q", s) }

// signInAs sets the demo user for the next pages (the cookie the user switcher sets), without
// loading a page.
func signInAs(b *browser, base, user string) {
	b.t.Helper()
	b.do("sign in as "+user, chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
		_, err := cdp.Call(ctx, t, network.SetCookie, network.SetCookieParams{Name: "bindery_user", Value: user, URL: base + "/"})
		return err
	}))
}
