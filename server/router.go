package server

import (
	"net/http"
	"slices"
	"strings"

	"github.com/julienschmidt/httprouter"
)

// The route table is written with {name} wildcards (as in the OpenAPI document) and served by
// httprouter. httprouter v1.3.0 cannot hold a static segment beside a wildcard at the same place
// of two routes of one method (POST /api/ops/batches/run beside POST /api/ops/batches/{id}/settle):
// it panics at registration. Such a static route is registered under the wildcard instead and
// chosen by the segment's value; any other value at that place is not that route (404), unless
// the wildcard has a route of its own there.

// segment is one path segment of a route: a literal, or a wildcard name.
type segment struct {
	literal string
	param   string
}

func segments(path string) []segment {
	parts := strings.Split(strings.Trim(path, "/"), "/")
	out := make([]segment, len(parts))
	for i, p := range parts {
		if strings.HasPrefix(p, "{") && strings.HasSuffix(p, "}") {
			out[i] = segment{param: p[1 : len(p)-1]}
		} else {
			out[i] = segment{literal: p}
		}
	}
	return out
}

// sameShape reports whether a and b agree on their first n segments (wildcards match wildcards).
func sameShape(a, b []segment, n int) bool {
	if len(a) < n || len(b) < n {
		return false
	}
	for i := range n {
		if (a[i].param != "") != (b[i].param != "") || (a[i].param == "" && a[i].literal != b[i].literal) {
			return false
		}
	}
	return true
}

// guard is a literal a shadowed static segment must have: the wildcard named param equals value.
type guard struct{ param, value string }

// registration turns a table path into httprouter's pattern, with the guards of the static
// segments that had to be registered as wildcards because a sibling route has one there.
func registration(rt route, table []route) (pattern string, guards []guard) {
	segs := segments(rt.path)
	for i, sg := range segs {
		if sg.param != "" {
			continue
		}
		for _, other := range table {
			os := segments(other.path)
			if other.method == rt.method && sameShape(segs, os, i) && len(os) > i && os[i].param != "" {
				guards = append(guards, guard{param: os[i].param, value: sg.literal})
				segs[i] = segment{param: os[i].param}
				break
			}
		}
	}
	var b strings.Builder
	for _, sg := range segs {
		b.WriteString("/")
		if sg.param != "" {
			b.WriteString(":" + sg.param)
		} else {
			b.WriteString(sg.literal)
		}
	}
	return b.String(), guards
}

// newRouter registers the table on httprouter. Routes that share a registration (static
// segments registered under one wildcard, and the wildcard's own route) are one handle that
// picks the first route whose guards hold, the guarded ones first. Wildcard values reach
// handlers through r.PathValue, so handlers do not depend on the router. GET routes answer HEAD
// too.
func (s *Server) newRouter(table []route) *httprouter.Router {
	router := httprouter.New()
	router.RedirectTrailingSlash = false
	router.RedirectFixedPath = false
	router.HandleMethodNotAllowed = true
	router.HandleOPTIONS = true // answers OPTIONS with the Allow list, which 405s also carry
	router.NotFound = s.unmatched
	router.MethodNotAllowed = s.wrongMethod
	type candidate struct {
		guards []guard
		path   string
		h      http.Handler
	}
	type registered struct{ method, pattern string }
	var order []registered
	shared := map[registered][]candidate{}
	for _, rt := range table {
		pattern, guards := registration(rt, table)
		k := registered{rt.method, pattern}
		if _, ok := shared[k]; !ok {
			order = append(order, k)
		}
		shared[k] = append(shared[k], candidate{guards, rt.path, s.chain(rt)})
	}
	for _, k := range order {
		candidates := shared[k]
		slices.SortStableFunc(candidates, func(a, b candidate) int { return len(b.guards) - len(a.guards) })
		handle := func(w http.ResponseWriter, r *http.Request, ps httprouter.Params) {
			for _, c := range candidates {
				if !slices.ContainsFunc(c.guards, func(g guard) bool { return ps.ByName(g.param) != g.value }) {
					for _, p := range ps {
						r.SetPathValue(p.Key, p.Value)
					}
					noteRoute(r, c.path)
					c.h.ServeHTTP(w, r)
					return
				}
			}
			s.unmatched.ServeHTTP(w, r)
		}
		router.Handle(k.method, k.pattern, handle)
		if k.method == http.MethodGet {
			router.Handle(http.MethodHead, k.pattern, handle)
		}
	}
	return router
}
