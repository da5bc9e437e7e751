package metric

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite docs/metrics.md from the family registry")

// markdown is docs/metrics.md: the registry as a table.
func markdown() string {
	var b strings.Builder
	b.WriteString(`# Metrics

Generated from the family registry (` + "`internal/platform/metric/families.go`" + `) by
` + "`go test ./internal/platform/metric -run TestMetricsDocs -update`" + `; a test fails when the two disagree.

` + "`/metrics`" + ` is the Prometheus text format: every family has its ` + "`# HELP`" + ` and ` + "`# TYPE`" + `
line, and latency histograms have ` + "`le`" + ` buckets, so the usual queries work, for example

    histogram_quantile(0.9, sum by (le) (rate(bindery_http_request_duration_seconds_bucket[5m])))
    sum by (route, code) (rate(bindery_http_requests_total[5m]))

Durations are in seconds. No identity is ever a label value; label values are cut at 128
characters, and each family keeps at most 1000 label sets (further ones are not recorded).
A new metric needs its entry in the registry (help text, type, buckets): a test scans the code
for metric names and another lints the served text with Prometheus' promlint.

| family | type | meaning | buckets (s) |
|---|---|---|---|
`)
	for _, name := range Names() {
		f := families[name]
		if !strings.HasPrefix(name, "bindery_") {
			continue
		}
		var buckets []string
		for _, v := range f.Buckets {
			buckets = append(buckets, strconv.FormatFloat(v, 'g', -1, 64))
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s |\n", name, f.Type, f.Help, strings.Join(buckets, ", "))
	}
	b.WriteString(`
The Go runtime (` + "`go_*`" + `) and process (` + "`process_*`" + `) families come from the metrics library
and carry their help text from the same registry. Three of the library's families are left out
because their names break the conventions and they say nothing about a build without cgo:
`)
	var dropped []string
	for _, name := range Names() {
		if families[name].drop {
			dropped = append(dropped, "`"+name+"`")
		}
	}
	b.WriteString(strings.Join(dropped, ", ") + ".\n")
	return b.String()
}

// TestMetricsDocs keeps docs/metrics.md equal to the registry.
func TestMetricsDocs(t *testing.T) {
	path := filepath.Join("..", "..", "..", "docs", "metrics.md")
	want := markdown()
	if *update {
		if err := os.WriteFile(path, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(path)
	if err != nil || string(got) != want {
		t.Fatalf("docs/metrics.md is stale (%v); run: go test ./internal/platform/metric -run TestMetricsDocs -update", err)
	}
}
