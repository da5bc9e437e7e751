package server

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"bindery/internal/platform/config"
	"bindery/internal/platform/signin"
	"bindery/internal/sim"
	"bindery/store"
	"bindery/store/storetest"
)

// Signing in with OpenID Connect against the simulated identity provider over real HTTP (the
// provider is product code, faithful to the code flow with PKCE: internal/sim/oidc.go). The
// browser is the test: it carries cookies between bindery's answers (through the harness, so
// every exchange is held to the OpenAPI document) and the provider's.

// provider is the simulated identity provider on a listener of its own.
type provider struct {
	sims   *sim.Sims
	ts     *httptest.Server
	issuer string
}

const (
	clientID     = "bindery"
	clientSecret = "oidc-s3cret"
	// binderyURL is where the harness's requests go (httptest's default host): the callback
	// registered at the provider is this one's.
	binderyURL = "http://example.com"
)

func startProvider(t testing.TB) *provider {
	t.Helper()
	sims := sim.New(sim.Options{Config: config.NewStatic(config.MustParse(""))})
	ts := httptest.NewServer(sims.Handler())
	t.Cleanup(func() { ts.Close(); _ = sims.Stop(context.Background()) })
	sims.OIDC.Register(sim.OIDCClient{ID: clientID, Secret: clientSecret, RedirectURIs: []string{binderyURL + "/auth/callback"}})
	return &provider{sims: sims, ts: ts, issuer: ts.URL + "/sim/oidc"}
}

// oidcConfig is the harness configuration that signs people in through p.
func oidcConfig(p *provider, extra map[string]string) map[string]string {
	c := map[string]string{
		"identity.oidc":          fmt.Sprintf("{issuer: %q, clientID: %s, clientSecret: %s, groupsClaim: groups}", p.issuer, clientID, clientSecret),
		"authz.opsRule":          "bindery-ops",
		"ratelimit.authFailures": "",
	}
	for k, v := range extra {
		c[k] = v
	}
	return c
}

// browser is a person's browser: it keeps the cookies bindery sets, and sends them back.
type browser struct {
	t   testing.TB
	h   *harness
	jar map[string]*http.Cookie
}

func newBrowser(t testing.TB, h *harness) *browser {
	return &browser{t: t, h: h, jar: map[string]*http.Cookie{}}
}

// do sends c with the browser's cookies (for the path) and keeps what the answer sets.
func (b *browser) do(c call) *httptest.ResponseRecorder {
	b.t.Helper()
	if c.header == nil {
		c.header = map[string]string{}
	}
	var sent []string
	for _, ck := range b.jar {
		if strings.HasPrefix(strings.SplitN(c.path, "?", 2)[0], ck.Path) {
			sent = append(sent, ck.Name+"="+ck.Value)
		}
	}
	if len(sent) > 0 && c.header["Cookie"] == "" {
		c.header["Cookie"] = strings.Join(sent, "; ")
	}
	rec := b.h.do(c)
	for _, ck := range rec.Result().Cookies() {
		if ck.MaxAge < 0 {
			delete(b.jar, ck.Name)
		} else {
			b.jar[ck.Name] = ck
		}
	}
	return rec
}

// cookie is the value the browser holds for name ("" when none).
func (b *browser) cookie(name string) string {
	if c := b.jar[name]; c != nil {
		return c.Value
	}
	return ""
}

// login starts a sign-in at bindery and returns the provider's address it redirects to.
func (b *browser) login(next string) *url.URL {
	b.t.Helper()
	rec := b.do(call{method: "GET", path: "/auth/login?next=" + url.QueryEscape(next)})
	if rec.Code != http.StatusFound {
		b.t.Fatalf("GET /auth/login: %d %s", rec.Code, rec.Body)
	}
	loc, err := url.Parse(rec.Header().Get("Location"))
	if err != nil {
		b.t.Fatal(err)
	}
	return loc
}

// atProvider is the person at the provider's sign-in page picking account: the provider's
// redirect back to bindery.
func atProvider(t testing.TB, authorize *url.URL, account string) *url.URL {
	t.Helper()
	back, err := sim.AnswerSignIn(context.Background(), authorize, account)
	if err != nil {
		t.Fatal(err)
	}
	return back
}

