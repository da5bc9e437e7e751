package workflow_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"bindery/internal/sim"
	"bindery/internal/testkit"
	"bindery/internal/vocab/explain"
	"bindery/internal/vocab/state"
	"bindery/store"
	"bindery/store/storetest"
)

// A request the batch round holds back for more requests to share a pipeline (batch.maxWait)
// says until when, by the oldest waiting request's admission plus batch.maxWait — and the round
// indeed leaves it waiting.
func TestHeldForMoreRequestsSaysUntilWhen(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		h := setup(t, db, options{approvalFirst: true, realBatch: true, extra: strings.Replace(fastSims, "batch:\n", "batch:\n  maxWait: 10m\n  maxRequests: 5\n", 1)})
		first := h.approved("alice", "db-read")[0]
		second := h.approved("bob", "db-read")[0]
		if res := h.round(); len(res.Partitions) != 1 || res.Partitions[0].Outcome != string(state.RoundNotDue) {
			t.Fatalf("round: %+v", res)
		}
		since := h.view(first).Waiting.Since // the oldest request's admission
		for _, op := range []string{first, second} {
			v := h.view(op)
			w := v.Waiting
			if w == nil || w.HeldUntil == nil {
				t.Fatalf("%s: no hold: %+v", op, w)
			}
			want := since.Add(10 * time.Minute)
			if d := w.HeldUntil.Sub(want); d < -2*time.Second || d > time.Minute+2*time.Second { // rounded up to its minute
				t.Errorf("%s: held until %s, want about %s", op, w.HeldUntil, want)
			}
			// As people read it: with the date when the hold ends on another day than today (a
			// test run in the ten minutes before midnight UTC).
			clock := explain.Clock(*w.HeldUntil, time.Now())
			if !strings.Contains(w.WaitingFor, "more requests of infra/access-config to share a pipeline with, until "+clock) ||
				v.NextAction != state.NextWait || !strings.HasPrefix(v.NextActionText, "Your request waits until "+clock) || !strings.Contains(v.NextActionText, "for more requests to share a pipeline") {
				t.Errorf("%s: %q / %q", op, w.WaitingFor, v.NextActionText)
			}
		}
	})
}

// While a request waits for its approval, the page says how long approvals of its target usually
// take — the median of the latest decided ones, or that there is no estimate yet — and not when
// bindery looks at the ticket next (that is no end of the wait), nor bindery's scheduling.
func TestApprovalSaysHowLongApprovalsOfTheTargetTake(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		h := setup(t, db, options{approvalFirst: true})
		waiting := h.apply("alice", "db-read")
		v := h.waitState(waiting, state.StatusApprovalSent, 0)
		// Nor as "next in line for a free worker": bindery is not to act (a look at the ticket
		// running right now may show as running).
		if w := v.Waiting; w == nil || w.NextCheckAt != nil || (w.Lane != "" && !w.Running) || !strings.HasPrefix(w.ApprovalTakes, "no estimate yet: 0 approvals of this target decided so far") {
			t.Fatalf("without decided approvals: %+v", w)
		}
		// Three decided approvals of the target, that took 1 h, 2 h and 3 h; one of another target.
		for i, took := range []time.Duration{time.Hour, 3 * time.Hour, 2 * time.Hour} {
			op := h.apply(fmt.Sprintf("u%d@example.com", i), "db-read")
			h.waitState(op, state.StatusApprovalSent, 0)
			h.decide(op, sim.TicketApproved)
			h.waitState(op, state.StatusMRCreating, state.StepQueued)
			if _, err := db.Raw().ExecContext(bg, "UPDATE operation SET approval_us = ? WHERE operation_id = ?", took.Microseconds(), op); err != nil {
				t.Fatal(err)
			}
		}
		other := h.apply("carol@example.com", "grafana")
		h.waitState(other, state.StatusApprovalSent, 0)
		h.decide(other, sim.TicketApproved)
		h.waitState(other, state.StatusMRCreating, state.StepQueued)
		if _, err := db.Raw().ExecContext(bg, "UPDATE operation SET approval_us = ? WHERE operation_id = ?", (9 * time.Hour).Microseconds(), other); err != nil {
			t.Fatal(err)
		}
		w := h.view(waiting).Waiting
		if w == nil || w.ApprovalTakes != "approvals of this target usually take about 2 h (median of the last 3)" || w.NextCheckAt != nil {
			t.Fatalf("with three decided approvals: %+v", w)
		}
	})
}

// A request whose car rides behind a BLOCKED car of its project's train says so, since when and
// why — the car ahead's merge request held for a person — and that a person must act
// (WAIT_MANUAL), not "nothing to do".
func TestACarBehindABlockedCarSaysWhy(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		clock := testkit.NewClock(time.Now())
		extra := strings.Replace(fmt.Sprintf(trainSims, 2), "mergeMethod: merge\n", "mergeMethod: merge\n    mergeBlocker: discussions_not_resolved\n", 1)
		h := setup(t, db, options{approvalFirst: true, realBatch: true, clock: clock, extra: extra})
		first, firstCar := h.car("alice")
		second, _ := h.car("bob")
		clock.Advance(11 * time.Minute) // both pipelines pass; the first car meets the discussion
		h.waitFor("the first car blocked", func() bool { return h.view(first).Step.Code == int(state.StepHandleMRBlocked) })
		var v = h.view(second)
		h.waitFor("the second car told it waits behind the first", func() bool {
			v = h.view(second)
			return v.Waiting != nil && v.Waiting.Blocker != nil
		})
		b := v.Waiting.Blocker
		if !b.Behind || b.BatchID != firstCar || !strings.HasPrefix(b.Text, "merge request !") || !strings.Contains(b.Text, "has an unresolved discussion: a maintainer of "+project) ||
			v.NextAction != state.NextWaitManual || !strings.Contains(v.NextActionText, fmt.Sprintf("behind blocked batch %d since ", firstCar)) ||
			!strings.Contains(v.Waiting.WaitingFor, fmt.Sprintf("behind blocked batch %d since ", firstCar)) {
			t.Fatalf("behind the blocked car: %s %q %+v %+v", v.NextAction, v.NextActionText, v.Waiting, b)
		}
	})
}
