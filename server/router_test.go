package server

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestAStaticSegmentBesideAWildcardRoutesBothWays pins the one shape httprouter cannot hold
// natively (POST /api/ops/batches/run beside POST /api/ops/batches/{id}/settle).
func TestAStaticSegmentBesideAWildcardRoutesBothWays(t *testing.T) {
	t.Parallel()
	table := []route{
		{method: "POST", path: "/api/ops/batches/run"},
		{method: "POST", path: "/api/ops/batches/{id}/settle"},
		{method: "GET", path: "/api/ops/batches"},
	}
	if p, g := registration(table[0], table); p != "/api/ops/batches/:id" || len(g) != 1 || g[0] != (guard{"id", "run"}) {
		t.Fatalf("run registered as %q %v", p, g)
	}
	if p, g := registration(table[1], table); p != "/api/ops/batches/:id/settle" || len(g) != 0 {
		t.Fatalf("settle registered as %q %v", p, g)
	}
	if p, g := registration(table[2], table); p != "/api/ops/batches" || len(g) != 0 {
		t.Fatalf("list registered as %q %v", p, g)
	}
}

func TestRouterServesTheWholeTable(t *testing.T) {
	t.Parallel()
	h := newTestServer(t, nil).Handler()
	for _, c := range []struct {
		method, path string
		status       int
	}{
		{"GET", "/healthz", 200},
		{"HEAD", "/healthz", 200},
		{"POST", "/healthz", 405},
		{"OPTIONS", "/healthz", 200},
		{"GET", "/api/ops/batches/run", 405},    // the path exists, for POST
		{"POST", "/api/ops/batches/other", 404}, // a guarded static segment matches only its literal
		{"GET", "/api/nope", 404},
	} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(c.method, c.path, nil))
		if rec.Code != c.status {
			t.Errorf("%s %s: %d, want %d", c.method, c.path, rec.Code, c.status)
		}
	}
}

// Several static segments beside one wildcard, and the wildcard's own route at that place, share
// one registration: each request reaches its own route (httprouter would panic on the second
// registration of the pattern).
func TestStaticSiblingsAndTheirWildcardShareOneRegistration(t *testing.T) {
	t.Parallel()
	s := newTestServer(t, nil)
	answer := func(what string) handlerFunc {
		return func(w http.ResponseWriter, r *http.Request) (int, any, error) {
			return http.StatusOK, map[string]string{"route": what, "id": r.PathValue("id")}, nil
		}
	}
	table := []route{
		{method: "POST", path: "/x/batches/{id}", name: "one", auth: authPublic, handle: answer("one")},
		{method: "POST", path: "/x/batches/run", name: "run", auth: authPublic, handle: answer("run")},
		{method: "POST", path: "/x/batches/sweep", name: "sweep", auth: authPublic, handle: answer("sweep")},
		{method: "POST", path: "/x/batches/{id}/settle", name: "settle", auth: authPublic, handle: answer("settle")},
	}
	router := s.newRouter(table)
	for path, want := range map[string]string{
		"/x/batches/run":       `{"id":"run","route":"run"}`,
		"/x/batches/sweep":     `{"id":"sweep","route":"sweep"}`,
		"/x/batches/7":         `{"id":"7","route":"one"}`,
		"/x/batches/7/settle":  `{"id":"7","route":"settle"}`,
		"/x/batches/run/other": "",
	} {
		rec := httptest.NewRecorder()
		router.ServeHTTP(rec, httptest.NewRequest("POST", path, nil))
		if got := strings.TrimSpace(rec.Body.String()); want != "" && (rec.Code != 200 || got != want) || want == "" && rec.Code != 404 {
			t.Errorf("POST %s: %d %s, want %s", path, rec.Code, got, want)
		}
	}
}
