package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"time"

	"bindery/internal/testkit/proc"
	"bindery/internal/vocab/state"
)

// httpSection: apply and status throughput against `bindery serve` on each database, the load
// generator in its own process on loopback, /healthz on the same server in the same run as the
// baseline. The RSS of serve under the apply load is kept for the footprint section.
func httpSection(ctx context.Context, e *env) (string, []goal, error) {
	kinds := []string{"sqlite"}
	if e.mysql != "" {
		kinds = append(kinds, "mysql")
	}
	warmup := quickOr(e, time.Second, 200*time.Millisecond)
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
	cpu           map[string][]float64 // process → CPU seconds per request, per run
	rejected      []float64            // apply: share of the accepted whose first step failed (CREATE_FAILED)
	db            map[string][]float64 // MariaDB status counter → per request, per run
}

// The processes whose CPU an HTTP load is charged with.
var cpuProcesses = []string{"bindery serve", "database server", "bindery sim", "load generator"}

func (r *endpointRuns) addCPU(proc string, perRequest float64) {
	if r.cpu == nil {
		r.cpu = map[string][]float64{}
	}
	r.cpu[proc] = append(r.cpu[proc], perRequest)
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

	var health, apply, status, rawApplyRuns, rawStatusRuns endpointRuns
	var peak []float64
	probe := loadProbe{pids: map[string]int{"bindery serve": st.serve.Pid(), "bindery sim": st.sim.Pid()}, pprof: st.pprof}
	if kind == "mysql" {
		probe.pids["database server"] = findProcess("mariadbd", "mysqld")
		probe.mysqlDSN = e.mysql
	}
	profile := func(endpoint string, run int) loadProbe {
		p := probe
		if e.profile != "" {
			p.profileTo = filepath.Join(e.profile, fmt.Sprintf("%s-%s-%d.pprof", kind, endpoint, run+1))
		}
		return p
	}
	for run := range e.runs {
		// The resident set of serve is sampled through the run's three loads (RSS under load,
		// reported with the footprint).
		stopSampling := sampleRSS(st.serve)
		err := func() error {
			spec := loadSpec{URL: st.url, Conc: e.conc, Warmup: warmup, Duration: e.duration, Mode: "healthz"}
			if err := measureLoad(ctx, spec, profile("healthz", run), &health); err != nil {
				return err
			}
			if workflowErr != nil {
				return nil
			}
			spec.Mode, spec.Prefix, spec.Targets = "apply", fmt.Sprintf("%s-r%d", kind, run), targetKeys()
			spec.IDs = filepath.Join(dir, fmt.Sprintf("accepted-%d.txt", run))
			if err := measureLoad(ctx, spec, profile("apply", run), &apply); err != nil {
				return err
			}
			if apply.rps[len(apply.rps)-1] == 0 {
				return fmt.Errorf("%s: no application was accepted: %s", db.name(), apply.firstError)
			}
			share, err := firstStepsFailed(ctx, st.url, spec.IDs, spec.Prefix)
			if err != nil {
				return err
			}
			apply.rejected = append(apply.rejected, share)
			spec.Mode = "status"
			if err := measureLoad(ctx, spec, profile("status", run), &status); err != nil {
				return err
			}
			// The physical baselines, in the same run, on the same server, at the same concurrency.
			if err := measureRaw(ctx, db, rawApply, e.conc, warmup, e.duration, &rawApplyRuns); err != nil {
				return err
			}
			return measureRaw(ctx, db, rawStatus, e.conc, warmup, e.duration, &rawStatusRuns)
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
		text := title + table(rows) + fmt.Sprintf("\nApply and status not measured: %s.\n\n", workflowErr) +
			cpuTable(db, []string{"`GET /healthz`"}, []*endpointRuns{&health})
		if kind == "mysql" {
			goals = append(goals, goal{"apply throughput on MariaDB", "≥ 1,000/s, p99 ≤ 50 ms", "—", notMeasured})
		}
		return text, goals, nil
	}
	row("`POST /api/apply`", apply)
	row("`GET /api/requests/{id}`", status)
	raw := [][]string{{"bindery", "raw operation it stands on", ">raw throughput", ">raw p99", ">throughput ÷ raw", ">p99 ÷ raw",
		">raw CPU per operation", ">ceiling of any HTTP endpoint on it", ">ceiling ÷ raw"}}
	reachable := map[string]float64{}
	for _, r := range []struct {
		what     string
		op       rawOp
		own, raw endpointRuns
	}{{"`POST /api/apply`", rawApply, apply, rawApplyRuns}, {"`GET /api/requests/{id}`", rawStatus, status, rawStatusRuns}} {
		ceiling := ceilingOver(health, r.raw)
		reachable[r.op.name] = ratios(ceiling, r.raw.rps).med
		raw = append(raw, []string{r.what, r.op.name, distOf(r.raw.rps).show(perSecond), distOf(r.raw.p99).show(millis),
			ratios(r.own.rps, r.raw.rps).show(times), ratios(r.own.p99, r.raw.p99).show(times),
			distOf(sumCPU(r.raw)).show(func(s float64) string { return nanos(s * 1e9) }), distOf(ceiling).show(perSecond),
			ratios(ceiling, r.raw.rps).show(times)})
	}
	rawText := fmt.Sprintf("\nPhysical baselines (`cmd/bench/raw.go`), in the same run on the same database server, %d connections in a "+
		"closed loop in the bench process through the pools bindery opens: a transaction of two inserts with unique keys "+
		"(apply), a point read of three rows by a unique index (status). The raw loop has the cores to itself; bindery "+
		"shares them with the load generator. The ceiling is what an endpoint doing nothing but the raw operation "+
		"behind HTTP could reach here: cores ÷ (CPU of a `/healthz` request in every process + CPU of the raw "+
		"operation in the bench process and the database server), both measured in this run.\n\n", e.conc) + table(raw)
	rejected := fmt.Sprintf("\nOf the accepted applications, %s ended their first step failed (`CREATE_FAILED`: the approval "+
		"ticket could not be opened); the others reached APPROVAL_SENT. A busy first-steps lane delays a ticket in the database; "+
		"it never refuses one.\n", distOf(apply.rejected).show(percent))
	names, all := []string{"`GET /healthz`", "`POST /api/apply`", "`GET /api/requests/{id}`"}, []*endpointRuns{&health, &apply, &status}
	text := title + table(rows) + rawText + rejected + "\n" + cpuTable(db, names, all) + dbTable(db, names, all)
	for _, r := range []struct {
		what string
		runs endpointRuns
	}{{"apply", apply}, {"status", status}} {
		if r.runs.firstError != "" {
			text += fmt.Sprintf("\nFirst refusal of %s: `%s`\n", r.what, r.runs.firstError)
		}
	}
	applyRatio, applyP99 := ratios(apply.rps, rawApplyRuns.rps).med, ratios(apply.p99, rawApplyRuns.p99).med
	statusRatio := ratios(status.rps, rawStatusRuns.rps).med
	goals = append(goals,
		goal{"apply ÷ raw two-insert transaction on " + db.name(), "≥ 0.4× throughput, p99 ≤ 3× raw p99",
			fmt.Sprintf("%s, p99 %s (HTTP ceiling %s)", times(applyRatio), times(applyP99), times(reachable[rawApply.name])), check(applyRatio >= 0.4 && applyP99 <= 3)},
		goal{"status ÷ raw point read of three rows on " + db.name(), "≥ 0.5× throughput",
			fmt.Sprintf("%s (HTTP ceiling %s)", times(statusRatio), times(reachable[rawStatus.name])), check(statusRatio >= 0.5)})
	if kind == "mysql" {
		rps, p99 := distOf(apply.rps).med, distOf(apply.p99).med
		goals = append(goals, goal{"apply throughput on MariaDB", "≥ 1,000/s, p99 ≤ 50 ms",
			fmt.Sprintf("%s, p99 %s", perSecond(rps), millis(p99)), check(rps >= 1000 && p99 <= 50)})
	}
	return text + "\n", goals, nil
}

// sampleRSS reads p's resident set every 50 ms until the returned function is called, which
// answers the largest value seen.
func sampleRSS(p *proc.Process) func() float64 {
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
			if cur, _, err := rssOf(p); err == nil {
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

// loadProbe is what is watched during a load: the processes whose CPU is charged to it, the
// MariaDB server's counters (mysqlDSN), and with -profile serve's CPU profile.
type loadProbe struct {
	pids      map[string]int
	mysqlDSN  string
	pprof     string // serve's pprof address ("" without -profile)
	profileTo string // file for the CPU profile of the measured window
}

// measureLoad runs one load and charges the CPU the processes used during it to its requests,
// and on MariaDB the server's statements; with -profile it saves serve's CPU profile of the
// measured window.
func measureLoad(ctx context.Context, spec loadSpec, probe loadProbe, into *endpointRuns) error {
	pids, mysqlDSN := probe.pids, probe.mysqlDSN
	before := map[string]float64{}
	for name, pid := range pids {
		if pid > 0 {
			before[name], _ = cpuSeconds(pid)
		}
	}
	var dbBefore map[string]float64
	if mysqlDSN != "" {
		var err error
		if dbBefore, err = mysqlStatus(ctx, mysqlDSN); err != nil {
			return err
		}
	}
	profiled := make(chan error, 1)
	if probe.pprof != "" && probe.profileTo != "" {
		go func() { profiled <- saveProfile(ctx, probe.pprof, probe.profileTo, spec.Warmup, spec.Duration) }()
	} else {
		profiled <- nil
	}
	res, err := runLoad(ctx, spec)
	if perr := <-profiled; err == nil && perr != nil {
		err = fmt.Errorf("profile of %s: %w", spec.Mode, perr)
	}
	if err != nil {
		return err
	}
	into.add(res)
	if res.Total == 0 {
		return nil
	}
	if mysqlDSN != "" {
		after, err := mysqlStatus(ctx, mysqlDSN)
		if err != nil {
			return err
		}
		if into.db == nil {
			into.db = map[string][]float64{}
		}
		for _, c := range mysqlCounters {
			into.db[c] = append(into.db[c], (after[c]-dbBefore[c])/float64(res.Total))
		}
	}
	for name, pid := range pids {
		if pid == 0 {
			continue
		}
		if after, err := cpuSeconds(pid); err == nil {
			into.addCPU(name, (after-before[name])/float64(res.Total))
		}
	}
	into.addCPU("load generator", res.cpu/float64(res.Total))
	return nil
}

// cpuTable: the CPU each process spent per request, and what that allows at most on this
// machine's cores if nothing else ran.
func cpuTable(db database, names []string, runs []*endpointRuns) string {
	head := []string{"CPU per request"}
	var procs []string
	for _, p := range cpuProcesses {
		if p == "database server" && db.kind != "mysql" {
			continue // SQLite runs inside bindery
		}
		procs = append(procs, p)
		head = append(head, ">"+p)
	}
	head = append(head, ">all", fmt.Sprintf(">ceiling on %d cores", runtime.NumCPU()))
	rows := [][]string{head}
	for i, r := range runs {
		row := []string{names[i]}
		for _, p := range procs {
			row = append(row, distOf(r.cpu[p]).show(func(s float64) string { return nanos(s * 1e9) }))
		}
		total := sumCPU(*r)
		ceiling := make([]float64, len(total))
		for j, t := range total {
			if t > 0 {
				ceiling[j] = float64(runtime.NumCPU()) / t
			}
		}
		row = append(row, distOf(total).show(func(s float64) string { return nanos(s * 1e9) }), distOf(ceiling).show(perSecond))
		rows = append(rows, row)
	}
	return table(rows) + "\n"
}

// dbTable: MariaDB's statements per request by kind, from its global status counters (a profile
// of the database side). The counters are the server's: other clients of a shared server add to
// them, which is why row-read counters (thrown off by any other client's scans) are left out.
func dbTable(db database, names []string, runs []*endpointRuns) string {
	if db.kind != "mysql" {
		return ""
	}
	rows := [][]string{{"MariaDB statements per request (server-wide counters)", ">all", ">SELECT", ">INSERT", ">UPDATE", ">explicit COMMIT"}}
	for i, r := range runs {
		row := []string{names[i]}
		for _, c := range mysqlCounters {
			row = append(row, distOf(r.db[c]).show(count))
		}
		rows = append(rows, row)
	}
	return table(rows) + "\n"
}

// saveProfile waits out the warm-up and saves serve's CPU profile of the measured window.
func saveProfile(ctx context.Context, addr, path string, warmup, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(warmup):
	}
	secs := max(1, int(d.Round(time.Second)/time.Second))
	req, err := http.NewRequestWithContext(ctx, "GET", fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", addr, secs), nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("pprof answered %d", resp.StatusCode)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// firstStepsFailed waits (up to 30 s) until the accepted applications in idsFile have left
// APPROVAL_SENDING — their tickets were opened, or the step failed — and returns the share that
// failed, counted in the stuck list (GET /api/ops/requests, as an operator).
func firstStepsFailed(ctx context.Context, base, idsFile, prefix string) (float64, error) {
	ids, err := readOwned(idsFile)
	if err != nil || len(ids) == 0 {
		return 0, err
	}
	api := newAPIClient(base)
	// The first-steps lane takes due work oldest first: once the last accepted ones are out of
	// APPROVAL_SENDING, so are the others.
	deadline := time.Now().Add(30 * time.Second)
	for _, o := range ids[max(0, len(ids)-20):] {
		for {
			st, err := api.status(ctx, o)
			if err != nil {
				return 0, err
			}
			if st != state.StatusApprovalSending || time.Now().After(deadline) {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	stuck, err := api.stuck(ctx, state.StatusCreateFailed)
	if err != nil {
		return 0, err
	}
	failed := 0
	for _, id := range stuck {
		if strings.HasPrefix(id, prefix+"-") {
			failed++
		}
	}
	return float64(failed) / float64(len(ids)), nil
}

// sumCPU is, per run, the CPU of every process charged with r.
func sumCPU(r endpointRuns) []float64 {
	var out []float64
	for _, v := range r.cpu {
		for j, x := range v {
			if j >= len(out) {
				out = append(out, 0)
			}
			out[j] += x
		}
	}
	return out
}
