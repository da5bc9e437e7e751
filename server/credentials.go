package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"bindery/internal/platform/config"
	"bindery/internal/platform/identity"
	"bindery/internal/platform/logging"
	"bindery/internal/platform/signin"
	"bindery/internal/vocab/apperr"
	"bindery/store"
)

// Who is calling (docs/api.md, 'Who may call'). One way of signing people in per deployment,
// chosen by the configuration in force: with identity.oidc.issuer set, the session cookie of a
// sign-in through the identity provider, and nothing else (the login header and the demo's
// switcher are not read); without it, the login header (and in the demo the switcher). A
// personal API token, sent as a bearer token, is read in either.

// callerOf resolves the request's caller once. It never answers: a refusal travels in
// Caller.Err (an *apperr.Error when there are words for it) to authentication.
func (s *Server) callerOf(r *http.Request, info *reqInfo) identity.Caller {
	snap := s.deps.Config.Current()
	if bearer, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok && strings.HasPrefix(strings.TrimSpace(bearer), signin.TokenPrefix) {
		return s.tokenCaller(r, info, snap, strings.TrimSpace(bearer))
	}
	if snap.OIDCIssuer() != "" {
		return s.sessionCaller(r, info, snap)
	}
	return identity.FromRequest(r, identity.Sources{
		LoginHeader: snap.LoginHeader(), Trusted: snap.TrustedProxies(), Demo: s.deps.Demo, Directory: snap.IdentityDirectory(),
	})
}

// sessionCaller is the caller of a session cookie. An expired session is no failure (it happens
// to everybody); a cookie that names no session counts as one.
func (s *Server) sessionCaller(r *http.Request, info *reqInfo, snap *config.Snapshot) identity.Caller {
	c, err := r.Cookie(signin.SessionCookie)
	if err != nil || c.Value == "" {
		return identity.Caller{Err: identity.ErrNone}
	}
	refused := func(words string, cause error) identity.Caller {
		return identity.Caller{From: identity.FromSession, Err: signInAgain(cause, words)}
	}
	if over := s.failuresOver(r, snap); over != nil {
		return identity.Caller{From: identity.FromSession, Err: over}
	}
	hash, ok := signin.SessionID(c.Value)
	if !ok {
		s.failed(r, snap)
		return refused("Your session cookie is not one bindery issued: sign in again.", errors.New("malformed session cookie"))
	}
	sess, err := s.deps.DB.SessionOf(r.Context(), hash, sessionLimits(snap))
	switch {
	case errors.Is(err, store.ErrNotFound):
		s.failed(r, snap)
		return refused("Your session is not known to bindery (you signed out, or it ended): sign in again.", err)
	case errors.Is(err, store.ErrSessionIdle):
		return refused(fmt.Sprintf("Your session ended after %s without use: sign in again.", words(snap.SessionIdle())), err)
	case errors.Is(err, store.ErrSessionAbsolute):
		return refused(fmt.Sprintf("Your session ended: a sign-in lasts %s at most. Sign in again.", words(snap.SessionAbsolute())), err)
	case err != nil:
		return identity.Caller{From: identity.FromSession, Err: notChecked(err)}
	}
	info.session = hash
	return identity.Caller{Identity: identity.Identity{ID: sess.Account, Name: sess.Name, Groups: sess.Groups}, Presented: sess.Account, From: identity.FromSession}
}

// notChecked is a credential the database could not look up: 503, try again — never a 401
// that would sign a person out for a database's hiccup.
func notChecked(err error) *apperr.Error {
	return apperr.Wrap(err, apperr.Unavailable, "bindery could not check who you are right now (its database did not answer); try again shortly.")
}

// signInAgain is a 401 that sends a person to sign in (the SPA shows its "Sign in" button).
func signInAgain(cause error, words string) *apperr.Error {
	e := apperr.Wrap(cause, apperr.Unauthenticated, "%s", words)
	e.LoginURL = loginPath
	return e
}

// loginPath is where a person signs in when bindery signs them in itself.
const loginPath = "/auth/login"

// sessionLimits are the session rules in force: use is written at most once a minute (or a
// tenth of the idle time, when that is shorter), so that a page that polls costs no write.
func sessionLimits(snap *config.Snapshot) store.SessionLimits {
	return store.SessionLimits{Idle: snap.SessionIdle(), Absolute: snap.SessionAbsolute(), Touch: min(time.Minute, snap.SessionIdle()/10)}
}

