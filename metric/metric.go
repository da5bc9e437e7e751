// Package metric records metrics under the rules of SPEC §6.6: a metric never changes a result.
// Every call recovers its own panics (logged, never raised), label values are normalised and cut
// at 128 characters, a sample with an empty or invalid dimension is skipped, and the number of
// label sets per metric is capped. Callers pass only values they already parsed; nothing here
// reads a request. The HTTP layer uses it for API and business-activity metrics, the workflow
// for business outcomes (sent after commit, only on a real flip).
package metric

import (
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

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

// SetSink writes to a VictoriaMetrics set (counters and histograms).
func SetSink(set *metrics.Set) Sink { return setSink{set} }

type setSink struct{ set *metrics.Set }

func (s setSink) Inc(series string)                { s.set.GetOrCreateCounter(series).Inc() }
func (s setSink) Observe(series string, v float64) { s.set.GetOrCreateHistogram(series).Update(v) }

// Recorder is safe for concurrent use. A nil *Recorder records nothing.
type Recorder struct {
	sink      Sink
	log       *slog.Logger
	maxSeries int64

	known   sync.Map // series → struct{}
	perName sync.Map // metric name → *atomic.Int64 (label sets admitted)
	panics  atomic.Int64
	skipped atomic.Int64
}

// New returns a Recorder writing to sink.
func New(sink Sink, log *slog.Logger) *Recorder {
	return &Recorder{sink: sink, log: log, maxSeries: DefaultMaxSeries}
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

// series builds name{k="v",…} or reports why the sample is skipped.
func (r *Recorder) series(name string, labels []string) (string, bool) {
	if !validName(name, true) || len(labels)%2 != 0 {
		r.skipped.Add(1)
		return "", false
	}
	var b strings.Builder
	b.Grow(len(name) + 16*len(labels))
	b.WriteString(name)
	for i := 0; i < len(labels); i += 2 {
		v := Normalize(labels[i+1])
		if !validName(labels[i], false) || v == "" {
			r.skipped.Add(1)
			return "", false
		}
		if i == 0 {
			b.WriteByte('{')
		} else {
			b.WriteByte(',')
		}
		b.WriteString(labels[i])
		b.WriteString(`="`)
		b.WriteString(v)
		b.WriteByte('"')
	}
	if len(labels) > 0 {
		b.WriteByte('}')
	}
	s := b.String()
	if _, ok := r.known.Load(s); ok {
		return s, true
	}
	c, _ := r.perName.LoadOrStore(name, new(atomic.Int64))
	count := c.(*atomic.Int64)
	if count.Load() >= r.maxSeries {
		r.skipped.Add(1)
		return "", false
	}
	if _, loaded := r.known.LoadOrStore(s, struct{}{}); !loaded {
		count.Add(1)
	}
	return s, true
}

// Normalize makes a label value safe: trimmed, anything outside letters, digits and
// " _.:@/+-" replaced by "_", cut at MaxLabelLen characters. Empty means "skip the sample".
func Normalize(v string) string {
	v = strings.TrimSpace(v)
	if v == "" {
		return ""
	}
	var b strings.Builder
	n := 0
	for _, c := range v {
		if n == MaxLabelLen {
			break
		}
		switch {
		case c == utf8.RuneError:
			c = '_'
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', strings.ContainsRune(" _.:@/+-", c):
		default:
			c = '_'
		}
		b.WriteRune(c)
		n++
	}
	return strings.TrimSpace(b.String())
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
