package server

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"bindery/api"
	"bindery/internal/platform/identity"
	"bindery/internal/remote/approval"
	"bindery/internal/vocab/apperr"
	"bindery/store"
)

// The interceptors (docs/api.md, 'Interceptors'). Each is a plain func(http.Handler) http.Handler
// that either passes the request on or writes its own answer; none knows a handler's response type.

// reqInfo is what the chain learned about a request before the handler runs.
type reqInfo struct {
	caller  identity.Caller
	session string          // the hash of the caller's session id (a sign-in with OpenID Connect)
	token   *store.APIToken // the caller's personal API token
	body    []byte          // the body, once read (by the approval hook's authentication or endpoint)
	read    bool
	owned   *api.RequestView // an owner-checked route's request, loaded by authorization
}

type infoKey struct{}

func infoOf(r *http.Request) *reqInfo {
	if i, ok := r.Context().Value(infoKey{}).(*reqInfo); ok {
		return i
	}
	return &reqInfo{caller: identity.Caller{Err: identity.ErrNone}}
}

// withCaller resolves who is calling, once per request, from the config in force (callerOf),
// on the routes of people; the webhooks, the metrics and the public routes have no caller. It
// never answers: the rate limit keys on the result, authentication enforces it.
func (s *Server) withCaller(rt route, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		info := &reqInfo{caller: identity.Caller{Err: identity.ErrNone}}
		r = r.WithContext(context.WithValue(r.Context(), infoKey{}, info))
		if rt.auth.people() {
			info.caller = s.callerOf(r, info)
		}
		next.ServeHTTP(w, r)
	})
}

// withCrossOrigin refuses a write of a person's browser that another site's page sent
// (docs/api.md, 'Cross-origin writes'): net/http's CrossOriginProtection reads Sec-Fetch-Site,
// else Origin against the host (and server.publicURL's origin is bindery's own too). A browser's
// credentials — the session cookie, the demo's cookie, a login proxy's cookie behind its header —
// go with such a request by themselves; a personal API token does not, so a token's call is not
// looked at, nor are the webhooks. It runs before the rate limit: a forged request must not
// use up the victim's quota.
func (s *Server) withCrossOrigin(rt route, next http.Handler) http.Handler {
	if !rt.auth.people() {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := s.cop.Check(r); err != nil && !infoOf(r).caller.ByToken() {
			s.rec.Inc("bindery_http_refused_total", "route", rt.name, "code", string(apperr.CrossOrigin))
			s.fail(w, r, apperr.Wrap(err, apperr.CrossOrigin, "This change was sent by a page of another site, and was refused: bindery takes changes only from its own pages."))
			return
		}
		next.ServeHTTP(w, r)
	})
}