// tokenCaller is the caller of a personal API token: its owner, within its scopes (checked by
// authorization, withAuth). A token that is unknown, revoked or expired counts as a failure.
func (s *Server) tokenCaller(r *http.Request, info *reqInfo, snap *config.Snapshot, bearer string) identity.Caller {
	refused := func(words string, cause error) identity.Caller {
		return identity.Caller{From: identity.FromToken, Err: apperr.Wrap(cause, apperr.Unauthenticated, "%s", words)}
	}
	if over := s.failuresOver(r, snap); over != nil {
		return identity.Caller{From: identity.FromToken, Err: over}
	}
	presented, ok := signin.ParseToken(bearer)
	if !ok {
		s.failed(r, snap)
		return refused("This API token is not valid: it is not a token bindery issued.", errors.New("malformed API token"))
	}
	tok, err := s.deps.DB.TokenByLookup(r.Context(), presented.Lookup)
	switch {
	case errors.Is(err, store.ErrNotFound) || (err == nil && !signin.Equal(tok.SecretHash, presented.Hash)):
		s.failed(r, snap)
		return refused("This API token is not valid: bindery knows no such token.", errors.New("unknown API token"))
	case err != nil:
		return identity.Caller{From: identity.FromToken, Err: notChecked(err)}
	case !tok.RevokedAt.IsZero():
		s.failed(r, snap)
		return refused("This API token was revoked: create a new one on the Settings page.", fmt.Errorf("API token %d revoked", tok.ID))
	case tok.Expired:
		s.failed(r, snap)
		return refused(fmt.Sprintf("This API token expired on %s: create a new one on the Settings page.", tok.ExpiresAt.UTC().Format("2006-01-02 15:04 MST")),
			fmt.Errorf("API token %d expired", tok.ID))
	}
	info.token = &tok
	id, err := identity.Resolve(tok.Owner, snap.IdentityDirectory())
	if err != nil { // an owner stored from a resolved identity resolves again; a directory change
		id = identity.Identity{ID: tok.Owner} // may rename, never unmake, an email-shaped account
	}
	return identity.Caller{Identity: id, Presented: tok.Owner, From: identity.FromToken}
}

// failuresOver is the refusal of a request from a client address that presented too many
// refused credentials within the window (ratelimit.authFailures, this instance's share), before
// its own is looked at; nil when under the limit.
func (s *Server) failuresOver(r *http.Request, snap *config.Snapshot) *apperr.Error {
	d := s.limiter.Peek(failureKey(r, snap), s.deps.Share.Of(snap.RateLimit(failureLimit, failureDefault)), snap.RateWindow())
	if d.Allowed {
		return nil
	}
	s.rec.Inc("bindery_ratelimited_total", "bucket", failureBucket)
	e := apperr.New(apperr.RateLimited, "Too many refused sign-in credentials from your address; wait before trying again.")
	e.RetryAfter = d.RetryAfter
	return e
}

// failed counts one refused credential of the request's client address.
func (s *Server) failed(r *http.Request, snap *config.Snapshot) {
	s.limiter.Allow(failureKey(r, snap), s.deps.Share.Of(snap.RateLimit(failureLimit, failureDefault)), snap.RateWindow())
}

// The refused credentials' limit (docs/api.md, 'Rate limits'): keyed by the client address,
// since a refused credential names nobody.
const (
	failureBucket  = "authfail"
	failureLimit   = "ratelimit.authFailures"
	failureDefault = 20
)

func failureKey(r *http.Request, snap *config.Snapshot) string {
	return failureBucket + ":ip:" + identity.ClientAddr(r.RemoteAddr, r.Header.Values("X-Forwarded-For"), snap.TrustedProxies())
}

// words is a duration as a person reads it: "8h", "90m", "45s".
func words(d time.Duration) string {
	switch {
	case d%time.Hour == 0:
		return fmt.Sprintf("%dh", d/time.Hour)
	case d%time.Minute == 0:
		return fmt.Sprintf("%dm", d/time.Minute)
	}
	return d.Round(time.Second).String()
}

// clearSession tells the browser to forget a session cookie bindery refused, so that it stops
// sending it (and counting as a failure).
func (s *Server) clearSession(w http.ResponseWriter, r *http.Request) {
	http.SetCookie(w, signin.Cookie(signin.SessionCookie, "", "/", 0, s.secureCookies(r)))
}

// baseURL is bindery's own address as people reach it: server.publicURL; else the address the
// process listens on; else (a server built without one, in tests) the request's host.
func (s *Server) baseURL(r *http.Request) string {
	if u := s.deps.Config.Current().PublicURL(); u != "" {
		return u
	}
	if s.deps.ListenAddr != "" {
		return "http://" + s.deps.ListenAddr
	}
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	return scheme + "://" + r.Host
}

// secureCookies: cookies are Secure when bindery is reached over https.
func (s *Server) secureCookies(r *http.Request) bool {
	return strings.HasPrefix(s.baseURL(r), "https://")
}

// useToken records a use of the caller's API token before the route runs: its last use and an
// audit entry with its id (docs/api.md, 'API tokens'). A use that cannot be recorded is not run.
func (s *Server) useToken(ctx context.Context, r *http.Request, rt route, allowed bool) error {
	tok := infoOf(r).token
	err := s.deps.DB.UseToken(ctx, tok.ID, store.AuditEvent{
		Key: "token.use:" + logging.RequestID(ctx), Actor: tok.Owner, Action: "token.use", RequestID: logging.RequestID(ctx),
		Params: map[string]any{"id": tok.ID, "route": rt.name, "method": r.Method, "allowed": allowed},
	})
	if err != nil {
		return apperr.Wrap(err, apperr.Unavailable, "The use of this API token could not be recorded, so the request was not run; please retry.")
	}
	return nil
}
