package server

import (
	"errors"
	"html/template"
	"net/http"
	"net/url"
	"regexp"
	"time"

	"bindery/api"
	"bindery/internal/platform/config"
	"bindery/internal/platform/identity"
	"bindery/internal/platform/logging"
	"bindery/internal/platform/signin"
	"bindery/internal/vocab/apperr"
	"bindery/store"
)

// Signing in with OpenID Connect (docs/api.md, 'Who may call'): GET /auth/login sends a person
// to the identity provider, GET /auth/callback takes them back and starts a session, POST
// /auth/logout ends it. The first two are navigations of the browser, so they answer with a
// redirect or a page (an error's status from the one table, statusOf, its words on the page);
// sign-out is the page's call and answers JSON.

// attemptLife is how long a started sign-in may take at the provider.
const attemptLife = 10 * time.Minute

// client is bindery as the provider's client under the configuration in force.
func (s *Server) client(r *http.Request, snap *config.Snapshot, redirect string) signin.Client {
	if redirect == "" {
		redirect = s.baseURL(r) + "/auth/callback"
	}
	return signin.Client{Issuer: snap.OIDCIssuer(), ClientID: snap.OIDCClientID(), ClientSecret: snap.OIDCClientSecret(),
		Scopes: snap.OIDCScopes(), RedirectURL: redirect}
}

// signinStart is GET /auth/login?next=/path.
func (s *Server) signinStart(w http.ResponseWriter, r *http.Request) (int, any, error) {
	snap := s.deps.Config.Current()
	if snap.OIDCIssuer() == "" {
		return s.signinPage(w, r, apperr.New(apperr.NotFound, "bindery does not sign people in itself here: it takes who you are from the sign-in in front of it. Open bindery through your organisation's sign-in."))
	}
	next, ok := signin.SafeNext(r.URL.Query().Get("next"))
	if !ok {
		return s.signinPage(w, r, apperr.Invalid("next", "must be a page of bindery (a path such as /requests): this sign-in link would have sent you elsewhere afterwards, so it was not followed. Open bindery and sign in from there."))
	}
	c := s.client(r, snap, "")
	start, err := s.oidc.Begin(r.Context(), c)
	if err != nil {
		return s.signinPage(w, r, signinFailure(err))
	}
	err = s.deps.DB.PutSigninAttempt(r.Context(), store.SigninAttempt{StateHash: signin.Hash(start.State), Nonce: start.Nonce,
		Verifier: start.Verifier, NextPath: next, RedirectURL: c.RedirectURL}, attemptLife)
	if err != nil {
		return s.signinPage(w, r, apperr.Wrap(err, apperr.Unavailable, "bindery could not record the sign-in it was about to start; try again in a moment."))
	}
	http.SetCookie(w, signin.Cookie(signin.AttemptCookie, start.State, signin.AttemptPath, attemptLife, s.secureCookies(r)))
	w.Header().Set("Cache-Control", "no-store")
	http.Redirect(w, r, start.URL, http.StatusFound)
	return 0, nil, nil
}

