package signin

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/coreos/go-oidc/v3/oidc"
	"golang.org/x/oauth2"

	"bindery/internal/remote/outbound"
)

// Client is bindery as a client of the identity provider, from the configuration in force at a
// request (identity.oidc.*) and the address the provider sends people back to.
type Client struct {
	Issuer       string
	ClientID     string
	ClientSecret string
	Scopes       []string
	RedirectURL  string // server.publicURL + /auth/callback
}

// Options configure NewOIDC.
type Options struct {
	Metrics *metrics.Set // outbound call metrics (system "oidc"); nil: a private set
	Log     *slog.Logger // breaker changes; nil: discarded
	// Limits bound each call to the provider (timeout, breaker), read at each call.
	Limits func() outbound.Limits
	// Transport carries the calls; nil: a transport of its own (outbound.NewHTTPClient's).
	Transport http.RoundTripper
}

// OIDC is the relying party: it sends people to the provider and checks what comes back. One
// per process; the provider's discovery document is kept per issuer for discoveryFor, and read
// again at the first sign-in after a failure (a provider down at start delays nothing else).
type OIDC struct {
	hc *http.Client

	mu         sync.Mutex
	discovered map[string]discovery // by issuer
}

type discovery struct {
	provider *oidc.Provider
	at       time.Time
}

// discoveryFor is how long a discovery document is believed before it is read again.
const discoveryFor = time.Hour

// NewOIDC returns the relying party. It calls nothing until the first sign-in.
func NewOIDC(o Options) *OIDC {
	if o.Transport == nil {
		o.Transport = outbound.NewHTTPClient().Transport
	}
	if o.Limits == nil {
		o.Limits = func() outbound.Limits {
			return outbound.Limits{Timeout: 10 * time.Second, Failures: 5, Cooldown: 30 * time.Second}
		}
	}
	g := guarded{guard: outbound.NewGuard(system, o.Metrics, o.Log), base: o.Transport, limits: o.Limits}
	return &OIDC{hc: &http.Client{Transport: g, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }},
		discovered: map[string]discovery{}}
}

// Reason says why a sign-in failed; the server turns it into words and a status.
type Reason string

// The reasons. Each is one thing that went wrong, named so that the page a person reads (and
// the log an operator reads) says which.
const (
	Unreachable   Reason = "provider_unreachable"   // discovery, keys or the code exchange got no answer
	Misconfigured Reason = "provider_misconfigured" // the discovery document names another issuer, or is not one
	NotConfigured Reason = "not_configured"         // no issuer or no client id in the configuration
	CodeRefused   Reason = "code_refused"           // the provider refused the code (used twice, expired, PKCE mismatch)
	ClientRefused Reason = "client_refused"         // the provider refused bindery as a client (id or secret)
	NoIDToken     Reason = "no_id_token"            // the exchange answered without an ID token
	WrongIssuer   Reason = "wrong_issuer"           // the ID token was issued by another issuer
	WrongAudience Reason = "wrong_audience"         // the ID token was issued to another client
	Expired       Reason = "token_expired"          // the ID token's time is over
	Unverifiable  Reason = "token_unverifiable"     // signature, format or keys do not check out
	NonceMismatch Reason = "nonce_mismatch"         // the ID token belongs to another sign-in (a replay)
)

// Failure is a sign-in that failed for Reason; Cause, for the log, holds the detail (never shown
// to the person: it may carry the provider's text).
type Failure struct {
	Reason Reason
	Cause  error
}

func (f *Failure) Error() string {
	if f.Cause == nil {
		return "sign-in failed: " + string(f.Reason)
	}
	return fmt.Sprintf("sign-in failed: %s: %v", f.Reason, f.Cause)
}

func (f *Failure) Unwrap() error { return f.Cause }

func fail(r Reason, cause error) error { return &Failure{Reason: r, Cause: cause} }

// ReasonOf is the reason of a sign-in error ("" when it is not a Failure).
func ReasonOf(err error) Reason {
	var f *Failure
	if errors.As(err, &f) {
		return f.Reason
	}
	return ""
}

// Start is a sign-in on its way: where to send the person, and what the callback needs to
// finish it (the server stores State's hash, Nonce and Verifier; the browser holds State).
type Start struct {
	URL      string
	State    string
	Nonce    string
	Verifier string
}

// Begin starts a sign-in: discovery (once in a while), then the provider's address with the
// state, the nonce and the PKCE challenge (S256).
func (o *OIDC) Begin(ctx context.Context, c Client) (Start, error) {
	p, err := o.provider(ctx, c)
	if err != nil {
		return Start{}, err
	}
	s := Start{State: Random(), Nonce: Random(), Verifier: oauth2.GenerateVerifier()}
	s.URL = o.config(p, c).AuthCodeURL(s.State, oidc.Nonce(s.Nonce), oauth2.S256ChallengeOption(s.Verifier))
	return s, nil
}