// callback brings the provider's answer to bindery, as the browser does.
func (b *browser) callback(back *url.URL) *httptest.ResponseRecorder {
	b.t.Helper()
	return b.do(call{method: "GET", path: back.RequestURI()})
}

// signIn is the whole flow for account, returning bindery's answer to the callback.
func (b *browser) signIn(p *provider, account, next string) *httptest.ResponseRecorder {
	b.t.Helper()
	return b.callback(atProvider(b.t, b.login(next), account))
}

func counted(t testing.TB, db *store.DB, table string) int {
	t.Helper()
	var n int
	if err := db.Raw().QueryRow("SELECT COUNT(*) FROM " + table).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// The whole code flow, on both databases: a person without a session is sent to sign in; the
// provider is asked with a state, a nonce and a PKCE challenge; the callback starts a session
// whose cookie holds only a random id (the database only its hash); the person is then who the
// provider said, with the groups it named, and sign-out ends it.
func TestSignInWithTheIdentityProviderStartsASession(t *testing.T) {
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		p := startProvider(t)
		h := setup(t, options{serve: true, db: db, config: oidcConfig(p, nil)})
		b := newBrowser(t, h)

		rec := b.do(get("/api/me", ""))
		if rec.Code != 401 || !strings.Contains(rec.Body.String(), `"loginUrl":"/auth/login"`) || !strings.Contains(rec.Body.String(), "Sign-in required") {
			t.Fatalf("signed out: %d %s", rec.Code, rec.Body)
		}

		authorize := b.login("/requests?status=x")
		q := authorize.Query()
		if authorize.Scheme+"://"+authorize.Host+authorize.Path != p.issuer+"/authorize" || q.Get("client_id") != clientID ||
			q.Get("redirect_uri") != binderyURL+"/auth/callback" || q.Get("code_challenge_method") != "S256" || q.Get("code_challenge") == "" ||
			q.Get("nonce") == "" || q.Get("state") == "" || q.Get("scope") != "openid email profile" || q.Get("response_type") != "code" {
			t.Fatalf("sent to %s", authorize)
		}
		if got := b.jar[signin.AttemptCookie]; got == nil || got.Value != q.Get("state") || !got.HttpOnly || got.Path != signin.AttemptPath {
			t.Fatalf("the browser's state cookie: %+v", got)
		}
		var verifier string
		if err := db.Raw().QueryRow("SELECT verifier FROM signin_attempt").Scan(&verifier); err != nil || strings.Contains(authorize.String(), verifier) {
			t.Fatalf("the verifier (%v) is kept server-side and never sent before the exchange", err)
		}

		done := b.callback(atProvider(t, authorize, "bob@example.com"))
		if done.Code != http.StatusSeeOther || done.Header().Get("Location") != "/requests?status=x" {
			t.Fatalf("callback: %d %s %s", done.Code, done.Header().Get("Location"), done.Body)
		}
		sess := b.jar[signin.SessionCookie]
		if sess == nil || !sess.HttpOnly || sess.SameSite != http.SameSiteLaxMode || sess.Secure || sess.Path != "/" || sess.MaxAge != 168*3600 {
			t.Fatalf("session cookie: %+v", sess)
		}
		if b.cookie(signin.AttemptCookie) != "" {
			t.Fatal("the state cookie outlived the sign-in")
		}
		var account, idHash, groups string
		if err := db.Raw().QueryRow("SELECT account, id_hash, groups_json FROM signin_session").Scan(&account, &idHash, &groups); err != nil {
			t.Fatal(err)
		}
		if account != "bob@example.com" || idHash != signin.Hash(sess.Value) || idHash == sess.Value || groups != `["staff","b-owners"]` {
			t.Fatalf("session row: %s %s %s (cookie %s)", account, idHash, groups, sess.Value)
		}
		if n := counted(t, db, "signin_attempt"); n != 0 {
			t.Fatalf("%d sign-in attempts left", n)
		}

		me := b.do(get("/api/me", ""))
		if me.Code != 200 || !strings.Contains(me.Body.String(), `"identity":"bob@example.com","displayName":"bob"`) || !strings.Contains(me.Body.String(), `"signOut":true`) {
			t.Fatalf("me: %d %s", me.Code, me.Body)
		}
		// The groups the provider named reach the permission check: bob holds b-owners as a
		// group, so the restricted target is his to apply for.
		h.perms.grants = map[string][]string{"group:b-owners": {"b-owners"}}
		if rec := b.do(post("/api/apply", "", applyJSON("op-signed-in", "restricted-b"))); rec.Code != 202 {
			t.Fatalf("apply, signed in: %d %s", rec.Code, rec.Body)
		}
		if !strings.Contains(h.dbState(), "audit signin:") {
			t.Fatalf("the sign-in is not in the audit log:\n%s", h.dbState())
		}

		out := b.do(call{method: "POST", path: "/auth/logout"})
		if out.Code != 200 || !strings.Contains(out.Body.String(), `"signedOut":true`) || b.cookie(signin.SessionCookie) != "" {
			t.Fatalf("sign-out: %d %s, cookie %q", out.Code, out.Body, b.cookie(signin.SessionCookie))
		}
		if n := counted(t, db, "signin_session"); n != 0 {
			t.Fatalf("%d sessions after sign-out", n)
		}
		// Nothing secret reaches the log: the client secret, the session id, the state, the code.
		for what, secret := range map[string]string{"client secret": clientSecret, "session id": sess.Value, "state": q.Get("state"), "nonce": q.Get("nonce")} {
			if strings.Contains(h.logs.String(), secret) {
				t.Errorf("the log holds the %s", what)
			}
		}
		// The old cookie, kept by someone who copied it, is no session any more.
		stale := h.do(call{method: "GET", path: "/api/me", header: map[string]string{"Cookie": signin.SessionCookie + "=" + sess.Value}})
		if stale.Code != 401 || !strings.Contains(stale.Body.String(), "not known to bindery") {
			t.Fatalf("a signed-out cookie: %d %s", stale.Code, stale.Body)
		}
	})
}

