package leakcheck

import (
	"strings"
	"testing"
)

func TestJSONNamesEveryStringThatHoldsInternalsButNotTheAllowedLinks(t *testing.T) {
	s := New([]string{"injected words"}, "http://127.0.0.1:8080/sim/gitlab")
	doc := `{"mr":{"url":"http://127.0.0.1:8080/sim/gitlab/p/-/merge_requests/3"},
		"timeline":[{"note":"MR !3 merged (http://127.0.0.1:8080/sim/gitlab/p/-/merge_requests/3)"},
		            {"note":"Failed: gitlab create_mr: HTTP 502."},
		            {"note":"the update of the file"},
		            {"note":"UPDATE operation SET x"},
		            {"note":"some INJECTED words"},
		            {"note":"dial tcp 127.0.0.1:3306: refused"}]}`
	got := s.JSON([]byte(doc))
	want := []string{"$.timeline[1].note", "$.timeline[3].note", "$.timeline[4].note", "$.timeline[5].note"}
	if len(got) != len(want) {
		t.Fatalf("leaks %q, want at %v", got, want)
	}
	for i, w := range want {
		if !strings.HasPrefix(got[i], w+":") {
			t.Errorf("leak %d: %q, want at %s", i, got[i], w)
		}
	}
}
