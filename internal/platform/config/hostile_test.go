package config

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strings"
	"testing"
	"time"
	"unicode"
	"unicode/utf8"
)

// Hostile config files (issue 8, point 3; docs/config.md, 'Reloads that keep the last good
// configuration' and 'Defaults follow the lighter consequence'): every key of the registry × values
// of the wrong YAML type, out of range, huge, unprintable or aliased, and whole files that are
// binary, empty, truncated, deeply nested or a "billion laughs". Each goes through the reload path
// of a Source opened on a real file. The outcome is one of two: the file is refused with a short,
// printable error kept for the ops console and the previous snapshot stays in force (the very same
// one), or the new snapshot is installed whole, with the key at its value or its documented
// fallback — never a panic, a hang, or a snapshot mixing both files.

// hostileValue is a value written for a key; prefix goes at the top of the file (anchors).
type hostileValue struct {
	name, prefix, value string
}

func hostileValues() []hostileValue {
	// Per key, 500 levels (the parser's own limit, 10,000, is met by the whole-file cases of the
	// watch test below): deep enough to catch recursion in a key's reading, cheap enough for
	// ninety keys.
	deep := strings.Repeat("[", 500) + strings.Repeat("]", 500)
	deepMap := strings.Repeat("{a: ", 500) + "1" + strings.Repeat("}", 500)
	laughs := "x-laughs:\n  - &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n"
	for i := 1; i <= 9; i++ {
		laughs += fmt.Sprintf("  - &a%d [*a%d, *a%d, *a%d, *a%d, *a%d, *a%d, *a%d, *a%d, *a%d]\n", i, i-1, i-1, i-1, i-1, i-1, i-1, i-1, i-1, i-1)
	}
	return []hostileValue{
		{"a mapping", "", "{a: 1, b: [2]}"}, {"a list", "", "[1, two, {three: 3}]"}, {"an empty list", "", "[]"},
		{"an empty mapping", "", "{}"}, {"nested lists", "", "[[[]]]"}, {"null", "", "~"}, {"true", "", "true"},
		{"a huge integer", "", "99999999999999999999999999999999"}, {"a huge negative", "", "-99999999999999999999"},
		{"int64 max", "", "0x7fffffffffffffff"}, {"negative", "", "-1"}, {"zero", "", "0"},
		{"1e309", "", "1e309"}, {"-1e309", "", "-1e309"}, {"NaN", "", ".nan"}, {"Inf", "", ".inf"}, {"-Inf", "", "-.inf"},
		{"a long string", "", `"` + strings.Repeat("x", 100_000) + `"`},
		{"control characters", "", `"a\0b\ac\x1b[31md\x7f\u202e"`}, {"a tab", "", "\"\\t\""},
		{"binary tag", "", "!!binary aGVsbG8="}, {"timestamp tag", "", "!!timestamp 2001-12-14"}, {"custom tag", "", "!evil x"},
		{"an undefined alias", "", "*nowhere"}, {"an alias of a list", "x-anchor: &l [a, b]\n", "*l"},
		{"an alias of a scalar", "x-anchor: &s '5'\n", "*s"},
		{"billion laughs", laughs, "*a9"},
		{"deep lists", "", deep}, {"deep mappings", "", deepMap},
		{"a merge key", "", "{<<: {a: 1}}"},
	}
}

// nestedDoc renders dotted keys (any depth) with raw YAML values, sections merged, in key order.
func nestedDoc(kv map[string]string) string {
	type node struct {
		val  *string
		kids map[string]*node
	}
	root := &node{kids: map[string]*node{}}
	for k, v := range kv {
		n := root
		for _, part := range strings.Split(k, ".") {
			if n.kids[part] == nil {
				n.kids[part] = &node{kids: map[string]*node{}}
			}
			n = n.kids[part]
		}
		v := v
		n.val = &v
	}
	var b strings.Builder
	var walk func(n *node, indent string)
	walk = func(n *node, indent string) {
		names := make([]string, 0, len(n.kids))
		for name := range n.kids {
			names = append(names, name)
		}
		sort.Strings(names)
		for _, name := range names {
			kid := n.kids[name]
			if kid.val != nil {
				b.WriteString(indent + name + ": " + *kid.val + "\n")
				continue
			}
			b.WriteString(indent + name + ":\n")
			walk(kid, indent+"  ")
		}
	}
	walk(root, "")
	return b.String()
}

