package server

import (
	"fmt"
	"io"
	"net/http"
	"net/url"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// BenchmarkAuditExportTenYears exports a ten-year range holding auditRows audited actions and
// appRows applications (SQLite, spread over the ten years) as CSV to a client that reads as fast
// as it can, and reports the rows per second and the highest heap in use during the export
// (peak-heap-MB, sampled every millisecond) beside the heap before it (base-heap-MB): the walk
// holds one page, so the peak does not grow with the range (BENCHMARKS.md, 'The audit export').
func BenchmarkAuditExportTenYears(b *testing.B) {
	const auditRows, appRows = 200_000, 50_000
	h := setup(b, options{})
	raw := h.db.Raw()
	start := time.Date(2016, 1, 1, 0, 0, 0, 0, time.UTC)
	step := 10 * 365 * 24 * time.Hour / auditRows
	insert := func(n int, row func(i int) (string, []any)) {
		const chunk = 400
		for i := 0; i < n; i += chunk {
			var vals []string
			var args []any
			for j := i; j < min(n, i+chunk); j++ {
				v, a := row(j)
				vals, args = append(vals, v), append(args, a...)
			}
			q, _ := row(-1)
			if _, err := raw.Exec(q+strings.Join(vals, ", "), args...); err != nil {
				b.Fatal(err)
			}
		}
	}
	ts := func(i int, every time.Duration) string {
		return start.Add(time.Duration(i) * every).Format("2006-01-02 15:04:05.000")
	}
	insert(auditRows, func(i int) (string, []any) {
		if i < 0 {
			return "INSERT INTO audit_log (event_key, at, actor, action, params, request_id) VALUES ", nil
		}
		return "(?, ?, ?, ?, ?, ?)", []any{fmt.Sprintf("revoke:%d", i), ts(i, step), "ops@example.com", "revoke", fmt.Sprintf(`{"request":"op-%d","reason":"=quarterly review, item %d"}`, i%appRows, i), "req"}
	})
	insert(appRows, func(i int) (string, []any) {
		if i < 0 {
			return "INSERT INTO operation (operation_id, subject_id, target_key, project, flow, reason, status, step, decided_by, created_at, updated_at) VALUES ", nil
		}
		at := ts(i, step*auditRows/appRows)
		return "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", []any{fmt.Sprintf("op-%d", i), fmt.Sprintf("user%d@example.com", i), "db-read", "infra/acl", "approval-first", "r", "VALIDATED", 10301, "dave@example.com", at, at}
	})
	q := url.Values{"from": {start.Format(time.RFC3339)}, "to": {start.Add(10 * 366 * 24 * time.Hour).Format(time.RFC3339)}}
	srv := h.srv.Handler()
	b.ResetTimer()
	var peak, base atomic.Uint64
	for range b.N {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		base.Store(ms.HeapInuse)
		done := make(chan struct{})
		go func() {
			t := time.NewTicker(time.Millisecond)
			defer t.Stop()
			for {
				select {
				case <-done:
					return
				case <-t.C:
					var m runtime.MemStats
					runtime.ReadMemStats(&m)
					if m.HeapInuse > peak.Load() {
						peak.Store(m.HeapInuse)
					}
				}
			}
		}()
		r, _ := http.NewRequest("GET", "/api/ops/audit/export?"+q.Encode(), nil)
		r.Header.Set("X-Bindery-User", "ops")
		r.RemoteAddr = "192.0.2.10:4321"
		w := &discardWriter{h: http.Header{}}
		srv.ServeHTTP(w, r)
		close(done)
		if w.code != 200 || w.lines < auditRows+appRows {
			b.Fatalf("export: %d, %d lines\n%s", w.code, w.lines, h.logs)
		}
	}
	b.ReportMetric(float64(peak.Load())/(1<<20), "peak-heap-MB")
	b.ReportMetric(float64(base.Load())/(1<<20), "base-heap-MB")
	b.ReportMetric(float64(auditRows+appRows)*float64(b.N)/b.Elapsed().Seconds(), "rows/s")
}

// discardWriter is a client that reads the answer as fast as it comes, counting its lines.
type discardWriter struct {
	h     http.Header
	code  int
	lines int
}

func (d *discardWriter) Header() http.Header { return d.h }
func (d *discardWriter) WriteHeader(c int)   { d.code = c }
func (d *discardWriter) Write(p []byte) (int, error) {
	if d.code == 0 {
		d.code = 200
	}
	d.lines += strings.Count(string(p), "\n")
	return io.Discard.Write(p)
}
func (d *discardWriter) Flush() {}
