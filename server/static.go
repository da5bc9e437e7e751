package server

import (
	"bytes"
	"io/fs"
	"net/http"
	"path"
	"regexp"
	"strings"
	"time"

	"bindery/internal/vocab/apperr"
)

// hashedAsset matches build outputs whose name carries a content hash (index-3f9a1c2b.js):
// their content never changes under that name, so browsers may keep them for a year.
var hashedAsset = regexp.MustCompile(`[.-][A-Za-z0-9_]{8,}\.[a-z0-9]+$`)

// staticHandler serves the SPA (docs/api.md, 'Serving the page'): index.html never cached; hashed
// assets immutable; a missing file gets the SPA page when it is a navigation (Accept has text/html
// and the path has no extension) and 404 JSON otherwise — never a 500 — both no-store.
type staticHandler struct {
	files fs.FS
	serve func(w http.ResponseWriter, r *http.Request, err error)
}

func (s staticHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		s.serve(w, r, apperr.New(apperr.NotFound, "No such endpoint."))
		return
	}
	p := strings.TrimPrefix(path.Clean("/"+r.URL.Path), "/")
	if strings.HasPrefix(p, "api/") || p == "api" {
		s.serve(w, r, apperr.New(apperr.NotFound, "No such endpoint."))
		return
	}
	if p == "" || p == "index.html" {
		s.page(w, r)
		return
	}
	data, err := fs.ReadFile(s.files, p)
	if err != nil {
		if isNavigation(r, p) {
			s.page(w, r)
			return
		}
		s.serve(w, r, apperr.New(apperr.NotFound, "No such file."))
		return
	}
	if hashedAsset.MatchString(path.Base(p)) {
		w.Header().Set("Cache-Control", "public, max-age=31536000, immutable")
	} else {
		w.Header().Set("Cache-Control", "no-cache")
	}
	http.ServeContent(w, r, path.Base(p), time.Time{}, bytes.NewReader(data))
}

// page serves index.html, the SPA's entry and its fallback for client-side routes.
func (s staticHandler) page(w http.ResponseWriter, r *http.Request) {
	data, err := fs.ReadFile(s.files, "index.html")
	if err != nil {
		s.serve(w, r, apperr.New(apperr.NotFound, "No such file."))
		return
	}
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	http.ServeContent(w, r, "index.html", time.Time{}, bytes.NewReader(data))
}

func isNavigation(r *http.Request, p string) bool {
	return strings.Contains(r.Header.Get("Accept"), "text/html") && path.Ext(p) == ""
}
