package server

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/VictoriaMetrics/metrics"
	"github.com/go-sql-driver/mysql"

	"bindery/api"
	"bindery/internal/remote/outbound"
	"bindery/internal/vocab/apperr"
	"bindery/store"
	"bindery/workflow"
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

// A database that did not answer — the deadline passed, the connection was lost or refused, the
// pool closed, a conflict outlasted its retries — is 503 with Retry-After, never a 500, and the
// driver's words stay in the log.
func TestADatabaseThatDidNotAnswerIs503(t *testing.T) {
	for _, err := range []error{
		fmt.Errorf("insert operation: %w", context.DeadlineExceeded),
		fmt.Errorf("read: %w", mysql.ErrInvalidConn),
		fmt.Errorf("read: %w", driver.ErrBadConn),
		errors.New("sql: database is closed"),
		&net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connect: connection refused")},
		fmt.Errorf("claim: %w", store.ErrRetry),
	} {
		rec := httptest.NewRecorder()
		writeError(rec, httptest.NewRequest("GET", "/", nil), slog.New(slog.DiscardHandler), err)
		if rec.Code != 503 || rec.Header().Get("Retry-After") == "" || !strings.Contains(rec.Body.String(), `"code":"UNAVAILABLE"`) ||
			strings.Contains(rec.Body.String(), "sql") || strings.Contains(rec.Body.String(), "connection") {
			t.Errorf("%v → %d %s (Retry-After %q)", err, rec.Code, rec.Body.String(), rec.Header().Get("Retry-After"))
		}
	}
}

// A webhook that lost a database conflict more often than its retries allow is refused with
// what happened — a conflicting change at the same moment — not a timeout that did not happen
// (GitLab's hook log shows the message to the people who look after the hook).
func TestAConflictIsNotCalledATimeout(t *testing.T) {
	h := setup(t, options{})
	h.wf.GitLabEventFn = func(context.Context, workflow.GitLabEvent) (api.CallbackResult, error) {
		return api.CallbackResult{}, fmt.Errorf("wake tasks: %w: Error 1213 (40001): Deadlock found", store.ErrRetry)
	}
	rec := h.do(call{method: "POST", path: "/hooks/gitlab", header: map[string]string{"X-Gitlab-Token": "gtok"},
		body: `{"object_kind":"merge_request","project":{"path_with_namespace":"p"},"object_attributes":{"iid":3}}`})
	body := rec.Body.String()
	if rec.Code != 503 || !strings.Contains(body, "conflicting change") || strings.Contains(body, "in time") || strings.Contains(body, "1213") {
		t.Fatalf("%d %s; want 503 naming a conflict, not a timeout, without the driver's words", rec.Code, body)
	}
}

// A dependency other than the database that did not answer is named as such, not as the
// database (an outbound error unwraps to its transport error: it is classified first); one that
// answered with a refusal stays what it is.
func TestAnOutboundFailureIsNotCalledTheDatabase(t *testing.T) {
	timeout := outbound.NewError("gitlab", "get_mr", outbound.KindTimeout, &net.OpError{Op: "read", Err: context.DeadlineExceeded})
	rec := httptest.NewRecorder()
	writeError(rec, httptest.NewRequest("GET", "/", nil), slog.New(slog.DiscardHandler), fmt.Errorf("read MR: %w", timeout))
	if rec.Code != 503 || !strings.Contains(rec.Body.String(), "A service bindery depends on") || rec.Header().Get("Retry-After") == "" {
		t.Fatalf("an outbound timeout: %d %s", rec.Code, rec.Body.String())
	}
	rec = httptest.NewRecorder()
	writeError(rec, httptest.NewRequest("GET", "/", nil), slog.New(slog.DiscardHandler), outbound.NewStatusError("gitlab", "merge", 403, "forbidden", "nope", nil))
	if rec.Code != 500 {
		t.Fatalf("an outbound refusal no step handled: %d", rec.Code)
	}
}