// Claims are the verified claims of an ID token.
type Claims struct {
	Subject string
	all     map[string]any
}

// Finish exchanges the code (with the verifier of its sign-in) and checks the ID token: the
// issuer, the audience, the expiry and the signature (go-oidc), then that its nonce is the one
// this sign-in sent. A provider that cannot be reached is Unreachable; everything else names
// what was wrong.
func (o *OIDC) Finish(ctx context.Context, c Client, nonce, verifier, code string) (Claims, error) {
	p, err := o.provider(ctx, c)
	if err != nil {
		return Claims{}, err
	}
	tok, err := o.config(p, c).Exchange(context.WithValue(ctx, oauth2.HTTPClient, o.hc), code, oauth2.VerifierOption(verifier))
	if err != nil {
		return Claims{}, exchangeFailure(err)
	}
	raw, _ := tok.Extra("id_token").(string)
	if raw == "" {
		return Claims{}, fail(NoIDToken, errors.New("the token answer holds no id_token"))
	}
	idt, err := p.Verifier(&oidc.Config{ClientID: c.ClientID}).Verify(ctx, raw)
	if err != nil {
		return Claims{}, verifyFailure(err, raw, c)
	}
	if !Equal(idt.Nonce, nonce) {
		return Claims{}, fail(NonceMismatch, errors.New("the ID token's nonce is not this sign-in's"))
	}
	cl := Claims{Subject: idt.Subject}
	if err := idt.Claims(&cl.all); err != nil {
		return Claims{}, fail(Unverifiable, err)
	}
	return cl, nil
}

// Found is what Check found at the provider.
type Found struct {
	KeysURL string // the key set the discovery document names (jwks_uri)
	Keys    int    // how many keys it publishes
}

// Check reads the provider as sign-in does, for a check of a deployment that wants to know
// before a person tries: the discovery document (or the one read within the hour) by the same
// call and checks — its issuer must be c.Issuer character for character — with the endpoints a
// sign-in goes to, then the key set the ID tokens are verified with (read at the first sign-in
// otherwise). nil when people can sign in as far as the provider tells; else a Failure saying
// why. Nothing is kept of the key set.
func (o *OIDC) Check(ctx context.Context, c Client) (Found, error) {
	p, err := o.provider(ctx, c)
	if err != nil {
		return Found{}, err
	}
	var doc struct {
		KeysURL string `json:"jwks_uri"`
	}
	if err := p.Claims(&doc); err != nil || p.Endpoint().AuthURL == "" || p.Endpoint().TokenURL == "" || doc.KeysURL == "" {
		return Found{}, fail(Misconfigured, errors.New("the discovery document lacks the authorization, token or jwks endpoint"))
	}
	n, err := o.keys(ctx, doc.KeysURL)
	return Found{KeysURL: doc.KeysURL, Keys: n}, err
}

// keys counts the keys of a key set (RFC 7517): none, or no key set at all, is Misconfigured
// (no ID token could be verified); no answer is Unreachable.
func (o *OIDC) keys(ctx context.Context, u string) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return 0, fail(Misconfigured, fmt.Errorf("jwks_uri %q: %w", u, err))
	}
	resp, err := o.hc.Do(req)
	if err != nil {
		return 0, fail(Unreachable, err)
	}
	defer resp.Body.Close()
	var set struct {
		Keys []json.RawMessage `json:"keys"`
	}
	if resp.StatusCode != http.StatusOK {
		return 0, fail(Misconfigured, fmt.Errorf("GET %s: %s", u, resp.Status))
	}
	if err := json.NewDecoder(resp.Body).Decode(&set); err != nil || len(set.Keys) == 0 {
		return 0, fail(Misconfigured, fmt.Errorf("%s publishes no signing keys", u))
	}
	return len(set.Keys), nil
}