// Every sign-in that goes wrong answers a page saying what happened, in words, with nothing
// internal in it — and leaves nothing behind: no session, no cookie, the sign-in's state spent.
func TestASignInThatGoesWrongSaysWhatHappenedAndStoresNothing(t *testing.T) {
	type flow struct {
		p *provider
		h *harness
		b *browser
	}
	for _, tc := range []struct {
		name   string
		run    func(f flow) *httptest.ResponseRecorder
		status int
		words  string
	}{
		{"an ID token of another issuer", func(f flow) *httptest.ResponseRecorder {
			f.p.sims.OIDC.SetFaults(sim.OIDCFaults{Issuer: "https://evil.example/realms/main"})
			return f.b.signIn(f.p, "alice@example.com", "/")
		}, 401, "issued by another identity provider"},
		{"an ID token for another application", func(f flow) *httptest.ResponseRecorder {
			f.p.sims.OIDC.SetFaults(sim.OIDCFaults{Audience: "another-app"})
			return f.b.signIn(f.p, "alice@example.com", "/")
		}, 401, "issued for another application"},
		{"an expired ID token", func(f flow) *httptest.ResponseRecorder {
			f.p.sims.OIDC.SetFaults(sim.OIDCFaults{ExpiredBy: time.Minute})
			return f.b.signIn(f.p, "alice@example.com", "/")
		}, 401, "had expired"},
		{"an ID token with another sign-in's nonce (a replay)", func(f flow) *httptest.ResponseRecorder {
			first := f.b.login("/")
			f.p.sims.OIDC.SetFaults(sim.OIDCFaults{Nonce: first.Query().Get("nonce")})
			return f.b.signIn(f.p, "alice@example.com", "/") // a second sign-in gets the first's nonce
		}, 401, "belongs to another sign-in"},
		{"a code used twice", func(f flow) *httptest.ResponseRecorder {
			first := atProvider(f.b.t, f.b.login("/"), "alice@example.com")
			if rec := f.b.callback(first); rec.Code != http.StatusSeeOther {
				f.b.t.Fatalf("the first use: %d %s", rec.Code, rec.Body)
			}
			f.b.do(call{method: "POST", path: "/auth/logout"})
			second := atProvider(f.b.t, f.b.login("/"), "alice@example.com")
			replay := second.Query()
			replay.Set("code", first.Query().Get("code")) // the new sign-in, with the spent code
			second.RawQuery = replay.Encode()
			return f.b.callback(second)
		}, 401, "did not accept this sign-in"},
		{"a replayed state", func(f flow) *httptest.ResponseRecorder {
			back := atProvider(f.b.t, f.b.login("/"), "alice@example.com")
			held := f.b.cookie(signin.AttemptCookie)
			if rec := f.b.callback(back); rec.Code != http.StatusSeeOther {
				f.b.t.Fatalf("the first use: %d %s", rec.Code, rec.Body)
			}
			f.b.do(call{method: "POST", path: "/auth/logout"})
			f.b.jar[signin.AttemptCookie] = &http.Cookie{Name: signin.AttemptCookie, Value: held, Path: signin.AttemptPath}
			return f.b.callback(back) // the same answer again, state cookie and all
		}, 400, "finished already"},
		{"a callback this browser did not start (a forged link)", func(f flow) *httptest.ResponseRecorder {
			other := newBrowser(f.b.t, f.h)
			back := atProvider(f.b.t, other.login("/"), "mallory@example.com")
			return f.b.callback(back)
		}, 400, "not started in this browser"},
		{"no account claim", func(f flow) *httptest.ResponseRecorder {
			f.p.sims.OIDC.SetFaults(sim.OIDCFaults{Omit: []string{"email"}})
			return f.b.signIn(f.p, "alice@example.com", "/")
		}, 401, `has no &#34;email&#34; claim`},
		{"an email the provider has not verified", func(f flow) *httptest.ResponseRecorder {
			f.p.sims.OIDC.SetFaults(sim.OIDCFaults{EmailUnverified: true})
			return f.b.signIn(f.p, "alice@example.com", "/")
		}, 401, "not verified"},
		{"the person declines at the provider", func(f flow) *httptest.ResponseRecorder {
			authorize := f.b.login("/")
			form := authorize.Query()
			form.Set("deny", "1")
			authorize.RawQuery = ""
			hc := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
			resp, err := hc.PostForm(authorize.String(), form)
			if err != nil {
				f.b.t.Fatal(err)
			}
			resp.Body.Close()
			back, _ := resp.Location()
			return f.b.callback(back)
		}, 401, `answered &#34;access_denied&#34;`},
		{"the provider's token endpoint fails", func(f flow) *httptest.ResponseRecorder {
			back := atProvider(f.b.t, f.b.login("/"), "alice@example.com")
			f.p.sims.OIDC.Inject("token", sim.FaultError, 1)
			return f.b.callback(back)
		}, 503, "cannot be reached"},
		{"a wrong client secret", func(f flow) *httptest.ResponseRecorder {
			f.p.sims.OIDC.Register(sim.OIDCClient{ID: clientID, Secret: "rotated", RedirectURIs: []string{binderyURL + "/auth/callback"}})
			return f.b.signIn(f.p, "alice@example.com", "/")
		}, 503, "refused bindery as its client"},
		{"a discovery document that names another issuer", func(f flow) *httptest.ResponseRecorder {
			f.p.sims.OIDC.SetFaults(sim.OIDCFaults{DiscoveryIssuer: "https://sso.example.com"})
			return f.b.do(call{method: "GET", path: "/auth/login"})
		}, 503, "does not answer as that provider"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := startProvider(t)
			h := setup(t, options{serve: true, config: oidcConfig(p, nil)})
			b := newBrowser(t, h)
			rec := tc.run(flow{p, h, b})
			body := rec.Body.String()
			if rec.Code != tc.status || !strings.Contains(body, tc.words) || !strings.Contains(body, `id="signin-message"`) {
				t.Fatalf("%d, want %d with %q:\n%s", rec.Code, tc.status, tc.words, body)
			}
			if m := leakPatterns.FindString(body); m != "" || len(body) > 4096 {
				t.Errorf("the page leaks %q (%d bytes)", m, len(body))
			}
			for _, leak := range []string{clientSecret, "invalid_grant", "error_description", "oidc:", "go-oidc", p.ts.Listener.Addr().String()} {
				if strings.Contains(body, leak) {
					t.Errorf("the page leaks %q:\n%s", leak, body)
				}
			}
			if strings.Contains(h.logs.String(), clientSecret) {
				t.Error("the log holds the client secret")
			}
			if b.cookie(signin.SessionCookie) != "" || counted(t, h.db, "signin_session") != 0 {
				t.Fatalf("a failed sign-in left a session (cookie %q, %d rows)", b.cookie(signin.SessionCookie), counted(t, h.db, "signin_session"))
			}
			if me := b.do(get("/api/me", "")); me.Code != 401 {
				t.Fatalf("after the failure, /api/me: %d", me.Code)
			}
		})
	}
}

