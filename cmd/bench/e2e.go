package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"bindery/internal/platform/config"
	"bindery/internal/sim"
	"bindery/internal/testkit/proc"
	"bindery/internal/vocab/state"
)

// e2eSection: N applications through the HTTP API, approved by the simulated approval system
// (auto-approve), until every one is VALIDATED — once with the approval-first flow (batched:
// one MR per batch of up to batch.maxRequests) and once with the legacy flow (one MR per
// request). The simulators run in this process so that their counters (sim.GitLab.Usage) are
// read exactly; bindery is the built binary, `bindery serve`, reaching them over loopback.
func e2eSection(ctx context.Context, e *env) (string, []goal, error) {
	kind := "sqlite"
	if e.mysql != "" {
		kind = "mysql"
	}
	flows := []struct {
		name          string
		approvalFirst bool
	}{{"batched (approval-first)", true}, {"one MR per request (legacy)", false}}
	type flowRuns struct {
		wall, mrs, pipelines, calls, retries []float64
		perEndpoint                          map[string][]float64
	}
	results := make([]flowRuns, len(flows))
	var failures []error // a flow that fails does not hide the figures of the other
	for run := range e.runs {
		for i, f := range flows {
			if len(results[i].wall) < run {
				continue // failed in an earlier run
			}
			r, err := e2eRun(ctx, e, kind, f.approvalFirst, run, e.n, nil)
			if errors.Is(err, errNoWorkflow) {
				return fmt.Sprintf("Not measured: %s. The section drives the product through its HTTP API only (apply; the "+
						"approval simulator approves every ticket; `GET /api/requests/{id}` until VALIDATED), so it runs as soon as "+
						"the workflow is wired into `bindery serve`.\n", err),
					[]goal{{"GitLab calls per request, batched vs. one MR per request", "≤ 1/20", "—", notMeasured}}, nil
			}
			if err != nil {
				failures = append(failures, fmt.Errorf("%s, run %d: %w", f.name, run+1, err))
				continue
			}
			fr := &results[i]
			n := float64(e.n)
			fr.wall = append(fr.wall, float64(r.wall))
			fr.mrs = append(fr.mrs, float64(r.usage.MergeRequests))
			fr.pipelines = append(fr.pipelines, float64(r.usage.Pipelines))
			fr.calls = append(fr.calls, float64(r.usage.TotalCalls())/n)
			fr.retries = append(fr.retries, float64(r.retries)/n)
			if fr.perEndpoint == nil {
				fr.perEndpoint = map[string][]float64{}
			}
			for ep, c := range r.usage.Calls {
				fr.perEndpoint[ep] = append(fr.perEndpoint[ep], float64(c)/n)
			}
		}
	}
	db := "SQLite"
	if kind == "mysql" {
		db = "MariaDB"
	}
	n := float64(e.n)
	perSec := func(wall []float64) []float64 {
		out := make([]float64, len(wall))
		for i, w := range wall {
			out[i] = n / (w / 1e9)
		}
		return out
	}
	perReq := func(xs []float64) []float64 {
		out := make([]float64, len(xs))
		for i, x := range xs {
			out[i] = x / n
		}
		return out
	}
	b, l := results[0], results[1]
	rows := [][]string{{"", ">" + flows[0].name, ">" + flows[1].name, ">batched ÷ legacy"}}
	rows = append(rows,
		[]string{"wall time, first apply → all VALIDATED", distOf(b.wall).show(nanos), distOf(l.wall).show(nanos), ratios(b.wall, l.wall).show(times)},
		[]string{"requests validated per second", distOf(perSec(b.wall)).show(count), distOf(perSec(l.wall)).show(count), ratios(perSec(b.wall), perSec(l.wall)).show(times)},
		[]string{"merge requests per request", distOf(perReq(b.mrs)).show(count), distOf(perReq(l.mrs)).show(count), ratios(b.mrs, l.mrs).show(times)},
		[]string{"pipelines per request", distOf(perReq(b.pipelines)).show(count), distOf(perReq(l.pipelines)).show(count), ratios(b.pipelines, l.pipelines).show(times)},
		[]string{"**GitLab calls per request**", distOf(b.calls).show(count), distOf(l.calls).show(count), ratios(b.calls, l.calls).show(times)},
		[]string{"operator retries per request (failed, retried through the ops API)", distOf(b.retries).show(count), distOf(l.retries).show(count), ""},
	)
	endpoints := map[string]bool{}
	for ep := range b.perEndpoint {
		endpoints[ep] = true
	}
	for ep := range l.perEndpoint {
		endpoints[ep] = true
	}
	perEp := [][]string{{"GitLab endpoint", ">batched, calls per request", ">legacy, calls per request"}}
	for _, ep := range sortedKeys(endpoints) {
		perEp = append(perEp, []string{"`" + ep + "`", distOf(b.perEndpoint[ep]).show(count), distOf(l.perEndpoint[ep]).show(count)})
	}
	r := ratios(b.calls, l.calls)
	goals := []goal{{"GitLab calls per request, batched vs. one MR per request", "≤ 1/20 (0.05×)", "—", notMeasured}}
	if r.n > 0 {
		goals[0].measured, goals[0].status = times(r.med), check(r.med <= 0.05)
	}
	body := fmt.Sprintf("%s approved requests per flow and run, applied through `POST /api/apply` (8 at a time, each by a "+
		"distinct identity, over three targets in two projects), approved by the approval simulator (auto-approve), followed "+
		"with `GET /api/requests/{id}` until every one is VALIDATED. `bindery serve` on %s; the simulators in the bench "+
		"process with zero latency (pipelines, rebases and deploys finish at once), polling every 20 ms, batch rounds "+
		"every second, `batch.maxRequests` 50 (the default). GitLab calls are counted by the simulator (`sim.GitLab.Usage`). "+
		"Once a second the bench plays the operator: failed requests of the stuck list (`GET /api/ops/requests`) are retried "+
		"through `POST /api/ops/requests/{id}/retry`, at most 20 times each; their calls count.\n\n",
		count(n), db)
	real, err := realisticRun(ctx, e, kind, db)
	if err != nil {
		failures = append(failures, err)
	}
	return body + table(rows) + "\n" + table(perEp) + real, goals, errors.Join(failures...)
}

