package batch_test

import (
	"fmt"
	"strings"
	"testing"

	"bindery/internal/vocab/state"
	"bindery/store"
	"bindery/store/storetest"
)

// mutating are the simulator endpoints that change GitLab; reads poll.
var endpoints = []string{"create_branch", "create_commit", "create_mr", "get_mr", "mr_pipelines", "create_mr_pipeline",
	"get_approvals", "approve", "merge", "rebase", "update_mr", "delete_branch", "get_pipeline", "checklist",
	"retry_pipeline", "create_pipeline", "get_commit", "get_project"}

func (e *env) calls() map[string]int {
	out := map[string]int{}
	for _, ep := range endpoints {
		out[ep] = e.gl.Calls(ep)
	}
	return out
}

func diff(after, before map[string]int) map[string]int {
	out := map[string]int{}
	for k, v := range after {
		if d := v - before[k]; d != 0 {
			out[k] = d
		}
	}
	return out
}

// N approved requests of a project become one batch, one commit and one MR; every member ends
// MERGED with the MR recorded and its file on the target branch; and the GitLab calls a batch
// makes are the same for 12 members as for one.
func TestABatchOfRequestsLandsThroughOneMRWithCallsIndependentOfItsSize(t *testing.T) {
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		e := setup(t, db, settings{})
		svc := e.service(t, "i1")

		runOne := func(prefix string, n int) (store.Batch, []string, map[string]int) {
			t.Helper()
			ids := e.admitMany(t, prefix, "t1", n)
			before := e.calls()
			o := e.round(t, svc, projectA)
			if o.Err != nil || o.Result != state.RoundClaimed || o.Claimed != n {
				t.Fatalf("round: %+v", o)
			}
			b := e.stopped(t, o.BatchID)
			return b, ids, diff(e.calls(), before)
		}

		one, _, callsOne := runOne("solo", 1)
		b, ids, callsMany := runOne("many", 12)
		for _, x := range []store.Batch{one, b} {
			if x.Status != state.BatchSucceeded || x.MRIID == 0 || x.PipelineID == 0 {
				t.Fatalf("batch: %+v", x)
			}
		}
		for i, id := range ids {
			e.expect(t, id, state.StatusMerged, state.StepHandleMerged, state.NextWait)
			if r := e.request(t, id); r.Operation.MRIID != b.MRIID || r.Operation.BatchID != b.ID || r.Operation.PipelineID != b.PipelineID {
				t.Errorf("%s: MR %d pipeline %d batch %d, want MR %d pipeline %d batch %d", id, r.Operation.MRIID, r.Operation.PipelineID,
					r.Operation.BatchID, b.MRIID, b.PipelineID, b.ID)
			}
			if !e.onMain(t, "t1", fmt.Sprintf("user-many-%02d", i)) {
				t.Errorf("%s: file not on main", id)
			}
		}
		if fmt.Sprint(callsMany) != fmt.Sprint(callsOne) {
			t.Fatalf("GitLab calls grew with the members: 1 member %v, 12 members %v", callsOne, callsMany)
		}
		if callsMany["create_commit"] != 1 || callsMany["create_mr"] != 1 || callsMany["merge"] != 1 {
			t.Fatalf("one commit, one MR, one merge per batch: %v", callsMany)
		}

		// The timeline of a member: queued, batched, MR open, created, merging, approved, merged.
		steps, err := db.Steps(bg, ids[3])
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, s := range steps {
			got = append(got, s.Step.String())
		}
		want := "APPROVAL_SENDING QUEUED BATCHED CREATE_STARTED CREATE_SUCCEEDED HANDLE_STARTED HANDLE_APPROVED HANDLE_MERGED"
		if strings.Join(got, " ") != want {
			t.Fatalf("timeline: %s\nwant:     %s", strings.Join(got, " "), want)
		}

		// Stage metrics, after commit: the wait in line per member, CI and merge per batch.
		if n := e.sink.count(`bindery_batch_wait_seconds{project="infra/access-config"}`); n != 13 {
			t.Errorf("batch wait observed %d times, want 13", n)
		}
		for _, m := range []string{`bindery_batch_ci_seconds{project="infra/access-config"}`, `bindery_batch_merge_seconds{project="infra/access-config"}`,
			`bindery_batches_settled_total{project="infra/access-config",status="SUCCEEDED"}`} {
			if n := e.sink.count(m); n != 2 {
				t.Errorf("%s: %d, want 2", m, n)
			}
		}
	})
}
