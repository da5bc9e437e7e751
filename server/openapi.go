package server

import (
	_ "embed"
	"net/http"
)

// openAPIDoc describes the API. It is written by hand (schemas, auth, rate limits, error
// answers); a test checks it against the route table so that no route goes undocumented.
//
//go:embed openapi.json
var openAPIDoc []byte

// openAPI is GET /api/openapi.json.
func (s *Server) openAPI(w http.ResponseWriter, r *http.Request) (int, any, error) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.Header().Set("Cache-Control", "no-cache")
	_, _ = w.Write(openAPIDoc)
	return 0, nil, nil
}
