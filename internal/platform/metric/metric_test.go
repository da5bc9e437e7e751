package metric

import (
	"bytes"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/VictoriaMetrics/metrics"

	"bindery/internal/platform/logging"
)

type recordingSink struct {
	mu     sync.Mutex
	series []string
}

func (s *recordingSink) Inc(series string) {
	s.mu.Lock()
	s.series = append(s.series, series)
	s.mu.Unlock()
}
func (s *recordingSink) Observe(series string, _ float64) {
	s.Inc(series)
}

type panickingSink struct{}

func (panickingSink) Inc(string)              { panic("metrics backend exploded") }
func (panickingSink) Observe(string, float64) { panic("metrics backend exploded") }

func TestLabelValuesAreNormalisedAndCut(t *testing.T) {
	sink := &recordingSink{}
	r := New(sink, logging.Discard())
	r.Inc("bindery_x_total", "user", " Alice@Example.com \"}\n", "route", strings.Repeat("é", 300))
	if len(sink.series) != 1 {
		t.Fatalf("series %v", sink.series)
	}
	got := sink.series[0]
	want := `bindery_x_total{user="Alice@Example.com __",route="` + strings.Repeat("_", MaxLabelLen) + `"}`
	if got != want {
		t.Fatalf("series\n%s\nwant\n%s", got, want)
	}
}

func TestInvalidOrEmptyDimensionSkipsTheSample(t *testing.T) {
	sink := &recordingSink{}
	r := New(sink, logging.Discard())
	r.Inc("bindery_x_total", "user", "")
	r.Inc("bindery_x_total", "user", "   ")
	r.Inc("bindery_x_total", "bad-label", "v")
	r.Inc("bindery_x_total", "odd")
	r.Inc("bad name", "user", "a")
	// Names the exposition owns: "le" would be written twice in every bucket line.
	r.Observe("bindery_x_seconds", 1, "le", "0.5")
	r.Observe("bindery_x_seconds", 1, "quantile", "0.5")
	r.Inc("bindery_x_total", "__name__", "y")
	if len(sink.series) != 0 || r.Skipped() != 8 {
		t.Fatalf("recorded %v, skipped %d", sink.series, r.Skipped())
	}
}

func TestLabelSetsPerMetricAreCapped(t *testing.T) {
	sink := &recordingSink{}
	r := New(sink, logging.Discard()).WithMaxSeries(3)
	for _, u := range []string{"a", "b", "c", "d", "e", "a"} {
		r.Inc("bindery_x_total", "user", u)
	}
	r.Inc("bindery_y_total", "user", "z") // another metric has its own cap
	if got := strings.Join(sink.series, " "); got != `bindery_x_total{user="a"} bindery_x_total{user="b"} bindery_x_total{user="c"} bindery_x_total{user="a"} bindery_y_total{user="z"}` {
		t.Fatalf("recorded %s", got)
	}
}

func TestAPanickingBackendNeverReachesTheCaller(t *testing.T) {
	var logs bytes.Buffer
	r := New(panickingSink{}, logging.New(&logs, "text", new(slog.LevelVar)))
	for i := 0; i < 3; i++ {
		r.Inc("bindery_x_total", "user", "a")
		r.Observe("bindery_y_seconds", 1)
	}
	if r.Panics() != 6 || strings.Count(logs.String(), "metric failed") != 1 {
		t.Fatalf("panics %d, logs:\n%s", r.Panics(), logs.String())
	}
	// The real backend panics on a name registered as another type; that too is contained.
	backend := New(SetSink(metrics.NewSet()), logging.Discard())
	backend.Inc("bindery_z_total")
	backend.Observe("bindery_z_total", 1)
	if backend.Panics() != 1 {
		t.Fatalf("real backend: %d panics recovered, want 1", backend.Panics())
	}
	var nilRecorder *Recorder
	nilRecorder.Inc("bindery_x_total")
}

func TestCallerPanicIsNotSwallowed(t *testing.T) {
	r := New(panickingSink{}, logging.Discard())
	defer func() {
		if p := recover(); p != "caller's own" {
			t.Fatalf("recovered %v, want the caller's panic to pass through", p)
		}
	}()
	func() {
		defer r.Inc("bindery_x_total") // a metric in a deferred call while the caller panics
		panic("caller's own")
	}()
}

// Repeated calls take the remembered series; different spellings of one label value still land
// on one series, and the spellings remembered per metric are bounded.
func TestRepeatedCallsKeepTheirSeriesAndSpellingsAreBounded(t *testing.T) {
	sink := &recordingSink{}
	r := New(sink, logging.Discard()).WithMaxSeries(2)
	spellings := []string{"a", " a", "a ", "  a", "a  ", "   a", "a", " a"}
	for _, u := range spellings {
		r.Inc("bindery_x_total", "user", u)
	}
	for i, got := range sink.series {
		if got != `bindery_x_total{user="a"}` {
			t.Fatalf("call %d (%q) recorded %s", i, spellings[i], got)
		}
	}
	if len(sink.series) != len(spellings) || r.Skipped() != 0 {
		t.Fatalf("recorded %d of %d, skipped %d", len(sink.series), len(spellings), r.Skipped())
	}
	if n := len(r.raw); n != 4 {
		t.Fatalf("remembered %d spellings, want 2 × max series = 4", n)
	}
	// The raw text is unambiguous: a label value holding what would be the next label's text
	// is another call.
	r.Inc("bindery_y_total", "a", "bc", "d", "e")
	r.Inc("bindery_y_total", "a", "b", "cd", "e")
	if got := sink.series[len(sink.series)-2:]; got[0] != `bindery_y_total{a="bc",d="e"}` || got[1] != `bindery_y_total{a="b",cd="e"}` {
		t.Fatalf("recorded %v", got)
	}
}
