package batch_test

import (
	"fmt"
	"strings"
	"testing"

	"bindery/internal/vocab/state"
	"bindery/store"
	"bindery/store/storetest"
)

// One culprit among 8 while newcomers keep arriving, two while each batch runs: the half a
// bisection returns is retried on its own before any newcomer is batched, so the culprit is
// isolated in ⌈log₂ 8⌉ = 3 bisections, never shares a batch with a newcomer, and the batch that
// isolated it names it (batch, member timeline). Every innocent member and every newcomer lands.
func TestTheCulpritIsIsolatedInThreeBisectionsAndNoNewcomerJoinsASuspect(t *testing.T) {
	for _, culprit := range []int{1, 6} { // in the half that stays, in the half that goes back
		t.Run(fmt.Sprintf("culprit %d", culprit), func(t *testing.T) {
			storetest.Each(t, func(t *testing.T, db *store.DB) {
				e := setup(t, db, settings{})
				f := e.gl.Faults()
				f.PipelineFailOn = []string{"breaks-ci"}
				e.gl.SetFaults(f)
				svc := e.service(t, "i1")
				var first []string
				for i := range 8 {
					id, reason := fmt.Sprintf("op-%d", i), "needs access"
					if i == culprit {
						reason = "breaks-ci"
					}
					e.admit(t, id, fmt.Sprintf("user-%d", i), "t1", reason)
					first = append(first, id)
				}

				var newcomers []string
				var batches []int64
				for r := 0; ; r++ {
					if r == 40 {
						t.Fatal("the partition did not drain in 40 rounds")
					}
					o := e.round(t, svc, projectA)
					if o.Err != nil {
						t.Fatalf("round: %v", o.Err)
					}
					if o.Result != state.RoundClaimed {
						if e.count(t, "SELECT COUNT(*) FROM merge_batch_request WHERE partition_key = ? AND batch_id IS NULL", projectA) == 0 {
							break
						}
						continue
					}
					batches = append(batches, o.BatchID)
					if r < 6 { // newcomers arrive while the batch runs (and is bisected)
						for j := range 2 {
							id := fmt.Sprintf("new-%d-%d", r, j)
							e.admit(t, id, "user-"+id, "t1", "needs access")
							newcomers = append(newcomers, id)
						}
					}
					if b := e.stopped(t, o.BatchID); b.Status == state.BatchBlocked {
						t.Fatalf("batch %d blocked: %s", b.ID, b.Note)
					}
				}

				// No newcomer was ever in a batch with one of the first 8 (the first batch
				// claimed all of them; every later batch holding one holds suspects only).
				isFirst := map[string]bool{}
				for _, id := range first {
					isFirst[id] = true
				}
				for _, id := range batches {
					ms, err := db.Members(bg, id)
					if err != nil {
						t.Fatal(err)
					}
					var old, fresh []string
					for _, m := range ms {
						if isFirst[m.OperationID] {
							old = append(old, m.OperationID)
						} else {
							fresh = append(fresh, m.OperationID)
						}
					}
					if len(old) > 0 && len(fresh) > 0 {
						t.Errorf("batch %d mixed suspects %v with newcomers %v", id, old, fresh)
					}
				}

				for i, id := range first {
					if i == culprit {
						e.expect(t, id, state.StatusCreateFailed, state.StepCreatePipelineFailed, state.NextContactSupport)
						continue
					}
					e.expect(t, id, state.StatusMerged, state.StepHandleMerged, state.NextWait)
					if !e.onMain(t, "t1", fmt.Sprintf("user-%d", i)) {
						t.Errorf("%s: file not on main", id)
					}
				}
				for _, id := range newcomers {
					e.expect(t, id, state.StatusMerged, state.StepHandleMerged, state.NextWait)
				}
				if n := e.sink.count(`bindery_batch_bisections_total{project="infra/access-config"}`); n != 3 {
					t.Errorf("%d bisections, want ⌈log₂ 8⌉ = 3", n)
				}

				// The batch that isolated it names it, with the bisection it ended.
				var lastID int64
				if err := db.Raw().QueryRowContext(bg, "SELECT batch_id FROM merge_batch_member WHERE operation_id = ? ORDER BY id DESC LIMIT 1", first[culprit]).Scan(&lastID); err != nil {
					t.Fatal(err)
				}
				last, err := db.Batch(bg, lastID)
				if err != nil {
					t.Fatal(err)
				}
				if last.Status != state.BatchFailed || last.Culprit != first[culprit] || last.Bisections != 3 || last.BisectionRoot() != batches[0] {
					t.Fatalf("the culprit's batch: %+v, want FAILED naming %s after 3 bisections of batch %d", last, first[culprit], batches[0])
				}
				found := fmt.Sprintf("batch %d isolated the culprit %s after 3 bisections", last.ID, first[culprit])
				if !strings.Contains(last.Note, found) {
					t.Errorf("batch note %q does not say %q", last.Note, found)
				}
				steps := e.steps(t, first[culprit])
				if note := steps[len(steps)-1].Note; !strings.Contains(note, found) {
					t.Errorf("the culprit's last timeline note %q does not say %q", note, found)
				}
				if n := e.count(t, "SELECT COUNT(*) FROM merge_batch WHERE culprit <> ''"); n != 1 {
					t.Errorf("%d batches name a culprit, want 1", n)
				}
			})
		})
	}
}