// goodBase is the last good file every case starts from; ratelimit.apply is the sentinel that
// shows which file a snapshot came from.
var goodBase = map[string]string{
	"ratelimit.apply":      "7",
	"apply.mode":           "OPEN",
	"hooks.approvalSecret": "base-secret",
	"targets":              `[{key: base, title: Base, project: a/b, path: "x/{subject}.yaml"}]`,
}

// reloadBounded runs a reload and fails the test if it does not return (a hang).
func reloadBounded(t *testing.T, src *Source) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- src.Reload() }()
	select {
	case err := <-done:
		return err
	case <-time.After(20 * time.Second):
		t.Fatal("reload did not return")
		return nil
	}
}

// checkOutcome asserts one of the two allowed outcomes of a reload of a hostile file.
func checkOutcome(t *testing.T, src *Source, before *Snapshot, err error, key string) {
	t.Helper()
	cur := src.Current()
	if err != nil {
		if cur != before {
			t.Fatalf("refused file, but the snapshot in force changed (generation %d → %d)", before.Generation, cur.Generation)
		}
		le := src.LastError()
		if le == nil {
			t.Fatal("refused file, but no error kept for the ops console")
		}
		if len(le.Message) > 1024 || strings.IndexFunc(le.Message, func(r rune) bool { return !unicode.IsPrint(r) }) >= 0 {
			t.Fatalf("the ops console's error is not a short printable text (%d bytes): %.300q", len(le.Message), le.Message)
		}
		return
	}
	if cur == before {
		t.Fatal("accepted file, but the previous snapshot is still in force")
	}
	if key != "ratelimit.apply" && key != "ratelimit" && cur.RateLimit("ratelimit.apply", 10) != 7 {
		t.Fatalf("accepted file, but ratelimit.apply = %d: not the file's 7", cur.RateLimit("ratelimit.apply", 10))
	}
	if key != "" {
		found := false
		for _, r := range cur.Report {
			if r.Key == key {
				found = true
				if r.Status != StatusSet && r.Status != StatusFallback {
					t.Fatalf("%s reported %q", key, r.Status)
				}
				if len(r.Effective) > 1024 || len(r.Note) > 1024 {
					t.Fatalf("%s: the ops console's line is %d+%d bytes", key, len(r.Effective), len(r.Note))
				}
			}
		}
		if !found {
			t.Fatalf("%s missing from the report", key)
		}
	}
	callEveryGetter(t, cur)
}

func TestHostileValueOfEveryKeyKeepsTheLastGoodOrFallsBack(t *testing.T) {
	values := hostileValues()
	ts := openTestSource(t, nestedDoc(goodBase))
	for _, k := range Keys {
		for _, hv := range values {
			t.Run(k.Name+"/"+hv.name, func(t *testing.T) {
				kv := map[string]string{}
				for bk, bv := range goodBase {
					if bk != k.Name {
						kv[bk] = bv
					}
				}
				kv[k.Name] = hv.value
				write(t, ts.path, hv.prefix+nestedDoc(kv))
				before := ts.Current()
				checkOutcome(t, ts.Source, before, reloadBounded(t, ts.Source), k.Name)
			})
		}
	}
}

