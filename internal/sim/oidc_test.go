package sim_test

import (
	"bindery/internal/testkit"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"bindery/internal/platform/config"
	"bindery/internal/sim"
)

// The simulated identity provider is held to the code flow where bindery's checks depend on it:
// an unknown client or redirect URI is an error page (never a redirect there), PKCE (S256) is
// required and checked, a code is good once, for one minute, for its client and redirect URI.
func TestTheSimulatedProviderKeepsTheCodeFlowsRules(t *testing.T) {
	clock := testkit.NewClock(time.Date(2026, 3, 2, 9, 0, 0, 0, time.UTC))
	sims := sim.New(sim.Options{Config: config.NewStatic(config.MustParse("")), Clock: clock})
	ts := httptest.NewServer(sims.Handler())
	defer ts.Close()
	const redirect = "https://bindery.example/auth/callback"
	sims.OIDC.Register(sim.OIDCClient{ID: "bindery", Secret: "s", RedirectURIs: []string{redirect}})
	hc := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	verifier := strings.Repeat("v", 43)
	sum := sha256.Sum256([]byte(verifier))
	authorize := func(client, to, challenge string) *http.Response {
		t.Helper()
		form := url.Values{"response_type": {"code"}, "client_id": {client}, "redirect_uri": {to}, "scope": {"openid email"}, "state": {"st"},
			"nonce": {"n1"}, "code_challenge": {challenge}, "code_challenge_method": {"S256"}, "login": {"alice@example.com"}}
		resp, err := hc.PostForm(ts.URL+"/sim/oidc/authorize", form)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	code := func() string {
		resp := authorize("bindery", redirect, base64.RawURLEncoding.EncodeToString(sum[:]))
		loc, _ := resp.Location()
		if resp.StatusCode != http.StatusFound || loc == nil || !strings.HasPrefix(loc.String(), redirect) || loc.Query().Get("state") != "st" {
			t.Fatalf("authorize: %d %v", resp.StatusCode, loc)
		}
		return loc.Query().Get("code")
	}
	exchange := func(code, verifier, to string) (int, map[string]any) {
		t.Helper()
		req, _ := http.NewRequest("POST", ts.URL+"/sim/oidc/token", strings.NewReader(url.Values{"grant_type": {"authorization_code"}, "code": {code},
			"redirect_uri": {to}, "code_verifier": {verifier}}.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.SetBasicAuth("bindery", "s")
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out map[string]any
		json.NewDecoder(resp.Body).Decode(&out)
		return resp.StatusCode, out
	}

	for _, tc := range []struct{ client, to string }{{"nobody", redirect}, {"bindery", "https://evil.example/cb"}} {
		if resp := authorize(tc.client, tc.to, "x"); resp.StatusCode != 400 || resp.Header.Get("Location") != "" {
			t.Errorf("client %s to %s: %d %q, want an error page here", tc.client, tc.to, resp.StatusCode, resp.Header.Get("Location"))
		}
	}
	if resp := authorize("bindery", redirect, ""); !strings.Contains(resp.Header.Get("Location"), "error=invalid_request") {
		t.Errorf("no PKCE: %s", resp.Header.Get("Location"))
	}
	c := code()
	if status, out := exchange(c, verifier, redirect); status != 200 || out["id_token"] == nil {
		t.Fatalf("exchange: %d %v", status, out)
	}
	if status, out := exchange(c, verifier, redirect); status != 400 || out["error"] != "invalid_grant" {
		t.Fatalf("the same code again: %d %v", status, out)
	}
	if status, out := exchange(code(), strings.Repeat("w", 43), redirect); status != 400 || out["error"] != "invalid_grant" {
		t.Fatalf("another verifier: %d %v", status, out)
	}
	late := code()
	clock.Advance(61 * time.Second)
	if status, out := exchange(late, verifier, redirect); status != 400 || out["error"] != "invalid_grant" {
		t.Fatalf("an expired code: %d %v", status, out)
	}
	var disc map[string]any
	resp, _ := hc.Get(ts.URL + "/sim/oidc/.well-known/openid-configuration")
	json.NewDecoder(resp.Body).Decode(&disc)
	resp.Body.Close()
	if disc["issuer"] != ts.URL+"/sim/oidc" || disc["token_endpoint"] != ts.URL+"/sim/oidc/token" {
		t.Fatalf("discovery: %v", disc)
	}
}

// Without a client of the Go API's, the provider knows the one the configuration names
// (identity.oidc.clientID and its secret, as registered at a real provider), returning to
// bindery's callback under server.publicURL — what bindery sends, and what docs/install.md
// registers — and under Options.BinderyURL; no other address, and no other client.
func TestTheConfigurationsClientIsRegisteredAtBinderysAddresses(t *testing.T) {
	cfg := config.MustParse("server:\n  publicURL: https://bindery.example.com\nidentity:\n  oidc:\n    issuer: https://idp.invalid\n    clientID: bindery\n    clientSecret: s3cret\n")
	sims := sim.New(sim.Options{Config: config.NewStatic(cfg), BinderyURL: "http://127.0.0.1:8080"})
	ts := httptest.NewServer(sims.Handler())
	defer ts.Close()
	hc := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	authorize := func(client, to string) (int, string) {
		t.Helper()
		resp, err := hc.PostForm(ts.URL+"/sim/oidc/authorize", url.Values{"response_type": {"code"}, "client_id": {client}, "redirect_uri": {to},
			"scope": {"openid"}, "state": {"st"}, "nonce": {"n"}, "code_challenge": {"c"}, "code_challenge_method": {"S256"}, "login": {"alice@example.com"}})
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode, resp.Header.Get("Location")
	}
	for _, to := range []string{"https://bindery.example.com/auth/callback", "http://127.0.0.1:8080/auth/callback"} {
		if code, loc := authorize("bindery", to); code != http.StatusFound || !strings.HasPrefix(loc, to+"?") || !strings.Contains(loc, "code=") {
			t.Errorf("the configuration's client to %s: %d %q", to, code, loc)
		}
	}
	for _, tc := range []struct{ client, to string }{{"bindery", "https://bindery.example.com/elsewhere"}, {"other", "https://bindery.example.com/auth/callback"}} {
		if code, loc := authorize(tc.client, tc.to); code != http.StatusBadRequest || loc != "" {
			t.Errorf("client %s to %s: %d %q, want the error page", tc.client, tc.to, code, loc)
		}
	}
}