// realisticRun is the end-to-end run with CI of a realistic length: -real-n requests over
// -real-projects projects (one target each), pipelines of 10 minutes scaled by -real-scale,
// once per flow (one run: it is the longest measurement of the bench).
func realisticRun(ctx context.Context, e *env, kind, db string) (string, error) {
	r := &realisticCI{projects: e.realProjects, pipeline: 10 * time.Minute, timeScale: e.realScale}
	n := e.realN
	var res [2]e2eResult
	var failures []error
	for i, approvalFirst := range []bool{true, false} {
		fmt.Fprintf(e.log, "   realistic CI, approval-first %t: %d requests, %d projects, time scale %g\n", approvalFirst, n, r.projects, r.timeScale)
		got, err := e2eRun(ctx, e, kind, approvalFirst, 0, n, r)
		if err != nil {
			failures = append(failures, fmt.Errorf("realistic CI, approval-first %t: %w", approvalFirst, err))
			continue
		}
		res[i] = got
		// The figures in the log too: a run stopped during the other flow keeps this one's.
		fmt.Fprintf(e.log, "   %s: %d MRs, %d pipelines, %d GitLab calls, workers running %.3g mean %.3g peak of %.3g, %d retries\n",
			got.wall.Round(time.Second), got.usage.MergeRequests, got.usage.Pipelines, got.usage.TotalCalls(), got.busyMean, got.busyPeak, got.workers, got.retries)
	}
	per := func(x float64) string { return count(x / float64(n)) }
	ratio := func(a, b float64) string {
		if b == 0 {
			return ""
		}
		return times(a / b)
	}
	b, l := res[0], res[1]
	scaled := func(w time.Duration) string {
		if w == 0 {
			return "—"
		}
		return fmt.Sprintf("%s (%.3g h of simulated time)", nanos(float64(w)), (time.Duration(float64(w) * r.timeScale)).Hours())
	}
	rows := [][]string{{"", ">batched (approval-first)", ">one MR per request (legacy)", ">batched ÷ legacy"},
		{"wall time, first apply → all VALIDATED", scaled(b.wall), scaled(l.wall), ratio(float64(b.wall), float64(l.wall))},
		{"merge requests per request", per(float64(b.usage.MergeRequests)), per(float64(l.usage.MergeRequests)), ratio(float64(b.usage.MergeRequests), float64(l.usage.MergeRequests))},
		{"pipelines per request", per(float64(b.usage.Pipelines)), per(float64(l.usage.Pipelines)), ratio(float64(b.usage.Pipelines), float64(l.usage.Pipelines))},
		{"**GitLab calls per request**", per(float64(b.usage.TotalCalls())), per(float64(l.usage.TotalCalls())), ratio(float64(b.usage.TotalCalls()), float64(l.usage.TotalCalls()))},
		{"engine workers running an action, mean (peak) of once-a-second samples", fmt.Sprintf("%s (%s) of %s", count(b.busyMean), count(b.busyPeak), count(b.workers)),
			fmt.Sprintf("%s (%s) of %s", count(l.busyMean), count(l.busyPeak), count(l.workers)), ratio(b.busyMean, l.busyMean)},
		{"operator retries per request", per(float64(b.retries)), per(float64(l.retries)), ""},
	}
	text := fmt.Sprintf("\n**With CI of a realistic length.** %s requests over %d projects (one target each, so up to %d "+
		"batches in CI at once), pipelines of 10 minutes and the simulators' other durations (rebase 3 s, deploy 3 s) divided "+
		"by `sim.timeScale` %g (a pipeline takes %s of wall time), one run per flow; otherwise as above (%s, auto-approve, "+
		"`batch.maxRequests` 50, batch rounds every second), with bindery polling GitLab every 250 ms (`poll.short`) and "+
		"the default workers (`workers.size` 8, `workers.first` 4). Workers in use are read from serve's `/metrics` "+
		"(`bindery_engine_running`, all lanes).\n\n", count(float64(n)), r.projects, r.projects, r.timeScale,
		nanos(float64(r.pipeline)/r.timeScale), db)
	return text + table(rows), errors.Join(failures...)
}

