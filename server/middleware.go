package server

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net/http"
	"regexp"
	"runtime/debug"
	"time"

	"bindery/internal/platform/logging"
	"bindery/internal/vocab/apperr"
)

// Interceptors are plain func(http.Handler) http.Handler; each writes its own response.

// contentPolicy lets a page load only bindery's own scripts, styles and API: no inline script
// or style, no plugin, no other origin, and no framing (clickjacking). The one data: URL is the
// page's icon. API answers carry it too: a JSON body opened as a page runs nothing.
const contentPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
	"connect-src 'self'; font-src 'self'; manifest-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"

// withSecurityHeaders gives every answer the browser protections: the content policy, no
// content-type sniffing (a JSON or text answer is never run as a script or page), and no
// Referer to other sites (a request page's path names its operation id). A handler may set its
// own policy (the demo's simulated GitLab pages have theirs).
func withSecurityHeaders(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", contentPolicy)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "same-origin")
		next.ServeHTTP(w, r)
	})
}

var requestIDPattern = regexp.MustCompile(`^[A-Za-z0-9._:-]{1,64}$`)

// withRequestID gives every request an id: the caller's X-Request-Id when it is sane, else a new
// one. It is echoed in the response and carried by the context into every log line.
func withRequestID(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := r.Header.Get("X-Request-Id")
		if !requestIDPattern.MatchString(id) {
			id = newRequestID()
		}
		w.Header().Set("X-Request-Id", id)
		next.ServeHTTP(w, r.WithContext(logging.WithRequestID(r.Context(), id)))
	})
}

func newRequestID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// statusRecorder remembers the status a handler wrote.
type statusRecorder struct {
	http.ResponseWriter
	status int
	bytes  int
}

func (s *statusRecorder) WriteHeader(code int) {
	if s.status == 0 {
		s.status = code
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusRecorder) Write(p []byte) (int, error) {
	if s.status == 0 {
		s.status = http.StatusOK
	}
	n, err := s.ResponseWriter.Write(p)
	s.bytes += n
	return n, err
}

func (s *statusRecorder) Unwrap() http.ResponseWriter { return s.ResponseWriter }

// withRecover turns a panic into 500 INTERNAL; the stack goes to the log, never to the client.
func withRecover(log *slog.Logger) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			rec := &statusRecorder{ResponseWriter: w}
			defer func() {
				p := recover()
				if p == nil || p == http.ErrAbortHandler {
					if p != nil {
						panic(p)
					}
					return
				}
				log.ErrorContext(r.Context(), "handler panic", "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
				if rec.status == 0 {
					writeError(rec, r, log, apperr.New(apperr.Internal, "panic"))
				}
			}()
			next.ServeHTTP(rec, r)
		})
	}
}

// unmatchedRoute is the access log's route of a request no route of the table took: the SPA's
// pages and assets, and the 404s and 405s.
const unmatchedRoute = "/{path...}"

type accessKey struct{}

// accessNote is where the router tells the access log which route a request took.
type accessNote struct{ route string }

// noteRoute records the route pattern r took, for its access line.
func noteRoute(r *http.Request, pattern string) {
	if n, ok := r.Context().Value(accessKey{}).(*accessNote); ok {
		n.route = pattern
	}
}

// withAccessLog logs one info line per request when log.access is on (read at each request):
// method, route, status, bytes and duration; the request id comes with the context. The route
// is the table's pattern, not the path: a route's lines read alike whatever ids they carry, and
// a stranger's path (a probe, a typo) is not copied into the log.
func (s *Server) withAccessLog(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		note := &accessNote{route: unmatchedRoute}
		rec := &statusRecorder{ResponseWriter: w}
		next.ServeHTTP(rec, r.WithContext(context.WithValue(r.Context(), accessKey{}, note)))
		if !s.deps.Config.Current().LogAccess() {
			return
		}
		status := rec.status
		if status == 0 { // the handler wrote nothing: net/http answers 200
			status = http.StatusOK
		}
		s.deps.Log.InfoContext(r.Context(), "http request", "method", r.Method, "route", note.route,
			"status", status, "bytes", rec.bytes, "duration", time.Since(start))
	})
}
