package server

import (
	"net/http/httptest"
	"strings"
	"testing"
)

// securityHeaders are what every answer carries, a page or an API's, a success or a refusal.
var securityHeaders = map[string]string{
	"Content-Security-Policy": contentPolicy,
	"X-Content-Type-Options":  "nosniff",
	"Referrer-Policy":         "same-origin",
}

func TestEveryAnswerCarriesTheBrowserProtections(t *testing.T) {
	t.Parallel()
	h := setup(t, options{})
	calls := []call{
		{method: "GET", path: "/"},
		{method: "GET", path: "/requests/op-1", header: map[string]string{"Accept": "text/html"}},
		{method: "GET", path: "/assets/app-3f9a1c2b.js"},
		{method: "GET", path: "/assets/missing-3f9a1c2b.js"},
		{method: "GET", path: "/api/nothing"},
		{method: "DELETE", path: "/api/me"},
		{method: "GET", path: "/api/me", user: "alice"},
	}
	for _, rt := range h.srv.routes() { // each route, as whoever comes without credentials
		calls = append(calls, call{method: rt.method, path: strings.NewReplacer("{operationId}", "op-1", "{id}", "1").Replace(rt.path), body: "{}"})
	}
	for _, c := range calls {
		rec := h.do(c)
		for k, want := range securityHeaders {
			if got := rec.Header().Get(k); got != want {
				t.Errorf("%s %s (%d): %s %q, want %q", c.method, c.path, rec.Code, k, got, want)
			}
		}
	}

	// The policy refuses what a page could be made to run: inline script and style, other
	// origins, plugins, and framing.
	for _, part := range []string{"default-src 'none';", "script-src 'self';", "style-src 'self';", "frame-ancestors 'none'", "base-uri 'none'"} {
		if !strings.Contains(contentPolicy, part) {
			t.Errorf("policy lacks %q: %s", part, contentPolicy)
		}
	}
	if strings.Contains(contentPolicy, "unsafe") || strings.Contains(contentPolicy, "*") {
		t.Errorf("policy allows too much: %s", contentPolicy)
	}

	// The separate metrics listener's answers too.
	rec := httptest.NewRecorder()
	h.srv.MetricsHandler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	for k, want := range securityHeaders {
		if got := rec.Header().Get(k); got != want {
			t.Errorf("metrics listener: %s %q, want %q", k, got, want)
		}
	}
}
