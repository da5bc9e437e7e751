package batch_test

import (
	"testing"

	"bindery/batch"
	"bindery/internal/remote/gitlab"
	"bindery/internal/vocab/state"
	"bindery/internal/work/change"
	"bindery/store"
	"bindery/store/storetest"
	"bindery/workflow"
)

// closing starts the close phase of a VALIDATED request as revoke and expiry do: the binding
// stays VALIDATED at CLOSE_STARTED and a delete action joins the waiting set.
func (e *env) closing(t *testing.T, opID string) {
	t.Helper()
	r := e.request(t, opID)
	if _, err := e.db.Transition(bg, r, store.Change{To: state.StatusValidated, Step: state.StepCloseStarted}); err != nil {
		t.Fatalf("close %s: %v", opID, err)
	}
	tg, _ := e.src.Current().Target("t1")
	a, err := batch.Admission(tg, r.Operation, state.ActionDelete)
	if err != nil {
		t.Fatal(err)
	}
	if added, err := e.db.Admit(bg, a); err != nil || !added {
		t.Fatalf("admit delete %s: %v %v", opID, added, err)
	}
}

// The close phase goes through the same batch path: deletes of validated bindings share a
// batch with a new request's create; the deletes end VALIDATED / CLOSE_MERGED with their files gone
// from the target branch (the create MERGED), then CLOSED / CLOSE_SUCCEEDED (re-appliable) when
// the deploy that includes the merge calls back. A delete whose pipeline fails ends
// HANDLE_FAILED / CLOSE_FAILED, its file kept; a delete of a file already gone ends CLOSED.
func TestCloseMembersRemoveTheirFilesThroughABatch(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		e := setup(t, db, settings{})
		svc := e.service(t, "i1")
		subjects := map[string]string{"op-alice": "alice", "op-bob": "bob", "op-dave": "dave", "op-eve": "eve"}
		for _, id := range []string{"op-alice", "op-bob", "op-dave", "op-eve"} {
			e.admit(t, id, subjects[id], "t1", "needs access")
		}
		e.drain(t, svc, projectA)
		if v, err := db.TransitionMany(bg, []string{"op-alice", "op-bob", "op-dave", "op-eve"},
			store.MemberChange{From: []state.BindingStatus{state.StatusMerged}, To: state.StatusValidated, Step: state.StepCalledBack}); err != nil || len(v) != 4 {
			t.Fatalf("validate: %d %v", len(v), err)
		}

		e.closing(t, "op-alice")
		e.closing(t, "op-bob")
		e.admit(t, "op-carol", "carol", "t1", "new")
		batches := e.drain(t, svc, projectA)
		if len(batches) != 1 || batches[0].Status != state.BatchSucceeded {
			t.Fatalf("batches: %+v", batches)
		}
		for _, id := range []string{"op-alice", "op-bob"} {
			// Merged, not yet deployed: still in effect until the deploy that includes the merge.
			e.expect(t, id, state.StatusValidated, state.StepCloseMerged, state.NextWait)
			if e.onMain(t, "t1", subjects[id]) {
				t.Errorf("%s: file still on main", id)
			}
		}
		e.expect(t, "op-carol", state.StatusMerged, state.StepHandleMerged, state.NextWait)
		if !e.onMain(t, "t1", "carol") {
			t.Error("carol's file not on main")
		}
		// The batch MR's deploy: the grant is validated, the removals closed.
		if d, err := workflow.RecordDeploy(bg, db, store.Deploy{Project: projectA, MRIID: batches[0].MRIID}); err != nil || len(d.Validated) != 1 || len(d.Closed) != 2 {
			t.Fatalf("the deploy of the batch's MR: %+v %v", d, err)
		}
		for _, id := range []string{"op-alice", "op-bob"} {
			e.expect(t, id, state.StatusClosed, state.StepCloseSucceeded, state.NextReapply)
		}

		f := e.gl.Faults()
		f.PipelineFailOn = []string{"t1/dave.yaml"}
		e.gl.SetFaults(f)
		e.closing(t, "op-dave")
		if b := e.drain(t, svc, projectA); len(b) != 1 || b[0].Status != state.BatchFailed {
			t.Fatalf("failing delete: %+v", b)
		}
		e.expect(t, "op-dave", state.StatusHandleFailed, state.StepCloseFailed, state.NextWaitManual)
		if !e.onMain(t, "t1", "dave") {
			t.Error("dave's file was removed by a failed batch")
		}
		e.gl.ResetFaults()

		tg, _ := e.src.Current().Target("t1")
		path, _ := change.RenderPath(tg, "eve")
		if _, err := e.runner.GitLab.CreateCommit(bg, projectA, gitlab.CommitRequest{Branch: "main", Message: "removed by hand",
			Actions: []gitlab.FileAction{{Action: gitlab.ActionDelete, Path: path}}}); err != nil {
			t.Fatal(err)
		}
		e.closing(t, "op-eve")
		if b := e.drain(t, svc, projectA); len(b) != 1 || b[0].Status != state.BatchSucceeded || b[0].MRIID != 0 {
			t.Fatalf("delete of a file already gone: %+v", b)
		}
		e.expect(t, "op-eve", state.StatusClosed, state.StepCloseSucceeded, state.NextReapply)
	})
}
