package main

import (
	"encoding/json"
	"math"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"bindery/api"
	"bindery/internal/vocab/state"
)

func TestPercentilesAreNearestRank(t *testing.T) {
	xs := []float64{5, 1, 4, 2, 3, 10, 9, 8, 7, 6}
	for _, c := range []struct{ p, want float64 }{{0.5, 5}, {0.9, 9}, {0.99, 10}, {0.1, 1}, {1, 10}} {
		if got := percentile(xs, c.p); got != c.want {
			t.Errorf("p%g: %g, want %g", c.p*100, got, c.want)
		}
	}
	if got := percentile([]float64{7}, 0.99); got != 7 {
		t.Errorf("one value: %g", got)
	}
	if !math.IsNaN(percentile(nil, 0.5)) {
		t.Error("no values must give NaN, not a figure")
	}
	if xs[0] != 5 {
		t.Error("percentile sorted its argument")
	}
}

func TestTheEstimateErrorIsRelativeToTheActualTimeToMerge(t *testing.T) {
	approved := time.Date(2026, 1, 1, 10, 0, 0, 0, time.UTC)
	merged := approved.Add(10 * time.Minute)
	for _, c := range []struct {
		est  time.Duration
		want float64
	}{{10 * time.Minute, 0}, {12 * time.Minute, 0.2}, {7*time.Minute + 30*time.Second, 0.25}, {0, 1}} {
		if got := estimateError(approved, approved.Add(c.est), merged); math.Abs(got-c.want) > 1e-9 {
			t.Errorf("estimate %s for 10m: %g, want %g", c.est, got, c.want)
		}
	}
	if !math.IsNaN(estimateError(approved, merged, approved)) {
		t.Error("a merge at the approval has no relative error")
	}
}

// entry is a timeline entry at minute m after t0.
func entry(t0 time.Time, m float64, s state.Step, note string) api.TimelineEntry {
	return api.TimelineEntry{Step: api.StepView{Code: int(s), Name: s.String()}, At: t0.Add(time.Duration(m * float64(time.Minute))), Note: note}
}

func TestAJourneyRunsFromTheFirstQueuedToTheFirstMerge(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 10, 0, 0, 0, time.UTC)
	tl := []api.TimelineEntry{
		entry(t0, 0, state.StepApprovalSending, ""),
		entry(t0, 1, state.StepApprovalSent, ""),
		entry(t0, 2, state.StepQueued, "approved"),
		entry(t0, 3, state.StepBatched, ""),
		entry(t0, 3, state.StepCreateStarted, "batch 1"),
		entry(t0, 8, state.StepQueued, "returned: batch 1 is bisected"),
		entry(t0, 9, state.StepBatched, ""),
		entry(t0, 9, state.StepCreateStarted, "batch 2"),
		entry(t0, 11, state.StepCreateStarted, "rebuilding batch 2"),
		entry(t0, 21, state.StepCreateSucceeded, "passed"),
		entry(t0, 21, state.StepHandleStarted, ""),
		entry(t0, 22, state.StepHandleApproved, ""),
		entry(t0, 24, state.StepHandleMerged, "merged"),
		entry(t0, 30, state.StepHandleMerged, "a second entry must not count"),
	}
	j, ok := journeyOf(tl)
	if !ok {
		t.Fatal("no journey")
	}
	if !j.approved.Equal(t0.Add(2*time.Minute)) || !j.merged.Equal(t0.Add(24*time.Minute)) {
		t.Errorf("approved %s, merged %s", j.approved, j.merged)
	}
	// Waiting for a car 2→3 and 8→9; in CI 3→8, 9→11, 11→21 (BATCHED counts for CI too); the
	// merge 21→24. CREATE_SUCCEEDED is an instant.
	want := map[string]time.Duration{state.StageBatch: 2 * time.Minute, state.StageCI: 17 * time.Minute, state.StageMerge: 3 * time.Minute}
	for s, d := range want {
		if j.stages[s] != d {
			t.Errorf("stage %s: %s, want %s (all: %v)", s, j.stages[s], d, j.stages)
		}
	}
	if len(j.stages) != len(want) {
		t.Errorf("stages %v", j.stages)
	}
	if !j.requeued || !j.rebuilt {
		t.Errorf("requeued %t, rebuilt %t", j.requeued, j.rebuilt)
	}
	if _, ok := journeyOf(tl[:2]); ok {
		t.Error("a request never approved has no journey")
	}
	open, _ := journeyOf(tl[:12])
	if !open.merged.IsZero() {
		t.Error("a request not merged has a merge time")
	}
}