type e2eResult struct {
	wall    time.Duration
	usage   sim.Usage
	retries int // operator retries of failed requests
	// Engine workers running an action (bindery_engine_running, all lanes), sampled once a
	// second from /metrics: the mean and the peak over the run, and the workers configured.
	busyMean, busyPeak, workers float64
}

// e2eRun is one flow: a fresh database, simulators and server; N applications; wait for all.
// With realistic, the catalog and the simulated CI are realistic's (see realisticCI).
func e2eRun(ctx context.Context, e *env, kind string, approvalFirst bool, run, n int, realistic *realisticCI) (e2eResult, error) {
	dir := filepath.Join(e.work, fmt.Sprintf("e2e-%t-%d-%t", approvalFirst, run, realistic != nil))
	c := stackConfig{approvalFirst: approvalFirst, autoApprove: true, fast: realistic == nil, realistic: realistic}
	targets := targetKeys()
	if realistic != nil {
		targets = realistic.targets()
	}
	p, err := startInProcess(ctx, e, kind, dir, c)
	if err != nil {
		return e2eResult{}, err
	}
	defer p.stop()
	st, sims := p.st, p.sims

	start := time.Now()
	wctx, stopWatch := context.WithCancel(ctx)
	busy := watchWorkers(wctx, st.url)
	ids, err := applyAll(ctx, st.url, n, fmt.Sprintf("e2e%d-%t", run, approvalFirst), targets)
	if err != nil {
		stopWatch()
		<-busy
		return e2eResult{}, err
	}
	retries, err := waitValidated(ctx, st, ids)
	wall := time.Since(start)
	stopWatch()
	w := <-busy
	if err != nil {
		return e2eResult{}, err
	}
	return e2eResult{wall: wall, usage: sims.GitLab.Usage(), retries: retries, busyMean: w.mean, busyPeak: w.peak, workers: w.workers}, nil
}

