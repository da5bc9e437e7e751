package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"bindery/api"
	"bindery/internal/vocab/state"
)

// trainSection: the merge train (batch.train, docs/architecture.md "The merge train") against
// CI of a realistic length and a steady stream of approved requests — batch.train 1 (one batch
// of a project in CI at a time) and 3, each without and with poison pills. What a requester
// feels is the time from the approval to the merge, measured in pipeline durations.
func trainSection(ctx context.Context, e *env) (string, []goal, error) {
	kind, db := "sqlite", "SQLite"
	if e.mysql != "" {
		kind, db = "mysql", "MariaDB"
	}
	p := trainPlan{projects: e.trainProjects, pipeline: 10 * time.Minute, scale: e.trainScale, perPipeline: 6,
		warm: e.trainWarm, measure: e.trainMeasure, drain: 6, maxWait: e.trainMaxWait, poisonShare: 0.02}
	configs, err := parseTrainConfigs(e.trainConfigs)
	if err != nil {
		return "", nil, err
	}
	results := make([]*trainFigures, len(configs))
	errs := make([]error, len(configs))
	var logMu sync.Mutex // the runs of -quick log at once
	logf := func(format string, args ...any) {
		logMu.Lock()
		defer logMu.Unlock()
		fmt.Fprintf(e.log, format, args...)
	}
	one := func(i int) {
		c := configs[i]
		logf("   %s: %d requests over %d projects, a pipeline every %s\n", c, p.requests(), p.projects, p.wallPipeline())
		reqs, run, err := trainRun(ctx, e, kind, p, c)
		if err != nil {
			errs[i] = err
			return
		}
		f := summarizeTrain(p, reqs, run)
		results[i] = &f
		// The figures in the log too: a run stopped later keeps this one's.
		logf("   %s: p50 %s, p90 %s, p99 %s pipelines (%d measured), %.3g pipelines per merged request, estimate error %s, serve %.2f cores\n%s",
			c, f.p50, f.p90, f.p99, f.measured, f.pipelinesPerMerged, f.estimateText(), f.serveCores, slowest(p, reqs, 3))
	}
	if e.quick {
		// A smoke: the four stacks at once (their figures are not judged), with the binary
		// built before them.
		if _, err := e.buildBindery(ctx); err != nil {
			return "", nil, err
		}
		var wg sync.WaitGroup
		for i := range configs {
			wg.Add(1)
			go func() { defer wg.Done(); one(i) }()
		}
		wg.Wait()
	} else {
		for i := range configs {
			if ctx.Err() != nil {
				return "", nil, ctx.Err()
			}
			one(i)
		}
	}
	var failures []error
	for i, err := range errs {
		if err != nil {
			failures = append(failures, fmt.Errorf("%s: %w", configs[i], err))
		}
	}
	text := fmt.Sprintf("%d projects (one target each), one approved request per project every sixth of a pipeline, evenly "+
		"spread over the projects; pipelines of 10 minutes and the simulators' other durations divided by `sim.timeScale` %g "+
		"(a pipeline takes %s of wall time); `sim.gitlab.mergeMethod: merge`; the approval simulator approves every ticket "+
		"at once. `bindery serve` on %s, batch rounds every second (the shortest `cron.rounds` can do), `poll.short` %s "+
		"(a fortieth of a pipeline; GitLab's webhooks wake the batches sooner), `batch.maxRequests` 50, %s, "+
		"`batch.flakyRetries` 1, the default workers. Arrivals run for %g pipelines; only the requests approved after the "+
		"first %g are measured, each from its approval (its QUEUED step) to its merge (HANDLE_MERGED), both read from the "+
		"request's timeline (the database clock). Pipelines per merged request and merges per hour count what happened "+
		"between the end of the warm-up and the last arrival. The estimate is `waiting.estimate.mergeAt` of "+
		"`GET /api/requests/{id}` read as soon as the request is approved; its error is |estimated − actual| ÷ actual time to "+
		"merge. Poison pills: %s of the requests carry a text in their reason that `sim.gitlab.pipelineFailOn` fails, so "+
		"every pipeline whose tree carries one fails; their latencies are left out of the percentiles (\"the others\"). "+
		"Percentiles are nearest-rank. One run per configuration, in the order of the columns.\n\n",
		p.projects, p.scale, p.wallPipeline(), db, p.pollShort(), maxWaitWords(p), p.warm+p.measure, p.warm, percent(p.poisonShare))
	text += renderTrain(configs, results)
	return text, trainGoals(configs, results), errors.Join(failures...)
}

