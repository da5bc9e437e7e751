package store_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"bindery/batch"
	"bindery/internal/vocab/state"
	"bindery/store"
	"bindery/store/storetest"
	"bindery/workflow"
)

// mergedRemovals seeds removals whose MR mrIID merged (VALIDATED at CLOSE_MERGED) the way a
// batch's settlement moves them, so that removal_merged lists them.
func mergedRemovals(t testing.TB, db *store.DB, project string, ids []string, mrIID int64) {
	t.Helper()
	seedRequests(t, db, project, ids, state.StatusValidated, state.StepCloseStarted, 0)
	moved, err := db.TransitionMany(bg, ids, store.MemberChange{From: []state.BindingStatus{state.StatusValidated}, FromStep: state.StepCloseStarted,
		To: state.StatusValidated, Step: state.StepCloseMerged, MRIID: mrIID, Note: "MR merged"})
	if err != nil || len(moved) != len(ids) {
		t.Fatalf("seed merged removals: %d %v", len(moved), err)
	}
	seedMerge(t, db, project, mrIID, "main", mergedAtBase.Add(time.Duration(mrIID)*time.Minute))
}

// A removal, like a grant, is acted on by the deploy of the MR that carries it: named exactly
// (its id is checked against the removal's MR, not the MR that once added its file), or by MR
// alone. Its close is CLOSED / CLOSE_SUCCEEDED, it leaves removal_merged, and a removal still
// waiting for its merge (CLOSE_STARTED) is left alone. A deploy that carried only removals is
// recorded like any other.
func TestADeployCallbackClosesTheRemovalsOfItsMR(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		mergedRemovals(t, db, "team/a", []string{"r1", "r2"}, 7)
		seedRequests(t, db, "team/a", []string{"waiting"}, state.StatusValidated, state.StepCloseStarted, 7) // its MR has not merged
		d := recordDeploy(t, db, store.Deploy{Project: "team/a", MRIID: 7, OperationIDs: []string{"r1", "waiting"}})
		if got := opIDs(d.Closed); !d.Fresh || len(d.Refused) > 0 || len(got) != 1 || got[0] != "r1" || len(d.Validated) != 0 {
			t.Fatalf("exact: closed %v, refused %v, fresh %t; want r1 closed, nothing refused", got, d.Refused, d.Fresh)
		}
		if n := count(t, db, "SELECT COUNT(*) FROM deploy_callback WHERE project = 'team/a' AND mr_iid = 7"); n != 1 {
			t.Fatalf("the removal-only deploy is not recorded (%d)", n)
		}
		for id, want := range map[string]state.BindingStatus{"r1": state.StatusClosed, "r2": state.StatusValidated, "waiting": state.StatusValidated} {
			if st := status(t, db, id); st != want {
				t.Errorf("%s: %s, want %s", id, st, want)
			}
		}
		if n := count(t, db, "SELECT COUNT(*) FROM removal_merged WHERE operation_id = 'r1'"); n != 0 {
			t.Fatal("a closed removal is still listed as waiting for its deploy")
		}
		steps, err := db.Steps(bg, "r1")
		if err != nil {
			t.Fatal(err)
		}
		if last := steps[len(steps)-1]; last.Step != state.StepCloseSucceeded || last.Status != state.StatusClosed || !strings.Contains(last.Note, "MR !7") {
			t.Fatalf("r1's last step: %+v", last)
		}
		// By MR alone (a repeat of the MR's callback without ids): the rest of its removals.
		mergedRemovals(t, db, "team/b", []string{"r3"}, 7)
		d = recordDeploy(t, db, store.Deploy{Project: "team/b", MRIID: 7})
		if got := opIDs(d.Closed); len(got) != 1 || got[0] != "r3" {
			t.Fatalf("by MR: closed %v", got)
		}
	})
}

