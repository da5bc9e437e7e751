package ui_test

import (
	"context"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"bindery/internal/platform/config"
	"bindery/server"
	"bindery/store/storetest"
	"bindery/ui"
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

// do runs steps with a deadline, failing the test with what the page shows.
func (b *browser) do(what string, steps ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
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

// waitFor polls a JavaScript condition until it holds (a deadline, not a timing assertion).
func (b *browser) waitFor(what, cond string, within time.Duration) {
	b.t.Helper()
	deadline := time.Now().Add(within)
	for {
		ctx, cancel := context.WithTimeout(b.ctx, 5*time.Second)
		ok, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`(()=>{try{return !!(`+cond+`)}catch(e){return false}})()`))
		cancel()
		if err == nil && ok {
			return
		}
		if time.Now().After(deadline) {
			b.t.Fatalf("%s: not within %s (%s; last error %v)\npage shows:\n%s", what, within, cond, err, b.pageText())
		}
		time.Sleep(100 * time.Millisecond)
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

func (b *browser) click(sel string) {
	b.t.Helper()
	b.do("click "+sel, chromedp.WaitVisible(chromedp.CSS(sel)), chromedp.Click(chromedp.CSS(sel)))
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

// site is the real server (static handler and all) with the fake API mounted.
type site struct {
	URL   string
	api   *fakeAPI
	files *releasable

	mu        sync.Mutex
	documents []string // request URIs of every page load (navigations), in order
}

func startSite(t *testing.T, fake *fakeAPI) *site {
	t.Helper()
	s := &site{api: fake, files: &releasable{FS: ui.Dist(), gone: map[string]bool{}}}
	srv := server.New(server.Deps{
		Config:  config.NewStatic(config.MustParse("")),
		DB:      storetest.SQLite(t),
		Metrics: metrics.NewSet(),
		Log:     slog.New(slog.NewTextHandler(io.Discard, nil)),
		UI:      s.files,
		Version: "test",
	})
	h := srv.Handler()
	fakeHandler := fake.Handler()
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Sec-Fetch-Dest") == "document" {
			s.mu.Lock()
			s.documents = append(s.documents, r.URL.RequestURI())
			s.mu.Unlock()
		}
		// The fake answers the whole JSON API (and the simulator's inbox); the real server
		// answers everything else: pages, assets, and the 404s of both.
		if p := r.URL.Path; strings.HasPrefix(p, "/api/") || strings.HasPrefix(p, "/sim/") {
			fakeHandler.ServeHTTP(w, r)
			return
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(ts.Close)
	s.URL = ts.URL
	return s
}

func (s *site) pageLoads() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.documents...)
}

func jsString(s string) string { return fmt.Sprintf("%q", s) }

func contains(list []string, s string) bool {
	for _, x := range list {
		if strings.Contains(x, s) {
			return true
		}
	}
	return false
}