// maxWaitWords says what batch.maxWait the runs had.
func maxWaitWords(p trainPlan) string {
	if p.maxWait == 0 {
		return "`batch.maxWait` 0"
	}
	return fmt.Sprintf("**`batch.maxWait` %s (%g pipelines: -train-maxwait)**", time.Duration(p.maxWait*float64(p.wallPipeline())), p.maxWait)
}

// trainPlan is the shape of every run of the section.
type trainPlan struct {
	projects    int
	pipeline    time.Duration // before scaling
	scale       float64       // sim.timeScale
	perPipeline int           // arrivals per project per pipeline
	warm        float64       // pipelines of arrivals before the measured ones
	measure     float64       // pipelines of measured arrivals
	drain       float64       // pipelines after the last arrival the run waits at most for the rest
	maxWait     float64       // batch.maxWait, in pipelines (0: the default, none)
	poisonShare float64
}

// wallPipeline is how long a pipeline takes on the wall clock.
func (p trainPlan) wallPipeline() time.Duration { return time.Duration(float64(p.pipeline) / p.scale) }

// pollShort is bindery's poll.short in the runs.
func (p trainPlan) pollShort() time.Duration { return p.wallPipeline() / 40 }

// requests is how many requests a run applies.
func (p trainPlan) requests() int {
	return int(math.Round((p.warm + p.measure) * float64(p.perPipeline*p.projects)))
}

// at is when request i arrives, after the first.
func (p trainPlan) at(i int) time.Duration {
	return time.Duration(float64(i) * float64(p.wallPipeline()) / float64(p.perPipeline*p.projects))
}

// project is the project request i goes to: the projects take turns, so each gets one every
// pipeline ÷ perPipeline.
func (p trainPlan) project(i int) int { return i % p.projects }

// measured says whether request i arrives after the warm-up.
func (p trainPlan) measured(i int) bool {
	return float64(i) >= p.warm*float64(p.perPipeline*p.projects)
}

// poisonPills picks round(n × share) of n requests (at least one when share > 0), one at a
// random place in each of as many equal stretches, so that they arrive as steadily as the
// others; the choice is the same in every run (a fixed seed).
func poisonPills(n int, share float64) []bool {
	out := make([]bool, n)
	k := int(math.Round(float64(n) * share))
	if share > 0 && k == 0 && n > 0 {
		k = 1
	}
	seed := uint64(0x9e3779b97f4a7c15)
	for j := range k {
		from, to := j*n/k, (j+1)*n/k
		seed = seed*6364136223846793005 + 1442695040888963407 // a fixed LCG: the same pills every run
		out[from+int((seed>>33)%uint64(to-from))] = true
	}
	return out
}

// trainConfig is one column of the section's table.
type trainConfig struct {
	cars      int
	isolation int // batch.isolationCars
	poison    bool
}

func (c trainConfig) String() string {
	s := fmt.Sprintf("batch.train %d", c.cars)
	if c.isolation > 0 {
		s += fmt.Sprintf(", batch.isolationCars %d", c.isolation)
	}
	if c.poison {
		s += ", 2 % poison pills"
	}
	return s
}

// parseTrainConfigs reads -train-configs: batch.train values, each with an "i" for as many
// batch.isolationCars and then a "p" for the run with poison pills ("1,3i,1p,3ip").
func parseTrainConfigs(s string) ([]trainConfig, error) {
	var out []trainConfig
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		c := trainConfig{}
		num, poison := strings.CutSuffix(f, "p")
		num, isolated := strings.CutSuffix(num, "i")
		if _, err := fmt.Sscanf(num, "%d", &c.cars); err != nil || c.cars < 1 || c.cars > 20 || fmt.Sprint(c.cars) != num {
			return nil, fmt.Errorf("-train-configs: %q is not a batch.train from 1 to 20 with an optional i (as many batch.isolationCars) and p (poison pills)", f)
		}
		if isolated {
			c.isolation = c.cars
		}
		c.poison = poison
		out = append(out, c)
	}
	return out, nil
}

// poisonText is what a poison pill's reason carries (sim.gitlab.pipelineFailOn).
const poisonText = "poison-pill"