// Reconciliation closes a removal whose callback was lost once a deploy of a later merge on its
// branch is called back — by merge order, exactly as it validates a grant — and leaves one that
// merged after that deploy. Early callbacks of removals are replayed.
func TestReconciliationClosesRemovalsByMergeOrder(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		mergedRemovals(t, db, "team/a", []string{"before"}, 5)
		seedRequests(t, db, "team/a", []string{"grant"}, state.StatusMerged, state.StepHandleMerged, 6)
		mergedRemovals(t, db, "team/a", []string{"after"}, 8)
		recordDeploy(t, db, store.Deploy{Project: "team/a", SHA: "sha-team/a-6"})
		clockPast(t, db, "SELECT CAST(MAX(created_at) AS CHAR) FROM removal_merged")
		r, err := workflow.ReconcileDeploys(bg, db, 0, 2*time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		if got := opIDs(r.Closed); r.Scanned != 2 || len(got) != 1 || got[0] != "before" {
			t.Fatalf("scanned %d, closed %v; want before of 2 (grant was validated by its callback, after merged later)", r.Scanned, got)
		}
		if st := status(t, db, "after"); st != state.StatusValidated {
			t.Fatalf("a removal merged after the deploy: %s", st)
		}
		steps, _ := db.Steps(bg, "before")
		if last := steps[len(steps)-1]; !strings.Contains(last.Note, "deploy of MR !6") {
			t.Fatalf("the inferred close does not say which deploy: %+v", last)
		}

		// A callback of !8 recorded before its removal merged (EarlyDeploys finds it).
		mergedRemovals(t, db, "team/c", []string{"early"}, 3)
		if _, err := db.Raw().ExecContext(bg, `INSERT INTO deploy_callback (project, mr_iid, operation_ids) VALUES ('team/c', 3, '["early"]')`); err != nil {
			t.Fatal(err)
		}
		early, err := db.EarlyDeploys(bg, time.Hour)
		if err != nil || len(early) != 1 || early[0].MRIID != 3 || strings.Join(early[0].OperationIDs, ",") != "early" {
			t.Fatalf("early deploys: %+v %v", early, err)
		}
	})
}

// The ops stuck list shows a removal whose deploy is overdue beside the failures, in the same
// order and pages; an operator's confirmation closes it, once.
func TestAnOverdueRemovalIsListedAndAnOperatorClosesIt(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		seedRequests(t, db, "team/a", []string{"f1"}, state.StatusHandleFailed, state.StepHandleMergeFailed, 0)
		mergedRemovals(t, db, "team/a", []string{"rm"}, 4)
		seedRequests(t, db, "team/a", []string{"f2"}, state.StatusCreateFailed, state.StepCreateFailed, 0)
		seedRequests(t, db, "team/a", []string{"ok"}, state.StatusValidated, state.StepCalledBack, 0)
		ageRows(t, db, "operation", 3*time.Hour, "f1")
		ageRows(t, db, "operation", 2*time.Hour, "rm")
		ageRows(t, db, "operation", time.Hour, "f2")
		if _, err := db.Raw().ExecContext(bg, "UPDATE removal_merged SET created_at = (SELECT updated_at FROM operation WHERE operation_id = 'rm')"); err != nil {
			t.Fatal(err)
		}
		f := store.StuckFilter{NeedsOperator: true, DeployOverdue: 30 * time.Minute, Page: store.Page{Limit: 2}}
		first, next, err := db.StuckOperations(bg, f)
		if err != nil || opIDs(first)[0] != "f1" || opIDs(first)[1] != "rm" || next == "" {
			t.Fatalf("page 1: %v %q %v; want f1, rm and a next page", opIDs(first), next, err)
		}
		f.Cursor = next
		second, next, err := db.StuckOperations(bg, f)
		if err != nil || len(second) != 1 || second[0].OperationID != "f2" || next != "" {
			t.Fatalf("page 2: %v %q %v; want f2 only", opIDs(second), next, err)
		}
		f = store.StuckFilter{NeedsOperator: true, DeployOverdue: 4 * time.Hour}
		if all, _, err := db.StuckOperations(bg, f); err != nil || len(all) != 2 {
			t.Fatalf("with a longer deployOverdue: %v %v; want the failures only", opIDs(all), err)
		}
		closed, err := closeRemoval(db, "Deploy confirmed by olga.", "rm")
		if err != nil || len(closed) != 1 || status(t, db, "rm") != state.StatusClosed {
			t.Fatalf("confirm: %v %v", opIDs(closed), err)
		}
		if again, err := closeRemoval(db, "Deploy confirmed by olga.", "rm"); err != nil || len(again) != 0 {
			t.Fatalf("confirmed twice: %v %v", opIDs(again), err)
		}
		if again, err := closeRemoval(db, "Deploy confirmed by olga.", "ok"); err != nil || len(again) != 0 || status(t, db, "ok") != state.StatusValidated {
			t.Fatalf("a binding in effect was closed: %v %v", opIDs(again), err)
		}
	})
}