// signinFinish is GET /auth/callback?state=…&code=…: the provider's answer. Every check comes
// before anything is stored; a session row and its cookie are the last step, or nothing is.
func (s *Server) signinFinish(w http.ResponseWriter, r *http.Request) (int, any, error) {
	snap := s.deps.Config.Current()
	q := r.URL.Query()
	// The sign-in is over whatever happens next: the browser forgets its state.
	http.SetCookie(w, signin.Cookie(signin.AttemptCookie, "", signin.AttemptPath, 0, s.secureCookies(r)))
	if snap.OIDCIssuer() == "" {
		return s.signinPage(w, r, apperr.New(apperr.NotFound, "bindery does not sign people in itself here (identity.oidc.issuer is not set): nothing was signed in."))
	}
	state := q.Get("state")
	if held, err := r.Cookie(signin.AttemptCookie); err != nil || state == "" || !signin.Equal(held.Value, state) {
		return s.signinPage(w, r, apperr.New(apperr.InvalidArgument, "This sign-in was not started in this browser, or it was finished already: nothing was signed in. Sign in again."))
	}
	attempt, err := s.deps.DB.TakeSigninAttempt(r.Context(), signin.Hash(state))
	switch {
	case errors.Is(err, store.ErrNotFound):
		return s.signinPage(w, r, apperr.Wrap(err, apperr.InvalidArgument, "This sign-in was finished already, or it took longer than %s: nothing was signed in. Sign in again.", words(attemptLife)))
	case err != nil:
		return s.signinPage(w, r, err)
	}
	if e := q.Get("error"); e != "" {
		return s.signinPage(w, r, apperr.New(apperr.Unauthenticated, "The identity provider did not sign you in (it answered %q): nothing was signed in.", errorCode(e)))
	}
	if q.Get("code") == "" {
		return s.signinPage(w, r, apperr.New(apperr.InvalidArgument, "The identity provider's answer carried no code: nothing was signed in. Sign in again."))
	}
	claims, err := s.oidc.Finish(r.Context(), s.client(r, snap, attempt.RedirectURL), attempt.Nonce, attempt.Verifier, q.Get("code"))
	if err != nil {
		return s.signinPage(w, r, signinFailure(err))
	}
	who, err := accountOf(claims, snap)
	if err != nil {
		return s.signinPage(w, r, err)
	}
	id := signin.Random()
	// A browser that had a session gets a new one: the old id ends with the sign-in (a fixed
	// id planted before the sign-in is worth nothing after it).
	var replaced string
	if old, err := r.Cookie(signin.SessionCookie); err == nil {
		replaced, _ = signin.SessionID(old.Value)
	}
	sess := store.Session{IDHash: signin.Hash(id), Account: who.ID, Name: who.Name, Groups: who.Groups}
	if err := s.deps.DB.CreateSession(r.Context(), sess, replaced); err != nil {
		return s.signinPage(w, r, apperr.Wrap(err, apperr.Unavailable, "You were signed in at the identity provider, but bindery could not record the session: nothing was signed in. Try again in a moment."))
	}
	s.auditSignin(r, "signin", who.ID, map[string]any{"groups": len(who.Groups)})
	http.SetCookie(w, signin.Cookie(signin.SessionCookie, id, "/", snap.SessionAbsolute(), s.secureCookies(r)))
	w.Header().Set("Cache-Control", "no-store")
	http.Redirect(w, r, attempt.NextPath, http.StatusSeeOther)
	return 0, nil, nil
}

// signout is POST /auth/logout: the session's row is deleted (on every instance at once) and
// the browser forgets the cookie. Signing out without a session is an answer, not an error.
func (s *Server) signout(w http.ResponseWriter, r *http.Request) (int, any, error) {
	ended := false
	if c, err := r.Cookie(signin.SessionCookie); err == nil {
		if hash, ok := signin.SessionID(c.Value); ok {
			if ended, err = s.deps.DB.EndSession(r.Context(), hash); err != nil {
				return 0, nil, apperr.Wrap(err, apperr.Unavailable, "bindery could not end your session; try again in a moment.")
			}
		}
	}
	s.clearSession(w, r)
	if ended {
		s.auditSignin(r, "signout", infoOf(r).caller.ID, nil)
	}
	return http.StatusOK, api.SignedOut{SignedOut: ended}, nil
}

// auditSignin records a sign-in or sign-out for operators. It does not hold the person back: the
// session is already decided, and a database that refused the record refuses the next request.
func (s *Server) auditSignin(r *http.Request, action, who string, params map[string]any) {
	if _, err := s.deps.DB.RecordAudit(r.Context(), store.AuditEvent{Key: action + ":" + logging.RequestID(r.Context()), Actor: who, Action: action,
		RequestID: logging.RequestID(r.Context()), Params: params}); err != nil {
		s.deps.Log.WarnContext(r.Context(), "sign-in not audited", "action", action, "identity", who, "err", err)
	}
}

// accountOf is the person an ID token names: the account claim (identity.oidc.accountClaim)
// through the one resolver, the display name, the groups (identity.oidc.groupsClaim).
func accountOf(c signin.Claims, snap *config.Snapshot) (identity.Identity, error) {
	claim := snap.OIDCAccountClaim()
	value := c.String(claim)
	if value == "" {
		return identity.Identity{}, apperr.New(apperr.Unauthenticated, "Your identity provider did not say who you are: its answer has no %q claim (identity.oidc.accountClaim). Nobody was signed in; the operators can name the claim that holds your account.", claim)
	}
	if claim == "email" && c.EmailUnverified() {
		return identity.Identity{}, apperr.New(apperr.Unauthenticated, "Your identity provider says your email address is not verified: nobody was signed in. Verify it there, then sign in again.")
	}
	id, err := identity.Resolve(value, snap.IdentityDirectory())
	if err != nil {
		return identity.Identity{}, apperr.Wrap(err, apperr.Unauthenticated, "The account your identity provider named (claim %q) is neither an email address nor in bindery's directory: nobody was signed in.", claim)
	}
	if name := c.String("name"); name != "" && len(name) <= 254 {
		id.Name = name
	}
	if g := snap.OIDCGroupsClaim(); g != "" {
		id.Groups = c.Strings(g)
	}
	return id, nil
}

