package store_test

import (
	"errors"
	"testing"
	"time"

	"bindery/internal/testkit"
	"bindery/internal/vocab/state"
	"bindery/store"
	"bindery/store/storetest"
	"bindery/workflow"
)

// The store paths the workflow added: the first step's task written with the application, expiry filled after validation, the expiry list that skips closing bindings, the
// operator-needed stuck list and bulk step histories.

// The first step's task is written in the application's transaction: the work is due from the
// first commit on; an application that fails writes no task.
func TestTheFirstStepsTaskIsWrittenWithTheApplication(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		a := application("op-1", "alice", "t1")
		a.Task = &store.TaskSpec{Kind: state.TaskRequest, Lane: "first", Step: "ticket"}
		mustApply(t, db, a)
		task, err := db.Task(bg, state.TaskRequest, "op-1")
		if err != nil || task.Step != "ticket" || task.Lane != "first" || task.Owner != "" || task.Overdue < 0 {
			t.Fatalf("task: %+v %v", task, err)
		}
		again := application("op-2", "alice", "t1") // the relation is active: refused
		again.Task = a.Task
		if _, err := db.Apply(bg, again); err == nil {
			t.Fatal("a second application for an active relation was accepted")
		}
		if _, err := db.Task(bg, state.TaskRequest, "op-2"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("a refused application left a task: %v", err)
		}
	})
}

func TestExpiryIsFilledFromTheValidationTimeOnce(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		for _, id := range []string{"v1", "v2", "v3"} {
			mustApply(t, db, application(id, "alice-"+id, "t1"))
			mustMove(t, db, id, state.StatusApprovalSent, state.StatusMRCreating, state.StatusMRCreated, state.StatusMerging, state.StatusMerged, state.StatusValidated)
		}
		mustApply(t, db, application("other", "alice", "t2"))
		mustMove(t, db, "other", state.StatusApprovalSent, state.StatusMRCreating, state.StatusMRCreated, state.StatusMerging, state.StatusMerged, state.StatusValidated)

		n, err := db.FillExpiry(bg, "t1", time.Hour, "v1")
		if err != nil || n != 1 {
			t.Fatalf("fill v1: %d %v", n, err)
		}
		b, _ := db.BindingByOperation(bg, "v1")
		if b.ExpiresAt == nil || b.ExpiresAt.Sub(b.UpdatedAt) != time.Hour {
			t.Fatalf("v1 expires at %v, updated %v: want one hour after validation", b.ExpiresAt, b.UpdatedAt)
		}
		if n, err := db.FillExpiry(bg, "t1", 2*time.Hour, "v1"); err != nil || n != 0 {
			t.Fatalf("a second fill changed an expiry: %d %v", n, err)
		}
		// The repair form: every validated binding of the target without an expiry.
		if n, err := db.FillExpiry(bg, "t1", time.Hour); err != nil || n != 2 {
			t.Fatalf("repair: %d %v", n, err)
		}
		if o, _ := db.BindingByOperation(bg, "other"); o.ExpiresAt != nil {
			t.Fatalf("another target's binding got an expiry: %v", o.ExpiresAt)
		}
		if n, err := db.FillExpiry(bg, "t2", 0); err != nil || n != 0 {
			t.Fatalf("no ttl: %d %v", n, err)
		}
	})
}

func TestExpiredBindingsAlreadyClosingAreNotListedAgain(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		for _, id := range []string{"e1", "e2"} {
			mustApply(t, db, application(id, "alice-"+id, "t1"))
			mustMove(t, db, id, state.StatusApprovalSent, state.StatusMRCreating, state.StatusMRCreated, state.StatusMerging, state.StatusMerged, state.StatusValidated)
		}
		if _, err := db.FillExpiry(bg, "t1", time.Millisecond); err != nil {
			t.Fatal(err)
		}
		testkit.Eventually(t, "both to expire", func() bool {
			bs, err := db.ExpiredToClose(bg, 10)
			if err != nil {
				t.Fatal(err)
			}
			return len(bs) == 2
		})
		if _, err := db.Admit(bg, store.Admission{OperationID: "e1", Action: state.ActionDelete, Partition: "infra/acl"}); err != nil {
			t.Fatal(err)
		}
		bs, err := db.ExpiredToClose(bg, 10)
		if err != nil || len(bs) != 1 || bs[0].OperationID != "e2" {
			t.Fatalf("expired to close: %+v %v", bs, err)
		}
	})
}

