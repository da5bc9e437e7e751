package workflow_test

import (
	"math"
	"strconv"
	"strings"
	"sync"
	"testing"

	"bindery/api"
	"bindery/internal/sim"
	"bindery/internal/vocab/state"
	"bindery/store"
	"bindery/store/storetest"
)

// The stage durations of validated requests come with the flip, not from their step histories:
// a deploy callback and a reconciliation that validate requests read no step row, and the
// histogram still gets each request's time per stage as its timeline shows it.
func TestValidationRecordsStageTimesWithoutReadingStepHistories(t *testing.T) {
	extra := strings.Replace(fastSims, "    delay: 0s\n", "    delay: 0s\n    dropRate: 1\n", 1) + "reconcile:\n  minAge: 1ms\n"
	var mu sync.Mutex
	var on bool
	var stepReads []string
	observe := func(st store.Statement) {
		mu.Lock()
		defer mu.Unlock()
		if on && strings.HasPrefix(st.Query, "SELECT") && strings.Contains(st.Query, "operation_step") {
			stepReads = append(stepReads, st.Query)
		}
	}
	storetest.EachWith(t, func(*testing.T) store.Options {
		o := storetest.DefaultOptions()
		o.OnStatement = observe
		return o
	}, func(t *testing.T, db *store.DB) {
		h := setup(t, db, options{extra: extra})
		var ops []string
		var last int64
		for _, user := range []string{"alice", "bob", "ops"} {
			op := h.apply(user, "db-read")
			h.waitState(op, state.StatusApprovalSent, 0)
			h.decide(op, sim.TicketApproved)
			last = h.waitState(op, state.StatusMerged, 0).MR.ID // the deploy simulator drops every callback
			ops = append(ops, op)
		}

		mu.Lock()
		on, stepReads = true, nil
		mu.Unlock()
		// The callback of the last MR validates its request; reconciliation infers the other two.
		if code, _ := h.deploy(api.DeployCallback{Project: project, MRIID: last}); code != 200 {
			t.Fatalf("deploy: %d", code)
		}
		if res, err := h.wf.Reconcile(bg); err != nil || res.Validated != 2 {
			t.Fatalf("reconcile: %+v %v", res, err)
		}
		mu.Lock()
		on = false
		reads := stepReads
		mu.Unlock()
		if len(reads) != 0 {
			t.Errorf("validation read step histories: %q", reads)
		}

		want := map[string]float64{}
		for _, op := range ops {
			v := h.view(op)
			if v.Status != state.StatusValidated {
				t.Fatalf("%s: %s", op, v.Status)
			}
			for _, s := range v.Stages {
				want[s.Stage] += s.Duration.Seconds()
			}
		}
		for _, stage := range []string{"ci", "merge", "deploy"} {
			if got := h.metric(`bindery_request_stage_seconds_count{stage="` + stage + `"}`); got != "3" {
				t.Errorf("stage %s observed %q times, want once per request", stage, got)
			}
			sum, err := strconv.ParseFloat(h.metric(`bindery_request_stage_seconds_sum{stage="`+stage+`"}`), 64)
			// The timeline's times are the step rows', the stage times the operation row's: each
			// from its own statement's clock, a few milliseconds apart at most.
			if err != nil || math.Abs(sum-want[stage]) > 0.05 {
				t.Errorf("stage %s: %v s recorded (%v), the timelines say %v s", stage, sum, err, want[stage])
			}
		}
	})
}