// withRateLimit is step 1. The limit is read from config at every request (missing → the
// route's default; blank, garbage or ≤ 0 → no limiting) and divided between the live instances.
// The subject is the canonical identity, else "ip:" + the client address — never one shared
// bucket for every unknown caller.
func (s *Server) withRateLimit(spec *rateSpec, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		snap := s.deps.Config.Current()
		limit := s.deps.Share.Of(snap.RateLimit(spec.key, spec.def))
		if limit > 0 {
			// The client address is worked out only for a caller without an identity: it walks
			// X-Forwarded-For, which every other request would pay for nothing.
			var subject string
			if c := infoOf(r).caller; c.Authenticated() {
				subject = c.ID
			} else {
				subject = "ip:" + identity.ClientAddr(r.RemoteAddr, r.Header.Values("X-Forwarded-For"), snap.TrustedProxies())
			}
			if d := s.limiter.Allow(spec.bucket+":"+subject, limit, snap.RateWindow()); !d.Allowed {
				s.rec.Inc("bindery_ratelimited_total", "bucket", spec.bucket)
				w.Header().Set("Retry-After", strconv.Itoa(int((d.RetryAfter+time.Second-1)/time.Second)))
				s.fail(w, r, apperr.New(apperr.RateLimited, "%s", spec.message))
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

// withAuth is step 2: 401 when there is no identity (or the login layer failed), 403 "Access
// denied" when the identity lacks the route's rule. Webhooks authenticate their sender here;
// any failure is 401 and nothing is recorded.
func (s *Server) withAuth(rt route, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var err error
		switch rt.auth {
		case authUser, authOwnerOrOps, authOps:
			// The owner check of authOwnerOrOps follows in endpoint, before the body. A token
			// is held to its scopes first: an ops route answers a token that it is not for
			// tokens, whoever owns it.
			err = s.authenticate(w, r)
			if err == nil && infoOf(r).token != nil {
				err = s.tokenUse(r, rt)
			}
			if err == nil && rt.auth == authOps && !s.isOperator(r.Context(), infoOf(r).caller) {
				err = apperr.Denied(errors.New("not an operator"))
			}
		case authApprovalHook:
			err = s.verifyApproval(w, r, rt.body)
		case authGitLabHook:
			err = checkToken(r.Header.Get("X-Gitlab-Token"), s.deps.Config.Current().GitLabHookToken(), "X-Gitlab-Token")
		case authMetrics:
			err = s.metricsAllowed(r)
		case authDeployHook:
			got, _ := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
			err = checkToken(strings.TrimSpace(got), s.deps.Config.Current().DeployToken(), "deploy bearer token")
		}
		if err != nil {
			s.rec.Inc("bindery_http_refused_total", "route", rt.name, "code", string(apperr.CodeOf(err)))
			s.fail(w, r, err)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// tokenUse holds a personal API token to what it may do on rt (before the owner check, which
// then holds it to its owner's requests) and audits the use, allowed or not, with its id.
func (s *Server) tokenUse(r *http.Request, rt route) error {
	refused := tokenAllowed(rt, infoOf(r).token.Scopes)
	if err := s.useToken(r.Context(), r, rt, refused == nil); err != nil {
		return err
	}
	return refused
}

// metricsAllowed: /metrics carries the shape of the traffic and the state of every dependency,
// so it is not public. On the API's listener it is served to loopback and server.trustedProxies
// (where a scraper runs beside bindery), and to anyone with server.metricsToken; with
// server.metricsAddr set it lives on that listener only (MetricsHandler), not here.
func (s *Server) metricsAllowed(r *http.Request) error {
	snap := s.deps.Config.Current()
	if s.started.MetricsAddr() != "" { // static: the listener was bound, or not, at the start
		return apperr.New(apperr.NotFound, "No such page: metrics are served on server.metricsAddr.")
	}
	if _, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok && snap.MetricsToken() != "" {
		return metricsBearer(r, snap.MetricsToken())
	}
	if identity.PeerTrusted(r.RemoteAddr, snap.TrustedProxies()) || loopback(r.RemoteAddr) {
		return nil
	}
	return apperr.New(apperr.Unauthenticated, "Metrics are served to loopback, server.trustedProxies and the bearer of server.metricsToken.")
}

// metricsBearer checks the request's bearer token against server.metricsToken.
func metricsBearer(r *http.Request, token string) error {
	got, _ := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if err := checkToken(strings.TrimSpace(got), token, "metrics token"); err != nil {
		return apperr.Wrap(err, apperr.Unauthenticated, "The metrics token is missing or wrong.")
	}
	return nil
}

func loopback(remoteAddr string) bool {
	ap, err := netip.ParseAddrPort(remoteAddr)
	return err == nil && ap.Addr().Unmap().IsLoopback()
}

// authenticate is 401 without an identity, in the words of why: the refusal a credential got
// (callerOf), else how to sign in — bindery's own sign-in (loginUrl /auth/login), the demo's
// users, or server.loginURL. A session cookie that was refused is cleared.
func (s *Server) authenticate(w http.ResponseWriter, r *http.Request) error {
	c := infoOf(r).caller
	if c.Authenticated() {
		return nil
	}
	if c.From == identity.FromSession {
		s.clearSession(w, r)
	}
	if e := apperr.As(c.Err); e != nil {
		return e
	}
	msg, login := "Sign-in required.", ""
	switch {
	case s.deps.Config.Current().OIDCIssuer() != "":
		login = loginPath
		msg = "Sign-in required: sign in with your organisation's account."
	case s.deps.Demo:
		// The SPA's first page reads the names, and who each one is, from this sentence: keep
		// its shape ("name (who)" or "name", separated by commas).
		msg = "Pick a demo user: " + strings.Join(s.demoUsersWords(), ", ") + "."
	case s.deps.Config.Current().LoginURL() != "":
		login = s.deps.Config.Current().LoginURL()
		msg = "Sign-in required: sign in at " + login + ", then reload."
	}
	e := apperr.Wrap(fmt.Errorf("no identity (%s): %w", c.From, c.Err), apperr.Unauthenticated, "%s", msg)
	e.LoginURL = login
	return e
}

// hookRefused is the one answer to a webhook whose sender is not authenticated.
func hookRefused(cause error) error {
	return apperr.Wrap(cause, apperr.Unauthenticated, "Callback authentication failed.")
}

// checkToken compares a presented token with the configured one in constant time (hashing
// both first, so not even the length leaks). An unconfigured token refuses everything.
func checkToken(got, want, what string) error {
	if want == "" {
		return hookRefused(fmt.Errorf("%s not configured", what))
	}
	g, w := sha256.Sum256([]byte(got)), sha256.Sum256([]byte(want))
	if subtle.ConstantTimeCompare(g[:], w[:]) != 1 {
		return hookRefused(fmt.Errorf("%s mismatch", what))
	}
	return nil
}

// verifyApproval reads the body (the signature covers it) and checks timestamp and HMAC.
func (s *Server) verifyApproval(w http.ResponseWriter, r *http.Request, limit int64) error {
	if err := readBody(w, r, limit); err != nil {
		return err
	}
	snap := s.deps.Config.Current()
	err := approval.Verify(snap.ApprovalSecret(), r.Header.Get(approval.TimestampHeader), r.Header.Get(approval.SignatureHeader),
		infoOf(r).body, s.now(), snap.ApprovalSkew())
	if err != nil {
		return hookRefused(err)
	}
	return nil
}

// isOperator asks the permission service whether the caller holds authz.opsRule. A caller with
// an API token never does: a token carries no operator's powers (docs/api.md, 'API tokens').
func (s *Server) isOperator(ctx context.Context, c identity.Caller) bool {
	ok, _ := s.operator(ctx, c)
	return ok
}

// operator is isOperator that tells a refusal from a check that did not answer (errPermission:
// an error, a panic or a timeout of the permission service): both grant nothing, but a caller
// that would otherwise be told something false (someone else's request "not found") says that
// the check did not answer.
func (s *Server) operator(ctx context.Context, c identity.Caller) (bool, error) {
	if c.ByToken() {
		return false, nil
	}
	return s.permitted(ctx, c, s.deps.Config.Current().OpsRule())
}

// errPermission: the permission service did not answer (an error, a panic or a timeout).
var errPermission = errors.New("the permission check did not answer")

// orOps is codes and the ops rule, which grants whatever codes guard — except to an API token.
func (s *Server) orOps(c identity.Caller, codes []string) []string {
	out := append([]string{}, codes...)
	if !c.ByToken() {
		out = append(out, s.deps.Config.Current().OpsRule())
	}
	return out
}

// permit asks whether the caller (or one of its groups) holds any of codes, in one round trip.
// It fails closed: no code configured, no permission service, an error, a panic or a timeout all
// answer false. The deadline holds even if the service ignores its context.
func (s *Server) permit(ctx context.Context, c identity.Caller, codes ...string) bool {
	ok, _ := s.permitted(ctx, c, codes...)
	return ok
}

// permitted is permit with the reason of a false that is no refusal: errPermission when the
// service did not answer.
func (s *Server) permitted(ctx context.Context, c identity.Caller, codes ...string) (bool, error) {
	id := c.ID
	var rules []string
	for _, c := range codes {
		if c = strings.TrimSpace(c); c != "" {
			rules = append(rules, c)
		}
	}
	log := s.deps.Log
	if len(rules) == 0 || id == "" {
		log.WarnContext(ctx, "permission refused: no rule code configured", "identity", id)
		return false, nil
	}
	ctx, cancel := context.WithTimeout(ctx, s.deps.PermissionTimeout)
	defer cancel()
	type answer struct {
		ok  bool
		err error
	}
	done := make(chan answer, 1)
	go func() {
		defer func() {
			if p := recover(); p != nil {
				done <- answer{err: fmt.Errorf("permission check panicked: %v", p)}
			}
		}()
		ok, err := s.deps.Permissions.Check(ctx, id, c.Groups, rules)
		done <- answer{ok, err}
	}()
	select {
	case a := <-done:
		if a.err != nil {
			log.WarnContext(ctx, "permission check failed; access denied", "identity", id, "rules", rules, "err", a.err)
			return false, fmt.Errorf("%w: %v", errPermission, a.err)
		}
		return a.ok, nil
	case <-ctx.Done():
		log.WarnContext(ctx, "permission check timed out; access denied", "identity", id, "rules", rules, "err", ctx.Err())
		return false, fmt.Errorf("%w: %v", errPermission, ctx.Err())
	}
}

// withAPIMetrics is step 3, on every route: status and latency. It never answers and never
// fails the request: the recorder contains its own panics, and a panic of the handler passes
// through untouched (counted as 500 on its way to withRecover).
func (s *Server) withAPIMetrics(name string, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		rec := &statusRecorder{ResponseWriter: w}
		completed := false
		defer func() {
			status := rec.status
			switch {
			case !completed:
				status = http.StatusInternalServerError
			case status == 0:
				status = http.StatusOK
			}
			s.rec.Inc("bindery_http_requests_total", "route", name, "code", statusLabel(status))
			s.rec.Since("bindery_http_request_duration_seconds", start, "route", name)
		}()
		next.ServeHTTP(rec, r)
		completed = true
	})
}

// withActivity is step 4, on the whitelisted routes only: "received" on arrival, "success" after
// completion for 2xx only. A request refused by an earlier step never gets here, so a 429 is
// never business activity. No identity is ever a label value (a label set per caller would fill
// the series cap and publish who uses bindery): the caller dimension is only whether the strict
// identity parse found an account ("account") or not ("other"); its result never flows back into
// the request.
func (s *Server) withActivity(action string, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		caller := "other"
		s.guard(func() {
			if _, ok := identity.Strict(infoOf(r).caller.Presented); ok {
				caller = "account"
			}
		})
		s.activity(action, "received", caller)
		rec := &statusRecorder{ResponseWriter: w}
		next.ServeHTTP(rec, r)
		if rec.status >= 200 && rec.status < 300 {
			s.activity(action, "success", caller)
		}
	})
}

func (s *Server) activity(action, stage, caller string) {
	s.rec.Inc("bindery_activity_total", "action", action, "stage", stage, "caller", caller)
}

// guard runs observability code that must never fail the request.
func (s *Server) guard(f func()) {
	defer func() {
		if p := recover(); p != nil {
			s.deps.Log.Error("metric code panicked; request goes on", "panic", p)
		}
	}()
	f()
}

// statusLabels are the status codes as label values, made once: the API metric of every request
// names its status.
var statusLabels = func() (l [600]string) {
	for c := 100; c < len(l); c++ {
		l[c] = strconv.Itoa(c)
	}
	return l
}()

func statusLabel(code int) string {
	if code >= 100 && code < len(statusLabels) {
		return statusLabels[code]
	}
	return strconv.Itoa(code)
}

// demoUsersWords names each demo user with who they are by the rules in force, so that a first
// visit knows whom to pick: "ops (the operator)", "alice (holds payments-admin)", "bob".
func (s *Server) demoUsersWords() []string {
	snap := s.deps.Config.Current()
	var codes []string
	for _, t := range snap.Targets() {
		for _, c := range t.RuleCodes {
			if !slices.Contains(codes, c) {
				codes = append(codes, c)
			}
		}
	}
	var out []string
	for _, u := range identity.DemoUsers() {
		switch held := snap.PermissionMatches(u.Account, nil, codes); {
		case snap.OpsRule() != "" && len(snap.PermissionMatches(u.Account, nil, []string{snap.OpsRule()})) > 0:
			out = append(out, u.Name+" (the operator)")
		case len(held) > 0:
			out = append(out, u.Name+" (holds "+strings.Join(held, " and ")+")")
		default:
			out = append(out, u.Name)
		}
	}
	return out
}