func TestPoisonPillsAreFewSpreadAndTheSameEveryRun(t *testing.T) {
	for _, c := range []struct {
		n     int
		share float64
		want  int
	}{{840, 0.02, 17}, {1000, 0.02, 20}, {24, 0.02, 1}, {10, 0, 0}} {
		a, b := poisonPills(c.n, c.share), poisonPills(c.n, c.share)
		got := 0
		for i := range a {
			if a[i] != b[i] {
				t.Fatalf("n %d: the pills differ between two calls", c.n)
			}
			if a[i] {
				got++
			}
		}
		if got != c.want {
			t.Errorf("n %d, share %g: %d pills, want %d", c.n, c.share, got, c.want)
		}
		for j := range c.want {
			in := 0
			for i := j * c.n / c.want; i < (j+1)*c.n/c.want; i++ {
				if a[i] {
					in++
				}
			}
			if in != 1 {
				t.Errorf("n %d: stretch %d holds %d pills", c.n, j, in)
			}
		}
	}
}

func TestArrivalsAreSteadyPerProject(t *testing.T) {
	p := trainPlan{projects: 20, pipeline: 10 * time.Minute, scale: 30, perPipeline: 6, warm: 2, measure: 5}
	if p.wallPipeline() != 20*time.Second || p.pollShort() != 500*time.Millisecond {
		t.Fatalf("pipeline %s, poll %s", p.wallPipeline(), p.pollShort())
	}
	if got := p.requests(); got != 840 {
		t.Errorf("requests %d, want 7 pipelines × 6 × 20", got)
	}
	// Each project gets one every sixth of a pipeline.
	if every := p.at(45) - p.at(25); (every - p.wallPipeline()/6).Abs() > time.Nanosecond {
		t.Errorf("a project's arrivals are %s apart, want %s", every, p.wallPipeline()/6)
	}
	if p.project(0) != 0 || p.project(19) != 19 || p.project(20) != 0 {
		t.Error("projects do not take turns")
	}
	if p.measured(239) || !p.measured(240) {
		t.Error("the warm-up is the first 2 pipelines of arrivals (240 requests)")
	}
}

func TestTheViewsEstimateMayBeMissing(t *testing.T) {
	for _, c := range []struct {
		body string
		want time.Time
	}{
		{`{"status":"MR_CREATING"}`, time.Time{}},
		{`{"status":"MR_CREATING","waiting":{"stage":"batch"}}`, time.Time{}},
		{`{"status":"MR_CREATING","waiting":{"estimate":{"mergeAt":"not a time"}}}`, time.Time{}},
		{`{"status":"MR_CREATING","waiting":{"estimate":{"mergeAt":"2026-01-01T10:20:00.5Z","words":"in about 20 minutes","basis":"x"}}}`,
			time.Date(2026, 1, 1, 10, 20, 0, 5e8, time.UTC)},
	} {
		var v trainView
		if err := json.Unmarshal([]byte(c.body), &v); err != nil {
			t.Fatalf("%s: %v", c.body, err)
		}
		got, ok := v.mergeAt()
		if ok != !c.want.IsZero() || !got.Equal(c.want) {
			t.Errorf("%s: %s %t", c.body, got, ok)
		}
	}
}

