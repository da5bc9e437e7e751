package server

import (
	"net/http/httptest"
	"testing"
)

// TestAStaticSegmentBesideAWildcardRoutesBothWays pins the one shape httprouter cannot hold
// natively (POST /api/ops/batches/run beside POST /api/ops/batches/{id}/settle).
func TestAStaticSegmentBesideAWildcardRoutesBothWays(t *testing.T) {
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
