package server

import (
	"context"
	"net/http"
)

// authKind is a route's authentication and authorization requirement (docs/api.md, 'Who may call').
type authKind int

const (
	authPublic       authKind = iota // anyone (infra, the OpenAPI document)
	authUser                         // a signed-in caller: 401 without an identity
	authOwnerOrOps                   // signed in; the handler checks the row's owner, else the ops rule (403)
	authOps                          // signed in and holding authz.opsRule: 401, then 403
	authApprovalHook                 // HMAC over timestamp + body (hooks.approvalSecret, hooks.approvalSkew)
	authGitLabHook                   // X-Gitlab-Token == hooks.gitlabToken
	authDeployHook                   // Authorization: Bearer hooks.deployToken
	authMetrics                      // loopback, server.trustedProxies or Bearer server.metricsToken
	authSession                      // anyone; the caller's session, when there is one, is read (sign-out)
)

// people reports whether a route's callers are people (and their scripts): the routes whose
// caller is resolved, and whose writes are refused when another site's page sends them.
func (a authKind) people() bool {
	return a == authUser || a == authOwnerOrOps || a == authOps || a == authSession
}

// rateSpec is a route's rate limit (docs/api.md, 'Rate limits'): the bucket, the config key read at
// each request, the default when the key is missing (equal to the key's registered default; a test
// checks), and the message of the 429.
type rateSpec struct {
	bucket, key string
	def         int
	message     string
}

// Body limits (docs/api.md, 'Status codes'): larger bodies get 413.
const (
	apiBody  = 64 << 10
	hookBody = 1 << 20
)

// handlerFunc answers with a status and a JSON body, or an error for writeError. A status of 0
// means the handler wrote the response itself.
type handlerFunc func(w http.ResponseWriter, r *http.Request) (int, any, error)

// route is one line of the route table.
type route struct {
	method, path string
	name         string    // metric label, idempotency scope and audit action
	auth         authKind  // see authKind
	tok          tokenUse  // what a personal API token may do here (tokenNone: nothing)
	limit        *rateSpec // nil: not rate limited
	activity     bool      // in the business-activity whitelist (interceptor 4)
	body         int64     // largest body read; 0: the route reads no body
	handle       handlerFunc
}