// trainRequest is one request of a run, as the bench saw it.
type trainRequest struct {
	owned
	index  int
	poison bool
	// The estimate of the view read right after the approval (zero: none).
	estimate time.Time
	// The view read once it ended, or when the run stopped waiting (pending: it had not ended).
	status   state.BindingStatus
	step     string
	timeline []api.TimelineEntry
	pending  bool
}

// trainRunInfo is what a run measured besides the requests.
type trainRunInfo struct {
	windowFrom, windowTo time.Time // the measured arrivals (wall clock)
	pipelines            int       // pipelines GitLab started in the window
	serveCores           float64   // serve's CPU over the run ÷ its wall time
	lateArrivals         time.Duration
	stopped              time.Time // when the run stopped waiting for the requests left
}

// trainView is what the bench reads of GET /api/requests/{id}.
type trainView struct {
	Status  state.BindingStatus `json:"status"`
	Step    api.StepView        `json:"step"`
	Waiting *struct {
		Estimate *struct {
			MergeAt string `json:"mergeAt"`
		} `json:"estimate"`
	} `json:"waiting"`
	Timeline []api.TimelineEntry `json:"timeline"`
}

// mergeAt is the view's estimate of the merge (ok false: none, or not a time).
func (v trainView) mergeAt() (time.Time, bool) {
	if v.Waiting == nil || v.Waiting.Estimate == nil || v.Waiting.Estimate.MergeAt == "" {
		return time.Time{}, false
	}
	t, err := time.Parse(time.RFC3339Nano, v.Waiting.Estimate.MergeAt)
	return t, err == nil
}

// ended: the request will not move without someone (merged, failed, rejected, closed).
func ended(s state.BindingStatus) bool {
	return s == state.StatusMerged || s == state.StatusValidated || s.Failed() || s == state.StatusRejected || s == state.StatusClosed
}

// trainRun is one configuration: a fresh database, simulators and server; the steady arrivals;
// then it waits until every request ended and reads each one's timeline.
func trainRun(ctx context.Context, e *env, kind string, p trainPlan, c trainConfig) ([]*trainRequest, trainRunInfo, error) {
	var info trainRunInfo
	r := &realisticCI{projects: p.projects, pipeline: p.pipeline, timeScale: p.scale, train: c.cars, isolation: c.isolation, mergeMethod: "merge", pollShort: p.pollShort(),
		maxWait: time.Duration(p.maxWait * float64(p.wallPipeline()))}
	if c.poison {
		r.failOn = poisonText
	}
	dir := filepath.Join(e.work, fmt.Sprintf("train-%d-%d-%t", c.cars, c.isolation, c.poison))
	ip, err := startInProcess(ctx, e, kind, dir, stackConfig{approvalFirst: true, autoApprove: true, realistic: r})
	if err != nil {
		return nil, info, err
	}
	defer ip.stop()
	cpu0, _ := cpuSeconds(ip.st.serve.Pid())

	n := p.requests()
	pills := poisonPills(n, 0)
	if c.poison {
		pills = poisonPills(n, p.poisonShare)
	}
	targets := r.targets()
	reqs := make([]*trainRequest, n)
	for i := range reqs {
		id := fmt.Sprintf("train%d-%t-%05d", c.cars, c.poison, i)
		reqs[i] = &trainRequest{owned: owned{id: id, identity: id + "@bench.example"}, index: i, poison: pills[i]}
	}

	// The pipelines started in the window: GitLab's count at its two ends.
	start := time.Now()
	info.windowFrom = start.Add(time.Duration(p.warm * float64(p.wallPipeline())))
	info.windowTo = start.Add(time.Duration((p.warm + p.measure) * float64(p.wallPipeline())))
	counted := make(chan int, 2)
	var clocks sync.WaitGroup
	for _, at := range []time.Time{info.windowFrom, info.windowTo} {
		clocks.Add(1)
		go func() {
			defer clocks.Done()
			select {
			case <-time.After(time.Until(at)):
				counted <- ip.sims.GitLab.Usage().Pipelines
			case <-ctx.Done():
				counted <- 0
			}
		}()
	}

	if err := arrive(ctx, ip.st.url, start, p, reqs, targets, &info); err != nil {
		return nil, info, err
	}
	clocks.Wait()
	from, to := <-counted, <-counted
	info.pipelines = max(from, to) - min(from, to)
	if info.stopped, err = waitEnded(ctx, ip, p, reqs, start.Add(p.at(n-1))); err != nil {
		return nil, info, err
	}
	if cpu1, err := cpuSeconds(ip.st.serve.Pid()); err == nil {
		info.serveCores = (cpu1 - cpu0) / time.Since(start).Seconds()
	}
	// Every request's last view, for a look at where they waited (-keep keeps it).
	if data, err := json.Marshal(trainDump(reqs)); err == nil {
		_ = os.WriteFile(filepath.Join(dir, "requests.json"), data, 0o644)
	}
	return reqs, info, nil
}

