package batch

import (
	"fmt"
	"slices"
	"time"

	"bindery/internal/vocab/explain"
)

// When will my change land? (docs/workflow.md, 'The merge train'). The estimate is computed from
// the project's recent pipelines and the train's state by a pure function, so that what it
// assumes is written down once and tested by a table.

// EstimateSample is how many of a project's latest pipelines the estimate reads, and
// EstimateMinimum how many durations any estimate needs: with fewer, it says "no estimate yet"
// rather than guess.
const (
	EstimateSample  = 8
	EstimateMinimum = 3
)

// Estimate is when a request's change merges, as far as the train tells (the request view's
// estimate): MergeAt nil when nobody can know, Words for people, Basis what it stands on.
type Estimate struct {
	MergeAt *time.Time
	Words   string // "about 14 min", "no estimate yet"
	Basis   string // "median of the last 8 pipelines of infra/access-config: 9 min"
}

// TrainState is what an estimate of a project's merges reads: the train as it stands now.
type TrainState struct {
	Now     time.Time
	Project string
	// Durations are the project's latest passed pipelines (newest first): how long each took.
	Durations []time.Duration
	Cars      []EstimatedCar // the active cars, the first one merges next
	Length    int            // batch.train in force
	Paused    bool
}

// EstimatedCar is what the estimate needs of a car.
type EstimatedCar struct {
	ID      int64
	Started *time.Time // its current pipeline wait began (nil: its branch is not written yet)
	State   string     // CarState
}

// Place is where the request whose merge is estimated stands.
type Place struct {
	Car int // its car's index in TrainState.Cars; -1: it waits in the waiting set
	// In the waiting set: the requests a claim takes before it, how many a car takes
	// (batch.maxRequests), and when a round takes it if a car is free (batch.maxWait may hold a
	// small waiting set back).
	Ahead  int
	PerCar int
	Round  time.Time
}

// EstimateMerge estimates when the request at p merges, assuming:
//   - a pipeline takes the median of the project's recent ones (at least EstimateMinimum of them
//     recorded, else there is no estimate): flaky retries, bisections and a slower pipeline than
//     usual are not foreseen;
//   - a car whose pipeline runs ends it at its start plus that median, or now when it is overdue;
//     a car not built yet starts its pipeline now; a passed car is done;
//   - a car merges when its pipeline ended, but never before the car ahead of it merged, and the
//     approvals and the merge itself take no time worth counting;
//   - a failed car leaves the train without merging, and every car behind it is rebuilt: their
//     pipelines start again now;
//   - a request in the waiting set goes into the car its place gives it (PerCar requests to a
//     car); that car joins the train at the next round when the train has room, else when the car
//     whose place it takes merges — and, in a train of several cars, not before the newest car
//     has been in CI for a Length-th of the median (a round spreads the cars over a pipeline) —
//     and then needs a pipeline of its own;
//   - nothing is known of a BLOCKED car (it waits for a person) or of a paused queue (it waits for
//     an operator): no estimate then, and the basis says why.
func EstimateMerge(t TrainState, p Place) Estimate {
	none := func(format string, args ...any) Estimate {
		return Estimate{Words: explain.NoEstimate, Basis: fmt.Sprintf(format, args...)}
	}
	// A pause first: it is what holds everything, however many pipelines were recorded.
	if t.Paused {
		return none("the queue of %s is paused: nothing merges until an operator resumes it", t.Project)
	}
	if len(t.Durations) < EstimateMinimum {
		return none("%d %s of %s recorded so far; an estimate needs at least %d", len(t.Durations), explain.Plural(len(t.Durations), "pipeline"), t.Project, EstimateMinimum)
	}
	median := Median(t.Durations)
	basis := fmt.Sprintf("median of the last %d pipelines of %s: %s", len(t.Durations), t.Project, explain.Duration(median))
	last := p.Car
	if last < 0 {
		last = len(t.Cars) - 1
	}
	// The cars merge one after another: each merge time is the later of its pipeline's end and the
	// merge of the car ahead of it.
	var merges []time.Time // of the cars that stay in the train, in order
	prev, rebuilt := t.Now, false
	late := ""        // why the merge is later than the usual pipeline says: a pipeline that runs longer
	var due time.Time // when that pipeline was due to end
	for i, c := range t.Cars[:last+1] {
		switch c.State {
		case CarBlocked:
			if i == p.Car {
				return none("its car (batch %d) is blocked: it waits for a person or an operator", c.ID)
			}
			return none("batch %d ahead of it is blocked: it waits for a person or an operator", c.ID)
		case CarFailed:
			if i == p.Car {
				return none("its car (batch %d) failed its pipeline", c.ID)
			}
			rebuilt = true
			continue
		}
		end := t.Now.Add(median)
		switch {
		case c.State == CarPassed && !rebuilt:
			end = t.Now
		case c.Started != nil && c.State != CarBuilding && !rebuilt:
			end = later(c.Started.Add(median), t.Now)
			if c.Started.Add(median).Before(t.Now) && late == "" {
				due = c.Started.Add(median)
				// When it was due is the estimate's time; how long it has run grows at every read.
				late = fmt.Sprintf("the pipeline of batch %d runs longer than the usual %s", c.ID, explain.Duration(median))
			}
		}
		prev = later(end, prev)
		merges = append(merges, prev)
	}
	if p.Car >= 0 {
		e := estimated(t.Now, prev, basis)
		if late != "" && !prev.After(t.Now) {
			// Due by now and not merged: say it is late, and why, rather than "under a minute";
			// the time is the one it was expected at.
			e = estimated(t.Now, due, basis+"; "+late)
			e.Words = lateWords
		}
		return e
	}
	// The waiting set: the cars it takes to reach this request's join the train one by one.
	perCar := max(p.PerCar, 1)
	length := max(t.Length, 1)
	var newest time.Time // the newest car's start
	for _, c := range t.Cars {
		start := t.Now
		if c.Started != nil && c.State != CarBuilding {
			start = *c.Started
		}
		newest = later(newest, start)
	}
	for range p.Ahead/perCar + 1 {
		join := later(p.Round, t.Now)
		if n := len(merges); n >= length {
			join = later(join, merges[n-length]) // the car whose place it takes merged
		}
		if length > 1 && !newest.IsZero() {
			join = later(join, newest.Add(median/time.Duration(length))) // spread over a pipeline
		}
		newest = join
		prev = later(join.Add(median), prev)
		merges = append(merges, prev)
	}
	return estimated(t.Now, prev, basis)
}

func estimated(now, at time.Time, basis string) Estimate {
	at = at.UTC().Truncate(time.Second)
	return Estimate{MergeAt: &at, Words: explain.About(at.Sub(now)), Basis: basis}
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// Median is the median of ds (not empty): the mean of the middle two of an even count. The
// spacing of a train's cars, the estimate of a merge and the approvals' estimate all read it, so
// the page that shows "median of the last 8 pipelines: 9 min" and the round that spaces the cars
// by that median agree. The mean of the middles rather than one of them: a sample of recent
// pipelines is even as often as not (the estimate reads 8), and neither middle is more right
// than the other — taking the upper one would lean every even sample long.
func Median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// lateWords is the estimate of a merge that is due by now and has not happened: its pipeline
// (or one ahead) runs longer than the usual one, and the basis says which.
const lateWords = "later than estimated"