// A run of three requests of one project: one of the warm-up, one measured, one measured poison
// pill. The poison pill is left out of the percentiles and said how it ended; the figures count
// pipelines and merges in the window only.
func TestFiguresOfARun(t *testing.T) {
	p := trainPlan{projects: 1, pipeline: 10 * time.Minute, scale: 1, perPipeline: 1, warm: 1, measure: 2}
	t0 := time.Date(2026, 1, 1, 10, 0, 0, 0, time.UTC)
	done := func(from, to float64) []api.TimelineEntry {
		return []api.TimelineEntry{entry(t0, from, state.StepQueued, ""), entry(t0, from+1, state.StepBatched, ""),
			entry(t0, from+1, state.StepCreateStarted, ""), entry(t0, to-1, state.StepCreateSucceeded, ""),
			entry(t0, to, state.StepHandleMerged, "")}
	}
	reqs := []*trainRequest{
		{index: 0, status: state.StatusMerged, timeline: done(0, 12)},
		{index: 1, status: state.StatusValidated, timeline: done(10, 25), estimate: t0.Add(22 * time.Minute)},
		{index: 2, poison: true, status: state.StatusCreateFailed, step: "CREATE_PIPELINE_FAILED",
			timeline: []api.TimelineEntry{entry(t0, 20, state.StepQueued, ""), entry(t0, 40, state.StepCreatePipelineFailed, "")}},
		// Still in CI when the run stopped (minute 50): at least 2.2 pipelines.
		{index: 3, pending: true, status: state.StatusMRCreating, timeline: done(28, 60)[:3]},
		{index: 4, poison: true, pending: true, status: state.StatusMRCreating, timeline: done(29, 60)[:3]},
	}
	info := trainRunInfo{windowFrom: t0.Add(10 * time.Minute), windowTo: t0.Add(30 * time.Minute), pipelines: 3, stopped: t0.Add(50 * time.Minute)}
	f := summarizeTrain(p, reqs, info)
	if f.measured != 1 || f.p50 != (bounded{1.5, false}) || f.p99 != (bounded{2.2, true}) || f.unfinished != 1 || f.othersFailed != 0 {
		t.Errorf("measured %d, p50 %s, p99 %s, unfinished %d: want the one merged request, 1.5 pipelines, and the one still waiting at ≥ 2.2",
			f.measured, f.p50, f.p99, f.unfinished)
	}
	if f.poisonEnds[stillWaiting] != 1 {
		t.Errorf("poison pills %v", f.poisonEnds)
	}
	if f.estimates != 1 || math.Abs(f.estimateErr-0.2) > 1e-9 {
		t.Errorf("estimate error %g over %d, want 0.2 (12 minutes for 15)", f.estimateErr, f.estimates)
	}
	if f.poisonEnds["CREATE_FAILED / CREATE_PIPELINE_FAILED"] != 1 || len(f.poisonEnds) != 2 || f.poisonFailedIn != 2 {
		t.Errorf("poison pills %v after %g", f.poisonEnds, f.poisonFailedIn)
	}
	// Two merges in the window (at 12 and 25 minutes), three pipelines.
	if f.pipelinesPerMerged != 1.5 {
		t.Errorf("pipelines per merged request %g", f.pipelinesPerMerged)
	}
	if want := 2 / (20.0 / 60); math.Abs(f.mergedPerProjectHour-want) > 1e-9 {
		t.Errorf("merged per project per hour %g, want %g", f.mergedPerProjectHour, want)
	}
	if f.waitCar[0] != 0.1 || f.inCI[0] != 1.3 {
		t.Errorf("stages: waiting for a car %v, in CI %v", f.waitCar, f.inCI)
	}

	text := renderTrain([]trainConfig{{cars: 3}, {cars: 3, poison: true}}, []*trainFigures{&f, nil})
	for _, want := range []string{"| **p90** | ≥ 2.2 | — |", "| **median error of the estimate at approval** | 20 % (1) | — |", "1 CREATE_FAILED / CREATE_PIPELINE_FAILED, 1 not ended when the run stopped (2)"} {
		if !strings.Contains(text, want) {
			t.Errorf("table lacks %q:\n%s", want, text)
		}
	}
	for _, l := range strings.Split(text, "\n") {
		if strings.HasPrefix(l, "| ") && strings.Count(l, " | ") != 2 {
			t.Errorf("row of %d cells: %q", strings.Count(l, " | ")+1, l)
		}
	}
}

func TestTheTrainGoalsJudgeBatchTrainThree(t *testing.T) {
	all4, err := parseTrainConfigs("1,3,1p,3p")
	if err != nil || len(all4) != 4 || all4[3] != (trainConfig{cars: 3, poison: true}) {
		t.Fatalf("%v %v", all4, err)
	}
	if iso, err := parseTrainConfigs("3i,3ip"); err != nil || iso[0] != (trainConfig{cars: 3, isolation: 3}) || iso[1] != (trainConfig{cars: 3, isolation: 3, poison: true}) {
		t.Fatalf("3i,3ip: %v %v", iso, err)
	}
	for _, bad := range []string{"", "0", "21", "3q", "p", "1,,3", "03", "3pi", "i"} {
		if _, err := parseTrainConfigs(bad); err == nil {
			t.Errorf("-train-configs %q accepted", bad)
		}
	}
	if gs := trainGoals(nil, nil); len(gs) != 5 || gs[0].status != notMeasured {
		t.Fatalf("nothing measured: %+v", gs)
	}
	good := &trainFigures{measured: 100, p50: bounded{1.2, false}, p90: bounded{1.45, false}, pipelinesPerMerged: 0.4, estimates: 100, estimateErr: 0.1}
	bad := &trainFigures{measured: 100, p50: bounded{1.6, false}, p90: bounded{2.1, true}, pipelinesPerMerged: 0.6}
	gs := trainGoals(all4, []*trainFigures{bad, good, bad, bad})
	for i, want := range []goalStatus{met, met, missed, met, met} {
		if gs[i].status != want {
			t.Errorf("goal %q: %s, want %s", gs[i].what, gs[i].status, want)
		}
	}
	gs = trainGoals(all4, []*trainFigures{good, bad, good, good})
	for i, want := range []goalStatus{missed, missed, met, missed, notMeasured} {
		if gs[i].status != want {
			t.Errorf("goal %q: %s, want %s", gs[i].what, gs[i].status, want)
		}
	}
	if !strings.Contains(gs[4].measured, "no estimate") {
		t.Errorf("the estimate's goal says %q", gs[4].measured)
	}
	// A lower bound below the goal says nothing about it.
	unsure := &trainFigures{measured: 100, p50: bounded{1.2, true}, p90: bounded{1.9, true}, pipelinesPerMerged: 0.4}
	gs = trainGoals(all4, []*trainFigures{nil, unsure, nil, unsure})
	for i, want := range []goalStatus{notMeasured, missed, notMeasured} {
		if gs[i].status != want || (i != 1 && gs[i].measured != "≥ "+trim([]float64{1.2, 0, 1.9}[i], 3)+" pipelines") {
			t.Errorf("goal %q: %s %q, want %s", gs[i].what, gs[i].status, gs[i].measured, want)
		}
	}
}

