package batch

import (
	"testing"
	"time"

	"bindery/internal/vocab/explain"
)

// The estimate of a merge, case by case: what it assumes (EstimateMerge's comment) is what this
// table pins.
func TestTheEstimateOfAMergeFollowsTheTrain(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 3, 2, 10, 0, 0, 0, time.UTC)
	min := func(n float64) time.Duration { return time.Duration(n * float64(time.Minute)) }
	ago := func(d time.Duration) *time.Time { at := now.Add(-d); return &at }
	nine := []time.Duration{min(9), min(8), min(10), min(9), min(30), min(7), min(9), min(11)} // median 9
	car := func(id int64, state string, started *time.Time) EstimatedCar {
		return EstimatedCar{ID: id, State: state, Started: started}
	}
	in := func(i int) Place { return Place{Car: i} }
	waiting := func(ahead, perCar int) Place {
		return Place{Car: -1, Ahead: ahead, PerCar: perCar, Round: now}
	}
	const basis = "median of the last 8 pipelines of infra/access-config: 9 min"
	for _, c := range []struct {
		name      string
		durations []time.Duration
		cars      []EstimatedCar
		length    int
		paused    bool
		place     Place
		in        time.Duration // from now; -1: no estimate
		words     string
		basis     string
	}{
		{name: "no pipeline recorded yet", cars: []EstimatedCar{car(1, "running", ago(min(2)))}, place: in(0), in: -1, words: explain.NoEstimate,
			basis: "0 pipelines of infra/access-config recorded so far; an estimate needs at least 3"},
		{name: "two pipelines are not enough", durations: nine[:2], cars: []EstimatedCar{car(1, "running", ago(min(2)))}, place: in(0), in: -1, words: explain.NoEstimate,
			basis: "2 pipelines of infra/access-config recorded so far; an estimate needs at least 3"},
		{name: "three are: the median of an odd count", durations: []time.Duration{min(4), min(20), min(6)}, cars: []EstimatedCar{car(1, "running", ago(min(2)))},
			place: in(0), in: min(4), words: "about 4 min", basis: "median of the last 3 pipelines of infra/access-config: 6 min"},
		{name: "the median of an even count is the mean of the middle two", durations: []time.Duration{min(4), min(6), min(8), min(30)}, cars: []EstimatedCar{car(1, "running", ago(min(2)))},
			place: in(0), in: min(5), words: "about 5 min", basis: "median of the last 4 pipelines of infra/access-config: 7 min"},
		{name: "the first car merges when its pipeline ends", durations: nine, cars: []EstimatedCar{car(1, "running", ago(min(2)))}, place: in(0), in: min(7), words: "about 7 min", basis: basis},
		{name: "an overdue pipeline is later than estimated, and says why and when it was due", durations: nine, cars: []EstimatedCar{car(1, "running", ago(min(20)))}, place: in(0), in: -min(11), words: "later than estimated",
			basis: basis + "; the pipeline of batch 1 runs longer than the usual 9 min"},
		{name: "behind an overdue car too", durations: nine, cars: []EstimatedCar{car(1, "running", ago(min(20))), car(2, "passed", ago(min(9)))}, place: in(1), in: -min(11), words: "later than estimated",
			basis: basis + "; the pipeline of batch 1 runs longer than the usual 9 min"},
		{name: "a car not built yet needs a whole pipeline", durations: nine, cars: []EstimatedCar{car(1, "building", nil)}, place: in(0), in: min(9), words: "about 9 min", basis: basis},
		{name: "a passed car merges now", durations: nine, cars: []EstimatedCar{car(1, "passed", ago(min(9)))}, place: in(0), in: 0, words: "under a minute", basis: basis},
		{name: "a waiting request's car follows the newest car at a third of a pipeline in a train of 3", durations: nine, length: 3,
			cars: []EstimatedCar{car(1, "running", ago(min(1)))}, place: waiting(0, 5), in: min(2) + min(9), words: "about 11 min", basis: basis},
		{name: "a car never merges before the one ahead of it", durations: nine,
			cars: []EstimatedCar{car(1, "running", ago(min(1))), car(2, "running", ago(min(6)))}, place: in(1), in: min(8), words: "about 8 min", basis: basis},
		{name: "a car whose pipeline ends later than the one ahead merges then", durations: nine,
			cars: []EstimatedCar{car(1, "running", ago(min(6))), car(2, "running", ago(min(1))), car(3, "building", nil)}, place: in(2), in: min(9), words: "about 9 min", basis: basis},
		{name: "a failed car ahead leaves, the cars behind it start again", durations: nine,
			cars: []EstimatedCar{car(1, "running", ago(min(8))), car(2, "failed", ago(min(9))), car(3, "running", ago(min(8)))}, place: in(2), in: min(9), words: "about 9 min", basis: basis},
		{name: "its own car failed", durations: nine, cars: []EstimatedCar{car(1, "failed", ago(min(9)))}, place: in(0), in: -1, words: explain.NoEstimate,
			basis: "its car (batch 1) failed its pipeline"},
		{name: "a blocked car ahead: nobody knows", durations: nine, cars: []EstimatedCar{car(1, "blocked", ago(min(30))), car(2, "passed", ago(min(10)))}, place: in(1), in: -1, words: explain.NoEstimate,
			basis: "batch 1 ahead of it is blocked: it waits for a person or an operator"},
		{name: "its own car blocked", durations: nine, cars: []EstimatedCar{car(1, "blocked", ago(min(30)))}, place: in(0), in: -1, words: explain.NoEstimate,
			basis: "its car (batch 1) is blocked: it waits for a person or an operator"},
		{name: "a blocked car behind it changes nothing", durations: nine, cars: []EstimatedCar{car(1, "running", ago(min(4))), car(2, "blocked", ago(min(3)))}, place: in(0), in: min(5), words: "about 5 min", basis: basis},
		{name: "a paused queue before enough pipelines: the pause is what holds it", durations: nine[:1], paused: true, cars: []EstimatedCar{car(1, "running", ago(min(2)))}, place: in(0), in: -1,
			words: explain.NoEstimate, basis: "the queue of infra/access-config is paused: nothing merges until an operator resumes it"},
		{name: "a paused queue: nobody knows", durations: nine, paused: true, cars: []EstimatedCar{car(1, "passed", ago(min(10)))}, place: in(0), in: -1, words: explain.NoEstimate,
			basis: "the queue of infra/access-config is paused: nothing merges until an operator resumes it"},
		{name: "waiting, the train has room: a car now, then a pipeline after the cars ahead", durations: nine, length: 3,
			cars: []EstimatedCar{car(1, "running", ago(min(8)))}, place: waiting(0, 10), in: min(9), words: "about 9 min", basis: basis},
		{name: "waiting, an empty train", durations: nine, length: 1, place: waiting(3, 10), in: min(9), words: "about 9 min", basis: basis},
		{name: "waiting, the train is full: the first car's merge frees a place", durations: nine, length: 2,
			cars: []EstimatedCar{car(1, "running", ago(min(4))), car(2, "running", ago(min(1)))}, place: waiting(0, 10), in: min(14), words: "about 14 min", basis: basis},
		{name: "waiting two cars back in a full train", durations: nine, length: 2,
			cars: []EstimatedCar{car(1, "running", ago(min(4))), car(2, "running", ago(min(1)))}, place: waiting(25, 10), in: min(23), words: "about 23 min", basis: basis},
		{name: "waiting behind a blocked car", durations: nine, length: 3, cars: []EstimatedCar{car(1, "blocked", ago(min(4)))}, place: waiting(0, 10), in: -1, words: explain.NoEstimate,
			basis: "batch 1 ahead of it is blocked: it waits for a person or an operator"},
		{name: "waiting for batch.maxWait before the round takes it", durations: nine, length: 3,
			place: Place{Car: -1, PerCar: 10, Round: now.Add(min(5))}, in: min(14), words: "about 14 min", basis: basis},
		{name: "hours", durations: []time.Duration{time.Hour, 80 * time.Minute, 100 * time.Minute}, length: 1, cars: []EstimatedCar{car(1, "building", nil)}, place: in(0),
			in: 80 * time.Minute, words: "about 1 h 20 min", basis: "median of the last 3 pipelines of infra/access-config: 1 h 20 min"},
		{name: "seconds", durations: []time.Duration{10 * time.Second, 12 * time.Second, 11 * time.Second}, length: 3, cars: []EstimatedCar{car(1, "building", nil)}, place: in(0),
			in: 11 * time.Second, words: "under a minute", basis: "median of the last 3 pipelines of infra/access-config: 11 s"},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := EstimateMerge(TrainState{Now: now, Project: "infra/access-config", Durations: c.durations, Cars: c.cars, Length: c.length, Paused: c.paused}, c.place)
			if got.Words != c.words || got.Basis != c.basis {
				t.Errorf("%q / %q, want %q / %q", got.Words, got.Basis, c.words, c.basis)
			}
			switch {
			case c.in == -1 && got.MergeAt != nil:
				t.Errorf("a made-up time: %v", got.MergeAt)
			case c.in != -1 && (got.MergeAt == nil || !got.MergeAt.Equal(now.Add(c.in))):
				t.Errorf("merge at %v, want %v", got.MergeAt, now.Add(c.in))
			}
		})
	}
}
