//go:build e2e

package ui_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/chromedp/chromedp"

	"bindery/internal/platform/config"
	"bindery/internal/sim"
	"bindery/server"
	"bindery/store"
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
	t.Parallel()
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

// startSignIn is the real server signing people in with the simulated identity provider (on a
// listener of its own, as an organisation's would be) and its database.
func startSignIn(t *testing.T) (base string, db *store.DB) {
	t.Helper()
	idp := sim.New(sim.Options{Config: config.NewStatic(config.MustParse(""))})
	provider := httptest.NewServer(idp.Handler())
	t.Cleanup(provider.Close)
	var h http.Handler
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { h.ServeHTTP(w, r) }))
	t.Cleanup(ts.Close)
	idp.OIDC.Register(sim.OIDCClient{ID: "bindery", Secret: "s3cret", RedirectURIs: []string{ts.URL + "/auth/callback"}})
	db = storetest.SQLite(t)
	h = server.New(server.Deps{
		Config: config.NewStatic(config.MustParse(fmt.Sprintf("server:\n  publicURL: %s\nidentity:\n  oidc:\n    issuer: %s/sim/oidc\n    clientID: bindery\n    clientSecret: s3cret\n",
			ts.URL, provider.URL))),
		DB:      db,
		Metrics: metrics.NewSet(),
		Log:     slog.New(slog.NewTextHandler(io.Discard, nil)),
		UI:      ui.Dist(),
		Version: "test",
	}).Handler()
	return ts.URL, db
}

// A person signs in with the identity provider in a real browser: the signed-out page offers
// "Sign in" (not a 401's text), the provider's page sends them back where they were, the header
// says who is signed in and offers "Sign out"; on the settings page they make an API token (shown
// once; it works for a script), see it listed and revoke it; then they sign out and are back
// at "Sign in".
func TestSignInMakeATokenAndSignOutInTheBrowser(t *testing.T) {
	base, db := startSignIn(t)
	b := newBrowser(t, 1280, 900)
	b.do("open bindery", chromedp.Navigate(base+"/requests"))
	b.waitFor("the sign-in page", `document.querySelector('#sign-in #sign-in-link')`, 20*time.Second)
	if href := evalJS[string](b, `document.querySelector('#sign-in-link').getAttribute('href')`); href != "/auth/login?next=%2Frequests" {
		t.Fatalf("sign-in link %q", href)
	}
	// The body's text only: pageText starts with the address, whose random port may hold "401".
	if text := evalJS[string](b, `document.body.innerText`); strings.Contains(text, "401") || strings.Contains(text, "UNAUTHENTICATED") || evalJS[bool](b, `!!document.querySelector('[data-demo-user], #user-switcher')`) {
		t.Fatalf("the signed-out page: %s", b.pageText())
	}
	b.screenshot("sign-in-oidc-laptop.png")
	b.click("#sign-in-link")
	b.waitFor("the identity provider's page", `!!document.querySelector('#sim-login [data-login="alice@example.com"]')`, 20*time.Second)
	b.click(`[data-login="alice@example.com"]`)
	b.waitFor("back at bindery, signed in", `location.pathname === '/requests' && document.querySelector('#who-name') && document.querySelector('#sign-out')`, 20*time.Second)
	if who := evalJS[string](b, `document.querySelector('#who-name').innerText`); !strings.Contains(who, "alice") {
		t.Fatalf("the header says %q", who)
	}
	if evalJS[bool](b, `document.cookie.includes('bindery_session')`) {
		t.Fatal("a script can read the session cookie")
	}

	b.click(`nav a[href="/settings"]`)
	b.waitFor("the tokens section", `document.querySelector('#token-form')`, 20*time.Second)
	b.do("fill the token form", chromedp.SendKeys(chromedp.CSS("#token-name"), "onboarding script"), chromedp.Click(chromedp.CSS("#scope-read-apply")))
	b.click("#token-make")
	b.waitFor("the new token, shown once", `document.querySelector('#new-token') && document.querySelector('#tokens tbody tr')`, 20*time.Second)
	token := evalJS[string](b, `document.querySelector('#new-token').innerText`)
	if !regexp.MustCompile(`^bdy_[A-Za-z0-9_-]{43}$`).MatchString(token) {
		t.Fatalf("token %q", token)
	}
	if row := evalJS[string](b, `document.querySelector('#tokens tbody tr').innerText`); !strings.Contains(row, "onboarding script") || !strings.Contains(row, "read and apply") || strings.Contains(row, token) {
		t.Fatalf("the listed token: %s", row)
	}
	if code := asScript(t, base, token); code != 200 {
		t.Fatalf("a script with the new token: %d", code)
	}
	b.screenshot("settings-tokens-laptop.png")
	b.click("#tokens [data-revoke]")
	b.waitFor("the revocation", `document.querySelector('#token-revoked') && !document.querySelector('#tokens')`, 20*time.Second)
	if code := asScript(t, base, token); code != 401 {
		t.Fatalf("a script with the revoked token: %d", code)
	}

	b.click("#sign-out")
	b.waitFor("signed out, back at Sign in", `document.querySelector('#sign-in #sign-in-link') && !document.querySelector('#sign-out')`, 20*time.Second)
	var sessions int
	if err := db.Raw().QueryRow("SELECT COUNT(*) FROM signin_session").Scan(&sessions); err != nil || sessions != 0 {
		t.Fatalf("%d sessions after sign-out (%v)", sessions, err)
	}
}

// asScript calls /api/me with token, as a script does.
func asScript(t *testing.T, base, token string) int {
	t.Helper()
	req, _ := http.NewRequestWithContext(context.Background(), "GET", base+"/api/me", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}
