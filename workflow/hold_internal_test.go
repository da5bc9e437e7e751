package workflow

import (
	"strings"
	"testing"
	"time"

	"bindery/internal/platform/config"
	"bindery/store"
)

// A round holds a waiting set back as batch.Service.round decides it, and the view says until
// when: a small set until its oldest request waited batch.maxWait; a merge train's next car
// until the spacing ends (the newest car's time in CI or the oldest request's wait reaching a
// k-th of the median pipeline), rounded up to its minute; nothing is held when a suspect group or a request sent next
// waits, when enough requests wait, or when the train is full.
func TestARoundHoldSaysUntilWhen(t *testing.T) {
	workflowFor := func(keys string) *Workflow {
		snap, err := config.Parse([]byte("batch:\n" + keys))
		if err != nil {
			t.Fatal(err)
		}
		return &Workflow{cfg: config.NewStatic(snap)}
	}
	now := time.Date(2026, 12, 3, 8, 0, 0, 0, time.UTC)
	minutes := func(ms ...int) []time.Duration {
		var out []time.Duration
		for _, m := range ms {
			out = append(out, time.Duration(m)*time.Minute)
		}
		return out
	}
	car := []store.Batch{{ID: 7}}
	cases := []struct {
		name, keys string
		s          trainSnapshot
		until      time.Duration // from now; 0: not held
		words      string
	}{
		{name: "a small set waits for batch.maxWait", keys: "  maxWait: 15m\n  maxRequests: 5\n",
			s: trainSnapshot{load: store.TrainLoad{Waiting: 2, OldestWait: 5 * time.Minute}}, until: 10 * time.Minute, words: "until 08:10 UTC"},
		{name: "enough requests wait", keys: "  maxWait: 15m\n  maxRequests: 2\n",
			s: trainSnapshot{load: store.TrainLoad{Waiting: 2, OldestWait: 5 * time.Minute}}},
		{name: "a suspect group goes at once", keys: "  maxWait: 15m\n  maxRequests: 5\n",
			s: trainSnapshot{load: store.TrainLoad{Waiting: 2, OldestWait: time.Minute, Priority: true}}},
		{name: "maxWait passed", keys: "  maxWait: 15m\n  maxRequests: 5\n",
			s: trainSnapshot{load: store.TrainLoad{Waiting: 2, OldestWait: 16 * time.Minute}}},
		{name: "the train is full", keys: "  maxWait: 15m\n  maxRequests: 5\n",
			s: trainSnapshot{cars: car, load: store.TrainLoad{Cars: 1, Waiting: 2, OldestWait: time.Minute}}},
		// A train of 3, the median pipeline 12 min: a car every 4 min; the newest car has run
		// 1 min, the oldest request waited 2 min: the spacing ends in 2 min (the request's wait).
		{name: "the train's spacing", keys: "  train: 3\n  maxRequests: 5\n",
			s:     trainSnapshot{cars: car, durations: minutes(10, 12, 14), load: store.TrainLoad{Cars: 1, SinceNewest: time.Minute, Waiting: 1, OldestWait: 2 * time.Minute}},
			until: 2 * time.Minute, words: "until 08:02 UTC at the latest: the merge train starts its cars spaced over a pipeline (every 4 min, a third of the usual pipeline)"},
		{name: "spacing with too few pipelines recorded", keys: "  train: 3\n  maxRequests: 5\n",
			s: trainSnapshot{cars: car, durations: minutes(10), load: store.TrainLoad{Cars: 1, SinceNewest: time.Minute, Waiting: 1, OldestWait: 2 * time.Minute}}},
	}
	for _, c := range cases {
		c.s.loadAt = time.Now()
		h := workflowFor(c.keys).roundHoldOf("infra/a", c.s, now)
		switch {
		case c.until == 0 && h.why != "":
			t.Errorf("%s: held: %+v", c.name, h)
		case c.until == 0:
		case h.why == "" || !h.until.Equal(now.Add(c.until)) || !strings.Contains(h.why, c.words) || !strings.Contains(h.text, strings.SplitN(c.words, " at", 2)[0]):
			t.Errorf("%s: %+v, want until %s and %q", c.name, h, now.Add(c.until), c.words)
		}
	}
}
