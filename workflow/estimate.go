package workflow

import (
	"fmt"
	"math"
	"slices"
	"time"

	"bindery/api"
	"bindery/internal/vocab/explain"
)

// When will my change land? (docs/workflow.md, 'The merge train'). The estimate is computed from
// the project's recent pipelines and the train's state by a pure function, so that what it
// assumes is written down once and tested by a table.

// estimateSample is how many of a project's latest pipelines the estimate reads, and
// estimateMinimum how many it needs: with fewer, it says "no estimate yet" rather than guess.
const (
	estimateSample  = 8
	estimateMinimum = 3
)

// noEstimate is the words of an estimate that cannot be made.
const noEstimate = "no estimate yet"

// trainState is what an estimate of a project's merges reads: the train as it stands now.
type trainState struct {
	Now     time.Time
	Project string
	// Durations are the project's latest passed pipelines (newest first): how long each took.
	Durations []time.Duration
	Cars      []carState // the active cars, the first one merges next
	Length    int        // batch.train in force
	Paused    bool
}

// carState is what the estimate needs of a car.
type carState struct {
	ID      int64
	Started *time.Time // its current pipeline wait began (nil: its branch is not written yet)
	State   string     // batch.CarState
}

// trainPlace is where the request whose merge is estimated stands.
type trainPlace struct {
	Car int // its car's index in trainState.Cars; -1: it waits in the waiting set
	// In the waiting set: the requests a claim takes before it, how many a car takes
	// (batch.maxRequests), and when a round takes it if a car is free (batch.maxWait may hold a
	// small waiting set back).
	Ahead  int
	PerCar int
	Round  time.Time
}

// estimateMerge estimates when the request at p merges, assuming:
//   - a pipeline takes the median of the project's recent ones (at least estimateMinimum of them
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
func estimateMerge(t trainState, p trainPlace) api.Estimate {
	none := func(format string, args ...any) api.Estimate {
		return api.Estimate{Words: noEstimate, Basis: fmt.Sprintf(format, args...)}
	}
	// A pause first: it is what holds everything, however many pipelines were recorded.
	if t.Paused {
		return none("the queue of %s is paused: nothing merges until an operator resumes it", t.Project)
	}
	if len(t.Durations) < estimateMinimum {
		return none("%d %s of %s recorded so far; an estimate needs at least %d", len(t.Durations), explain.Plural(len(t.Durations), "pipeline"), t.Project, estimateMinimum)
	}
	median := medianOf(t.Durations)
	basis := fmt.Sprintf("median of the last %d pipelines of %s: %s", len(t.Durations), t.Project, durationWords(median))
	last := p.Car
	if last < 0 {
		last = len(t.Cars) - 1
	}
	// The cars merge one after another: each merge time is the later of its pipeline's end and the
	// merge of the car ahead of it.
	var merges []time.Time // of the cars that stay in the train, in order
	prev, rebuilt := t.Now, false
	for i, c := range t.Cars[:last+1] {
		switch c.State {
		case carBlocked:
			if i == p.Car {
				return none("its car (batch %d) is blocked: it waits for a person or an operator", c.ID)
			}
			return none("batch %d ahead of it is blocked: it waits for a person or an operator", c.ID)
		case carFailed:
			if i == p.Car {
				return none("its car (batch %d) failed its pipeline", c.ID)
			}
			rebuilt = true
			continue
		}
		end := t.Now.Add(median)
		switch {
		case c.State == carPassed && !rebuilt:
			end = t.Now
		case c.Started != nil && c.State != carBuilding && !rebuilt:
			end = later(c.Started.Add(median), t.Now)
		}
		prev = later(end, prev)
		merges = append(merges, prev)
	}
	if p.Car >= 0 {
		return estimated(t.Now, prev, basis)
	}
	// The waiting set: the cars it takes to reach this request's join the train one by one.
	perCar := max(p.PerCar, 1)
	length := max(t.Length, 1)
	var newest time.Time // the newest car's start
	for _, c := range t.Cars {
		start := t.Now
		if c.Started != nil && c.State != carBuilding {
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

// The car states the estimate tells apart (batch.CarState's words).
const (
	carBuilding = "building"
	carPassed   = "passed"
	carFailed   = "failed"
	carBlocked  = "blocked"
)

func estimated(now, at time.Time, basis string) api.Estimate {
	at = at.UTC().Truncate(time.Second)
	return api.Estimate{MergeAt: &at, Words: aboutWords(at.Sub(now)), Basis: basis}
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// medianOf is the median of ds (the mean of the middle two of an even count).
func medianOf(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// aboutWords says how far off a time is, roughly: "under a minute", "about 14 min", "about 2 h 5 min".
func aboutWords(d time.Duration) string {
	if d < time.Minute {
		return "under a minute"
	}
	return "about " + durationWords(d)
}

// durationWords is a duration in the words of the estimates: seconds under a minute, else
// minutes, with hours beyond one ("40 s", "9 min", "1 h 20 min").
func durationWords(d time.Duration) string {
	if d < time.Minute {
		return fmt.Sprintf("%d s", int(math.Round(d.Seconds())))
	}
	m := int(math.Round(d.Minutes()))
	if m < 60 {
		return fmt.Sprintf("%d min", m)
	}
	if m%60 == 0 {
		return fmt.Sprintf("%d h", m/60)
	}
	return fmt.Sprintf("%d h %d min", m/60, m%60)
}
