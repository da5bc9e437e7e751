package sim

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-jose/go-jose/v4"

	"bindery/internal/platform/config"
)

// The simulated identity provider: an OpenID Connect provider of the authorization code flow
// (OpenID Connect Core 1.0, §3.1; PKCE, RFC 7636, S256 only) under /sim/oidc, so that bindery's
// sign-in is tested and shown against a provider over real HTTP:
//
//	GET  /sim/oidc/.well-known/openid-configuration   discovery
//	GET  /sim/oidc/authorize                          the sign-in page (or, with AutoLogin, the redirect at once)
//	POST /sim/oidc/authorize                          the person picked (login=<account>) or declined (deny=1)
//	POST /sim/oidc/token                              the code exchange (client_secret_basic or _post)
//	GET  /sim/oidc/keys                               the signing key (ES256)
//
// It is faithful where bindery's checks depend on it: an unregistered client or redirect URI is
// an error page, never a redirect; a code is good once, for one minute, for the client and
// redirect URI it was issued to, and only with the PKCE verifier of its challenge; the ID token
// carries the nonce of the authorization request. Faults are set with the Go API: SetFaults
// bends the next ID tokens (issuer, audience, expiry, nonce, claims), Inject the transport of
// an endpoint ("discovery", "authorize", "token", "keys").

// OIDCUser is a person the provider signs in.
type OIDCUser struct {
	Subject string
	Email   string
	Name    string
	Groups  []string
}

// OIDCClient is a registered client: its id, its secret ("" for a public client, PKCE only) and
// the redirect URIs it may use.
type OIDCClient struct {
	ID           string
	Secret       string
	RedirectURIs []string
}

// OIDCFaults bend the ID tokens the provider issues until changed.
type OIDCFaults struct {
	Issuer          string        // the iss claim instead of the provider's own
	Audience        string        // the aud claim instead of the client id
	ExpiredBy       time.Duration // exp this long before the token is issued
	Nonce           string        // the nonce claim instead of the request's
	Omit            []string      // claims left out (e.g. "email")
	EmailUnverified bool          // email_verified false
	Groups          any           // the groups claim instead of the user's (any JSON value)
	DiscoveryIssuer string        // the issuer the discovery document names instead of its own
}

// OIDC simulates an OpenID Connect provider.
type OIDC struct {
	opts Options
	gate *gate
	key  func() *ecdsa.PrivateKey

	mu        sync.Mutex
	users     []OIDCUser
	clients   map[string]OIDCClient
	codes     map[string]*oidcCode
	faults    OIDCFaults
	autoLogin string // account signed in without a page
}

type oidcCode struct {
	client, redirect, challenge, nonce string
	user                               OIDCUser
	issued                             time.Time
	used                               bool
}

// codeLife is how long an authorization code may be exchanged.
const codeLife = time.Minute

// tokenLife is how long an ID token is valid.
const tokenLife = 5 * time.Minute

func newOIDC(o Options) *OIDC {
	p := &OIDC{opts: o, gate: newGate(), clients: map[string]OIDCClient{}, codes: map[string]*oidcCode{}}
	// The key is made at the first use: most simulators never sign anybody in.
	p.key = sync.OnceValue(func() *ecdsa.PrivateKey {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			panic(err) // crypto/rand does not fail
		}
		return k
	})
	// The demo's people, so that a demo signed in through this provider is the same demo.
	p.users = []OIDCUser{
		{Subject: "u-1001", Email: "alice@example.com", Name: "alice", Groups: []string{"staff"}},
		{Subject: "u-1002", Email: "bob@example.com", Name: "bob", Groups: []string{"staff", "b-owners"}},
		{Subject: "u-1003", Email: "ops@example.com", Name: "ops", Groups: []string{"staff", "operators"}},
	}
	return p
}

// SetUsers replaces the people the provider signs in.
func (p *OIDC) SetUsers(users ...OIDCUser) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.users = slices.Clone(users)
}

// Register adds (or replaces) a client.
func (p *OIDC) Register(c OIDCClient) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.clients[c.ID] = c
}

// SetFaults bends the next ID tokens (the zero value: none).
func (p *OIDC) SetFaults(f OIDCFaults) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.faults = f
}