// A database that does not answer while the window is closed: a resend is not refused for good
// as a new application (403) but told to try again (503).
func TestAResendWhileTheDatabaseIsDownIsNotRefusedAsClosed(t *testing.T) {
	h := setup(t, options{config: map[string]string{"apply.mode": "CLOSED"}})
	d := h.srv.deps
	d.DB = recordlessDB{h.db}
	d.Metrics = metrics.NewSet()
	srv := New(d)
	req := httptest.NewRequest("POST", "/api/apply", strings.NewReader(`{"operationId":"op-1","targetKey":"public-a","reason":"r"}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Bindery-User", "alice")
	rec := httptest.NewRecorder()
	srv.Handler().ServeHTTP(rec, req)
	if rec.Code != 503 {
		t.Fatalf("closed window, database down: %d %s", rec.Code, rec.Body.String())
	}
}

// recordlessDB is the real store whose idempotency records cannot be read.
type recordlessDB struct{ *store.DB }

func (recordlessDB) IdempotencyRecord(context.Context, string, string) (store.IdempotencyRecord, error) {
	return store.IdempotencyRecord{}, fmt.Errorf("read record: %w", context.DeadlineExceeded)
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

// /metrics is not public: on the API's listener it is served to loopback and
// server.trustedProxies, and to the bearer of server.metricsToken from anywhere; with
// server.metricsAddr set it is not on the API's listener at all, and its own listener serves
// /metrics alone (to the token's bearer when one is set).
func TestMetricsAreNotPublic(t *testing.T) {
	get := func(h *harness, peer, bearer string) int {
		c := call{method: "GET", path: "/metrics", peer: peer}
		if bearer != "" {
			c.header = map[string]string{"Authorization": "Bearer " + bearer}
		}
		return h.do(c).Code
	}
	h := setup(t, options{})
	for _, c := range []struct {
		peer, bearer string
		want         int
	}{
		{"127.0.0.1:9", "", 200}, {"[::1]:9", "", 200}, {"10.1.2.3:9", "", 200}, // loopback, a trusted proxy
		{"203.0.113.9:9", "", 401}, {"203.0.113.9:9", "anything", 401}, // no token configured: a bearer opens nothing
	} {
		if got := get(h, c.peer, c.bearer); got != c.want {
			t.Errorf("no token, from %s with %q: %d, want %d", c.peer, c.bearer, got, c.want)
		}
	}
	h = setup(t, options{config: map[string]string{"server.metricsToken": "m3trics"}})
	for _, c := range []struct {
		peer, bearer string
		want         int
	}{
		{"203.0.113.9:9", "m3trics", 200}, {"203.0.113.9:9", "wrong", 401}, {"203.0.113.9:9", "", 401},
		{"127.0.0.1:9", "wrong", 401}, // a wrong token is refused even where no token is needed
	} {
		if got := get(h, c.peer, c.bearer); got != c.want {
			t.Errorf("with a token, from %s with %q: %d, want %d", c.peer, c.bearer, got, c.want)
		}
	}
	h = setup(t, options{config: map[string]string{"server.metricsAddr": "127.0.0.1:0", "server.metricsToken": "m3trics"}})
	if got := get(h, "127.0.0.1:9", "m3trics"); got != 404 {
		t.Errorf("with server.metricsAddr, the API's listener answered /metrics %d", got)
	}
	mh := h.srv.MetricsHandler()
	for _, c := range []struct {
		path, bearer string
		want         int
	}{{"/metrics", "m3trics", 200}, {"/metrics", "", 401}, {"/api/me", "m3trics", 404}} {
		req := httptest.NewRequest("GET", c.path, nil)
		req.RemoteAddr = "203.0.113.9:9"
		if c.bearer != "" {
			req.Header.Set("Authorization", "Bearer "+c.bearer)
		}
		rec := httptest.NewRecorder()
		mh.ServeHTTP(rec, req)
		if rec.Code != c.want || (c.want == 200 && !strings.Contains(rec.Body.String(), "process_")) {
			t.Errorf("metrics listener %s with %q: %d, want %d", c.path, c.bearer, rec.Code, c.want)
		}
	}
}
