package metric

import (
	"bytes"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/VictoriaMetrics/metrics"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// exposeAll makes one series of every registered bindery family in a set, with the type the
// registry declares, and returns what Write serves for it.
func exposeAll(t *testing.T) []byte {
	t.Helper()
	set := metrics.NewSet()
	for _, name := range Names() {
		if !strings.HasPrefix(name, "bindery_") {
			continue // the library's families come with the process; see the scrape in app
		}
		series := name + `{lane="x"}`
		switch f, _ := Lookup(name); f.Type {
		case "counter":
			set.GetOrCreateCounter(series).Inc()
		case "gauge":
			set.NewGauge(series, func() float64 { return 1 })
		case "histogram":
			Histogram(set, series).Update(1)
		default:
			t.Fatalf("%s: bindery has no %q families", name, f.Type)
		}
	}
	var b bytes.Buffer
	Write(&b, set)
	return b.Bytes()
}

func lint(t *testing.T, text []byte) []promlint.Problem {
	t.Helper()
	problems, err := promlint.New(bytes.NewReader(text)).Lint()
	if err != nil {
		t.Fatalf("lint: %v", err)
	}
	return problems
}

// Every family in the registry has one line of help and a type, every histogram valid buckets,
// and the whole set, as served, passes Prometheus' own lint: names in base units, counters in
// _total, help everywhere.
func TestEveryRegisteredFamilyIsExposedLintClean(t *testing.T) {
	for _, name := range Names() {
		f, _ := Lookup(name)
		switch {
		case f.Type != "counter" && f.Type != "gauge" && f.Type != "histogram" && f.Type != "summary":
			t.Errorf("%s: type %q", name, f.Type)
		case f.drop:
		case f.Help == "" || strings.ContainsAny(f.Help, "\\\n") || !strings.HasSuffix(f.Help, "."):
			t.Errorf("%s: help %q is not one sentence on one line", name, f.Help)
		case strings.HasPrefix(name, "bindery_") && f.Type == "histogram":
			if err := metrics.ValidateBuckets(f.Buckets); err != nil {
				t.Errorf("%s: %v", name, err)
			}
		}
	}
	text := exposeAll(t)
	for _, p := range lint(t, text) {
		t.Errorf("%s: %s", p.Metric, p.Text)
	}
	parser := expfmt.NewTextParser(model.LegacyValidation)
	mfs, err := parser.TextToMetricFamilies(bytes.NewReader(text))
	if err != nil {
		t.Fatalf("parse: %v\n%s", err, text)
	}
	for name, mf := range mfs {
		f, ok := Lookup(name)
		if !ok || strings.ToLower(mf.GetType().String()) != f.Type || mf.GetHelp() != f.Help {
			t.Errorf("%s served as %s %q; registry %+v", name, mf.GetType(), mf.GetHelp(), f)
		}
		if f.drop {
			t.Errorf("%s is served though the registry drops it", name)
		}
	}
}

// A family missing from the registry is still served, with the library's empty help, so the lint
// of /metrics names it; the library's mistyped counters are served as counters; the families the
// registry drops are gone.
func TestWriteFillsHelpFromTheRegistryOnly(t *testing.T) {
	set := metrics.NewSet()
	set.GetOrCreateCounter("bindery_unregistered_total").Inc()
	set.GetOrCreateCounter(`bindery_http_requests_total{route="x",code="200"}`).Inc()
	var b bytes.Buffer
	Write(&b, set)
	text := b.String()
	problems := lint(t, b.Bytes())
	if len(problems) != 1 || problems[0].Metric != "bindery_unregistered_total" || problems[0].Text != "no help text" {
		t.Fatalf("problems %+v", problems)
	}
	for _, want := range []string{
		"# HELP bindery_http_requests_total HTTP requests answered, by route and status code.\n# TYPE bindery_http_requests_total counter\n" +
			`bindery_http_requests_total{route="x",code="200"} 1` + "\n",
		"# TYPE process_io_read_bytes_total counter\n",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("served text lacks %q", want)
		}
	}
	for name, f := range families {
		if f.drop && strings.Contains(text, name) {
			t.Errorf("dropped family %s is served", name)
		}
	}
}

// The histograms the recorder creates have the family's le buckets, not the library's vmrange.
func TestRecordedHistogramsHaveTheirFamilysBuckets(t *testing.T) {
	set := metrics.NewSet()
	r := New(SetSink(set), nil)
	r.Observe("bindery_batch_ci_seconds", 90, "project", "p")
	var b bytes.Buffer
	set.WritePrometheus(&b)
	text := b.String()
	f, _ := Lookup("bindery_batch_ci_seconds")
	if strings.Contains(text, "vmrange") || strings.Count(text, "_bucket{") != len(f.Buckets)+1 ||
		!strings.Contains(text, `bindery_batch_ci_seconds_bucket{project="p",le="60"} 0`) ||
		!strings.Contains(text, `bindery_batch_ci_seconds_bucket{project="p",le="120"} 1`) {
		t.Fatalf("served:\n%s", text)
	}
}

// metricName is a string literal that starts with a metric name: "bindery_x_total" or a
// series or format such as `bindery_x_total{system=%q}`.
var metricName = regexp.MustCompile(`^(bindery_[a-z0-9_]*[a-z0-9])(\{|$)`)

// notMetrics are literals of that shape that name something else.
var notMetrics = map[string]string{"bindery_user": "the demo mode's cookie (identity.DemoCookie)"}

// Every metric name the code uses is in the registry, so its family has help text and, for a
// histogram, its buckets — also those the scrape test's traffic never reaches.
func TestEveryMetricNameInTheCodeIsRegistered(t *testing.T) {
	fset := token.NewFileSet()
	seen := 0
	err := filepath.WalkDir("..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path != ".." && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || d.Name() == "node_modules") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		file, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		ast.Inspect(file, func(n ast.Node) bool {
			lit, ok := n.(*ast.BasicLit)
			if !ok || lit.Kind != token.STRING {
				return true
			}
			s, err := strconv.Unquote(lit.Value)
			if m := metricName.FindStringSubmatch(s); err == nil && m != nil {
				seen++
				if _, ok := Lookup(m[1]); !ok && notMetrics[m[1]] == "" {
					t.Errorf("%s: metric %s is not in the registry (internal/platform/metric/families.go)", fset.Position(lit.Pos()), m[1])
				}
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if seen < 30 {
		t.Fatalf("found only %d metric names in the code: the scan is broken", seen)
	}
}

// One observation of a latency, as the HTTP interceptor makes it on every request.
func BenchmarkObserveLatency(b *testing.B) {
	r := New(SetSink(metrics.NewSet()), nil)
	for b.Loop() {
		r.Observe("bindery_http_request_duration_seconds", 0.003, "route", "targets")
	}
}