// provider is the issuer's discovery, read when not known or older than discoveryFor.
func (o *OIDC) provider(ctx context.Context, c Client) (*oidc.Provider, error) {
	if c.Issuer == "" || c.ClientID == "" {
		return nil, fail(NotConfigured, errors.New("identity.oidc.issuer or identity.oidc.clientID is blank"))
	}
	o.mu.Lock()
	d, ok := o.discovered[c.Issuer]
	o.mu.Unlock()
	if ok && time.Since(d.at) < discoveryFor {
		return d.provider, nil
	}
	p, err := oidc.NewProvider(oidc.ClientContext(ctx, o.hc), c.Issuer)
	var mismatch *oidc.IssuerMismatchError
	var oe *outbound.Error
	switch {
	case err == nil:
	case ok:
		// The provider we knew is there still, as far as anybody can tell: keep it, try later.
		return d.provider, nil
	case errors.As(err, &mismatch):
		return nil, fail(Misconfigured, err)
	case errors.As(err, &oe):
		return nil, fail(Unreachable, err)
	default:
		// An answer that is not a discovery document (a 404, an HTML page): the issuer is
		// wrong, or the provider is not up as itself.
		return nil, fail(Misconfigured, err)
	}
	o.mu.Lock()
	o.discovered[c.Issuer] = discovery{provider: p, at: time.Now()}
	o.mu.Unlock()
	return p, nil
}

// config is the code flow's client. The client authenticates with HTTP Basic
// (client_secret_basic, OpenID Connect's default), or, without a secret, as a public client
// naming itself in the form; never both in turn (oauth2's guessing would send a failed code
// exchange twice).
func (o *OIDC) config(p *oidc.Provider, c Client) *oauth2.Config {
	ep := p.Endpoint()
	ep.AuthStyle = oauth2.AuthStyleInHeader
	if c.ClientSecret == "" {
		ep.AuthStyle = oauth2.AuthStyleInParams
	}
	return &oauth2.Config{ClientID: c.ClientID, ClientSecret: c.ClientSecret, Endpoint: ep, RedirectURL: c.RedirectURL, Scopes: c.Scopes}
}

// exchangeFailure names why the code exchange failed.
func exchangeFailure(err error) error {
	var re *oauth2.RetrieveError
	var oe *outbound.Error
	switch {
	case errors.As(err, &oe):
		return fail(Unreachable, err)
	case errors.As(err, &re) && (re.ErrorCode == "invalid_client" || re.ErrorCode == "unauthorized_client"):
		return fail(ClientRefused, err)
	case errors.As(err, &re):
		return fail(CodeRefused, err)
	}
	return fail(Unreachable, err)
}

// verifyFailure names why go-oidc refused the ID token. go-oidc names only the expiry by type;
// for the issuer and the audience the token's own claims are read — unverified, only to choose
// the words of a refusal that stands either way.
func verifyFailure(err error, raw string, c Client) error {
	var expired *oidc.TokenExpiredError
	if errors.As(err, &expired) {
		return fail(Expired, err)
	}
	var claims struct {
		Issuer   string   `json:"iss"`
		Audience audience `json:"aud"`
	}
	if parts := strings.Split(raw, "."); len(parts) == 3 {
		if payload, derr := base64.RawURLEncoding.DecodeString(parts[1]); derr == nil && json.Unmarshal(payload, &claims) == nil {
			switch {
			case claims.Issuer != c.Issuer:
				return fail(WrongIssuer, err)
			case !slices.Contains(claims.Audience, c.ClientID):
				return fail(WrongAudience, err)
			}
		}
	}
	return fail(Unverifiable, err)
}

// audience is the aud claim: one string or a list.
type audience []string

func (a *audience) UnmarshalJSON(b []byte) error {
	var one string
	if json.Unmarshal(b, &one) == nil {
		*a = []string{one}
		return nil
	}
	return json.Unmarshal(b, (*[]string)(a))
}

// String is a claim's value when it is a string ("" otherwise).
func (c Claims) String(name string) string {
	s, _ := c.all[name].(string)
	return strings.TrimSpace(s)
}

// Has reports whether the token carries the claim.
func (c Claims) Has(name string) bool {
	_, ok := c.all[name]
	return ok
}

// EmailUnverified reports whether the token says its email address is not verified
// (email_verified false, or "false" as some providers write it).
func (c Claims) EmailUnverified() bool {
	switch v := c.all["email_verified"].(type) {
	case bool:
		return !v
	case string:
		return strings.EqualFold(v, "false")
	}
	return false
}

// Strings is a claim that lists strings (a list, or one string); other values give nothing.
// At most 100 values of at most 256 bytes are kept: a session row is no place for a dump.
func (c Claims) Strings(name string) []string {
	var out []string
	add := func(v any) {
		if s, ok := v.(string); ok && strings.TrimSpace(s) != "" && len(s) <= 256 && len(out) < 100 {
			out = append(out, strings.TrimSpace(s))
		}
	}
	switch v := c.all[name].(type) {
	case string:
		add(v)
	case []any:
		for _, e := range v {
			add(e)
		}
	}
	return out
}