// routes is the whole route table, on one screen. Each route shows its auth requirement and its
// rate limit; the interceptors run in the order of docs/api.md, 'Interceptors' (see chain).
func (s *Server) routes() []route {
	// POST /api/apply: the rate limit runs before idempotency, so an over-limit duplicate of an
	// accepted application gets 429, not DUPLICATE_SUBMIT. Accepted trade-off (docs/api.md,
	// 'Interceptors'): a rejected request consumes nothing, and the client retries after
	// Retry-After anyway.
	applyLimit := &rateSpec{"apply", "ratelimit.apply", 10, "Too many applications; please wait before applying again."}
	// A withdrawal shares the revocations' bucket: both end a request on its owner's word.
	revokeLimit := &rateSpec{"revoke", "ratelimit.revoke", 10, "Too many revocations or withdrawals; please wait before trying again."}
	renewLimit := &rateSpec{"renew", "ratelimit.renew", 10, "Too many renewals; please wait before trying again."}
	return []route{
		// method, path, name, auth, API token, rate limit, business activity, body limit, handler
		{"POST", "/api/apply", "apply", authUser, tokenApply, applyLimit, true, apiBody, s.apply},
		{"GET", "/api/requests/{operationId}", "request", authOwnerOrOps, tokenRead, nil, false, 0, s.request},
		{"POST", "/api/requests/{operationId}/revoke", "revoke", authOwnerOrOps, tokenApply, revokeLimit, true, apiBody, s.revoke},
		{"POST", "/api/requests/{operationId}/withdraw", "withdraw", authOwnerOrOps, tokenApply, revokeLimit, true, apiBody, s.withdraw},
		{"POST", "/api/requests/{operationId}/renew", "renew", authOwnerOrOps, tokenApply, renewLimit, true, apiBody, s.renew},
		{"GET", "/api/my/requests", "my.requests", authUser, tokenRead, nil, false, 0, s.myRequests},
		{"GET", "/api/targets", "targets", authUser, tokenRead, nil, false, 0, s.targets},
		{"GET", "/api/preview", "preview", authUser, tokenRead, nil, false, 0, s.preview},
		{"GET", "/api/me", "me", authUser, tokenRead, nil, false, 0, s.me},
		{"GET", "/api/my/notifications", "my.notifications", authUser, tokenRead, nil, false, 0, s.myNotifications},
		{"POST", "/api/my/notifications", "my.notifications.set", authUser, tokenNone, nil, false, apiBody, s.setMyNotifications},
		{"GET", "/api/requests/{operationId}/sent", "request.sent", authOwnerOrOps, tokenRead, nil, false, 0, s.requestSent},

		{"GET", "/api/reviews", "reviews", authUser, tokenRead, nil, false, 0, s.reviews},
		{"POST", "/api/reviews", "review.start", authUser, tokenNone, nil, true, apiBody, s.startReview},
		{"GET", "/api/reviews/{id}", "review", authUser, tokenRead, nil, false, 0, s.review},
		{"POST", "/api/reviews/{id}/items/{itemId}/decide", "review.decide", authUser, tokenNone, nil, true, apiBody, s.decideReview},
		{"POST", "/api/reviews/{id}/complete", "review.complete", authUser, tokenNone, nil, true, apiBody, s.completeReview},
		{"GET", "/api/reviews/{id}/export", "review.export", authUser, tokenRead, nil, false, 0, s.reviewExport},

		{"GET", "/api/ops/batches", "ops.batches", authOps, tokenNone, nil, false, 0, s.opsBatches},
		{"POST", "/api/ops/batches/run", "ops.batches.run", authOps, tokenNone, nil, true, apiBody, s.opsRunRound},
		{"POST", "/api/ops/batches/{id}/settle", "ops.batches.settle", authOps, tokenNone, nil, true, apiBody, s.opsSettle},
		{"GET", "/api/ops/requests", "ops.requests", authOps, tokenNone, nil, false, 0, s.opsStuck},
		{"GET", "/api/ops/attention", "ops.attention", authOps, tokenNone, nil, false, 0, s.opsAttention},
		{"GET", "/api/ops/drift", "ops.drift", authOps, tokenNone, nil, false, 0, s.opsDrift},
		{"POST", "/api/ops/drift/{id}/accept", "ops.drift.accept", authOps, tokenNone, nil, true, apiBody, s.opsDriftAccept},
		{"POST", "/api/ops/drift/{id}/ignore", "ops.drift.ignore", authOps, tokenNone, nil, true, apiBody, s.opsDriftIgnore},
		{"POST", "/api/ops/drift/{id}/restore", "ops.drift.restore", authOps, tokenNone, nil, true, apiBody, s.opsDriftRestore},
		{"POST", "/api/ops/import", "ops.import", authOps, tokenNone, nil, true, apiBody, s.opsImport},
		{"POST", "/api/ops/requests/{operationId}/retry", "ops.requests.retry", authOps, tokenNone, nil, true, apiBody, s.opsRetry},
		{"POST", "/api/ops/requests/{operationId}/next", "ops.requests.next", authOps, tokenNone, nil, true, apiBody, s.opsMergeNext},
		{"GET", "/api/ops/trains", "ops.trains", authOps, tokenNone, nil, false, 0, s.opsTrains},
		{"POST", "/api/ops/trains/pause", "ops.trains.pause", authOps, tokenNone, nil, true, apiBody, s.opsPause},
		{"POST", "/api/ops/trains/resume", "ops.trains.resume", authOps, tokenNone, nil, true, apiBody, s.opsResume},
		{"POST", "/api/ops/reconcile", "ops.reconcile", authOps, tokenNone, nil, true, apiBody, s.opsReconcile},
		{"GET", "/api/ops/config", "ops.config", authOps, tokenNone, nil, false, 0, s.opsConfig},
		{"GET", "/api/ops/audit", "ops.audit", authOps, tokenNone, nil, false, 0, s.opsAudit},
		{"GET", "/api/ops/audit/export", "ops.audit.export", authOps, tokenNone, nil, false, 0, s.opsAuditExport},
		{"GET", "/api/ops/notify", "ops.notify", authOps, tokenNone, nil, false, 0, s.opsNotify},
		{"POST", "/api/ops/notify/deliveries/{id}/resend", "ops.notify.resend", authOps, tokenNone, nil, true, apiBody, s.opsResend},
		{"POST", "/api/ops/notify/endpoints/{name}/enable", "ops.notify.enable", authOps, tokenNone, nil, true, apiBody, s.opsEnable},

		{"GET", "/api/tokens", "tokens", authUser, tokenNone, nil, false, 0, s.listTokens},
		{"POST", "/api/tokens", "tokens.create", authUser, tokenNone, nil, true, apiBody, s.createToken},
		{"DELETE", "/api/tokens/{id}", "tokens.revoke", authUser, tokenNone, nil, true, 0, s.revokeToken},

		{"GET", "/auth/login", "auth.login", authPublic, tokenNone, nil, false, 0, s.signinStart},
		{"GET", "/auth/callback", "auth.callback", authPublic, tokenNone, nil, false, 0, s.signinFinish},
		{"POST", "/auth/logout", "auth.logout", authSession, tokenNone, nil, false, 0, s.signout},

		{"POST", "/hooks/approval", "hook.approval", authApprovalHook, tokenNone, nil, false, hookBody, s.approvalHook},
		{"POST", "/hooks/deploy", "hook.deploy", authDeployHook, tokenNone, nil, false, hookBody, s.deployHook},
		{"POST", "/hooks/gitlab", "hook.gitlab", authGitLabHook, tokenNone, nil, false, hookBody, s.gitlabHook},

		{"GET", "/api/openapi.json", "openapi", authPublic, tokenNone, nil, false, 0, s.openAPI},
		{"GET", "/healthz", "healthz", authPublic, tokenNone, nil, false, 0, s.healthz},
		{"GET", "/readyz", "readyz", authPublic, tokenNone, nil, false, 0, s.readyz},
		{"GET", "/metrics", "metrics", authMetrics, tokenNone, nil, false, 0, s.metrics},
	}
}