// AutoLogin makes the authorization endpoint sign account in at once, as a provider with a
// session of its own does ("" shows the sign-in page again).
func (p *OIDC) AutoLogin(account string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.autoLogin = account
}

// Inject makes the next times calls of endpoint ("discovery", "authorize", "token", "keys")
// misbehave as f.
func (p *OIDC) Inject(endpoint string, f Fault, times int) { p.gate.inject(endpoint, f, times) }

// Calls is how many calls of endpoint reached the provider.
func (p *OIDC) Calls(endpoint string) int { return p.gate.count(endpoint) }

// Issuer is the provider's issuer as a caller of r sees it (Options.PublicURL + "/oidc").
func (p *OIDC) Issuer(r *http.Request) string { return publicURL(p.opts, r) + "/oidc" }

// client is a registered client; the configuration's is registered unless the Go API
// registered its own: identity.oidc.clientID and its secret, redirecting to bindery's callback
// where bindery says it is — server.publicURL (what bindery sends as its redirect URL, and what
// docs/install.md registers), and Options.BinderyURL (the demo's own address).
func (p *OIDC) client(id string) (OIDCClient, bool) {
	p.mu.Lock()
	c, ok := p.clients[id]
	p.mu.Unlock()
	if ok {
		return c, true
	}
	snap := p.opts.Config.Current()
	if id == "" || id != snap.OIDCClientID() {
		return OIDCClient{}, false
	}
	c = OIDCClient{ID: id, Secret: snap.OIDCClientSecret()}
	for _, base := range []string{snap.PublicURL(), p.opts.BinderyURL} {
		if base != "" && !slices.Contains(c.RedirectURIs, base+"/auth/callback") {
			c.RedirectURIs = append(c.RedirectURIs, base+"/auth/callback")
		}
	}
	return c, len(c.RedirectURIs) > 0
}

// ServeHTTP serves /sim/oidc/….
func (p *OIDC) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var endpoint string
	var handle func(w http.ResponseWriter)
	switch path := strings.TrimPrefix(r.URL.Path, "/sim/oidc"); {
	case path == "/.well-known/openid-configuration" && r.Method == http.MethodGet:
		endpoint, handle = "discovery", func(w http.ResponseWriter) { p.discovery(w, r) }
	case path == "/authorize" && (r.Method == http.MethodGet || r.Method == http.MethodPost):
		endpoint, handle = "authorize", func(w http.ResponseWriter) { p.authorize(w, r) }
	case path == "/token" && r.Method == http.MethodPost:
		endpoint, handle = "token", func(w http.ResponseWriter) { p.token(w, r) }
	case path == "/keys" && r.Method == http.MethodGet:
		endpoint, handle = "keys", func(w http.ResponseWriter) { p.keys(w) }
	default:
		writeJSON(w, http.StatusNotFound, map[string]string{"error": "not_found"})
		return
	}
	p.gate.serve(w, r, endpoint, config.SimTransport{}, func(_ int, msg string) any {
		return map[string]string{"error": "server_error", "error_description": msg}
	}, handle)
}

func (p *OIDC) discovery(w http.ResponseWriter, r *http.Request) {
	iss := p.Issuer(r)
	p.mu.Lock()
	named := p.faults.DiscoveryIssuer
	p.mu.Unlock()
	if named == "" {
		named = iss
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"issuer":                                named,
		"authorization_endpoint":                iss + "/authorize",
		"token_endpoint":                        iss + "/token",
		"jwks_uri":                              iss + "/keys",
		"response_types_supported":              []string{"code"},
		"subject_types_supported":               []string{"public"},
		"id_token_signing_alg_values_supported": []string{"ES256"},
		"scopes_supported":                      []string{"openid", "email", "profile", "groups"},
		"token_endpoint_auth_methods_supported": []string{"client_secret_basic", "client_secret_post", "none"},
		"code_challenge_methods_supported":      []string{"S256"},
		"claims_supported":                      []string{"sub", "iss", "aud", "exp", "iat", "nonce", "email", "email_verified", "name", "groups"},
	})
}