// The waiting set never holds a write of a binding's file (a renewal's new expiry, a drift
// restore) beside the binding's removal — merged after the removal, the write would put the
// removed file back: the removal's start drops the waiting writes, a write is not admitted while
// the removal is on its way, and a write a batch returns to the waiting set (a bisection's half)
// leaves it when the removal waits there.
func TestAFileWriteNeverWaitsBesideItsBindingsRemoval(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		const p = "grp/files"
		ids := []string{"fw-renewed", "fw-kept", "fw-restored"}
		seedRequests(t, db, p, ids, state.StatusValidated, state.StepCalledBack, 0)
		write := func(id string, a state.Action) store.Admission {
			return store.Admission{OperationID: id, Action: a, Partition: p,
				Change: store.AdmittedChange{Branch: "main", Path: "b/" + id + ".yaml", Content: "subject: " + id + "\n"}}
		}
		waiting := func(id string, a state.Action) int {
			return count(t, db, "SELECT COUNT(*) FROM merge_batch_request WHERE operation_id = ? AND action = ? AND batch_id IS NULL", id, a)
		}
		for _, id := range ids[:2] {
			if added, err := db.Admit(bg, write(id, state.ActionRenew)); err != nil || !added {
				t.Fatalf("admit %s: %v %v", id, added, err)
			}
		}
		claimable(t, db)
		c, err := batch.Claim(bg, db, claimInput(p, 10))
		if err != nil || len(c.Members) != 2 {
			t.Fatalf("claim: %+v %v", c, err)
		}

		// fw-renewed is revoked while its renewal's file is in the batch; the batch returns both.
		if added, err := db.Admit(bg, write("fw-renewed", state.ActionDelete)); err != nil || !added {
			t.Fatalf("admit the removal: %v %v", added, err)
		}
		if err := db.InTx(bg, func(tx *store.Tx) error { return tx.AdmitRenewal(bg, write("fw-renewed", state.ActionRenew)) }); !errors.Is(err, store.ErrRestoring) {
			t.Fatalf("a renewal's file admitted beside the removal: %v", err)
		}
		if _, _, err := db.AdvanceBatch(bg, store.BatchStep{Batch: c.Batch, Change: store.BatchChange{Note: "bisect"}, Requeue: []string{"fw-renewed", "fw-kept"}, Bisect: true}); err != nil {
			t.Fatal(err)
		}
		if waiting("fw-renewed", state.ActionRenew) != 0 || waiting("fw-renewed", state.ActionDelete) != 1 {
			t.Fatal("the returned renewal's file waits beside its binding's removal")
		}
		if waiting("fw-kept", state.ActionRenew) != 1 {
			t.Fatal("a returned renewal's file without a removal left the waiting set")
		}

		// A restore waiting when its binding's removal starts leaves with that start.
		if added, err := db.Admit(bg, write("fw-restored", state.ActionRestore)); err != nil || !added {
			t.Fatalf("admit the restore: %v %v", added, err)
		}
		if err := db.InTx(bg, func(tx *store.Tx) error { return tx.DropWaitingFileWrites(bg, "fw-restored") }); err != nil {
			t.Fatal(err)
		}
		if waiting("fw-restored", state.ActionRestore) != 0 {
			t.Fatal("the restore still waits")
		}
	})
}