// inProcess is `bindery serve` on a fresh database against simulators that run in this process,
// so that their counters (sim.GitLab.Usage) are read exactly.
type inProcess struct {
	st   *stack
	sims *sim.Sims
	stop func() // serve, then the simulators, then the database
}

// startInProcess starts the simulators in this process and serve on configuration c (its
// addresses and database filled in here), in dir.
func startInProcess(ctx context.Context, e *env, kind, dir string, c stackConfig) (*inProcess, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	db, err := newDatabase(ctx, e, kind, dir)
	if err != nil {
		return nil, err
	}
	addr, err := proc.FreeAddr()
	if err != nil {
		db.drop()
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		db.drop()
		return nil, err
	}
	c.addr, c.simURL, c.db = addr, "http://"+ln.Addr().String(), db
	snap, err := config.Parse([]byte(configYAML(c)))
	if err != nil {
		ln.Close()
		db.drop()
		return nil, fmt.Errorf("generated configuration: %w", err)
	}
	simLog, err := os.Create(filepath.Join(dir, "sim.log"))
	if err != nil {
		ln.Close()
		db.drop()
		return nil, err
	}
	sims := sim.New(sim.Options{Config: config.NewStatic(snap), BinderyURL: "http://" + addr, PublicURL: c.simURL + "/sim",
		Log: slog.New(slog.NewTextHandler(simLog, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	srv := &http.Server{Handler: sims.Handler(), ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(ln)
	sctx, stopSims := context.WithCancel(ctx)
	sims.Start(sctx)
	p := &inProcess{sims: sims}
	p.stop = func() {
		if p.st != nil {
			p.st.stop()
		}
		stopSims()
		_ = sims.Stop(context.Background())
		srv.Close()
		simLog.Close()
		db.drop()
	}
	if p.st, err = startStack(ctx, e, c, dir); err != nil {
		p.stop()
		return nil, err
	}
	return p, nil
}

type workerUse struct{ mean, peak, workers float64 }

// watchWorkers samples serve's /metrics once a second (loopback may read it) until ctx ends:
// the engine workers running an action, summed over the lanes, and the workers configured.
func watchWorkers(ctx context.Context, url string) <-chan workerUse {
	out := make(chan workerUse, 1)
	go func() {
		client := &http.Client{Timeout: 5 * time.Second}
		var sum, n float64
		var use workerUse
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				if n > 0 {
					use.mean = sum / n
				}
				out <- use
				return
			case <-tick.C:
			}
			req, _ := http.NewRequestWithContext(ctx, "GET", url+"/metrics", nil)
			status, body, err := send(client, req)
			if err != nil || status != http.StatusOK {
				continue
			}
			running, workers := 0.0, 0.0
			for _, line := range strings.Split(string(body), "\n") {
				var v float64
				if name, rest, ok := strings.Cut(line, " "); ok {
					fmt.Sscan(rest, &v)
					switch {
					case strings.HasPrefix(name, "bindery_engine_running{"):
						running += v
					case strings.HasPrefix(name, "bindery_engine_workers{"):
						workers += v
					}
				}
			}
			sum, n = sum+running, n+1
			use.peak, use.workers = max(use.peak, running), max(use.workers, workers)
		}
	}()
	return out
}

// applyAll sends n applications, 8 at a time, and returns them (operationId, owner).
func applyAll(ctx context.Context, url string, n int, prefix string, targets []string) ([]owned, error) {
	client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 8}}
	out := make([]owned, n)
	errs := make(chan error, n)
	next := make(chan int)
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				id := fmt.Sprintf("%s-%05d", prefix, i)
				o := owned{id: id, identity: id + "@bench.example"}
				body := fmt.Sprintf(`{"operationId":%q,"targetKey":%q,"reason":"end-to-end benchmark"}`, id, targets[i%len(targets)])
				req, _ := http.NewRequestWithContext(ctx, "POST", url+"/api/apply", strings.NewReader(body))
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set(loginHeader, o.identity)
				status, answer, err := send(client, req)
				switch {
				case err != nil:
					errs <- err
				case status == http.StatusServiceUnavailable:
					errs <- errNoWorkflow
				case status != http.StatusAccepted:
					errs <- fmt.Errorf("apply %s: %d %s", id, status, oneLine(string(answer)))
				default:
					out[i] = o
				}
			}
		}()
	}
	for i := range n {
		select {
		case next <- i:
		case err := <-errs:
			close(next)
			wg.Wait()
			return nil, err
		}
	}
	close(next)
	wg.Wait()
	select {
	case err := <-errs:
		return nil, err
	default:
	}
	return out, nil
}