// authorize checks the request; a client or redirect URI it does not know is answered here (the
// spec forbids redirecting to it), anything else wrong goes back to the client as error=.
func (p *OIDC) authorize(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseForm(); err != nil {
		oidcPage(w, http.StatusBadRequest, "Bad request", "The request could not be read.", nil)
		return
	}
	q := r.Form
	c, ok := p.client(q.Get("client_id"))
	redirect := q.Get("redirect_uri")
	if !ok || !slices.Contains(c.RedirectURIs, redirect) {
		oidcPage(w, http.StatusBadRequest, "Unknown client", "This application is not registered here, or asked to return to an address it did not register.", nil)
		return
	}
	back := func(params url.Values) {
		params.Set("state", q.Get("state"))
		http.Redirect(w, r, redirect+"?"+params.Encode(), http.StatusFound)
	}
	switch {
	case q.Get("response_type") != "code":
		back(url.Values{"error": {"unsupported_response_type"}})
		return
	case !slices.Contains(strings.Fields(q.Get("scope")), "openid"):
		back(url.Values{"error": {"invalid_scope"}})
		return
	case q.Get("code_challenge_method") != "S256" || q.Get("code_challenge") == "":
		// PKCE is required here, so that a client that stops sending it is caught.
		back(url.Values{"error": {"invalid_request"}, "error_description": {"PKCE with S256 is required"}})
		return
	case r.Method == http.MethodPost && q.Get("deny") != "":
		back(url.Values{"error": {"access_denied"}})
		return
	}
	account := q.Get("login")
	if r.Method == http.MethodGet {
		p.mu.Lock()
		account = p.autoLogin
		p.mu.Unlock()
	}
	if account == "" {
		p.loginPage(w, r, q)
		return
	}
	u, ok := p.user(account)
	if !ok {
		back(url.Values{"error": {"access_denied"}, "error_description": {"unknown user"}})
		return
	}
	code := randomText()
	p.mu.Lock()
	p.codes[code] = &oidcCode{client: c.ID, redirect: redirect, challenge: q.Get("code_challenge"), nonce: q.Get("nonce"), user: u, issued: p.opts.Clock.Now()}
	p.mu.Unlock()
	back(url.Values{"code": {code}})
}

func (p *OIDC) user(account string) (OIDCUser, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, u := range p.users {
		if strings.EqualFold(u.Email, account) || u.Subject == account {
			return u, true
		}
	}
	return OIDCUser{}, false
}

// token exchanges a code for an ID token.
func (p *OIDC) token(w http.ResponseWriter, r *http.Request) {
	refuse := func(status int, code, why string) {
		w.Header().Set("Cache-Control", "no-store")
		writeJSON(w, status, map[string]string{"error": code, "error_description": why})
	}
	if err := r.ParseForm(); err != nil || r.PostForm.Get("grant_type") != "authorization_code" {
		refuse(http.StatusBadRequest, "unsupported_grant_type", "only authorization_code")
		return
	}
	f := r.PostForm
	id, secret, basic := r.BasicAuth()
	if basic {
		id, _ = url.QueryUnescape(id)
		secret, _ = url.QueryUnescape(secret)
	} else {
		id, secret = f.Get("client_id"), f.Get("client_secret")
	}
	c, ok := p.client(id)
	if !ok || subtle.ConstantTimeCompare([]byte(c.Secret), []byte(secret)) != 1 {
		refuse(http.StatusUnauthorized, "invalid_client", "unknown client or wrong secret")
		return
	}
	p.mu.Lock()
	code, found := p.codes[f.Get("code")]
	var why string
	switch {
	case !found:
		why = "unknown code"
	case code.used:
		why = "code already used"
	case p.opts.Clock.Now().Sub(code.issued) > codeLife:
		why = "code expired"
	case code.client != c.ID || code.redirect != f.Get("redirect_uri"):
		why = "code issued to another client or redirect URI"
	case s256(f.Get("code_verifier")) != code.challenge:
		why = "PKCE verifier does not match the challenge"
	}
	if found {
		code.used = true // one exchange, right or wrong: a stolen code is spent by a failed try
	}
	faults := p.faults
	p.mu.Unlock()
	if why != "" {
		refuse(http.StatusBadRequest, "invalid_grant", why)
		return
	}
	idToken, err := p.sign(p.claims(r, c.ID, code, faults))
	if err != nil {
		refuse(http.StatusInternalServerError, "server_error", err.Error())
		return
	}
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusOK, map[string]any{"access_token": randomText(), "token_type": "Bearer", "expires_in": int(tokenLife / time.Second), "id_token": idToken})
}

