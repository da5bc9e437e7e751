package server

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/VictoriaMetrics/metrics"

	"bindery/apperr"
	"bindery/store"
)

// downDB is the real store whose Ping fails, as when the database is unreachable.
type downDB struct {
	*store.DB
	err error
}

func (d downDB) Ping(context.Context) error { return d.err }

func newTestServer(t *testing.T, dbErr error) *Server {
	t.Helper()
	h := setup(t, options{})
	if dbErr != nil {
		d := h.srv.deps
		d.DB = downDB{h.db, dbErr}
		d.Metrics = metrics.NewSet()
		return New(d)
	}
	return h.srv
}

// scenario is one row of an HTTP table: request, expected status, headers, body parts and
// parts that must not appear.
type scenario struct {
	name, method, path string
	header             map[string]string
	status             int
	wantHeader         map[string]string
	want, notWant      []string
}

func runScenarios(t *testing.T, h http.Handler, rows []scenario) {
	t.Helper()
	for _, sc := range rows {
		t.Run(sc.name, func(t *testing.T) {
			req := httptest.NewRequest(sc.method, sc.path, nil)
			for k, v := range sc.header {
				req.Header.Set(k, v)
			}
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			body, _ := io.ReadAll(rec.Body)
			if rec.Code != sc.status {
				t.Fatalf("status %d, want %d; body %s", rec.Code, sc.status, body)
			}
			for k, v := range sc.wantHeader {
				if got := rec.Header().Get(k); got != v {
					t.Errorf("header %s = %q, want %q", k, got, v)
				}
			}
			for _, w := range sc.want {
				if !strings.Contains(string(body), w) {
					t.Errorf("body lacks %q: %s", w, body)
				}
			}
			for _, w := range sc.notWant {
				if strings.Contains(string(body), w) {
					t.Errorf("body leaks %q: %s", w, body)
				}
			}
		})
	}
}

func TestStaticServingFollowsTheReleaseRules(t *testing.T) {
	html := map[string]string{"Accept": "text/html,application/xhtml+xml"}
	runScenarios(t, newTestServer(t, nil).Handler(), []scenario{
		{name: "index is never cached", method: "GET", path: "/", status: 200,
			wantHeader: map[string]string{"Cache-Control": "no-store"}, want: []string{"spa"}},
		{name: "hashed asset is immutable", method: "GET", path: "/assets/app-3f9a1c2b.js", status: 200,
			wantHeader: map[string]string{"Cache-Control": "public, max-age=31536000, immutable"}},
		{name: "unhashed file revalidates", method: "GET", path: "/favicon.svg", status: 200,
			wantHeader: map[string]string{"Cache-Control": "no-cache"}},
		{name: "navigation to a client route gets the page", method: "GET", path: "/requests/abc", header: html, status: 200,
			wantHeader: map[string]string{"Cache-Control": "no-store"}, want: []string{"spa"}},
		{name: "missing old asset is 404 JSON, never 500", method: "GET", path: "/assets/app-00000000.js", header: html, status: 404,
			wantHeader: map[string]string{"Cache-Control": "no-store", "Content-Type": "application/json; charset=utf-8"}, want: []string{`"code":"NOT_FOUND"`}},
		{name: "unknown API path is 404 JSON even for a browser", method: "GET", path: "/api/nope", header: html, status: 404,
			wantHeader: map[string]string{"Cache-Control": "no-store"}, want: []string{`"requestId"`}},
		{name: "non-navigation fetch of a missing path is 404", method: "GET", path: "/requests/abc", status: 404},
		{name: "traversal stays inside the build", method: "GET", path: "/../../etc/passwd", header: html, status: 200, notWant: []string{"root:"}},
		{name: "POST to an unknown path is 404 JSON", method: "POST", path: "/whatever", status: 404},
		{name: "wrong method on a route is 405", method: "POST", path: "/healthz", status: 405, want: []string{"METHOD_NOT_ALLOWED"}},
	})
}

func TestReadyzReportsTheDatabaseWithoutLeakingIt(t *testing.T) {
	runScenarios(t, newTestServer(t, errors.New("dial tcp db.internal:3306: connection refused")).Handler(), []scenario{
		{name: "db down", method: "GET", path: "/readyz", status: 503,
			want: []string{`"code":"UNAVAILABLE"`}, notWant: []string{"db.internal", "3306", "dial"}},
	})
	runScenarios(t, newTestServer(t, nil).Handler(), []scenario{
		{name: "db up", method: "GET", path: "/readyz", status: 200, want: []string{"ready"}},
	})
}

func TestErrorsMapThroughOneTable(t *testing.T) {
	for code := range statusOf {
		rec := httptest.NewRecorder()
		writeError(rec, httptest.NewRequest("GET", "/", nil), slog.New(slog.DiscardHandler), apperr.New(code, "msg"))
		if rec.Code != statusOf[code] {
			t.Errorf("%s → %d, want %d", code, rec.Code, statusOf[code])
		}
	}
	rec := httptest.NewRecorder()
	writeError(rec, httptest.NewRequest("GET", "/", nil), slog.New(slog.DiscardHandler), errors.New("SELECT * FROM secret_table failed"))
	if rec.Code != 500 || strings.Contains(rec.Body.String(), "secret_table") || !strings.Contains(rec.Body.String(), apperr.GenericMessage) {
		t.Fatalf("internal error: %d %s", rec.Code, rec.Body.String())
	}
}

func TestPanicBecomesGeneric500(t *testing.T) {
	h := withRequestID(withRecover(slog.New(slog.DiscardHandler))(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
		panic("boom at /home/dev/bindery/server.go:42")
	})))
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/x", nil))
	if rec.Code != 500 || strings.Contains(rec.Body.String(), "boom") || !strings.Contains(rec.Body.String(), `"code":"INTERNAL"`) {
		t.Fatalf("%d %s", rec.Code, rec.Body.String())
	}
}

func TestRequestIDIsKeptWhenSaneAndReplacedWhenNot(t *testing.T) {
	h := newTestServer(t, nil).Handler()
	for in, keep := range map[string]bool{"abc-123": true, "": false, "<script>": false, strings.Repeat("a", 65): false} {
		req := httptest.NewRequest("GET", "/healthz", nil)
		req.Header.Set("X-Request-Id", in)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		got := rec.Header().Get("X-Request-Id")
		if (got == in) != keep || got == "" {
			t.Errorf("in %q → %q", in, got)
		}
	}
}
