package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// httpSection: apply and status throughput against `bindery serve` on each database, the load
// generator in its own process on loopback, /healthz on the same server in the same run as the
// baseline. The RSS of serve under the apply load is kept for the footprint section.
func httpSection(ctx context.Context, e *env) (string, []goal, error) {
	kinds := []string{"sqlite"}
	if e.mysql != "" {
		kinds = append(kinds, "mysql")
	}
	warmup := time.Second
	if e.quick {
		warmup = 200 * time.Millisecond
	}
	var body strings.Builder
	fmt.Fprintf(&body, "The built binary (`CGO_ENABLED=0 go build`), `bindery sim` and `bindery serve` on a generated configuration "+
		"(rate limits off, applications open, every request from a distinct identity in the login header of a trusted "+
		"loopback proxy, unrestricted targets) and a fresh database. The load generator is a separate process: %d "+
		"connections in a closed loop, %s of warm-up then %s measured per endpoint and run. `/healthz` on the same server "+
		"in the same run is the baseline. Apply hands each request to the workflow (the approval ticket is opened in the "+
		"background, on the simulator); status asks `GET /api/requests/{id}` for the requests accepted just before, each "+
		"by its owner. Throughput counts 2xx answers; latencies are of 2xx answers.\n\n", e.conc, warmup, e.duration)
	var goals []goal
	var errs []error
	for _, kind := range kinds {
		text, gs, err := httpOn(ctx, e, kind, warmup)
		body.WriteString(text)
		goals = append(goals, gs...)
		if err != nil {
			errs = append(errs, err)
		}
	}
	return body.String(), goals, errors.Join(errs...)
}

type endpointRuns struct {
	rps, p50, p99 []float64
	non2xx        map[string]int
	errors        int
	firstError    string
}

func (r *endpointRuns) add(res loadResult) {
	r.rps, r.p50, r.p99 = append(r.rps, res.RPS), append(r.p50, res.P50), append(r.p99, res.P99)
	if r.non2xx == nil {
		r.non2xx = map[string]int{}
	}
	for s, n := range res.Statuses {
		if !strings.HasPrefix(s, "2") {
			r.non2xx[s] += n
		}
	}
	r.errors += res.Errors
	if r.firstError == "" {
		r.firstError = res.FirstError
	}
}

func (r *endpointRuns) refused() string {
	var parts []string
	for _, s := range sortedKeys(r.non2xx) {
		parts = append(parts, fmt.Sprintf("%s × %s", count(float64(r.non2xx[s])), s))
	}
	if r.errors > 0 {
		parts = append(parts, fmt.Sprintf("%s transport errors", count(float64(r.errors))))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

func httpOn(ctx context.Context, e *env, kind string, warmup time.Duration) (string, []goal, error) {
	dir := filepath.Join(e.work, "http-"+kind)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", nil, err
	}
	db, err := newDatabase(ctx, e, kind, dir)
	if err != nil {
		return "", nil, err
	}
	defer db.drop()
	title := fmt.Sprintf("**%s**\n\n", db.name())
	st, err := startStack(ctx, e, stackConfig{db: db, approvalFirst: true}, dir)
	if err != nil {
		return title, nil, err
	}
	defer st.stop()
	workflowErr := probeApply(ctx, st.url)
	if workflowErr != nil && !errors.Is(workflowErr, errNoWorkflow) {
		return title, nil, workflowErr
	}

	var health, apply, status endpointRuns
	var peak []float64
	for run := range e.runs {
		// The resident set of serve is sampled through the run's three loads (RSS under load,
		// reported with the footprint).
		stopSampling := sampleRSS(st.serve)
		err := func() error {
			spec := loadSpec{URL: st.url, Conc: e.conc, Warmup: warmup, Duration: e.duration, Mode: "healthz"}
			res, err := runLoad(ctx, spec)
			if err != nil {
				return err
			}
			health.add(res)
			if workflowErr != nil {
				return nil
			}
			spec.Mode, spec.Prefix, spec.Targets = "apply", fmt.Sprintf("%s-r%d", kind, run), targetKeys()
			spec.IDs = filepath.Join(dir, fmt.Sprintf("accepted-%d.txt", run))
			if res, err = runLoad(ctx, spec); err != nil {
				return err
			}
			apply.add(res)
			if res.OK == 0 {
				return fmt.Errorf("%s: no application was accepted: %s", db.name(), res.FirstError)
			}
			spec.Mode = "status"
			if res, err = runLoad(ctx, spec); err != nil {
				return err
			}
			status.add(res)
			return nil
		}()
		peak = append(peak, stopSampling())
		if err != nil {
			return title, nil, err
		}
	}
	if kind == "sqlite" {
		e.rssUnderLoad = peak
	}

	rows := [][]string{{"endpoint", ">throughput", ">p50", ">p99", ">throughput ÷ /healthz", ">p99 ÷ /healthz", "refused"}}
	row := func(what string, r endpointRuns) {
		rows = append(rows, []string{what, distOf(r.rps).show(perSecond), distOf(r.p50).show(millis), distOf(r.p99).show(millis),
			ratios(r.rps, health.rps).show(times), ratios(r.p99, health.p99).show(times), r.refused()})
	}
	row("`GET /healthz` (baseline)", health)
	var goals []goal
	if workflowErr != nil {
		rows = append(rows, []string{"`POST /api/apply`", "not measured", "", "", "", "", ""})
		rows = append(rows, []string{"`GET /api/requests/{id}`", "not measured", "", "", "", "", ""})
		text := title + table(rows) + fmt.Sprintf("\nApply and status not measured: %s.\n\n", workflowErr)
		if kind == "mysql" {
			goals = append(goals, goal{"apply throughput on MariaDB", "≥ 1,000/s, p99 ≤ 50 ms", "—", notMeasured})
		}
		return text, goals, nil
	}
	row("`POST /api/apply`", apply)
	row("`GET /api/requests/{id}`", status)
	text := title + table(rows)
	for _, r := range []struct {
		what string
		runs endpointRuns
	}{{"apply", apply}, {"status", status}} {
		if r.runs.firstError != "" {
			text += fmt.Sprintf("\nFirst refusal of %s: `%s`\n", r.what, r.runs.firstError)
		}
	}
	if kind == "mysql" {
		rps, p99 := distOf(apply.rps).med, distOf(apply.p99).med
		goals = append(goals, goal{"apply throughput on MariaDB", "≥ 1,000/s, p99 ≤ 50 ms",
			fmt.Sprintf("%s, p99 %s", perSecond(rps), millis(p99)), check(rps >= 1000 && p99 <= 50)})
	}
	return text + "\n", goals, nil
}

// sampleRSS reads p's resident set every 50 ms until the returned function is called, which
// answers the largest value seen.
func sampleRSS(p *process) func() float64 {
	stop := make(chan struct{})
	var mu sync.Mutex
	var largest float64
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(50 * time.Millisecond)
		defer t.Stop()
		for {
			if cur, _, err := p.rss(); err == nil {
				mu.Lock()
				largest = max(largest, cur)
				mu.Unlock()
			}
			select {
			case <-stop:
				return
			case <-t.C:
			}
		}
	}()
	return func() float64 {
		close(stop)
		wg.Wait()
		mu.Lock()
		defer mu.Unlock()
		return largest
	}
}