// trainDump is what requests.json holds of each request.
func trainDump(reqs []*trainRequest) any {
	type dumped struct {
		ID       string              `json:"id"`
		Poison   bool                `json:"poison,omitempty"`
		Pending  bool                `json:"pending,omitempty"`
		Estimate *time.Time          `json:"estimate,omitempty"`
		Status   state.BindingStatus `json:"status"`
		Timeline []api.TimelineEntry `json:"timeline"`
	}
	out := make([]dumped, len(reqs))
	for i, q := range reqs {
		out[i] = dumped{ID: q.id, Poison: q.poison, Pending: q.pending, Status: q.status, Timeline: q.timeline}
		if !q.estimate.IsZero() {
			out[i].Estimate = &q.estimate
		}
	}
	return out
}

// arrive applies request i at start + p.at(i) (8 at a time), and right after each one is
// approved reads its view once for the estimate. A request that cannot keep its time goes late
// (info.lateArrivals is the latest).
func arrive(ctx context.Context, url string, start time.Time, p trainPlan, reqs []*trainRequest, targets []string, info *trainRunInfo) error {
	a := newAPIClient(url)
	jobs := make(chan *trainRequest)
	errs := make(chan error, len(reqs))
	var late time.Duration
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for q := range jobs {
				if err := applyAndRead(ctx, a, q, targets[p.project(q.index)]); err != nil {
					errs <- err
				}
			}
		}()
	}
	var err error
loop:
	for i, q := range reqs {
		due := start.Add(p.at(i))
		select {
		case <-ctx.Done():
			err = ctx.Err()
			break loop
		case err = <-errs:
			break loop
		case <-time.After(time.Until(due)):
		}
		select {
		case jobs <- q:
		case <-ctx.Done():
			err = ctx.Err()
			break loop
		}
		late = max(late, time.Since(due))
	}
	close(jobs)
	wg.Wait()
	if err == nil {
		select {
		case err = <-errs:
		default:
		}
	}
	info.lateArrivals = late
	return err
}

