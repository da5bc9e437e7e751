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

// A write of a binding's file read by a claim beside the binding's removal (a renewal's new
// expiry that came back to the waiting set while the removal was admitted) is moot: the car takes
// the removal alone and the write leaves the waiting set. Taken together, one car held two rows
// of one request: it wrote the renewal's file, recorded the removal as merged, and the binding
// closed with its file still on main.
func TestAFileWriteBesideItsRemovalLeavesAndTheFileIsRemoved(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		e := setup(t, db, settings{})
		svc := e.service(t, "i1")
		e.admit(t, "op-alice", "alice", "t1", "needs access")
		e.drain(t, svc, projectA)
		e.validate(t, "op-alice")

		e.admitWrite(t, "op-alice", state.ActionRenew)
		e.closing(t, "op-alice")
		batches := e.drain(t, svc, projectA)
		if len(batches) != 1 || batches[0].Status != state.BatchSucceeded {
			t.Fatalf("batches: %+v", batches)
		}
		if n := e.count(t, "SELECT COUNT(*) FROM merge_batch_member WHERE batch_id = ?", batches[0].ID); n != 1 {
			t.Fatalf("the removal's car holds %d rows, want the removal alone", n)
		}
		if n := e.count(t, "SELECT COUNT(*) FROM merge_batch_request WHERE operation_id = 'op-alice' AND action = 'RENEW'"); n != 0 {
			t.Fatalf("the renewal's write is still in the waiting set: %d", n)
		}
		e.expect(t, "op-alice", state.StatusValidated, state.StepCloseMerged, state.NextWait)
		if e.onMain(t, "t1", "alice") {
			t.Fatal("alice's file is still on main after her removal merged")
		}
	})
}

// A drift restore in a car whose binding's removal has started (revoked after the restore was
// admitted; the restore came back to the waiting set beside the removal) leaves its car when the
// car is built: writing the file is moot. Kept, a bisection sent the restore's car to the end of
// the merge train, behind the removal's car, and the restore merged after the removal: the
// removed file was back on main while the binding closed.
func TestARestoreLeavesItsCarOnceItsBindingsRemovalStarted(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		e := setup(t, db, settings{train: 2, flakyRetries: -1})
		first, eng := e.held(t, "i0")
		if err := eng.Start(bg); err != nil {
			t.Fatal(err)
		}
		e.admit(t, "op-alice", "alice", "t1", "needs access")
		e.drain(t, first, projectA)
		e.validate(t, "op-alice")
		if err := eng.Stop(bg); err != nil {
			t.Fatal(err)
		}

		// Her file removed outside bindery; an operator restores it, beside a poison pill; then
		// she is revoked.
		tg, _ := e.src.Current().Target("t1")
		path, _ := change.RenderPath(tg, "alice")
		if _, err := e.gl.RemoveFromBranch(projectA, "main", path); err != nil {
			t.Fatal(err)
		}
		f := e.gl.Faults()
		f.PipelineFailOn = []string{"t1/dave.yaml"}
		e.gl.SetFaults(f)
		e.admitWrite(t, "op-alice", state.ActionRestore)
		e.admit(t, "op-dave", "dave", "t1", "poison")
		e.closing(t, "op-alice")

		// Three waiting, two free cars: the restore and the poison pill share car 1, the removal
		// goes alone in car 2 behind it.
		svc, eng := e.held(t, "i1")
		car1 := e.round(t, svc, projectA)
		if car1.Result != state.RoundClaimed || car1.Claimed != 2 {
			t.Fatalf("car 1: %+v", car1)
		}
		car2 := e.round(t, svc, projectA)
		if car2.Result != state.RoundClaimed || car2.Claimed != 1 {
			t.Fatalf("car 2: %+v", car2)
		}
		if err := eng.Start(bg); err != nil {
			t.Fatal(err)
		}
		e.stopped(t, car1.BatchID)
		if b := e.stopped(t, car2.BatchID); b.Status != state.BatchSucceeded {
			t.Fatalf("the removal's car: %+v", b)
		}
		e.drain(t, svc, projectA)
		if e.onMain(t, "t1", "alice") {
			t.Fatal("the restore put alice's file back on main after her removal")
		}
		if n := e.count(t, "SELECT COUNT(*) FROM merge_batch_request WHERE operation_id = 'op-alice' AND action = 'RESTORE'"); n != 0 {
			t.Fatalf("the restore is still in the waiting set: %d", n)
		}
		e.expect(t, "op-alice", state.StatusClosed, state.StepCloseSucceeded, state.NextReapply)
	})
}

// validate moves merged requests to VALIDATED, as their deploy does.
func (e *env) validate(t *testing.T, ids ...string) {
	t.Helper()
	if v, err := e.db.TransitionMany(bg, ids, store.MemberChange{From: []state.BindingStatus{state.StatusMerged}, To: state.StatusValidated, Step: state.StepCalledBack}); err != nil || len(v) != len(ids) {
		t.Fatalf("validate %v: %d %v", ids, len(v), err)
	}
}

// admitWrite admits a write of opID's file while its binding is in effect (a drift restore, a
// renewal's new expiry), as the workflow does.
func (e *env) admitWrite(t *testing.T, opID string, a state.Action) {
	t.Helper()
	op, err := e.db.Operation(bg, opID)
	if err != nil {
		t.Fatal(err)
	}
	tg, _ := e.src.Current().Target(op.TargetKey)
	adm, err := batch.Admission(tg, op, a)
	if err != nil {
		t.Fatal(err)
	}
	if added, err := e.db.Admit(bg, adm); err != nil || !added {
		t.Fatalf("admit %s %s: %v %v", a, opID, added, err)
	}
}
