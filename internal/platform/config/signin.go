package config

import (
	"slices"
	"strings"
	"time"
)

// Sign-in area: bindery signing people in itself with OpenID Connect (identity.oidc.*), the
// server-side sessions that keep them signed in (identity.session.*), and the rate limit of
// refused credentials. Every key is dynamic: the server reads them at each request, so a
// rotated client secret or a shorter session applies without a restart.

type signinSettings struct {
	oidcIssuer       string // "" → people are signed in by the login header (or the demo)
	oidcClientID     string
	oidcClientSecret string
	oidcScopes       []string
	oidcAccountClaim string
	oidcGroupsClaim  string
	sessionIdle      time.Duration
	sessionAbsolute  time.Duration
}

// DefaultOIDCScopes are the scopes asked for when identity.oidc.scopes is missing.
var DefaultOIDCScopes = []string{"openid", "email", "profile"}

func init() {
	register(
		Key{
			Name: "identity.oidc.issuer", Type: "URL", Default: "(none: the login header)",
			Doc:       "The OpenID Connect provider bindery signs people in with (discovery at <issuer>/.well-known/openid-configuration). Set, it is the one way people sign in: GET /auth/login sends them there, the callback is server.publicURL + /auth/callback, a session cookie keeps them signed in, and identity.loginHeader is not read. Blank: the login header (or, in the demo, the user switcher).",
			Misconfig: "blank → the login header decides; a value that is not an http(s) URL rejects the file. A provider that cannot be reached does not stop the start: sign-in answers a page saying so until it can be reached (authentication fails closed, nothing else is affected).",
			apply: func(s *Snapshot, v value) (string, string, error) {
				u, note, err := httpURL("identity.oidc.issuer", v)
				if err != nil {
					return "", "", err
				}
				// The issuer is compared with the provider's discovery document character for
				// character, so it is kept as written (a trailing slash included).
				s.oidcIssuer = u
				return u, note, nil
			},
		},
		Key{
			Name: "identity.oidc.clientID", Type: "string", Default: "(none)",
			Doc:       "bindery's client id at the provider; ID tokens must be issued to it (their audience).",
			Misconfig: "blank with the issuer set → every sign-in answers that sign-in is not configured (authentication fails closed; the login header is still not read).",
			apply: func(s *Snapshot, v value) (string, string, error) {
				s.oidcClientID, _ = stringOr(v, "")
				if s.oidcIssuer != "" && s.oidcClientID == "" {
					return "", "blank with identity.oidc.issuer set: nobody can sign in", nil
				}
				return s.oidcClientID, blankOnly(v), nil
			},
		},
		Key{
			Name: "identity.oidc.clientSecret", Type: "string", Default: "(none: a public client)", Secret: true,
			Doc:       "bindery's client secret at the provider, sent with the code exchange. Never shown in a view or a log.",
			Misconfig: "missing/blank → bindery signs in as a public client (PKCE only), which a provider that expects a secret refuses: the sign-in page then says the provider did not accept it.",
			apply: func(s *Snapshot, v value) (string, string, error) {
				s.oidcClientSecret, _ = stringOr(v, "")
				return s.oidcClientSecret, blankOnly(v), nil
			},
		},
		Key{
			Name: "identity.oidc.scopes", Type: "list of strings", Default: strings.Join(DefaultOIDCScopes, ", "),
			Doc:       "Scopes asked of the provider at sign-in. openid is always asked.",
			Misconfig: "missing/blank or not a list → the default; a list without openid gets it added (a sign-in without it returns no ID token).",
			apply: func(s *Snapshot, v value) (string, string, error) {
				scopes, note := stringList(v)
				if len(scopes) == 0 {
					s.oidcScopes = slices.Clone(DefaultOIDCScopes)
					return strings.Join(s.oidcScopes, ", "), note, nil
				}
				if !slices.Contains(scopes, "openid") {
					scopes, note = append([]string{"openid"}, scopes...), "openid added"
				}
				s.oidcScopes = scopes
				return strings.Join(scopes, ", "), note, nil
			},
		},
		Key{
			Name: "identity.oidc.accountClaim", Type: "claim name", Default: "email",
			Doc:       "The ID token claim that names the person's account: an email-shaped account, or another spelling identity.directory maps to one. With email, a token whose email_verified is false is refused.",
			Misconfig: "missing/blank → email. A token without the claim, or with a value that names nobody, is refused with a page saying so (nobody is signed in under a guess).",
			apply: func(s *Snapshot, v value) (string, string, error) {
				var note string
				s.oidcAccountClaim, note = stringOr(v, "email")
				return s.oidcAccountClaim, note, nil
			},
		},
		Key{
			Name: "identity.oidc.groupsClaim", Type: "claim name", Default: "(none)",
			Doc:       "The ID token claim that lists the person's groups (a list of strings, or one string). They are kept with the session, and permission.rules may grant a rule code to \"group:NAME\".",
			Misconfig: "missing/blank → no groups are read; a token without the claim, or with a value that is not strings, gives no groups (rules naming groups then grant nothing: authorization fails closed).",
			apply: func(s *Snapshot, v value) (string, string, error) {
				s.oidcGroupsClaim, _ = stringOr(v, "")
				return s.oidcGroupsClaim, blankOnly(v), nil
			},
		},
		Key{
			Name: "identity.session.idle", Type: "duration", Default: "8h",
			Doc:       "A session unused for this long is over: the person signs in again. Use is recorded at most once a minute, so the idle time is exact to about a minute. Read at each request: a shorter value ends sessions idle beyond it at once.",
			Misconfig: "blank, unparsable or ≤ 0 → 8h.",
			apply: func(s *Snapshot, v value) (string, string, error) {
				var note string
				s.sessionIdle, note = durationOr(v, 8*time.Hour)
				return s.sessionIdle.String(), note, nil
			},
		},
		Key{
			Name: "identity.session.absolute", Type: "duration", Default: "168h",
			Doc:       "The longest a session lasts from its sign-in, used or not. Read at each request, like identity.session.idle.",
			Misconfig: "blank, unparsable or ≤ 0 → 168h.",
			apply: func(s *Snapshot, v value) (string, string, error) {
				var note string
				s.sessionAbsolute, note = durationOr(v, 168*time.Hour)
				return s.sessionAbsolute.String(), note, nil
			},
		},
		rateLimitKey("ratelimit.authFailures", 20, "Refused credentials per client address per window: an API token or a session cookie that authenticates nobody. Beyond it such requests answer 429 without being looked up."),
	)
}