// A sign-in only ever returns to a page of bindery's own: a next that names another host (an
// open redirect) is refused before anything is started.
func TestASignInReturnsOnlyToAPageOfBinderys(t *testing.T) {
	p := startProvider(t)
	h := setup(t, options{serve: true, config: oidcConfig(p, nil)})
	for _, next := range []string{
		"https://evil.example/", "//evil.example/x", "/\\evil.example", "\\\\evil.example", "http:evil.example", "javascript:alert(1)",
		"evil.example", "/ok\r\nLocation: https://evil.example", "/\x00", "/" + strings.Repeat("a", 2048),
	} {
		rec := h.do(call{method: "GET", path: "/auth/login?next=" + url.QueryEscape(next), outside: len(next) > 2048})
		if rec.Code != 400 || !strings.Contains(rec.Body.String(), "must be a page of bindery") || rec.Header().Get("Location") != "" {
			t.Errorf("next=%q: %d %s %s", next, rec.Code, rec.Header().Get("Location"), rec.Body)
		}
	}
	if n := counted(t, h.db, "signin_attempt"); n != 0 || p.sims.OIDC.Calls("discovery") != 0 {
		t.Fatalf("a refused next started %d sign-ins (%d discoveries)", n, p.sims.OIDC.Calls("discovery"))
	}
	for next, want := range map[string]string{"": "/", "/": "/", "/requests/op-1?x=1#top": "/requests/op-1?x=1#top", "/ops": "/ops", "/auth/logout": "/", "/%zz": "/"} {
		b := newBrowser(t, h)
		if rec := b.signIn(p, "alice@example.com", next); rec.Header().Get("Location") != want {
			t.Errorf("next=%q: back to %q, want %q", next, rec.Header().Get("Location"), want)
		}
	}
}

