// Package server is bindery's HTTP layer: the route table, the interceptors and the handlers.
// Handlers call the workflow and the store; errors reach the client only through writeError.
package server

import (
	"context"
	"io/fs"
	"log/slog"
	"net/http"
	"runtime"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/julienschmidt/httprouter"

	"bindery/apperr"
	"bindery/config"
)

// Pinger is what /readyz checks (the database).
type Pinger interface {
	Ping(ctx context.Context) error
}

// Deps are what the server needs from the rest of the process.
type Deps struct {
	Config  *config.Source
	DB      Pinger
	Metrics *metrics.Set
	Log     *slog.Logger
	UI      fs.FS // the SPA build; index.html at its root
	Version string
	// Mounts are extra handlers under a path prefix (the simulators in demo mode: "/sim/").
	Mounts map[string]http.Handler
}

// Server holds the router and its dependencies.
type Server struct {
	deps    Deps
	handler http.Handler
}

// New builds the router and the interceptor chain.
func New(d Deps) *Server {
	s := &Server{deps: d}
	d.Metrics.NewGauge(`bindery_build_info{version="`+d.Version+`",goversion="`+runtime.Version()+`"}`, func() float64 { return 1 })
	router := httprouter.New()
	router.RedirectTrailingSlash = false
	router.RedirectFixedPath = false
	router.HandleMethodNotAllowed = true
	for _, rt := range s.routes() {
		router.Handler(rt.method, rt.path, rt.handler)
	}
	router.MethodNotAllowed = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.fail(w, r, apperr.New(apperr.MethodNotAllowed, "Method not allowed on this path."))
	})
	static := staticHandler{files: d.UI, serve: s.fail}
	router.NotFound = static
	var h http.Handler = router
	if len(d.Mounts) > 0 {
		mux := http.NewServeMux()
		for prefix, m := range d.Mounts {
			mux.Handle(prefix, m)
		}
		mux.Handle("/", router)
		h = mux
	}
	h = withAccessLog(d.Log)(h)
	h = withRecover(d.Log)(h)
	s.handler = withRequestID(h)
	return s
}

// Handler is the whole HTTP surface.
func (s *Server) Handler() http.Handler { return s.handler }

func (s *Server) fail(w http.ResponseWriter, r *http.Request, err error) {
	writeError(w, r, s.deps.Log, err)
}

// route is one line of the route table.
type route struct {
	method, path string
	handler      http.Handler
}

// routes is the whole route table, on one screen.
func (s *Server) routes() []route {
	return []route{
		{"GET", "/healthz", http.HandlerFunc(s.healthz)},
		{"GET", "/readyz", http.HandlerFunc(s.readyz)},
		{"GET", "/metrics", http.HandlerFunc(s.metrics)},
	}
}

func (s *Server) healthz(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

// readyz answers 200 only when the database answers within two seconds.
func (s *Server) readyz(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	if err := s.deps.DB.Ping(ctx); err != nil {
		s.fail(w, r, apperr.Wrap(err, apperr.Unavailable, "The database is not reachable."))
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"status": "ready", "configGeneration": s.deps.Config.Current().Generation})
}

func (s *Server) metrics(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	s.deps.Metrics.WritePrometheus(w)
	metrics.WriteProcessMetrics(w)
}