func TestAPercentileOverRequestsStillWaitingIsALowerBound(t *testing.T) {
	full := []float64{1, 1.1, 1.2, 1.3, 1.4, 1.5, 1.6, 1.7, 1.8}
	if got := percentileOf(full, []float64{5}, 0.5); got != (bounded{1.4, false}) {
		t.Errorf("p50 below the bound: %+v", got)
	}
	if got := percentileOf(full, []float64{5}, 0.99); got != (bounded{5, true}) || got.String() != "≥ 5" {
		t.Errorf("p99 on the bound: %+v %s", got, got)
	}
	// A bound below the value picked: the request still waiting may end later than it.
	if got := percentileOf(full, []float64{1.25}, 0.9); !got.lower || got.v != 1.7 {
		t.Errorf("p90 above a bound: %+v", got)
	}
	if got := percentileOf(nil, nil, 0.5); got.String() != "—" {
		t.Errorf("nothing: %s", got)
	}
}

// Cars are read from the members' BATCHED steps: members claimed together share the moment.
func TestCarClaimsGiveTheTimeBetweenCarsOfAProject(t *testing.T) {
	p := trainPlan{projects: 2, pipeline: 10 * time.Minute, scale: 1, perPipeline: 1, warm: 0, measure: 10}
	t0 := time.Date(2026, 1, 1, 10, 0, 0, 0, time.UTC)
	claimed := func(index int, minutes ...float64) *trainRequest {
		q := &trainRequest{index: index}
		for _, m := range minutes {
			q.timeline = append(q.timeline, entry(t0, m, state.StepBatched, ""))
		}
		return q
	}
	reqs := []*trainRequest{
		claimed(0, 0), claimed(2, 0), // project 0, one car of two at 0
		claimed(4, 5), claimed(6, 15, 20), // a car at 5, one at 15, the second member again at 20
		claimed(1, 1), claimed(3, 11), // project 1: cars at 1 and 11
	}
	gaps, perCar := carClaims(p, reqs, t0, t0.Add(time.Hour))
	sort.Float64s(gaps)
	if want := []float64{0.5, 0.5, 1, 1}; !slices.Equal(gaps, want) {
		t.Errorf("gaps %v, want %v", gaps, want)
	}
	if perCar != 7.0/6 {
		t.Errorf("requests per car %g, want 7/6", perCar)
	}
	gaps, _ = carClaims(p, reqs, t0.Add(12*time.Minute), t0.Add(time.Hour))
	if want := []float64{1, 0.5}; !slices.Equal(gaps, want) {
		t.Errorf("gaps of the claims from minute 12: %v, want %v", gaps, want)
	}
}

// A -only run into a whole run's report replaces its own sections and Targets rows and keeps
// everything else.
func TestAnOnlyRunReplacesItsSectionsAndKeepsTheRest(t *testing.T) {
	old := "\n## Run\n\nthe full run's table\n" +
		renderGoals([]goal{{"chain overhead", "≤ 1.10×", "1.07×", met}, {sections[8].title + " goal", "≤ 1", "2", missed}}) +
		"\n## " + sections[0].title + "\n\nchain figures\n" +
		"\n## " + sections[8].title + "\n\nold train figures\n"
	got, ok := mergeOnly(old, map[string]string{sections[8].title: "new train figures\n"},
		[]goal{{sections[8].title + " goal", "≤ 1", "0.9", met}, {"a new goal", "≤ 2", "1", met}}, "*Measured on its own:* x.")
	if !ok {
		t.Fatal("not merged")
	}
	for _, want := range []string{"the full run's table", "chain figures", "| chain overhead | ≤ 1.10× | 1.07× | met |",
		"| " + sections[8].title + " goal | ≤ 1 | 0.9 | met |", "| a new goal | ≤ 2 | 1 | met |",
		"## " + sections[8].title + "\n\n*Measured on its own:* x.\n\nnew train figures\n"} {
		if !strings.Contains(got, want) {
			t.Errorf("merged report lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "old train figures") || strings.Contains(got, "| 2 | **missed**") {
		t.Errorf("old figures left:\n%s", got)
	}
	if _, ok := mergeOnly("", nil, nil, ""); ok {
		t.Error("an empty report was merged into")
	}
}