// A session ends by itself — idle too long, older than its absolute life, with words saying
// which — and a cookie bindery did not issue is nobody. Each refusal clears the cookie; a
// sign-in always starts a new session id, ending the browser's old one.
func TestASessionEndsWhenIdleTooOldOrUnknown(t *testing.T) {
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		p := startProvider(t)
		h := setup(t, options{serve: true, db: db, config: oidcConfig(p, map[string]string{"identity.session": "{idle: 2h, absolute: 12h}"})})
		signedIn := func() (*browser, string) {
			b := newBrowser(t, h)
			if rec := b.signIn(p, "alice@example.com", "/"); rec.Code != http.StatusSeeOther {
				t.Fatalf("sign-in: %d %s", rec.Code, rec.Body)
			}
			return b, signin.Hash(b.cookie(signin.SessionCookie))
		}
		refused := func(b *browser, words string) {
			t.Helper()
			rec := b.do(get("/api/me", ""))
			if rec.Code != 401 || !strings.Contains(rec.Body.String(), words) || !strings.Contains(rec.Body.String(), `"loginUrl":"/auth/login"`) {
				t.Fatalf("want 401 %q: %d %s", words, rec.Code, rec.Body)
			}
			if b.cookie(signin.SessionCookie) != "" {
				t.Fatal("the refused cookie was not cleared")
			}
		}

		b, hash := signedIn()
		storetest.Backdate(t, db, "signin_session", "seen_at", "id_hash", hash, 2*time.Hour+time.Minute)
		refused(b, "ended after 2h without use")

		b, hash = signedIn()
		storetest.Backdate(t, db, "signin_session", "seen_at", "id_hash", hash, 90*time.Minute) // used within idle…
		storetest.Backdate(t, db, "signin_session", "created_at", "id_hash", hash, 12*time.Hour+time.Minute)
		refused(b, "a sign-in lasts 12h at most") // …but too old

		b, _ = signedIn()
		v := []byte(b.cookie(signin.SessionCookie))
		v[0] = map[bool]byte{true: 'A', false: 'B'}[v[0] != 'A'] // one character changed, still base64url
		b.jar[signin.SessionCookie].Value = string(v)
		refused(b, "not known to bindery")
		b.jar[signin.SessionCookie] = &http.Cookie{Name: signin.SessionCookie, Value: "x'; DROP TABLE signin_session; --", Path: "/"}
		refused(b, "not one bindery issued")

		// A new sign-in in a browser with a session replaces it: a new id, the old row gone.
		b, first := signedIn()
		if rec := b.signIn(p, "alice@example.com", "/"); rec.Code != http.StatusSeeOther {
			t.Fatal(rec.Body)
		}
		if second := signin.Hash(b.cookie(signin.SessionCookie)); second == first {
			t.Fatal("a sign-in kept the session id")
		}
		var n int
		db.Raw().QueryRow("SELECT COUNT(*) FROM signin_session WHERE id_hash = ?", first).Scan(&n)
		if n != 0 {
			t.Fatal("the replaced session still exists")
		}
	})
}

