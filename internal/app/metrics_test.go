package app_test

import (
	"bytes"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"bindery/internal/platform/metric"
	"bindery/internal/testkit"
)

// The /metrics of the running demo, after a request went from apply to VALIDATED (so the HTTP,
// engine, cron, outbound, batch and request families exist), is what Prometheus expects:
// promlint finds no problem, every family has the type and help of the registry, and the
// latency histograms have le buckets a histogram_quantile can use.
func TestMetricsAfterAJourneyPassPrometheusLint(t *testing.T) {
	t.Parallel()
	_, configPath, dsn := demoDir(t)
	d := startDemo(t, configPath, dsn)
	op := apply(t, d, "alice", "payments-db-readonly")
	d.approveInInbox(t, op)
	testkit.Eventually(t, "VALIDATED", func() bool { return d.request(t, op).Status == "VALIDATED" })

	// Calls only this test makes, timed from the outside: the server's own time of each is at
	// most the client's.
	var slowest time.Duration
	for range 20 {
		start := time.Now()
		if code, _ := do(t, "GET", d.URL()+"/api/targets", "bob", ""); code != 200 {
			t.Fatalf("targets: %d", code)
		}
		slowest = max(slowest, time.Since(start))
	}

	code, text := get(t, d.URL()+"/metrics")
	if code != 200 {
		t.Fatalf("/metrics: %d", code)
	}
	problems, err := promlint.New(strings.NewReader(text)).Lint()
	if err != nil {
		t.Fatalf("lint: %v", err)
	}
	for _, p := range problems {
		t.Errorf("promlint: %s: %s", p.Metric, p.Text)
	}
	parser := expfmt.NewTextParser(model.LegacyValidation)
	families, err := parser.TextToMetricFamilies(bytes.NewReader([]byte(text)))
	if err != nil {
		t.Fatalf("parse /metrics: %v", err)
	}
	t.Logf("/metrics: %d families, %d lines, %d promlint problems", len(families), strings.Count(text, "\n"), len(problems))
	for name, mf := range families {
		f, ok := metric.Lookup(name)
		if !ok || strings.ToLower(mf.GetType().String()) != f.Type || mf.GetHelp() != f.Help {
			t.Errorf("%s served as %s %q; the registry says %+v", name, mf.GetType(), mf.GetHelp(), f)
		}
	}
	for _, name := range []string{"bindery_http_request_duration_seconds", "bindery_engine_action_seconds", "bindery_cron_run_seconds",
		"bindery_outbound_request_duration_seconds", "bindery_batch_wait_seconds", "bindery_batch_ci_seconds", "bindery_request_stage_seconds"} {
		if mf := families[name]; mf == nil || mf.GetType() != dto.MetricType_HISTOGRAM {
			t.Errorf("%s: not served as a histogram after the journey", name)
		}
	}
	if strings.Contains(text, "vmrange") {
		t.Error("/metrics still has vmrange buckets")
	}

	// histogram_quantile(0.9, sum by (le) (bindery_http_request_duration_seconds_bucket)): a
	// number inside the buckets that hold observations.
	all := sumByLe(t, families["bindery_http_request_duration_seconds"], nil)
	q90 := quantile(0.9, all)
	lo, hi := observedRange(all)
	if math.IsNaN(q90) || q90 < lo || q90 > hi || q90 <= 0 {
		t.Errorf("q90 of all routes %v, want within (%v, %v]", q90, lo, hi)
	}
	// The same for the one route only this test called: at most the bucket bound above the
	// slowest answer the client saw.
	targets := sumByLe(t, families["bindery_http_request_duration_seconds"], map[string]string{"route": "targets"})
	if n := targets[len(targets)-1].count; n != 20 {
		t.Fatalf("route targets counted %v requests, want 20", n)
	}
	bound := math.Inf(1)
	for _, b := range targets {
		if b.le >= slowest.Seconds() {
			bound = b.le
			break
		}
	}
	t.Logf("histogram_quantile(0.9) over all routes: %.4fs (buckets with observations: %v..%v)", q90, lo, hi)
	for _, q := range []float64{0.5, 0.9, 0.99} {
		t.Logf("histogram_quantile(%v) of route targets: %.4fs (slowest seen by the client %s)", q, quantile(q, targets), slowest)
		if v := quantile(q, targets); math.IsNaN(v) || v <= 0 || v > bound {
			t.Errorf("q%v of route targets %v, want in (0, %v] (slowest answer seen by the client %s)", q*100, v, bound, slowest)
		}
	}
	if t.Failed() {
		t.Logf("/metrics:\n%s", text)
	}
}

// bucket is one cumulative le bucket.
type bucket struct{ le, count float64 }

// sumByLe adds up the buckets of the series of mf whose labels include match, by le, as
// `sum by (le)` does.
func sumByLe(t *testing.T, mf *dto.MetricFamily, match map[string]string) []bucket {
	t.Helper()
	if mf == nil {
		t.Fatal("histogram not served")
	}
	byLe := map[float64]float64{}
series:
	for _, m := range mf.GetMetric() {
		for k, v := range match {
			if !slices.ContainsFunc(m.GetLabel(), func(l *dto.LabelPair) bool { return l.GetName() == k && l.GetValue() == v }) {
				continue series
			}
		}
		for _, b := range m.GetHistogram().GetBucket() {
			if !math.IsInf(b.GetUpperBound(), 1) { // the +Inf bucket is the count, added below
				byLe[b.GetUpperBound()] += float64(b.GetCumulativeCount())
			}
		}
		byLe[math.Inf(1)] += float64(m.GetHistogram().GetSampleCount())
	}
	var out []bucket
	for le, n := range byLe {
		out = append(out, bucket{le, n})
	}
	slices.SortFunc(out, func(a, b bucket) int { return cmpFloat(a.le, b.le) })
	return out
}

func cmpFloat(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// quantile is Prometheus' histogram_quantile over cumulative buckets sorted by le, the last
// +Inf: find the bucket the rank falls in and interpolate linearly inside it (from 0 for the
// first); a rank in the +Inf bucket answers the highest finite bound.
func quantile(q float64, buckets []bucket) float64 {
	if len(buckets) < 2 || !math.IsInf(buckets[len(buckets)-1].le, 1) {
		return math.NaN()
	}
	total := buckets[len(buckets)-1].count
	if total == 0 {
		return math.NaN()
	}
	rank := q * total
	i, _ := slices.BinarySearchFunc(buckets, rank, func(b bucket, r float64) int { return cmpFloat(b.count, r) })
	switch {
	case i == len(buckets)-1:
		return buckets[len(buckets)-2].le
	case i == 0 && buckets[0].le <= 0:
		return buckets[0].le
	}
	start, count := 0.0, buckets[i].count
	if i > 0 {
		start = buckets[i-1].le
		count -= buckets[i-1].count
		rank -= buckets[i-1].count
	}
	return start + (buckets[i].le-start)*(rank/count)
}

// observedRange is from the lower bound of the first bucket that holds an observation to the
// upper bound of the last one (the highest finite bound if observations reach +Inf).
func observedRange(buckets []bucket) (lo, hi float64) {
	prev := bucket{}
	lo = math.NaN()
	for i, b := range buckets {
		if b.count > prev.count {
			if math.IsNaN(lo) {
				lo = prev.le
			}
			hi = b.le
			if math.IsInf(hi, 1) {
				hi = buckets[i-1].le
			}
		}
		prev = b
	}
	return lo, hi
}