// signinFailure is a failed sign-in in the one error model: what went wrong, in words a person
// reads (the cause, which may hold the provider's text, goes to the log only).
func signinFailure(err error) error {
	w, ok := signinWords[signin.ReasonOf(err)]
	if !ok {
		return err
	}
	return apperr.Wrap(err, w.code, "%s", w.words)
}

const (
	signInAgainWords = " Nothing was signed in; sign in again."
	operatorsWords   = " Nobody can sign in until the operators fix it; nothing else in bindery is affected."
)

// signinWords: a sign-in's failures and what a person reads of each. What a person can retry is
// 401; what only the provider's recovery or an operator's fix ends is 503.
var signinWords = map[signin.Reason]struct {
	code  apperr.Code
	words string
}{
	signin.Unreachable:   {apperr.Unavailable, "The identity provider cannot be reached right now, so nobody can sign in; nothing else in bindery is affected. Try again in a minute."},
	signin.NotConfigured: {apperr.Unavailable, "Sign-in is not configured completely (identity.oidc.clientID is blank)." + operatorsWords},
	signin.Misconfigured: {apperr.Unavailable, "The identity provider at the configured address does not answer as that provider (its discovery names another issuer, or is no discovery document)." + operatorsWords},
	signin.ClientRefused: {apperr.Unavailable, "The identity provider refused bindery as its client (identity.oidc.clientID or clientSecret is wrong)." + operatorsWords},
	signin.CodeRefused:   {apperr.Unauthenticated, "The identity provider did not accept this sign-in's code: it was used already, or it expired." + signInAgainWords},
	signin.NoIDToken:     {apperr.Unauthenticated, "The identity provider's answer held no ID token (is the openid scope allowed for bindery?)." + signInAgainWords},
	signin.WrongIssuer:   {apperr.Unauthenticated, "The sign-in answer was issued by another identity provider than the configured one, and was refused." + signInAgainWords},
	signin.WrongAudience: {apperr.Unauthenticated, "The sign-in answer was issued for another application, not for bindery, and was refused." + signInAgainWords},
	signin.Expired:       {apperr.Unauthenticated, "The sign-in answer had expired when it arrived (are the clocks of bindery and the identity provider right?)." + signInAgainWords},
	signin.Unverifiable:  {apperr.Unauthenticated, "The sign-in answer's signature could not be verified, and it was refused." + signInAgainWords},
	signin.NonceMismatch: {apperr.Unauthenticated, "The sign-in answer belongs to another sign-in (a replay), and was refused." + signInAgainWords},
}

// errorCodePattern: an OAuth error code is a short token; anything else is not repeated.
var errorCodePattern = regexp.MustCompile(`^[a-z_]{1,40}$`)

func errorCode(e string) string {
	if errorCodePattern.MatchString(e) {
		return e
	}
	return "an error"
}

// signinPage answers a navigation of the sign-in with err: its status from the one table, a
// small page with its words, and the way on (sign in again, open bindery).
func (s *Server) signinPage(w http.ResponseWriter, r *http.Request, err error) (int, any, error) {
	status, body := answerOf(w, r, s.deps.Log, err)
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	retry := s.deps.Config.Current().OIDCIssuer() != ""
	_ = signinTemplate.Execute(w, map[string]any{"Status": status, "Body": body, "Retry": retry, "Login": loginPath + "?next=" + url.QueryEscape("/")})
	return 0, nil, nil
}

var signinTemplate = template.Must(template.New("signin").Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>Sign-in · bindery</title></head><body>
<main id="signin-problem" data-code="{{.Body.Code}}">
<h1>Sign-in did not work</h1>
<p id="signin-message">{{.Body.Message}}</p>
<p>{{if .Retry}}<a href="{{.Login}}" id="signin-again">Sign in again</a> · {{end}}<a href="/">Open bindery</a></p>
<p><small>{{.Status}} {{.Body.Code}} · request id <code>{{.Body.RequestID}}</code></small></p>
</main></body></html>`))
