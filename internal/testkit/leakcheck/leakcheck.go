// Package leakcheck finds internals in text meant for people outside bindery: the tests of the
// requester's views (workflow) and the chaos suite's final check scan every string of every
// answer with it. Internals are what an error carries from inside — panic and stack text, source
// paths, SQL and driver messages, transport errors, the classified text of an outbound failure
// ("gitlab approve: HTTP 502"), bindery's own "details in the server log" — not the links to the
// GitLab merge requests and pipelines a requester follows.
package leakcheck

import (
	"encoding/json"
	"fmt"
	"regexp"
	"sort"
	"strings"
)

// Markers are the shapes of internals; a match in any case counts, except for the SQL keywords,
// which count in capitals only (plain words such as "update" are no leak).
var Markers = []string{
	"panic", "goroutine", "runtime error", ".go:", "/home/", "/usr/", "/tmp/",
	"sql:", "Error 1", "deadlock", "database error", "database is locked", "invalid connection", "driver:",
	"HTTP 4", "HTTP 5", "dial tcp", "connection refused", "connection reset", "i/o timeout", "context deadline", "context canceled",
	"circuit breaker", "EOF", "127.0.0.1", "localhost", "::1",
	"unexpected error", "server log", "stack",
	"gitlab create", "gitlab get", "gitlab approve", "gitlab merge", "gitlab update", "gitlab rebase", "approval open_ticket", "approval get_ticket",
}

// sqlMarkers count in capitals only.
var sqlMarkers = []string{"SELECT ", "INSERT ", "UPDATE ", "DELETE FROM", " FROM operation", " WHERE "}

// Scanner finds internals in text; the links under its allowed web addresses are no leak.
type Scanner struct {
	extra   []string       // more markers (a test's injected text)
	allowed *regexp.Regexp // links to strip before scanning; nil: none
}

// New is a scanner that also looks for extra (case-insensitively) and strips the links under
// allowed (e.g. the GitLab web address the views link merge requests and pipelines to).
func New(extra []string, allowed ...string) *Scanner {
	s := &Scanner{extra: extra}
	var alts []string
	for _, a := range allowed {
		if a != "" {
			alts = append(alts, regexp.QuoteMeta(strings.TrimRight(a, "/"))+`[^\s)"]*`)
		}
	}
	if len(alts) > 0 {
		s.allowed = regexp.MustCompile(strings.Join(alts, "|"))
	}
	return s
}

// Find returns the first marker text holds ("": none).
func (s *Scanner) Find(text string) string {
	if s.allowed != nil {
		text = s.allowed.ReplaceAllString(text, "<link>")
	}
	lower := strings.ToLower(text)
	for _, list := range [][]string{Markers, s.extra} {
		for _, m := range list {
			if m != "" && strings.Contains(lower, strings.ToLower(m)) {
				return m
			}
		}
	}
	for _, m := range sqlMarkers {
		if strings.Contains(text, m) {
			return m
		}
	}
	return ""
}

// JSON scans every string of a JSON document (keys and values) and returns one line per leak:
// its path, the marker and the string. A document that is not JSON is scanned as text.
func (s *Scanner) JSON(data []byte) []string {
	var doc any
	if err := json.Unmarshal(data, &doc); err != nil {
		if m := s.Find(string(data)); m != "" {
			return []string{fmt.Sprintf("(not JSON): %q in %q", m, data)}
		}
		return nil
	}
	var out []string
	s.walk("$", doc, &out)
	return out
}

func (s *Scanner) walk(path string, v any, out *[]string) {
	switch v := v.(type) {
	case string:
		if m := s.Find(v); m != "" {
			*out = append(*out, fmt.Sprintf("%s: %q in %q", path, m, v))
		}
	case []any:
		for i, e := range v {
			s.walk(fmt.Sprintf("%s[%d]", path, i), e, out)
		}
	case map[string]any:
		keys := make([]string, 0, len(v))
		for k := range v {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			s.walk(path+"."+k, k, out)
			s.walk(path+"."+k, v[k], out)
		}
	}
}