// claims are an ID token's claims, bent by the faults in force.
func (p *OIDC) claims(r *http.Request, clientID string, code *oidcCode, f OIDCFaults) map[string]any {
	now := p.opts.Clock.Now()
	exp := now.Add(tokenLife)
	if f.ExpiredBy > 0 {
		exp = now.Add(-f.ExpiredBy)
	}
	c := map[string]any{
		"iss": p.Issuer(r), "sub": code.user.Subject, "aud": clientID, "iat": now.Unix(), "exp": exp.Unix(),
		"nonce": code.nonce, "email": code.user.Email, "email_verified": !f.EmailUnverified, "name": code.user.Name,
		"groups": code.user.Groups,
	}
	for name, v := range map[string]string{"iss": f.Issuer, "aud": f.Audience, "nonce": f.Nonce} {
		if v != "" {
			c[name] = v
		}
	}
	if f.Groups != nil {
		c["groups"] = f.Groups
	}
	for _, name := range f.Omit {
		delete(c, name)
	}
	return c
}

func (p *OIDC) sign(claims map[string]any) (string, error) {
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.ES256, Key: jose.JSONWebKey{Key: p.key(), KeyID: "sim-1"}},
		(&jose.SignerOptions{}).WithType("JWT"))
	if err != nil {
		return "", fmt.Errorf("signer: %w", err)
	}
	payload, err := json.Marshal(claims)
	if err != nil {
		return "", err
	}
	jws, err := signer.Sign(payload)
	if err != nil {
		return "", fmt.Errorf("sign: %w", err)
	}
	return jws.CompactSerialize()
}

func (p *OIDC) keys(w http.ResponseWriter) {
	writeJSON(w, http.StatusOK, jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{Key: &p.key().PublicKey, KeyID: "sim-1", Algorithm: string(jose.ES256), Use: "sig"}}})
}

func s256(verifier string) string {
	sum := sha256.Sum256([]byte(verifier))
	return base64.RawURLEncoding.EncodeToString(sum[:])
}

func randomText() string {
	b := make([]byte, 24)
	_, _ = rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}

// The sign-in page: one button per person (the provider's own sign-in, simulated), and one to
// decline.

const oidcStyle = `body{font:15px system-ui,sans-serif;margin:3em auto;max-width:28em;color:#222}
button{font:inherit;display:block;width:100%;margin:.4em 0;padding:.6em;border:1px solid #bbb;border-radius:4px;background:#f6f6f6;cursor:pointer}
.muted{color:#666;font-size:13px}`

var oidcLogin = template.Must(template.New("login").Parse(`<!doctype html>
<html><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>{{.Title}} · simulated identity provider</title><style>` + oidcStyle + `</style></head><body>
<p class="muted">Simulated identity provider</p>
<h1>{{.Title}}</h1>
<p>{{.Message}}</p>
{{if .Users}}<form method="post" action="/sim/oidc/authorize" id="sim-login">
{{range $k, $v := .Params}}<input type="hidden" name="{{$k}}" value="{{$v}}">{{end}}
{{range .Users}}<button type="submit" name="login" value="{{.Email}}" data-login="{{.Email}}">{{.Name}} <span class="muted">{{.Email}}</span></button>{{end}}
<button type="submit" name="deny" value="1" id="sim-deny">Do not sign in</button>
</form>{{end}}
</body></html>`))

func (p *OIDC) loginPage(w http.ResponseWriter, r *http.Request, q url.Values) {
	params := map[string]string{}
	for _, k := range []string{"response_type", "client_id", "redirect_uri", "scope", "state", "nonce", "code_challenge", "code_challenge_method"} {
		params[k] = q.Get(k)
	}
	p.mu.Lock()
	users := slices.Clone(p.users)
	p.mu.Unlock()
	// The form posts here and the answer redirects to the client: a browser holds a redirect
	// after a form to the page's form-action too.
	var extra string
	if u, err := url.Parse(q.Get("redirect_uri")); err == nil && u.Host != "" {
		extra = " " + u.Scheme + "://" + u.Host
	}
	oidcPage(w, http.StatusOK, "Sign in", "Pick who you are.", map[string]any{"Users": users, "Params": params, "FormAction": extra})
}

