// Package metric records metrics under the rules of docs/api.md, 'Metrics never change a result'.
// Every call recovers its own panics (logged, never raised), label values are normalised and cut
// at 128 characters, a sample with an empty or invalid dimension is skipped, and the number of
// label sets per metric is capped. Callers pass only values they already parsed; nothing here
// reads a request. The HTTP layer uses it for API and business-activity metrics, the workflow
// for business outcomes (sent after commit, only on a real flip). Every family is declared once in
// the registry (families.go), which gives /metrics its help text, types and histogram buckets.
package metric

import (
	"encoding/binary"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/metrics"
)

// MaxLabelLen is the longest label value kept; longer values are cut.
const MaxLabelLen = 128

// DefaultMaxSeries caps the label sets of one metric name.
const DefaultMaxSeries = 1000

// Sink is where samples go: the process's metric set, or a test double.
type Sink interface {
	Inc(series string)
	Observe(series string, v float64)
}

// SetSink writes to a VictoriaMetrics set: counters, and histograms with Prometheus le buckets
// (the family's, from the registry).
func SetSink(set *metrics.Set) Sink { return setSink{set} }

type setSink struct{ set *metrics.Set }

func (s setSink) Inc(series string)                { s.set.GetOrCreateCounter(series).Inc() }
func (s setSink) Observe(series string, v float64) { Histogram(s.set, series).Update(v) }

// Recorder is safe for concurrent use. A nil *Recorder records nothing.
type Recorder struct {
	sink      Sink
	log       *slog.Logger
	maxSeries int64

	mu      sync.RWMutex
	known   map[string]string // series seen (interned)
	perName map[string]int64  // metric name → label sets admitted
	// raw maps the unchecked text of a call (name and label values as given) to its series, so
	// that a repeated call — the same route, the same status — skips validating and normalising.
	// Only admitted series are remembered, at most 2 × maxSeries spellings per metric name.
	raw        map[string]string
	rawPerName map[string]int64
	panics     atomic.Int64
	skipped    atomic.Int64
}

// New returns a Recorder writing to sink.
func New(sink Sink, log *slog.Logger) *Recorder {
	return &Recorder{sink: sink, log: log, maxSeries: DefaultMaxSeries, known: map[string]string{}, perName: map[string]int64{},
		raw: map[string]string{}, rawPerName: map[string]int64{}}
}

// WithMaxSeries sets the cap of label sets per metric (tests).
func (r *Recorder) WithMaxSeries(n int) *Recorder { r.maxSeries = int64(n); return r }

// Inc adds one to the counter name with labels given as key, value pairs.
func (r *Recorder) Inc(name string, labels ...string) {
	if r == nil {
		return
	}
	defer r.recover(name)
	if series, ok := r.series(name, labels); ok {
		r.sink.Inc(series)
	}
}

// Observe records v in the histogram name.
func (r *Recorder) Observe(name string, v float64, labels ...string) {
	if r == nil {
		return
	}
	defer r.recover(name)
	if series, ok := r.series(name, labels); ok {
		r.sink.Observe(series, v)
	}
}

// Since records the seconds elapsed since start in the histogram name.
func (r *Recorder) Since(name string, start time.Time, labels ...string) {
	r.Observe(name, time.Since(start).Seconds(), labels...)
}

// Skipped is how many samples were dropped (invalid dimension or label-set cap).
func (r *Recorder) Skipped() int64 { return r.skipped.Load() }

// Panics is how many metric calls panicked (and were recovered).
func (r *Recorder) Panics() int64 { return r.panics.Load() }

// recover keeps a metric failure from reaching the caller. Called directly by defer, so it only
// ever sees a panic raised inside this package's call, never the caller's own.
func (r *Recorder) recover(name string) {
	p := recover()
	if p == nil {
		return
	}
	// Log the first panic and then one in 1024, so a broken metric cannot flood the log.
	if n := r.panics.Add(1); n == 1 || n%1024 == 0 {
		if r.log != nil {
			r.log.Error("metric failed; the request or step goes on", "metric", name, "panic", p, "panics", n)
		}
	}
}

