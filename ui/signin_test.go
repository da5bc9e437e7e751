package ui_test

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/chromedp/chromedp"

	"bindery/internal/platform/config"
	"bindery/server"
	"bindery/store/storetest"
	"bindery/ui"
)

// startServe is the real server in serve mode (no demo identities, no login proxy in front:
// every caller is anonymous) with the config text configYAML; {origin} in it stands for the
// server's own address. /sso/start is a stand-in for the organisation's sign-in page.
func startServe(t *testing.T, configYAML string) string {
	t.Helper()
	var h http.Handler
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/sso/start" {
			w.Header().Set("Content-Type", "text/html; charset=utf-8")
			_, _ = io.WriteString(w, "<!doctype html><title>Sign in</title><p>The organisation's sign-in page")
			return
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(ts.Close)
	h = server.New(server.Deps{
		Config:  config.NewStatic(config.MustParse(strings.ReplaceAll(configYAML, "{origin}", ts.URL))),
		DB:      storetest.SQLite(t),
		Metrics: metrics.NewSet(),
		Log:     slog.New(slog.NewTextHandler(io.Discard, nil)),
		UI:      ui.Dist(),
		Version: "test",
	}).Handler()
	return ts.URL
}

// A caller without an identity in serve mode is told how to sign in: with server.loginURL the
// page links the sign-in (a full page load, even on bindery's own origin); without it, it says
// where the identity comes from. Neither is the demo's user picker.
func TestAServePageWithoutAnIdentitySaysHowToSignIn(t *testing.T) {
	t.Run("with server.loginURL", func(t *testing.T) {
		base := startServe(t, "server:\n  loginURL: {origin}/sso/start?app=bindery\n")
		b := newBrowser(t, 1280, 900)
		b.do("open bindery", chromedp.Navigate(base+"/requests"))
		b.waitFor("the sign-in page", `document.querySelector('#sign-in #sign-in-link')`, 20*time.Second)
		if href := evalJS[string](b, `document.querySelector('#sign-in-link').href`); href != base+"/sso/start?app=bindery" {
			t.Fatalf("sign-in link %q", href)
		}
		if evalJS[bool](b, `!!document.querySelector('[data-demo-user]')`) {
			t.Fatal("serve mode offers demo users")
		}
		b.screenshot("sign-in-laptop.png")
		b.click("#sign-in-link")
		b.waitFor("the organisation's sign-in page", `location.pathname === '/sso/start' && document.body.innerText.includes("sign-in page")`, 20*time.Second)
	})
	t.Run("without it", func(t *testing.T) {
		base := startServe(t, "")
		b := newBrowser(t, 1280, 900)
		b.do("open bindery", chromedp.Navigate(base+"/"))
		b.waitFor("the sign-in page", `document.querySelector('#sign-in')`, 20*time.Second)
		text := evalJS[string](b, `document.querySelector('#sign-in').innerText`)
		if !strings.Contains(text, "Please sign in") || !strings.Contains(text, "from the sign-in in front of it") {
			t.Errorf("sign-in page: %s", text)
		}
		if evalJS[bool](b, `!!document.querySelector('#sign-in a, [data-demo-user]')`) {
			t.Errorf("a link or a demo user without server.loginURL: %s", text)
		}
	})
}
