package workflow

import (
	"context"
	"fmt"
	"sort"
	"testing"

	"bindery/internal/vocab/state"
	"bindery/store"
	"bindery/store/storetest"
)

// The sweep's two halves agree: the store's in-flight predicate (which operations without a task
// are orphans) and currentStep (which task drives a state) name the same operations, for every
// status, flow and step. A state one of them forgot would be work nobody runs.
func TestTheStoresInFlightStatesAreTheOnesAStepDrives(t *testing.T) {
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		ctx := context.Background()
		var steps []state.Step
		for s := state.Step(10001); s < 10601; s++ {
			if s.Known() {
				steps = append(steps, s)
			}
		}
		want := map[string]bool{}
		n := 0
		for _, flow := range []string{FlowApprovalFirst, FlowLegacy} {
			for _, status := range state.AllStatuses {
				for _, step := range steps {
					id := fmt.Sprintf("op-%05d", n)
					n++
					op := store.Operation{OperationID: id, Flow: flow, Status: status, Step: step}
					if currentStep(op) != "" {
						want[id] = true
					}
					if _, err := db.Raw().ExecContext(ctx, "INSERT INTO operation (operation_id, subject_id, target_key, project, flow, reason, status, step) VALUES (?, ?, 't', 'p', ?, '', ?, ?)",
						id, "s-"+id, flow, status, step); err != nil {
						t.Fatal(err)
					}
				}
			}
		}
		got := map[string]bool{}
		for {
			ops, _, err := db.Orphans(ctx, 500)
			if err != nil {
				t.Fatal(err)
			}
			fresh := 0
			for _, o := range ops {
				if !got[o.OperationID] {
					got[o.OperationID], fresh = true, fresh+1
				}
				// Give it a task so that the next page lists the rest.
				if err := db.InTx(ctx, func(tx *store.Tx) error {
					return tx.InsertTask(ctx, store.TaskSpec{Kind: state.TaskRequest, Ref: o.OperationID, Lane: "first", Step: "x"})
				}); err != nil {
					t.Fatal(err)
				}
			}
			if fresh == 0 {
				break
			}
		}
		var missing, extra []string
		for id := range want {
			if !got[id] {
				missing = append(missing, id)
			}
		}
		for id := range got {
			if !want[id] {
				extra = append(extra, id)
			}
		}
		sort.Strings(missing)
		sort.Strings(extra)
		describe := func(ids []string) []string {
			var out []string
			for _, id := range ids {
				o, _ := db.Operation(ctx, id)
				out = append(out, fmt.Sprintf("%s %s %s", o.Flow, o.Status, o.Step))
			}
			return out
		}
		if len(missing)+len(extra) > 0 {
			t.Fatalf("a step drives these but the store does not list them: %v\nthe store lists these but no step drives them: %v", describe(missing), describe(extra))
		}
		if len(want) == 0 {
			t.Fatal("no in-flight state at all")
		}
	})
}