func TestTheStuckListCanKeepOnlyWhatNeedsAnOperator(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		for _, id := range []string{"ok", "failed", "pending"} {
			mustApply(t, db, application(id, "alice", "t-"+id))
		}
		mustMove(t, db, "failed", state.StatusApprovalSent, state.StatusMRCreating, state.StatusCreateFailed)
		mustMove(t, db, "pending", state.StatusApprovalSent, state.StatusMRCreating, state.StatusMRCreated, state.StatusMerging)
		cur, _ := db.Request(bg, "pending")
		if _, err := db.Transition(bg, cur, store.Change{To: state.StatusMerging, Step: state.StepHandlePipelinePending}); err != nil {
			t.Fatal(err)
		}
		ops, _, err := db.StuckOperations(bg, store.StuckFilter{NeedsOperator: true})
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, o := range ops {
			got = append(got, o.OperationID)
		}
		if join(got) != "failed pending" {
			t.Fatalf("needs an operator: %v", got)
		}
	})
}

func TestADeployCallbackThatCameBeforeMergedIsFoundAndReplayed(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		mustApply(t, db, application("early", "alice", "t1"))
		mustMove(t, db, "early", state.StatusApprovalSent, state.StatusMRCreating, state.StatusMRCreated, state.StatusMerging)
		cur, _ := db.Request(bg, "early")
		if _, err := db.Transition(bg, cur, store.Change{To: state.StatusMerging, Step: state.StepHandleApproved, MRIID: 9}); err != nil {
			t.Fatal(err)
		}
		// The callback arrives while the request is still MERGING: recorded, nothing validated.
		d, err := workflow.RecordDeploy(bg, db, store.Deploy{Project: "infra/acl", MRIID: 9, OperationIDs: []string{"early"}})
		if err != nil || !d.Fresh || len(d.Validated) != 0 {
			t.Fatalf("early callback: %+v %v", d, err)
		}
		if got, err := db.EarlyDeploys(bg, time.Hour); err != nil || len(got) != 0 {
			t.Fatalf("early deploys before MERGED: %+v %v", got, err)
		}
		mustMove(t, db, "early", state.StatusMerged)
		rec, err := db.RecordedDeploy(bg, "infra/acl", 9)
		if err != nil || len(rec.OperationIDs) != 1 || rec.OperationIDs[0] != "early" {
			t.Fatalf("recorded deploy: %+v %v", rec, err)
		}
		if _, err := db.RecordedDeploy(bg, "infra/acl", 10); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("unknown MR: %v", err)
		}
		got, err := db.EarlyDeploys(bg, time.Hour)
		if err != nil || len(got) != 1 || got[0].MRIID != 9 || got[0].OperationIDs[0] != "early" {
			t.Fatalf("early deploys: %+v %v", got, err)
		}
		replay, err := workflow.RecordDeploy(bg, db, got[0])
		if err != nil || replay.Fresh || len(replay.Validated) != 1 {
			t.Fatalf("replay: %+v %v", replay, err)
		}
		if got, _ := db.EarlyDeploys(bg, time.Hour); len(got) != 0 {
			t.Fatalf("after the replay: %+v", got)
		}
	})
}

// A callback that names only other requests of its MR is not an early deploy of the MERGED one:
// its replay would validate nothing, on every reconciliation run.
func TestAnEarlyDeployNamingOtherRequestsOfItsMRIsNotReplayed(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		for _, id := range []string{"named", "other"} {
			mustApply(t, db, application(id, id, "t1"))
			mustMove(t, db, id, state.StatusApprovalSent, state.StatusMRCreating, state.StatusMRCreated, state.StatusMerging)
			cur, _ := db.Request(bg, id)
			if _, err := db.Transition(bg, cur, store.Change{To: state.StatusMerging, Step: state.StepHandleApproved, MRIID: 9}); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := workflow.RecordDeploy(bg, db, store.Deploy{Project: "infra/acl", MRIID: 9, OperationIDs: []string{"named"}}); err != nil {
			t.Fatal(err)
		}
		mustMove(t, db, "other", state.StatusMerged)
		if got, err := db.EarlyDeploys(bg, time.Hour); err != nil || len(got) != 0 {
			t.Fatalf("early deploys naming only a request still MERGING: %+v %v", got, err)
		}
		mustMove(t, db, "named", state.StatusMerged)
		got, err := db.EarlyDeploys(bg, time.Hour)
		if err != nil || len(got) != 1 || got[0].MRIID != 9 || len(got[0].OperationIDs) != 1 || got[0].OperationIDs[0] != "named" {
			t.Fatalf("early deploys once the named request is MERGED: %+v %v", got, err)
		}
	})
}