// series builds name{k="v",…} or reports why the sample is skipped. The common case — a call
// made before with the same values — allocates nothing and checks nothing again: its raw text
// is built in a stack buffer and looked up as is (a quarter of the cost of checking it).
func (r *Recorder) series(name string, labels []string) (string, bool) {
	var rawArr [512]byte
	raw := appendRaw(rawArr[:0], name, labels)
	r.mu.RLock()
	s, ok := r.raw[string(raw)]
	r.mu.RUnlock()
	if ok {
		return s, true
	}
	s, ok = r.checkedSeries(name, labels)
	if ok {
		r.mu.Lock()
		if _, seen := r.raw[string(raw)]; !seen && r.rawPerName[name] < 2*r.maxSeries {
			r.raw[string(raw)] = s
			r.rawPerName[name]++
		}
		r.mu.Unlock()
	}
	return s, ok
}

// appendRaw appends name and labels as given, each prefixed by its length (so that no two
// different calls share a text).
func appendRaw(buf []byte, name string, labels []string) []byte {
	buf = binary.AppendUvarint(buf, uint64(len(name)))
	buf = append(buf, name...)
	for _, l := range labels {
		buf = binary.AppendUvarint(buf, uint64(len(l)))
		buf = append(buf, l...)
	}
	return buf
}

// checkedSeries validates and normalises a call into its series.
func (r *Recorder) checkedSeries(name string, labels []string) (string, bool) {
	if !validName(name, true) || len(labels)%2 != 0 {
		r.skipped.Add(1)
		return "", false
	}
	var arr [512]byte
	buf := append(arr[:0], name...)
	for i := 0; i < len(labels); i += 2 {
		if !validName(labels[i], false) || reservedLabel(labels[i]) {
			r.skipped.Add(1)
			return "", false
		}
		if i == 0 {
			buf = append(buf, '{')
		} else {
			buf = append(buf, ',')
		}
		buf = append(append(buf, labels[i]...), '=', '"')
		n := len(buf)
		if buf = appendNormalized(buf, labels[i+1]); len(buf) == n {
			r.skipped.Add(1) // an empty dimension skips the sample
			return "", false
		}
		buf = append(buf, '"')
	}
	if len(labels) > 0 {
		buf = append(buf, '}')
	}
	r.mu.RLock()
	s, ok := r.known[string(buf)]
	r.mu.RUnlock()
	if ok {
		return s, true
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if s, ok := r.known[string(buf)]; ok {
		return s, true
	}
	if r.perName[name] >= r.maxSeries {
		r.skipped.Add(1)
		return "", false
	}
	s = string(buf)
	r.known[s] = s
	r.perName[name]++
	return s, true
}

// Normalize makes a label value safe: trimmed, anything outside letters, digits and
// " _.:@/+-" replaced by "_", cut at MaxLabelLen characters. Empty means "skip the sample".
func Normalize(v string) string { return string(appendNormalized(nil, v)) }

func appendNormalized(buf []byte, v string) []byte {
	v = strings.TrimSpace(v)
	start, n := len(buf), 0
	for _, c := range v {
		if n == MaxLabelLen {
			break
		}
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', strings.ContainsRune(" _.:@/+-", c):
			buf = append(buf, byte(c))
		default:
			buf = append(buf, '_')
		}
		n++
	}
	for len(buf) > start && buf[len(buf)-1] == ' ' { // a cut may end on a space
		buf = buf[:len(buf)-1]
	}
	return buf
}

// reservedLabel: label names the exposition owns — a histogram's le, a summary's quantile, and
// Prometheus' own __ prefix. A caller's "le" would be written twice in every bucket line and
// break the whole /metrics text.
func reservedLabel(s string) bool {
	return s == "le" || s == "quantile" || strings.HasPrefix(s, "__")
}

// validName: a metric name [a-zA-Z_:][a-zA-Z0-9_:]*, or a label name without ':'.
func validName(s string, metric bool) bool {
	if s == "" || len(s) > 200 {
		return false
	}
	for i, c := range s {
		ok := c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || (i > 0 && c >= '0' && c <= '9') || (metric && c == ':')
		if !ok {
			return false
		}
	}
	return true
}