// TestHostileFilesThroughTheWatchKeepTheLastGood writes whole hostile files and lets the watch
// find them (fsnotify, debounce, read, parse), waiting on the reload error counter or a new
// generation.
func TestHostileFilesThroughTheWatchKeepTheLastGood(t *testing.T) {
	good := nestedDoc(goodBase)
	binary := make([]byte, 4096)
	for i := range binary {
		binary[i] = byte(i*131 + i/7)
	}
	laughs := hostileValues()[26]
	cases := []struct {
		name   string
		data   []byte
		refuse bool // the file must be refused (else: refused or accepted whole)
	}{
		{"a binary file", binary, true},
		{"an empty file", nil, true},
		{"only whitespace and comments", []byte("\n  \n# all gone\n"), true},
		{"a file truncated inside a list", []byte(good[:strings.Index(good, "targets:")+20]), true},
		{"a file truncated inside a quoted string", []byte("hooks:\n  approvalSecret: \"abc"), true},
		{"duplicate keys", []byte(good + "ratelimit:\n  apply: 1\n"), true},
		{"tabs for indentation", []byte("ratelimit:\n\tapply: 7\n"), true},
		{"a list at the top", []byte("- a\n- b\n"), true},
		{"a scalar at the top", []byte("just text\n"), true},
		{"deeply nested lists", []byte("x: " + strings.Repeat("[", 100_000) + strings.Repeat("]", 100_000) + "\n"), false},
		{"deeply nested block mappings", []byte(deepBlock(3000)), false},
		{"billion laughs", []byte(laughs.prefix + good), false},
		{"billion laughs under the catalog", []byte(laughs.prefix + strings.Replace(good, "targets: [", "targets: [*a9, ", 1)), true},
		{"a file over the size limit", []byte(good + "# " + strings.Repeat("x", MaxFileSize) + "\n"), true},
		{"invalid UTF-8", []byte(good + "x: \xff\xfe\n"), true},
		{"a NUL byte", []byte(good + "x: a\x00b\n"), true},
	}
	ts := openTestSource(t, good)
	ts.PollInterval = time.Hour
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = ts.Watch(ctx) }()
	defer func() { cancel(); <-done }()
	time.Sleep(50 * time.Millisecond) // let the watch be installed

	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			// Back to a good file (distinct each time, so the watch sees a change), then the hostile one.
			gen := ts.Current().Generation
			write(t, ts.path, fmt.Sprintf("%s# good %d\n", good, i))
			waitFor(t, func() bool { return ts.Current().Generation > gen })
			before, errsBefore := ts.Current(), ts.metric("bindery_config_reload_errors_total")
			if err := os.WriteFile(ts.path, c.data, 0o644); err != nil {
				t.Fatal(err)
			}
			waitFor(t, func() bool {
				return ts.Current() != before || ts.metric("bindery_config_reload_errors_total") != errsBefore
			})
			refused := ts.Current() == before
			if c.refuse && !refused {
				t.Fatalf("the file was accepted:\n%.200q", c.data)
			}
			var err error
			if refused {
				err = fmt.Errorf("refused: %v", ts.LastError())
			}
			checkOutcome(t, ts.Source, before, err, "")
		})
	}
}

func deepBlock(depth int) string {
	var b strings.Builder
	for i := range depth {
		b.WriteString(strings.Repeat(" ", i) + "a:\n")
	}
	b.WriteString(strings.Repeat(" ", depth) + "b: 1\n")
	return b.String()
}