// applyAndRead applies q, waits for its approval (the simulator approves at once) and keeps the
// estimate of the view read then.
func applyAndRead(ctx context.Context, a *apiClient, q *trainRequest, target string) error {
	reason := "merge-train benchmark"
	if q.poison {
		reason = "merge-train benchmark, a " + poisonText + " that fails every pipeline carrying it"
	}
	body := fmt.Sprintf(`{"operationId":%q,"targetKey":%q,"reason":%q}`, q.id, target, reason)
	var answer api.ApplyResult
	if err := a.call(ctx, "POST", "/api/apply", q.identity, body, &answer); err != nil {
		return err
	}
	deadline := time.Now().Add(time.Minute)
	for {
		v, err := a.view(ctx, q.owned)
		if err != nil {
			return err
		}
		if !v.Status.AwaitingApproval() {
			q.estimate, _ = v.mergeAt()
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("request %s not approved within a minute (%s)", q.id, v.Status)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// view reads a request as its owner.
func (c *apiClient) view(ctx context.Context, o owned) (trainView, error) {
	var v trainView
	err := c.call(ctx, "GET", "/api/requests/"+o.id, o.identity, "", &v)
	return v, err
}

// waitEnded reads every request until it ended (merged or failed), one sweep at most every
// twentieth of a pipeline; its last view is kept. It stops waiting p.drain pipelines after the
// last arrival (last): the requests left are marked pending, and it returns when it stopped.
func waitEnded(ctx context.Context, ip *inProcess, p trainPlan, reqs []*trainRequest, last time.Time) (time.Time, error) {
	a := newAPIClient(ip.st.url)
	pending := append([]*trainRequest(nil), reqs...)
	deadline := last.Add(time.Duration(p.drain * float64(p.wallPipeline())))
	for {
		sweep := time.Now()
		stop := sweep.After(deadline)
		left := pending[:0]
		for _, q := range pending {
			v, err := a.view(ctx, q.owned)
			if err != nil {
				return sweep, err
			}
			q.status, q.step, q.timeline = v.Status, v.Step.Name, v.Timeline
			if q.pending = !ended(v.Status); q.pending {
				left = append(left, q)
			}
		}
		if pending = left; len(pending) == 0 || stop {
			return sweep, nil
		}
		select {
		case <-ctx.Done():
			return sweep, ctx.Err()
		case <-time.After(p.wallPipeline()/20 - time.Since(sweep)):
		}
	}
}

// journey is a request's way from its approval to its merge, read from its timeline.
type journey struct {
	approved, merged time.Time // the first QUEUED and the first HANDLE_MERGED ("merged" zero: never)
	// Time spent between the two, by the stage of each step (state.StageBatch: waiting for a
	// car, StageCI: in a car until its pipeline passed, StageMerge: approval, turn and merge).
	stages   map[string]time.Duration
	requeued bool // returned to the waiting set (a bisection of its car)
	rebuilt  bool // its car's branch was built again (a car ahead of it changed)
}

// journeyOf reads a timeline (ok false: it holds no QUEUED step).
func journeyOf(tl []api.TimelineEntry) (journey, bool) {
	j := journey{stages: map[string]time.Duration{}}
	queued := 0
	for i, en := range tl {
		step := state.Step(en.Step.Code)
		switch step {
		case state.StepQueued:
			queued++
			if queued == 1 {
				j.approved = en.At
			}
		case state.StepCreateStarted:
			// A car's branch is first written right after the claim (BATCHED); written again
			// later, it was rebuilt on a changed car ahead.
			j.rebuilt = j.rebuilt || (i > 0 && state.Step(tl[i-1].Step.Code) != state.StepBatched)
		case state.StepHandleMerged:
			if j.merged.IsZero() {
				j.merged = en.At
			}
		}
		if queued == 0 || !j.merged.IsZero() {
			continue
		}
		end := en.At.Add(en.Duration)
		if i+1 < len(tl) {
			end = tl[i+1].At
		}
		if s := step.Info().Stage; s != "" {
			j.stages[s] += end.Sub(en.At)
		}
	}
	j.requeued = queued > 1
	return j, queued > 0
}

// estimateError is |estimated − actual| ÷ actual, the durations counted from the approval (NaN:
// no actual duration).
func estimateError(approved, mergeAt, merged time.Time) float64 {
	actual := merged.Sub(approved)
	if actual <= 0 {
		return math.NaN()
	}
	return math.Abs(float64(mergeAt.Sub(approved)-actual)) / float64(actual)
}

// percentile is the nearest-rank p-th percentile (0 < p ≤ 1) of xs (NaN: none).
func percentile(xs []float64, p float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	k := int(math.Ceil(p*float64(len(s)))) - 1
	return s[min(max(k, 0), len(s)-1)]
}

// bounded is a figure that may be only a lower bound.
type bounded struct {
	v     float64
	lower bool // at least v: requests still waiting when the run stopped count at their wait so far
}

func (b bounded) String() string {
	if math.IsNaN(b.v) {
		return "—"
	}
	if b.lower {
		return "≥ " + trim(b.v, 3)
	}
	return trim(b.v, 3)
}

// percentileOf is the nearest-rank percentile of full values and lower bounds together: exact
// when it picks a full value below every bound, else a lower bound.
func percentileOf(full, bounds []float64, p float64) bounded {
	v := percentile(append(append([]float64(nil), full...), bounds...), p)
	lower := false
	for _, b := range bounds {
		lower = lower || v >= b
	}
	return bounded{v, lower}
}

// trainFigures are one configuration's figures.
type trainFigures struct {
	measured               int // measured requests (not poison pills) that merged
	p50, p90, p99          bounded
	othersFailed           int // measured requests that are no poison pill and failed
	unfinished             int // … and had not ended when the run stopped waiting
	poisonEnds             map[string]int
	poisonFailedIn         float64 // median approval → failed of the poison pills, in pipelines
	pipelinesPerMerged     float64
	mergedPerProjectHour   float64 // per hour of simulated time
	estimates              int     // measured merged requests with an estimate
	estimateErr            float64 // median
	waitCar, inCI, toMerge [2]float64
	requeued, rebuilt      float64    // shares of the measured merged requests
	carGaps                [3]float64 // p10, p50, p90 of the time between a project's car claims
	perCar                 float64    // requests per car claimed in the window
	serveCores             float64
	lateArrivals           time.Duration
}

func (f trainFigures) estimateText() string {
	if f.estimates == 0 {
		return "not measured"
	}
	return percent(f.estimateErr)
}

// stillWaiting is how a request the run stopped waiting for ended (poison pills' table cell).
const stillWaiting = "not ended when the run stopped"

// summarizeTrain turns a run's requests into its figures.
func summarizeTrain(p trainPlan, reqs []*trainRequest, info trainRunInfo) trainFigures {
	f := trainFigures{poisonEnds: map[string]int{}, serveCores: info.serveCores, lateArrivals: info.lateArrivals}
	unit := float64(p.wallPipeline())
	var lat, open, errs, waitCar, inCI, toMerge, poisonFailed []float64
	var requeued, rebuilt, mergedInWindow int
	for _, q := range reqs {
		j, ok := journeyOf(q.timeline)
		if ok && !j.merged.IsZero() && !j.merged.Before(info.windowFrom) && j.merged.Before(info.windowTo) {
			mergedInWindow++
		}
		if !p.measured(q.index) {
			continue
		}
		if q.poison {
			end := string(q.status) + " / " + q.step
			if q.pending {
				end = stillWaiting
			}
			f.poisonEnds[end]++
			if ok && q.status.Failed() && len(q.timeline) > 0 {
				poisonFailed = append(poisonFailed, float64(q.timeline[len(q.timeline)-1].At.Sub(j.approved))/unit)
			}
			continue
		}
		switch {
		case ok && q.pending && j.merged.IsZero():
			f.unfinished++
			open = append(open, float64(info.stopped.Sub(j.approved))/unit)
			continue
		case !ok || j.merged.IsZero():
			f.othersFailed++
			continue
		}
		took := j.merged.Sub(j.approved)
		lat = append(lat, float64(took)/unit)
		waitCar = append(waitCar, float64(j.stages[state.StageBatch])/unit)
		inCI = append(inCI, float64(j.stages[state.StageCI])/unit)
		toMerge = append(toMerge, float64(j.stages[state.StageMerge])/unit)
		if j.requeued {
			requeued++
		}
		if j.rebuilt {
			rebuilt++
		}
		if !q.estimate.IsZero() {
			errs = append(errs, estimateError(j.approved, q.estimate, j.merged))
		}
	}
	f.measured = len(lat)
	f.p50, f.p90, f.p99 = percentileOf(lat, open, 0.5), percentileOf(lat, open, 0.9), percentileOf(lat, open, 0.99)
	f.estimates, f.estimateErr = len(errs), percentile(errs, 0.5)
	f.poisonFailedIn = percentile(poisonFailed, 0.5)
	f.waitCar = [2]float64{percentile(waitCar, 0.5), percentile(waitCar, 0.9)}
	f.inCI = [2]float64{percentile(inCI, 0.5), percentile(inCI, 0.9)}
	f.toMerge = [2]float64{percentile(toMerge, 0.5), percentile(toMerge, 0.9)}
	if f.measured > 0 {
		f.requeued, f.rebuilt = float64(requeued)/float64(f.measured), float64(rebuilt)/float64(f.measured)
	}
	f.pipelinesPerMerged = math.NaN()
	if mergedInWindow > 0 {
		f.pipelinesPerMerged = float64(info.pipelines) / float64(mergedInWindow)
	}
	simHours := info.windowTo.Sub(info.windowFrom).Hours() * p.scale
	if simHours > 0 {
		f.mergedPerProjectHour = float64(mergedInWindow) / float64(p.projects) / simHours
	}
	gaps, perCar := carClaims(p, reqs, info.windowFrom, info.windowTo)
	f.carGaps = [3]float64{percentile(gaps, 0.1), percentile(gaps, 0.5), percentile(gaps, 0.9)}
	f.perCar = perCar
	return f
}

// carClaims reads when each project's cars were claimed from the requests' BATCHED steps (the
// members of one car share their claim's moment): the time from one claim of a project to its
// next, in pipelines, for the claims in [from, to), and the mean requests per car claimed then.
// With batch.train n and steady arrivals, a car every pipeline ÷ n keeps n in CI at once.
func carClaims(p trainPlan, reqs []*trainRequest, from, to time.Time) (gaps []float64, perCar float64) {
	claims := map[int][]time.Time{}
	for _, q := range reqs {
		for _, en := range q.timeline {
			if state.Step(en.Step.Code) == state.StepBatched {
				claims[p.project(q.index)] = append(claims[p.project(q.index)], en.At)
			}
		}
	}
	members, cars := 0, 0
	for _, ts := range claims {
		sort.Slice(ts, func(a, b int) bool { return ts[a].Before(ts[b]) })
		var last time.Time
		for _, t := range ts {
			if !last.IsZero() && t.Sub(last) < 10*time.Millisecond {
				if !t.Before(from) && t.Before(to) {
					members++
				}
				continue // the same car
			}
			if !last.IsZero() && !t.Before(from) && t.Before(to) {
				gaps = append(gaps, float64(t.Sub(last))/float64(p.wallPipeline()))
			}
			if !t.Before(from) && t.Before(to) {
				members, cars = members+1, cars+1
			}
			last = t
		}
	}
	perCar = math.NaN()
	if cars > 0 {
		perCar = float64(members) / float64(cars)
	}
	return gaps, perCar
}

// renderTrain is the section's table: one column per configuration.
func renderTrain(configs []trainConfig, rs []*trainFigures) string {
	head := []string{""}
	for _, c := range configs {
		head = append(head, ">"+c.String())
	}
	rows := [][]string{head}
	row := func(what string, cell func(f trainFigures) string) {
		r := []string{what}
		for _, f := range rs {
			if f == nil {
				r = append(r, "—")
				continue
			}
			r = append(r, cell(*f))
		}
		rows = append(rows, r)
	}
	pipes := func(x float64) string {
		if math.IsNaN(x) {
			return "—"
		}
		return trim(x, 3)
	}
	pair := func(x [2]float64) string { return pipes(x[0]) + " / " + pipes(x[1]) }
	row("**approval → merged, p50** (pipeline durations)", func(f trainFigures) string { return f.p50.String() })
	row("**p90**", func(f trainFigures) string { return f.p90.String() })
	row("**p99**", func(f trainFigures) string { return f.p99.String() })
	row("requests measured (merged; poison pills left out)", func(f trainFigures) string { return count(float64(f.measured)) })
	row("of them, waiting for a car, p50 / p90", func(f trainFigures) string { return pair(f.waitCar) })
	row("in a car until its pipeline passed, p50 / p90", func(f trainFigures) string { return pair(f.inCI) })
	row("approved by the bots, its turn, merged, p50 / p90", func(f trainFigures) string { return pair(f.toMerge) })
	row("their car rebuilt / they were returned to the waiting set", func(f trainFigures) string {
		return percent(f.rebuilt) + " / " + percent(f.requeued)
	})
	row("a project's cars: time from one claim to the next, p10 / p50 / p90", func(f trainFigures) string {
		return pipes(f.carGaps[0]) + " / " + pipes(f.carGaps[1]) + " / " + pipes(f.carGaps[2])
	})
	row("requests per car", func(f trainFigures) string { return pipes(f.perCar) })
	row("**pipelines per merged request**", func(f trainFigures) string { return pipes(f.pipelinesPerMerged) })
	row("merged requests per project per hour (simulated: 6 pipelines; 36 arrive)", func(f trainFigures) string { return pipes(f.mergedPerProjectHour) })
	row("**median error of the estimate at approval**", func(f trainFigures) string {
		if f.estimates == 0 {
			return "not measured"
		}
		return fmt.Sprintf("%s (%d)", percent(f.estimateErr), f.estimates)
	})
	row("poison pills: how they ended (median approval → failed)", func(f trainFigures) string {
		if len(f.poisonEnds) == 0 {
			return "—"
		}
		var parts []string
		for _, k := range sortedKeys(f.poisonEnds) {
			parts = append(parts, fmt.Sprintf("%d %s", f.poisonEnds[k], k))
		}
		return strings.Join(parts, ", ") + " (" + pipes(f.poisonFailedIn) + ")"
	})
	row("other measured requests that failed / had not merged when the run stopped", func(f trainFigures) string {
		return count(float64(f.othersFailed)) + " / " + count(float64(f.unfinished))
	})
	row("`bindery serve` CPU, cores (mean over the run)", func(f trainFigures) string { return trim(f.serveCores, 2) })
	row("latest arrival behind its time", func(f trainFigures) string { return nanos(float64(f.lateArrivals)) })
	text := table(rows)
	estimated := false
	for _, f := range rs {
		estimated = estimated || (f != nil && f.estimates > 0)
	}
	if !estimated {
		text += "\nThe estimate is not measured: the request view gives no estimate (`waiting.estimate.mergeAt`).\n"
	}
	return text
}

// trainGoals are the goals at batch.train 3 against what the runs measured (rs nil or a run
// missing: not measured). A run with batch.isolationCars 3 is judged when there is one.
func trainGoals(configs []trainConfig, rs []*trainFigures) []goal {
	of := func(poison bool) (string, *trainFigures) {
		for _, want := range []trainConfig{{cars: 3, isolation: 3, poison: poison}, {cars: 3, poison: poison}} {
			for i, x := range configs {
				if x == want && i < len(rs) {
					return want.String(), rs[i]
				}
			}
		}
		return trainConfig{cars: 3, poison: poison}.String(), nil
	}
	cleanName, clean := of(false)
	poisonName, poison := of(true)
	pipes := func(x bounded) string { return x.String() + " pipelines" }
	gs := []goal{
		{"merge train (" + cleanName + "): approval → merged p50", "≤ 1.3 pipeline durations", "—", notMeasured},
		{"merge train (" + cleanName + "): approval → merged p90", "≤ 1.5 pipeline durations", "—", notMeasured},
		{"merge train (" + poisonName + "): p90 of the others", "≤ 2.0 pipeline durations", "—", notMeasured},
		{"merge train (" + cleanName + "): pipelines per merged request", "≤ 0.5", "—", notMeasured},
		{"merge train (" + cleanName + "): median error of the estimate at approval", "≤ 25 %", "—", notMeasured},
	}
	set := func(g *goal, ok bool, measured string) { g.measured, g.status = measured, check(ok) }
	// A lower bound above the goal misses it; one below it says nothing.
	judge := func(g *goal, x bounded, limit float64) {
		if x.lower && x.v <= limit {
			g.measured = pipes(x)
			return
		}
		set(g, x.v <= limit, pipes(x))
	}
	if f := clean; f != nil && f.measured > 0 {
		judge(&gs[0], f.p50, 1.3)
		judge(&gs[1], f.p90, 1.5)
		if !math.IsNaN(f.pipelinesPerMerged) {
			set(&gs[3], f.pipelinesPerMerged <= 0.5, trim(f.pipelinesPerMerged, 3))
		}
		if f.estimates > 0 {
			set(&gs[4], f.estimateErr <= 0.25, percent(f.estimateErr))
		} else {
			gs[4].measured = "the request view gives no estimate"
		}
	}
	if f := poison; f != nil && f.measured > 0 {
		judge(&gs[2], f.p90, 2.0)
	}
	return gs
}

// slowest is the timelines of the n slowest measured requests, for the log: where they waited.
func slowest(p trainPlan, reqs []*trainRequest, n int) string {
	type slow struct {
		q    *trainRequest
		j    journey
		took time.Duration
	}
	var all []slow
	for _, q := range reqs {
		if j, ok := journeyOf(q.timeline); ok && !q.poison && p.measured(q.index) && !j.merged.IsZero() {
			all = append(all, slow{q, j, j.merged.Sub(j.approved)})
		}
	}
	sort.Slice(all, func(a, b int) bool { return all[a].took > all[b].took })
	unit := float64(p.wallPipeline())
	var b strings.Builder
	for _, s := range all[:min(n, len(all))] {
		fmt.Fprintf(&b, "     %s (project %d): %.3g pipelines\n", s.q.id, p.project(s.q.index), float64(s.took)/unit)
		for _, en := range s.q.timeline {
			if en.At.Before(s.j.approved) || en.At.After(s.j.merged) {
				continue
			}
			fmt.Fprintf(&b, "       +%.3g %s %s\n", float64(en.At.Sub(s.j.approved))/unit, en.Step.Name, oneLine(en.Note))
		}
	}
	return b.String()
}