func oidcPage(w http.ResponseWriter, status int, title, message string, data map[string]any) {
	if data == nil {
		data = map[string]any{}
	}
	data["Title"], data["Message"] = title, message
	sum := sha256.Sum256([]byte(oidcStyle))
	extra, _ := data["FormAction"].(string)
	w.Header().Set("Content-Security-Policy", "default-src 'none'; style-src 'sha256-"+base64.StdEncoding.EncodeToString(sum[:])+
		"'; form-action 'self'"+extra+"; base-uri 'none'; frame-ancestors 'none'")
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = oidcLogin.Execute(w, data)
}

// AnswerSignIn is a person at the simulated provider's sign-in page picking account, for the
// authorization request authorize (the address a client sent the browser to): the provider's
// redirect back to the client, with its code — or its error, when it refuses.
func AnswerSignIn(ctx context.Context, authorize *url.URL, account string) (*url.URL, error) {
	form := authorize.Query()
	form.Set("login", account)
	target := *authorize
	target.RawQuery = ""
	return redirectOf(ctx, http.DefaultClient, "the provider's sign-in", http.MethodPost, target.String(), form)
}

// SignIn signs account in to bindery at binderyURL through this provider, as a browser would:
// GET /auth/login?next=…, the provider's page answered with account, then bindery's callback.
// hc must have a cookie jar: it holds bindery's session cookie afterwards. It is how a test or a
// script signs somebody in without a browser; the error says at which step it failed and, for
// bindery's refusal, what bindery answered.
func (p *OIDC) SignIn(ctx context.Context, hc *http.Client, binderyURL, next, account string) error {
	return SignIn(ctx, hc, binderyURL, next, account)
}

// SignIn is (*OIDC).SignIn for a simulated provider in another process (`bindery sim`'s
// /sim/oidc): whichever one bindery sends the browser to answers its page.
func SignIn(ctx context.Context, hc *http.Client, binderyURL, next, account string) error {
	if hc.Jar == nil {
		return errors.New("sign in: the client has no cookie jar to keep the session in")
	}
	authorize, err := redirectOf(ctx, hc, "bindery's /auth/login", http.MethodGet, strings.TrimRight(binderyURL, "/")+"/auth/login?next="+url.QueryEscape(next), nil)
	if err != nil {
		return err
	}
	callback, err := AnswerSignIn(ctx, authorize, account)
	if err != nil {
		return err
	}
	if e := callback.Query().Get("error"); e != "" {
		return fmt.Errorf("sign in: the provider refused: %s", e)
	}
	_, err = redirectOf(ctx, hc, "bindery's callback", http.MethodGet, callback.String(), nil)
	return err
}

// redirectOf sends one request with hc (its cookies, never following redirects) and returns
// where the answer redirects; any other answer is an error with the page's text.
func redirectOf(ctx context.Context, hc *http.Client, what, method, target string, form url.Values) (*url.URL, error) {
	noFollow := *hc
	noFollow.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequestWithContext(ctx, method, target, body)
	if err != nil {
		return nil, fmt.Errorf("sign in: %s: %w", what, err)
	}
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	resp, err := noFollow.Do(req)
	if err != nil {
		return nil, fmt.Errorf("sign in: %s: %w", what, err)
	}
	defer resp.Body.Close()
	page, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	loc, err := resp.Location()
	if resp.StatusCode/100 != 3 || err != nil {
		return nil, fmt.Errorf("sign in: %s answered %d: %s", what, resp.StatusCode, strings.Join(strings.Fields(tagsOut(string(page))), " "))
	}
	return loc, nil
}

// tagsOut is an HTML page's text, roughly: enough for an error message.
func tagsOut(page string) string {
	var b strings.Builder
	in := false
	for _, r := range page {
		switch {
		case r == '<':
			in = true
			b.WriteRune(' ')
		case r == '>':
			in = false
		case !in:
			b.WriteRune(r)
		}
	}
	return b.String()
}