// waitFor polls cond; the watch is asynchronous, so this waits with a generous deadline rather
// than asserting a duration.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("timed out waiting for the watch")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// An alias is the value it names: `apply: *five` is 5, not a blank that turns the limit off, and
// `targets: *catalog` is that catalog, not an empty one. A billion-laughs alias stays one node
// here; only decoding would expand it, and the YAML decoder refuses excessive aliasing.
func TestAliasesAreTheirValuesNotBlanks(t *testing.T) {
	s, err := Parse([]byte(`x-shared:
  five: &five 5
  catalog: &catalog [{key: a, title: A, project: a/b, path: "x/{subject}.yaml"}]
  tokens: &tokens [r1, r2]
ratelimit:
  apply: *five
targets: *catalog
gitlab:
  reviewerTokens: *tokens
`))
	if err != nil {
		t.Fatal(err)
	}
	if got := s.RateLimit("ratelimit.apply", 10); got != 5 {
		t.Errorf("ratelimit.apply: *five = %d, want 5", got)
	}
	if len(s.Targets()) != 1 {
		t.Errorf("targets: *catalog = %d targets, want 1", len(s.Targets()))
	}
	if got := s.GitLabReviewerTokens(); len(got) != 2 {
		t.Errorf("gitlab.reviewerTokens: *tokens = %v", got)
	}
	laughs := hostileValues()[26].prefix
	if _, err := Parse([]byte(laughs + "targets: *a9\n")); err == nil {
		t.Error("a billion-laughs catalog was accepted")
	}
}

// A catalog whose path template could leave the repository, or its directory, is refused whole
// (docs/workflow.md, 'Targets and the file change'): whatever {subject} becomes, the path stays
// where the template puts it.
func TestPathTemplatesThatLeaveTheRepositoryAreRefused(t *testing.T) {
	for _, p := range []string{
		"../{subject}", "../../etc/{subject}", "/etc/{subject}", "//{subject}", "a/../../{subject}", "a/./{subject}",
		"a//{subject}", `a\..\{subject}`, `..\{subject}`, "a/{subject}/..", "a/\x00/{subject}", "./{subject}", "a/..",
		"{subject}/..", "a/b/", ".", "..", "", "a/b.yaml",
		// decoded once more by a proxy or a second escape
		"a/%2e%2e/{subject}", "%2E%2E/{subject}", "a/%2e/{subject}", "a/.%2e/{subject}", "a%2f..%2f../{subject}", "a/%5c/{subject}", "a/%00/{subject}",
	} {
		doc := fmt.Sprintf("targets: [{key: a, project: a/b, path: %q}]\n", p)
		if _, err := Parse([]byte(doc)); err == nil {
			t.Errorf("path template %q was accepted", p)
		}
	}
	for _, good := range []string{"bindings/a/{subject}.yaml", "bindings/100%25/{subject}.yaml", "bindings/a%b/{subject}.yaml"} {
		if _, err := Parse([]byte(fmt.Sprintf("targets: [{key: a, project: a/b, path: %q}]\n", good))); err != nil {
			t.Errorf("a good template %q: %v", good, err)
		}
	}
}

// A pasted blob as a key name, or as a value that is refused, reaches the log and the ops console
// clipped to a short text, cut between characters (never inside one), with its real length.
func TestHugeKeysAndValuesAreReportedClipped(t *testing.T) {
	huge := "x" + strings.Repeat("é", 1000) // odd offset: the cut falls inside a character
	snap, err := Parse([]byte(huge + ": 1\nratelimit:\n  apply: 3\n"))
	if err != nil {
		t.Fatal(err)
	}
	if len(snap.Unknown) != 1 {
		t.Fatalf("unknown keys: %d", len(snap.Unknown))
	}
	u := snap.Unknown[0]
	if len(u) > shownMax+32 || !utf8.ValidString(u) || !strings.HasPrefix(huge, strings.TrimSuffix(u, "… (2001 bytes)")) || !strings.HasSuffix(u, "… (2001 bytes)") {
		t.Fatalf("reported as %d bytes: %.300q", len(u), u)
	}
	_, err = Parse([]byte("targets:\n  - {key: " + huge + ", title: T, project: a/b, path: \"x/{subject}.yaml\"}\n"))
	if err == nil {
		t.Fatal("a target key of 2,001 bytes was accepted")
	}
	if msg := err.Error(); len(msg) > shownMax+32 || !utf8.ValidString(msg) || !strings.Contains(msg, "targets[0]") {
		t.Fatalf("error of %d bytes: %.300q", len(msg), msg)
	}
}
