package metric

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// The alert rules operators load (deploy/prometheus/alerts.yml) name only metrics bindery
// exports, and each rule passes its promtool unit test (deploy/prometheus/alerts_test.yml).

const rulesDir = "../../../deploy/prometheus"

// ruleExprs reads the expressions of a rule file.
func ruleExprs(t *testing.T, path string) map[string]string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Groups []struct {
			Rules []struct {
				Alert string `yaml:"alert"`
				Expr  string `yaml:"expr"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	if err := yaml.Unmarshal(data, &f); err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, g := range f.Groups {
		for _, r := range g.Rules {
			out[r.Alert] = r.Expr
		}
	}
	return out
}

var (
	quoted     = regexp.MustCompile(`"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'`)
	matchers   = regexp.MustCompile(`\{[^}]*\}`)
	ranges     = regexp.MustCompile(`\[[^\]]*\]`)
	identifier = regexp.MustCompile(`[a-zA-Z_:][a-zA-Z0-9_:]*(\s*\()?`)
)

// promqlWords are PromQL's keywords and aggregation modifiers: never metric names.
var promqlWords = []string{"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or", "unless", "offset", "atan2", "inf", "nan"}

// metricNames are the metric names an expression reads: its identifiers that are not functions,
// keywords, label names or quoted text.
func metricNames(expr string) []string {
	e := quoted.ReplaceAllString(expr, `""`)
	e = matchers.ReplaceAllString(e, "")
	e = ranges.ReplaceAllString(e, "")
	var out []string
	for _, m := range identifier.FindAllStringSubmatch(e, -1) {
		name := strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(m[0]), "("))
		if m[1] != "" || slices.Contains(promqlWords, strings.ToLower(name)) {
			continue
		}
		out = append(out, name)
	}
	// by (…) / without (…) lists are label names: drop what follows them up to ")".
	return out
}

// unknownMetrics lists the names of expr the registry does not have (a histogram's series
// count by their family).
func unknownMetrics(expr string) []string {
	var bad []string
	for _, n := range metricNames(stripGrouping(expr)) {
		base := n
		for _, suf := range []string{"_bucket", "_count", "_sum"} {
			if f, ok := Lookup(strings.TrimSuffix(n, suf)); ok && strings.HasSuffix(n, suf) && f.Type == "histogram" {
				base = strings.TrimSuffix(n, suf)
			}
		}
		if _, ok := Lookup(base); !ok {
			bad = append(bad, n)
		}
	}
	return bad
}

var grouping = regexp.MustCompile(`\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)`)

func stripGrouping(expr string) string { return grouping.ReplaceAllString(expr, "") }

func TestAlertRulesNameOnlyExportedMetrics(t *testing.T) {
	exprs := ruleExprs(t, filepath.Join(rulesDir, "alerts.yml"))
	if len(exprs) < 6 {
		t.Fatalf("%d rules", len(exprs))
	}
	for alert, expr := range exprs {
		if len(metricNames(expr)) == 0 {
			t.Errorf("%s: no metric found in %q", alert, expr)
		}
		if bad := unknownMetrics(expr); len(bad) > 0 {
			t.Errorf("%s names metrics bindery does not export: %v (%s)", alert, bad, expr)
		}
	}
	// The check itself catches a name that is not there, in every position.
	for _, expr := range []string{"max(bindery_nope) > 0", `sum by (le) (rate(bindery_http_request_duration_seconds_bucket[5m])) > bindery_nope_total{a="b"}`,
		"bindery_batches_blocked > 0 and on (instance) bindery_missing"} {
		if bad := unknownMetrics(expr); len(bad) != 1 {
			t.Errorf("%q: unknown %v, want exactly one", expr, bad)
		}
	}
	if bad := unknownMetrics(`histogram_quantile(0.9, sum by (le) (rate(bindery_http_request_duration_seconds_bucket{route="apply"}[5m]))) > 1`); len(bad) != 0 {
		t.Errorf("a histogram's bucket series: %v", bad)
	}
}

// promtool checks the rule file and runs its unit tests. CI installs Prometheus (Debian's
// package has promtool) and sets BINDERY_REQUIRE_PROMTOOL=1, which makes a missing promtool a
// failure instead of a skip.
func TestAlertRulesPassPromtool(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("BINDERY_REQUIRE_PROMTOOL") == "1" {
			t.Fatal("promtool is required (BINDERY_REQUIRE_PROMTOOL=1) but not installed: apt-get install prometheus")
		}
		t.Skip("promtool not installed (apt-get install prometheus); BINDERY_REQUIRE_PROMTOOL=1 makes this a failure")
	}
	for _, args := range [][]string{{"check", "rules", "alerts.yml"}, {"test", "rules", "alerts_test.yml"}} {
		cmd := exec.Command(promtool, args...)
		cmd.Dir = rulesDir
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}