// opsIdentity holds the ops rule in the generated configuration (permission.rules).
const opsIdentity = "ops@bench.example"

// maxOperatorRetries bounds the operator's retries of one request.
const maxOperatorRetries = 20

// waitValidated follows the requests with GET /api/requests/{id} until every one is VALIDATED.
// Requests finish roughly in order, so it asks for the oldest unfinished one and sleeps while it
// is not done: about one call per request plus one per poll. Once a second it plays the
// operator: it reads the stuck list (GET /api/ops/requests) and retries every failed request of
// this run (POST /api/ops/requests/{id}/retry), at most maxOperatorRetries times each; it
// returns how many retries it made. A rejected request, a request still failing after its
// retries, or no progress for two minutes ends the run with the statuses of those pending.
func waitValidated(ctx context.Context, st *stack, ids []owned) (int, error) {
	api := newAPIClient(st.url)
	status := func(o owned) (state.BindingStatus, error) { return api.status(ctx, o) }
	mine := map[string]bool{}
	for _, o := range ids {
		mine[o.id] = true
	}
	retries := map[string]int{}
	total := 0
	// operator retries the failed requests of this run found in the stuck list.
	operator := func() error {
		for _, st := range []state.BindingStatus{state.StatusCreateFailed, state.StatusHandleFailed} {
			failed, err := api.stuck(ctx, st)
			if err != nil {
				return err
			}
			for _, id := range failed {
				if !mine[id] {
					continue
				}
				if retries[id] >= maxOperatorRetries {
					return fmt.Errorf("request %s still %s after %d operator retries", id, st, maxOperatorRetries)
				}
				retries[id]++
				total++
				body := fmt.Sprintf(`{"operationId":"retry-%s-%d"}`, id, retries[id])
				if err := api.call(ctx, "POST", "/api/ops/requests/"+id+"/retry", opsIdentity, body, nil); err != nil {
					return err
				}
			}
		}
		return nil
	}
	pending := ids
	progress, lastOperator := time.Now(), time.Now()
	for len(pending) > 0 {
		s, err := status(pending[0])
		if err != nil {
			return total, err
		}
		switch {
		case s == state.StatusValidated:
			pending, progress = pending[1:], time.Now()
			continue
		case s == state.StatusRejected || s == state.StatusClosed:
			return total, fmt.Errorf("request %s ended %s%s", pending[0].id, s, breakdown(pending, status))
		case time.Since(progress) > 2*time.Minute:
			return total, fmt.Errorf("no request validated for 2 minutes, %d of %d pending%s\nserve log:\n%s", len(pending), len(ids),
				breakdown(pending, status), st.serve.Tail(15))
		}
		if time.Since(lastOperator) >= time.Second || s.Failed() {
			if err := operator(); err != nil {
				return total, fmt.Errorf("%w%s", err, breakdown(pending, status))
			}
			lastOperator = time.Now()
		}
		select {
		case <-ctx.Done():
			return total, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	return total, nil
}

// breakdown counts the statuses of the pending requests (for an error message).
func breakdown(pending []owned, status func(owned) (state.BindingStatus, error)) string {
	counts := map[string]int{}
	for _, o := range pending {
		s, err := status(o)
		if err != nil {
			counts["error: "+err.Error()]++
			continue
		}
		counts[string(s)]++
	}
	var parts []string
	for _, k := range sortedKeys(counts) {
		parts = append(parts, fmt.Sprintf("%s: %d", k, counts[k]))
	}
	sort.Strings(parts)
	return " (pending: " + strings.Join(parts, ", ") + ")"
}