// Several instances share sessions through the database: a sign-in at one is a session at the
// other, and a sign-out at the other ends it at the first.
func TestInstancesShareSessionsThroughTheDatabase(t *testing.T) {
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		p := startProvider(t)
		one := setup(t, options{serve: true, db: db, config: oidcConfig(p, nil)})
		two := setup(t, options{serve: true, db: db, config: oidcConfig(p, nil)})
		b := newBrowser(t, one)
		if rec := b.signIn(p, "ops@example.com", "/"); rec.Code != http.StatusSeeOther {
			t.Fatal(rec.Body)
		}
		b.h = two
		if rec := b.do(get("/api/me", "")); rec.Code != 200 || !strings.Contains(rec.Body.String(), "ops@example.com") {
			t.Fatalf("the other instance: %d %s", rec.Code, rec.Body)
		}
		cookie := b.cookie(signin.SessionCookie)
		if rec := b.do(call{method: "POST", path: "/auth/logout"}); rec.Code != 200 {
			t.Fatal(rec.Body)
		}
		rec := one.do(call{method: "GET", path: "/api/me", header: map[string]string{"Cookie": signin.SessionCookie + "=" + cookie}})
		if rec.Code != 401 {
			t.Fatalf("signed out at the other instance, the first still answers %d", rec.Code)
		}
	})
}

// With an issuer configured, signing in with the provider is the only way: the login proxy's
// header (even from a trusted proxy) and the demo's switcher are not read.
func TestWithAnIssuerTheLoginHeaderAndTheDemoSwitcherAreNotRead(t *testing.T) {
	p := startProvider(t)
	for _, serve := range []bool{true, false} {
		h := setup(t, options{serve: serve, config: oidcConfig(p, nil)})
		for _, c := range []call{
			{method: "GET", path: "/api/me", peer: "10.1.2.3:5000", header: map[string]string{"X-Forwarded-User": "ops@example.com"}, outside: true},
			{method: "GET", path: "/api/me", user: "ops"},
			{method: "GET", path: "/api/me", header: map[string]string{"Cookie": "bindery_user=ops"}, outside: true},
		} {
			if rec := h.do(c); rec.Code != 401 || !strings.Contains(rec.Body.String(), "/auth/login") {
				t.Errorf("demo %v, %+v: %d %s", !serve, c.header, rec.Code, rec.Body)
			}
		}
		if !serve {
			b := newBrowser(t, h)
			b.signIn(p, "alice@example.com", "/")
			me := b.do(get("/api/me", "")).Body.String()
			if !strings.Contains(me, `"demo":true`) || strings.Contains(me, "demoUsers") {
				t.Errorf("the demo signed in through the provider: %s (its switcher must be off)", me)
			}
		}
	}
	// Without an issuer, /auth/login says where people sign in instead.
	h := setup(t, options{serve: true})
	if rec := h.do(call{method: "GET", path: "/auth/login"}); rec.Code != 404 || !strings.Contains(rec.Body.String(), "sign-in in front of it") {
		t.Fatalf("/auth/login without an issuer: %d %s", rec.Code, rec.Body)
	}
}

