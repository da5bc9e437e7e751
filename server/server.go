// Package server is bindery's HTTP layer: the route table, the interceptors and the handlers.
// Handlers call the workflow and the store; errors reach the client only through writeError.
package server

import (
	"io/fs"
	"log/slog"
	"net/http"
	"runtime"
	"strings"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/julienschmidt/httprouter"

	"bindery/internal/platform/config"
	"bindery/internal/platform/metric"
	"bindery/internal/platform/ratelimit"
	"bindery/internal/vocab/apperr"
)

// Deps are what the server needs from the rest of the process.
type Deps struct {
	Config  *config.Source
	DB      Store
	Metrics *metrics.Set
	Log     *slog.Logger
	UI      fs.FS // the SPA build; index.html at its root
	Version string
	// Mounts are extra handlers under a path prefix (the simulators in demo mode: "/sim/").
	Mounts map[string]http.Handler
	// ListenAddr is the address the process listens on (the bound listener's), which the ops
	// config view reports for server.addr; AddrFlag says the -addr flag chose it over the key.
	// "": the view shows the key as loaded.
	ListenAddr string
	AddrFlag   bool

	// Demo trusts the demo identity header and cookie (docs/api.md, 'Who may call'). Never set in
	// serve mode.
	Demo bool
	// Workflow serves the workflow routes. Required by every route that reads or changes a
	// request or a batch (a server built without it — the UI's tests of pages and assets — only
	// serves what needs none).
	Workflow Workflow
	// Permissions answers rule-code checks; nil → every check fails closed (403).
	Permissions Permissions
	// Notifications serves the notification routes (settings, what was sent, the receivers);
	// nil → they answer 503 UNAVAILABLE.
	Notifications Notifications
	// PermissionTimeout bounds one permission round trip; 0 → 5s. Past it the answer is 403.
	PermissionTimeout time.Duration

	// Limiter holds the rate-limit windows; nil → a private one.
	Limiter *ratelimit.Limiter
	// Share divides each limit between the live instances; nil → this instance enforces the
	// whole limit.
	Share *ratelimit.Share
	// Recorder records metrics under the guard of docs/api.md, 'Metrics never change a result';
	// nil → one writing to Metrics.
	Recorder *metric.Recorder
	// Now is the clock of the access window and the callback skew; nil → time.Now.
	Now func() time.Time
}

// Server holds the router and its dependencies.
type Server struct {
	deps    Deps
	handler http.Handler
	limiter *ratelimit.Limiter
	rec     *metric.Recorder
	now     func() time.Time
	// started is the configuration the process started with: static keys changed since then
	// are "pending restart".
	started *config.Snapshot
	table   []route

	router      *httprouter.Router
	unmatched   http.Handler // the SPA, or 404 JSON
	wrongMethod http.Handler // 405 JSON
}

// New builds the router and the interceptor chain.
func New(d Deps) *Server {
	s := &Server{deps: d, limiter: d.Limiter, rec: d.Recorder, now: d.Now, started: d.Config.Current()}
	if s.limiter == nil {
		s.limiter = ratelimit.New(ratelimit.Options{})
	}
	if s.rec == nil {
		s.rec = metric.New(metric.SetSink(d.Metrics), d.Log)
	}
	if s.now == nil {
		s.now = time.Now
	}
	if s.deps.PermissionTimeout <= 0 {
		s.deps.PermissionTimeout = 5 * time.Second
	}
	d.Metrics.NewGauge(`bindery_build_info{version="`+metric.Normalize(d.Version)+`",goversion="`+runtime.Version()+`"}`, func() float64 { return 1 })
	d.Metrics.NewGauge("bindery_ratelimit_keys", func() float64 { return float64(s.limiter.Keys()) })

	s.table = s.routes()
	s.unmatched = s.withAPIMetrics("static", staticHandler{files: d.UI, serve: s.fail})
	s.wrongMethod = s.withAPIMetrics("method_not_allowed", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.fail(w, r, apperr.New(apperr.MethodNotAllowed, "Method not allowed on this path."))
	}))
	s.router = s.newRouter(s.table)
	// Outermost first: the request id, then the access log (outside the recovery, so a panic's
	// 500 gets its line too), then the recovery.
	var h http.Handler = http.HandlerFunc(s.route)
	h = withRecover(d.Log)(h)
	h = s.withAccessLog(h)
	s.handler = withSecurityHeaders(withRequestID(h))
	return s
}

// route sends mounted prefixes (the demo's simulators) to their handlers and everything else to
// the router: the route table, 405 JSON for a path the table has only for other methods, and the
// SPA rules (page, asset or 404 JSON) for the rest.
func (s *Server) route(w http.ResponseWriter, r *http.Request) {
	for prefix, m := range s.deps.Mounts {
		if strings.HasPrefix(r.URL.Path, prefix) {
			noteRoute(r, prefix+"{path...}")
			m.ServeHTTP(w, r)
			return
		}
	}
	s.router.ServeHTTP(w, r)
}

// Handler is the whole HTTP surface.
func (s *Server) Handler() http.Handler { return s.handler }

func (s *Server) fail(w http.ResponseWriter, r *http.Request, err error) {
	writeError(w, r, s.deps.Log, err)
}

func (s *Server) healthz(w http.ResponseWriter, r *http.Request) (int, any, error) {
	return http.StatusOK, map[string]string{"status": "ok"}, nil
}

// readyz answers 200 only when a write commits within database.requestTimeout: a ping answers
// even while writes are blocked (a lock, a full disk, a read-only server).
func (s *Server) readyz(w http.ResponseWriter, r *http.Request) (int, any, error) {
	ctx := r.Context() // bounded by database.requestTimeout, as every route's work (endpoint)
	if err := s.deps.DB.Ping(ctx); err != nil {
		return 0, nil, apperr.Wrap(err, apperr.Unavailable, "The database is not reachable.")
	}
	if err := s.deps.DB.WriteProbe(ctx); err != nil {
		return 0, nil, apperr.Wrap(err, apperr.Unavailable, "The database does not take writes right now.")
	}
	return http.StatusOK, map[string]any{"status": "ready", "configGeneration": s.deps.Config.Current().Generation}, nil
}

// MetricsHandler serves /metrics alone, for the listener of server.metricsAddr: to whoever
// reaches that listener, or only to the bearer of server.metricsToken when one is set.
func (s *Server) MetricsHandler() http.Handler {
	return withSecurityHeaders(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var err error
		switch tok := s.deps.Config.Current().MetricsToken(); {
		case r.URL.Path != "/metrics":
			err = apperr.New(apperr.NotFound, "Only /metrics is served here.")
		case r.Method != http.MethodGet && r.Method != http.MethodHead:
			err = apperr.New(apperr.MethodNotAllowed, "GET /metrics.")
		case tok != "":
			err = metricsBearer(r, tok)
		}
		if err != nil {
			s.fail(w, r, err)
			return
		}
		_, _, _ = s.metrics(w, r)
	}))
}

func (s *Server) metrics(w http.ResponseWriter, r *http.Request) (int, any, error) {
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	metric.Write(w, s.deps.Metrics)
	return 0, nil, nil
}