// OIDCIssuer is identity.oidc.issuer, the OpenID Connect provider people sign in with. Default
// "" (the login header, or the demo's switcher, decides); a value that is not an http(s) URL
// rejects the file. Set, it is the only way people sign in: the login header is not read.
func (s *Snapshot) OIDCIssuer() string { return s.oidcIssuer }

// OIDCClientID is identity.oidc.clientID. Default ""; blank with the issuer set → every sign-in
// is refused as not configured (authentication fails closed).
func (s *Snapshot) OIDCClientID() string { return s.oidcClientID }

// OIDCClientSecret is identity.oidc.clientSecret (a secret: redacted in every view). Default "":
// a public client (PKCE only), which a provider that expects a secret refuses.
func (s *Snapshot) OIDCClientSecret() string { return s.oidcClientSecret }

// OIDCScopes is identity.oidc.scopes. Default [openid, email, profile]; blank or not a list →
// the default; openid is added when missing. Do not modify the slice.
func (s *Snapshot) OIDCScopes() []string { return s.oidcScopes }

// OIDCAccountClaim is identity.oidc.accountClaim, the claim naming the account. Default and
// blank → "email".
func (s *Snapshot) OIDCAccountClaim() string { return s.oidcAccountClaim }

// OIDCGroupsClaim is identity.oidc.groupsClaim. Default "" (no groups are read).
func (s *Snapshot) OIDCGroupsClaim() string { return s.oidcGroupsClaim }

// SessionIdle is identity.session.idle. Default 8h; blank, garbage or ≤ 0 → 8h.
func (s *Snapshot) SessionIdle() time.Duration { return s.sessionIdle }

// SessionAbsolute is identity.session.absolute. Default 168h; blank, garbage or ≤ 0 → 168h.
func (s *Snapshot) SessionAbsolute() time.Duration { return s.sessionAbsolute }
