package app_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"os"
	"strings"
	"testing"

	"bindery/internal/platform/config"
	"bindery/internal/sim"
)

// `bindery demo` with identity.oidc set signs people in through that provider — here one that
// is not the demo's (a simulated identity provider on a listener of its own, as a team's would
// be) — and its user switcher is off. The sign-in is scripted over HTTP (sim.OIDC.SignIn, what a
// rehearsal of an installation uses); the session then applies and signs out. On both
// databases.
func TestTheDemoSignsInThroughTheConfiguredProvider(t *testing.T) {
	t.Parallel()
	eachDSN(t, func(t *testing.T, dsn string) {
		idp := sim.New(sim.Options{Config: config.NewStatic(config.MustParse(""))})
		ts := httptest.NewServer(idp.Handler())
		t.Cleanup(ts.Close)
		b := boot(t, dsn, fmt.Sprintf("identity:\n  oidc:\n    issuer: %s/sim/oidc\n    clientID: team-bindery\n    clientSecret: team-s3cret\n"+
			"apply:\n  mode: OPEN\ntargets:\n  - {key: a, title: A, project: p/q, path: \"x/{subject}.yaml\"}\n", ts.URL))
		idp.OIDC.Register(sim.OIDCClient{ID: "team-bindery", Secret: "team-s3cret", RedirectURIs: []string{b.URL() + "/auth/callback"}})

		if code, body := do(t, "GET", b.URL()+"/api/me", "alice", ""); code != 401 || !strings.Contains(body, "/auth/login") {
			t.Fatalf("the demo's switcher header with a provider configured: %d %s", code, body)
		}
		jar, _ := cookiejar.New(nil)
		hc := &http.Client{Jar: jar}
		if err := idp.OIDC.SignIn(context.Background(), hc, b.URL(), "/requests", "bob@example.com"); err != nil {
			t.Fatal(err)
		}
		call := func(method, path, body string) (int, string) {
			t.Helper()
			req, _ := http.NewRequest(method, b.URL()+path, strings.NewReader(body))
			if body != "" {
				req.Header.Set("Content-Type", "application/json")
			}
			resp, err := hc.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			data, _ := io.ReadAll(resp.Body)
			return resp.StatusCode, string(data)
		}
		if code, body := call("GET", "/api/me", ""); code != 200 || !strings.Contains(body, `"identity":"bob@example.com"`) || strings.Contains(body, "demoUsers") {
			t.Fatalf("me: %d %s", code, body)
		}
		if code, body := call("POST", "/api/apply", `{"operationId":"op-signed-in","targetKey":"a","reason":"r"}`); code != 202 {
			t.Fatalf("apply: %d %s", code, body)
		}
		if code, body := call("POST", "/auth/logout", ""); code != 200 || !strings.Contains(body, `"signedOut":true`) {
			t.Fatalf("sign-out: %d %s", code, body)
		}
		if code, _ := call("GET", "/api/me", ""); code != 401 {
			t.Fatalf("after sign-out: %d", code)
		}
	})
}

// A provider that cannot be reached when bindery starts does not stop it: it serves and is
// ready; only signing in says the provider cannot be reached.
func TestServeStartsWithTheProviderDown(t *testing.T) {
	t.Parallel()
	closed := httptest.NewServer(http.NotFoundHandler())
	issuer := closed.URL + "/realms/main"
	closed.Close()
	b := bootServe(t, "", fmt.Sprintf("database:\n  dsn: sqlite:%s/b.db\nidentity:\n  oidc:\n    issuer: %s\n    clientID: bindery\n", t.TempDir(), issuer))
	if code, body := get(t, b.URL()+"/readyz"); code != 200 {
		t.Fatalf("readyz: %d %s", code, body)
	}
	code, body := get(t, b.URL()+"/auth/login")
	if code != 503 || !strings.Contains(body, "identity provider cannot be reached") {
		t.Fatalf("sign-in: %d %s", code, body)
	}
	if data, _ := os.ReadFile(b.configPath); !strings.Contains(string(data), issuer) {
		t.Fatal("the test's configuration was not the one booted")
	}
}
