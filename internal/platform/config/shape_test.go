package config

import (
	"strings"
	"testing"
)

// nested is the YAML of one dotted key set to value.
func nested(key, value string) string {
	parts := strings.Split(key, ".")
	var b strings.Builder
	for i, p := range parts {
		b.WriteString(strings.Repeat("  ", i) + p + ":")
		if i < len(parts)-1 {
			b.WriteString("\n")
		}
	}
	return b.String() + " " + value + "\n"
}

// Every list-valued key given a value of the wrong shape — one string, commas and all, or a
// mapping — takes nothing from it: the same effective value as the key left out, and the report
// says why. A list that grants (trusted proxies, reviewer tokens, a permission rule) is never
// widened by guessing how a string splits. A list of maps or of targets given the wrong shape
// rejects the whole file instead.
func TestAListKeyOfTheWrongShapeIsNeverCoerced(t *testing.T) {
	n := 0
	for _, k := range Keys {
		if !strings.HasPrefix(k.Type, "list of") {
			continue
		}
		n++
		absent := MustParse("{}\n").report(k.Name)
		for _, wrong := range []string{`"10.0.0.0/8, 127.0.0.1, alice@example.com"`, "{a: b}"} {
			s, err := Parse([]byte(nested(k.Name, wrong)))
			if k.Type == "list of targets" || strings.HasPrefix(k.Type, "list of {") {
				if err == nil && len(s.Targets()) > 0 {
					t.Errorf("%s = %s: accepted %d targets", k.Name, wrong, len(s.Targets()))
				}
				continue
			}
			if err != nil {
				t.Errorf("%s = %s: the file was rejected (%v); the key should fall back alone", k.Name, wrong, err)
				continue
			}
			got := s.report(k.Name)
			if got.Effective != absent.Effective || got.Status != StatusFallback || got.Note == "" {
				t.Errorf("%s = %s: %+v, want %q as if absent, reported as a fallback", k.Name, wrong, got, absent.Effective)
			}
		}
	}
	if n < 9 {
		t.Fatalf("only %d list-valued keys", n)
	}
	// A permission rule given as one string grants nobody; the other rules stay.
	s := MustParse("permission:\n  rules:\n    bindery-ops: \"ops@x.example, alice@x.example\"\n    readers: [bob@x.example]\n")
	if ids, ok := s.PermissionRule("bindery-ops"); ok || len(ids) != 0 {
		t.Fatalf("a string rule granted %v", ids)
	}
	if ids, ok := s.PermissionRule("readers"); !ok || len(ids) != 1 {
		t.Fatalf("the well-formed rule: %v %v", ids, ok)
	}
	if r := s.report("permission.rules"); !strings.Contains(r.Note, "bindery-ops") {
		t.Fatalf("the skipped rule is not reported: %+v", r)
	}
}
