package server

import (
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	capoidc "github.com/hashicorp/cap/oidc"

	"bindery/internal/platform/signin"
	"bindery/store"
	"bindery/store/storetest"
)

// The same code flow against a provider bindery did not write: HashiCorp cap's test provider, in
// the test process, with its sign-in form (its interactive mode: a code per sign-in, good once,
// and the nonce of the request in the ID token). One difference is the provider's, not bindery's:
// cap's provider holds one PKCE verifier rather than checking each request's challenge, so the
// test hands it the verifier bindery keeps for the sign-in (the simulated provider checks S256
// for real). On both databases.
func TestSignInWithAnIndependentProviderImplementation(t *testing.T) {
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		p := capoidc.StartTestProvider(t, capoidc.WithNoTLS())
		p.SetClientCreds(clientID, clientSecret)
		p.SetAllowedRedirectURIs([]string{binderyURL + "/auth/callback"})
		p.SetSupportedScopes("openid", "email", "profile")
		p.SetExpectedExpiry(time.Minute)
		p.SetSubjectInfo(map[string]*capoidc.TestSubject{
			"carol": {Password: "pw", CustomClaims: map[string]any{"email": "carol@corp.example", "email_verified": true, "name": "Carol"}},
		})
		issuer := p.Addr()
		h := setup(t, options{serve: true, db: db, config: oidcConfig(&provider{issuer: issuer}, nil)})
		b := newBrowser(t, h)

		authorize := b.login("/requests")
		if !strings.HasPrefix(authorize.String(), issuer+"/authorize?") {
			t.Fatalf("sent to %s", authorize)
		}
		resp, err := http.Get(authorize.String())
		if err != nil {
			t.Fatal(err)
		}
		page, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		field := func(name string) string {
			m := regexp.MustCompile(`name="` + name + `" type="hidden" value="([^"]*)"`).FindSubmatch(page)
			if m == nil {
				t.Fatalf("the provider's sign-in form has no %s:\n%s", name, page)
			}
			return string(m[1])
		}
		var verifier string
		if err := db.Raw().QueryRow("SELECT verifier FROM signin_attempt").Scan(&verifier); err != nil {
			t.Fatal(err)
		}
		p.SetPKCEVerifier(heldVerifier(verifier))

		hc := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
		form := url.Values{"uname": {"carol"}, "psw": {"pw"}, "state": {field("state")}, "code": {field("code")}, "redirect_uri": {field("redirect_uri")}}
		resp, err = hc.PostForm(issuer+"/login", form)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		back, err := resp.Location()
		if err != nil {
			t.Fatalf("the provider's sign-in: %d", resp.StatusCode)
		}
		done := b.callback(back)
		if done.Code != http.StatusSeeOther || done.Header().Get("Location") != "/requests" {
			t.Fatalf("callback: %d %s", done.Code, done.Body)
		}
		me := b.do(get("/api/me", ""))
		if me.Code != 200 || !strings.Contains(me.Body.String(), `"identity":"carol@corp.example","displayName":"Carol"`) {
			t.Fatalf("me: %d %s", me.Code, me.Body)
		}

		// The provider's own rule: its code is good once. A second sign-in that brings it back is
		// refused by the provider, and bindery says so and signs nobody in.
		other := newBrowser(t, h)
		again := other.login("/")
		q := back.Query()
		q.Set("state", again.Query().Get("state"))
		back.RawQuery = q.Encode()
		if err := db.Raw().QueryRow("SELECT verifier FROM signin_attempt").Scan(&verifier); err != nil {
			t.Fatal(err)
		}
		p.SetPKCEVerifier(heldVerifier(verifier)) // the code is what is wrong, nothing else
		if rec := other.callback(back); rec.Code != 401 || !strings.Contains(rec.Body.String(), "did not accept this sign-in") || other.cookie(signin.SessionCookie) != "" {
			t.Fatalf("the code again: %d %s", rec.Code, rec.Body)
		}
	})
}

// heldVerifier is a PKCE verifier as cap's provider holds it.
type heldVerifier string

func (v heldVerifier) Verifier() string                { return string(v) }
func (v heldVerifier) Challenge() string               { return "" }
func (v heldVerifier) Method() capoidc.ChallengeMethod { return capoidc.S256 }
func (v heldVerifier) Copy() capoidc.CodeVerifier      { return v }
