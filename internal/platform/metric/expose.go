package metric

import (
	"bufio"
	"bytes"
	"io"
	"strings"

	"github.com/VictoriaMetrics/metrics"
)

// Write writes set and the process's own metrics (Go runtime, /proc) in the Prometheus text
// format, each family with its # HELP and # TYPE. The library writes the metadata lines but has
// no place for help text ("# HELP name" alone): Write fills them from the registry, exposes the
// registry's type where the library declares a wrong one, and leaves out the families the
// registry drops. A family not in the registry keeps the library's empty help, so a new metric
// without an entry shows up in the lint of /metrics.
func Write(w io.Writer, set *metrics.Set) {
	// The switch is process-wide; it only changes how the text is written, and /metrics is the
	// one place bindery writes it.
	metrics.ExposeMetadata(true)
	var raw bytes.Buffer
	set.WritePrometheus(&raw)
	metrics.WriteProcessMetrics(&raw)

	out := bufio.NewWriter(w)
	defer out.Flush()
	var fam Family
	known, dropped := false, false
	for line := range strings.Lines(raw.String()) {
		if rest, ok := strings.CutPrefix(line, "# HELP "); ok {
			name, _, _ := strings.Cut(strings.TrimSpace(rest), " ")
			fam, known = families[name]
			if dropped = known && fam.drop; dropped {
				continue
			}
			if known {
				line = "# HELP " + name + " " + fam.Help + "\n"
			}
		} else if dropped {
			continue
		} else if rest, ok := strings.CutPrefix(line, "# TYPE "); ok && known && fam.libType != "" {
			if name, typ, _ := strings.Cut(strings.TrimSpace(rest), " "); typ == fam.libType {
				line = "# TYPE " + name + " " + fam.Type + "\n"
			}
		}
		out.WriteString(line)
	}
}

// Histogram is the histogram series in set, created with its family's buckets on first use (the
// library's default buckets for a family the registry lacks).
func Histogram(set *metrics.Set, series string) *metrics.PrometheusHistogram {
	buckets := metrics.PrometheusHistogramDefaultBuckets
	if f, ok := families[familyOf(series)]; ok && len(f.Buckets) > 0 {
		buckets = f.Buckets
	}
	return set.GetOrCreatePrometheusHistogramExt(series, buckets)
}

// familyOf is the metric name of a series: the text before its labels.
func familyOf(series string) string {
	if i := strings.IndexByte(series, '{'); i >= 0 {
		return series[:i]
	}
	return series
}