// A provider that cannot be reached stops nothing but sign-in: bindery serves, a token's call
// works, and the sign-in page says the provider cannot be reached — until it can, when the
// next sign-in works without a restart.
func TestAProviderThatCannotBeReachedAffectsOnlySigningIn(t *testing.T) {
	p := startProvider(t)
	down := httptest.NewServer(p.sims.Handler())
	downIssuer := down.URL + "/sim/oidc"
	down.Close() // nothing listens there now
	h := setup(t, options{serve: true, config: oidcConfig(&provider{issuer: downIssuer}, nil)})
	if rec := h.do(get("/healthz", "")); rec.Code != 200 {
		t.Fatalf("healthz: %d", rec.Code)
	}
	token := mintToken(t, h, "alice@example.com", "read", "apply")
	if rec := h.do(call{method: "POST", path: "/api/apply", body: applyJSON("op-down", "public-a"), header: bearer(token)}); rec.Code != 202 {
		t.Fatalf("a token's apply while the provider is down: %d %s", rec.Code, rec.Body)
	}
	rec := h.do(call{method: "GET", path: "/auth/login"})
	if rec.Code != 503 || !strings.Contains(rec.Body.String(), "identity provider cannot be reached") || rec.Header().Get("Retry-After") == "" {
		t.Fatalf("sign-in with the provider down: %d %s", rec.Code, rec.Body)
	}
	if n := counted(t, h.db, "signin_attempt"); n != 0 {
		t.Fatalf("%d sign-ins started against a provider that cannot be reached", n)
	}
	// The provider is back (at the configured address): the next sign-in works.
	h.src.Replace(config.MustParse(configYAML(oidcConfig(p, nil))))
	if rec := newBrowser(t, h).signIn(p, "alice@example.com", "/"); rec.Code != http.StatusSeeOther {
		t.Fatalf("once the provider answers: %d %s", rec.Code, rec.Body)
	}
}