// chain wraps a route's handler in the interceptors, outermost first: who is calling (parsed,
// never answered), then the steps of docs/api.md, 'Interceptors' — 0.5 cross-origin writes,
// 1 rate limit, 2 authentication
// and authorization, 3 API latency and status metrics, 4 business-activity metrics — then the body checks (413, 415) and the handler, which binds the body. Each interceptor that
// refuses writes its own response and stops the chain, so a refused request reaches no later step
// and no handler, and a malformed body can never answer before authentication does.
func (s *Server) chain(rt route) http.Handler {
	h := s.endpoint(rt)
	if rt.activity {
		h = s.withActivity(rt.name, h)
	}
	h = s.withAPIMetrics(rt.name, h)
	h = s.withAuth(rt, h)
	if rt.limit != nil {
		h = s.withRateLimit(rt.limit, h)
	}
	h = s.withCrossOrigin(rt, h)
	return s.withCaller(rt, h)
}

// streamed names the routes whose answer is a stream as long as what it holds (the audit
// export): each read of theirs has its own deadline, and each write pushes the connection's.
var streamed = map[string]bool{"ops.audit.export": true, "review.export": true}

// endpoint checks that an owner-checked route's request is the caller's, then the body (size,
// media type), runs the handler and writes its answer.
func (s *Server) endpoint(rt route) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// One deadline for the request's database work (and whatever else it waits on): beyond
		// it the answer is 503, never a long wait. A streamed answer bounds each of its reads
		// instead (its length is the range's, not a wait).
		if !streamed[rt.name] {
			ctx, cancel := context.WithTimeout(r.Context(), s.deps.Config.Current().DatabaseRequestTimeout())
			defer cancel()
			r = r.WithContext(ctx)
		}
		if rt.auth == authOwnerOrOps {
			// The request and its owner are checked before the body is looked at: a stranger
			// learns nothing from the body's checks, nor whether the id exists.
			v, err := s.ownedRequest(r)
			if err != nil {
				s.fail(w, r, err)
				return
			}
			infoOf(r).owned = &v
		}
		if rt.body > 0 {
			if err := readBody(w, r, rt.body); err != nil {
				s.fail(w, r, err)
				return
			}
			if err := requireJSON(r); err != nil {
				s.fail(w, r, err)
				return
			}
		}
		status, body, err := rt.handle(w, r)
		switch {
		case err != nil:
			s.fail(w, r, err)
		case status != 0:
			writeJSON(w, status, body)
		}
	})
}