// Writes with a browser's credentials sent by another site's page are refused before anything
// of them runs (not even the rate limit counts them); the same writes from bindery's own page,
// a script's token, and the webhooks are not affected.
func TestWritesFromAnotherSitesPageAreRefused(t *testing.T) {
	p := startProvider(t)
	h := setup(t, options{serve: true, config: oidcConfig(p, map[string]string{"ratelimit.apply": "1"})})
	b := newBrowser(t, h)
	b.signIn(p, "alice@example.com", "/")
	for _, hdr := range []map[string]string{
		{"Sec-Fetch-Site": "cross-site"},
		{"Sec-Fetch-Site": "same-site", "Origin": "http://other.example.com"},
		{"Origin": "https://evil.example"},
	} {
		rec := b.do(call{method: "POST", path: "/api/apply", body: applyJSON("op-forged", "public-a"), header: hdr})
		if rec.Code != 403 || !strings.Contains(rec.Body.String(), `"code":"CROSS_ORIGIN"`) || !strings.Contains(rec.Body.String(), "another site") {
			t.Fatalf("%v: %d %s", hdr, rec.Code, rec.Body)
		}
		if rec := b.do(call{method: "POST", path: "/auth/logout", header: hdr}); rec.Code != 403 {
			t.Fatalf("a forged sign-out: %d %s", rec.Code, rec.Body)
		}
	}
	if h.wf.count("Apply") != 0 || counted(t, h.db, "signin_session") != 1 {
		t.Fatalf("a refused write ran (%d applications, %d sessions)", h.wf.count("Apply"), counted(t, h.db, "signin_session"))
	}
	// bindery's own page: the one application the limit of 1 allows (the forged ones used none).
	for _, hdr := range []map[string]string{{"Sec-Fetch-Site": "same-origin", "Origin": binderyURL}} {
		if rec := b.do(call{method: "POST", path: "/api/apply", body: applyJSON("op-own", "public-a"), header: hdr}); rec.Code != 202 {
			t.Fatalf("from bindery's own page: %d %s", rec.Code, rec.Body)
		}
	}
	token := mintToken(t, h, "bob@example.com", "read", "apply")
	hdr := bearer(token)
	hdr["Sec-Fetch-Site"], hdr["Origin"] = "cross-site", "https://ci.example"
	if rec := h.do(call{method: "POST", path: "/api/apply", body: applyJSON("op-script", "public-a"), header: hdr}); rec.Code != 202 {
		t.Fatalf("a token's call from anywhere: %d %s", rec.Code, rec.Body)
	}
	if rec := h.do(call{method: "POST", path: "/hooks/gitlab", body: `{"object_kind":"push"}`,
		header: map[string]string{"X-Gitlab-Token": "gtok", "Origin": "https://gitlab.example", "Sec-Fetch-Site": "cross-site"}}); rec.Code != 200 {
		t.Fatalf("a webhook: %d %s", rec.Code, rec.Body)
	}
}

// The demo's user switcher is a cookie too: its writes from another site's page are refused.
func TestTheDemoCookieIsProtectedFromOtherSites(t *testing.T) {
	h := setup(t, options{})
	rec := h.do(call{method: "POST", path: "/api/apply", body: applyJSON("op-demo", "public-a"), outside: true,
		header: map[string]string{"Cookie": "bindery_user=alice", "Sec-Fetch-Site": "cross-site"}})
	if rec.Code != 403 || !strings.Contains(rec.Body.String(), "CROSS_ORIGIN") {
		t.Fatalf("%d %s", rec.Code, rec.Body)
	}
	if rec := h.do(call{method: "POST", path: "/api/apply", body: applyJSON("op-demo", "public-a"), outside: true,
		header: map[string]string{"Cookie": "bindery_user=alice", "Sec-Fetch-Site": "same-origin"}}); rec.Code != 202 {
		t.Fatalf("from the demo's own page: %d %s", rec.Code, rec.Body)
	}
}

// Over https (server.publicURL), the cookies are Secure, and bindery's public origin is its own
// even behind a proxy that rewrites the Host header.
func TestOverHTTPSTheCookiesAreSecure(t *testing.T) {
	p := startProvider(t)
	p.sims.OIDC.Register(sim.OIDCClient{ID: clientID, Secret: clientSecret, RedirectURIs: []string{"https://bindery.example.com/auth/callback"}})
	h := setup(t, options{serve: true, config: oidcConfig(p, map[string]string{"server.publicURL": "https://bindery.example.com"})})
	b := newBrowser(t, h)
	authorize := b.login("/")
	if authorize.Query().Get("redirect_uri") != "https://bindery.example.com/auth/callback" || !b.jar[signin.AttemptCookie].Secure {
		t.Fatalf("redirect %s, state cookie %+v", authorize.Query().Get("redirect_uri"), b.jar[signin.AttemptCookie])
	}
	back := atProvider(t, authorize, "alice@example.com")
	if rec := b.callback(back); rec.Code != http.StatusSeeOther || !b.jar[signin.SessionCookie].Secure {
		t.Fatalf("callback %d, session cookie %+v", rec.Code, b.jar[signin.SessionCookie])
	}
	rec := b.do(call{method: "POST", path: "/api/apply", body: applyJSON("op-proxied", "public-a"), header: map[string]string{"Origin": "https://bindery.example.com"}})
	if rec.Code != 202 {
		t.Fatalf("from bindery's public origin behind a proxy: %d %s", rec.Code, rec.Body)
	}
}
