package store_test

import (
	"errors"
	"testing"

	"bindery/batch"
	"bindery/internal/vocab/state"
	"bindery/store"
	"bindery/store/storetest"
	"bindery/workflow"
)

// One request from apply to validated through the store API, as the workflow drives it; every
// read the request view needs shows the right thing on the way.
func TestARequestGoesFromApplyToValidatedWithItsTimeline(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		r := mustApply(t, db, application("op-1", "alice@example.com", "payments-db-readonly"))
		if r.Binding.Status != state.StatusApprovalSending || !r.Current() {
			t.Fatalf("after apply: %+v", r)
		}
		r = mustMove(t, db, "op-1", state.StatusApprovalSent, state.StatusMRCreating)
		added, err := db.Admit(bg, store.Admission{OperationID: "op-1", Action: state.ActionAdd, Partition: "infra/acl"})
		if err != nil || !added {
			t.Fatalf("admit: %v %v", added, err)
		}
		d, err := db.RequestDetail(bg, "op-1")
		if err != nil {
			t.Fatal(err)
		}
		if d.Waiting == nil || d.Waiting.Position() != 1 || d.Batch != nil {
			t.Fatalf("waiting: %+v, batch %+v", d.Waiting, d.Batch)
		}

		claimable(t, db) // SQLite's clock has milliseconds: let "created before now" pass
		c, err := batch.Claim(bg, db, store.ClaimInput{Partition: "infra/acl", Project: "infra/acl", Max: 50})
		if err != nil || c.Outcome != state.RoundClaimed || len(c.Members) != 1 {
			t.Fatalf("claim: %+v %v", c, err)
		}
		flipped, err := db.TransitionMembers(bg, c.Batch.ID, store.MemberChange{
			From: []state.BindingStatus{state.StatusMRCreating}, To: state.StatusMRCreated, Step: state.StepCreateSucceeded, MRIID: 7,
		})
		if err != nil || len(flipped) != 1 || flipped[0].MRIID != 7 || flipped[0].BatchID != c.Batch.ID {
			t.Fatalf("hand-off: %+v %v", flipped, err)
		}
		b, err := db.Batch(bg, c.Batch.ID)
		if err != nil {
			t.Fatal(err)
		}
		if b, err = db.UpdateBatch(bg, b, store.BatchChange{MRIID: 7}); err != nil || b.MRIID != 7 {
			t.Fatalf("record MR: %+v %v", b, err)
		}
		settled, err := db.Settle(bg, store.Settlement{BatchID: b.ID, Version: b.Version, Status: state.BatchSucceeded, Members: &store.MemberChange{
			From: []state.BindingStatus{state.StatusMRCreated, state.StatusMerging}, To: state.StatusMerged, Step: state.StepHandleMerged,
		}})
		if err != nil || len(settled.Flipped) != 1 || settled.Removed != 0 {
			t.Fatalf("settle: %+v %v", settled, err)
		}
		dep, err := workflow.RecordDeploy(bg, db, store.Deploy{Project: "infra/acl", MRIID: 7})
		if err != nil || !dep.Fresh || len(dep.Validated) != 1 || dep.Validated[0].OperationID != "op-1" {
			t.Fatalf("deploy: %+v %v", dep, err)
		}
		again, err := workflow.RecordDeploy(bg, db, store.Deploy{Project: "infra/acl", MRIID: 7})
		if err != nil || again.Fresh || len(again.Validated) != 0 {
			t.Fatalf("duplicate deploy callback: %+v %v", again, err)
		}

		d, err = db.RequestDetail(bg, "op-1")
		if err != nil {
			t.Fatal(err)
		}
		if d.Binding == nil || d.Binding.Status != state.StatusValidated || d.Operation.Step != state.StepCalledBack ||
			d.Batch == nil || d.Batch.Status != state.BatchSucceeded || d.Waiting != nil {
			t.Fatalf("detail: %+v", d)
		}
		var steps []state.Step
		for _, s := range d.Steps {
			steps = append(steps, s.Step)
		}
		want := []state.Step{state.StepApprovalSending, state.StepApprovalSent, state.StepQueued, state.StepCreateSucceeded,
			state.StepHandleMerged, state.StepCalledBack}
		if len(steps) != len(want) {
			t.Fatalf("timeline %v, want %v", steps, want)
		}
		for i := range want {
			if steps[i] != want[i] {
				t.Fatalf("timeline %v, want %v", steps, want)
			}
			if i > 0 && d.Steps[i].At.Before(d.Steps[i-1].At) {
				t.Fatalf("timeline goes back in time: %+v", d.Steps)
			}
		}
	})
}

func TestIllegalTransitionIsRefusedAndNothingIsWritten(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		mustApply(t, db, application("op-1", "alice", "t"))
		cur := mustMove(t, db, "op-1", state.StatusApprovalSent)
		_, err := db.Transition(bg, cur, store.Change{To: state.StatusValidated, Step: state.StepCalledBack})
		var illegal *state.ErrIllegalTransition
		if !errors.As(err, &illegal) || illegal.From != state.StatusApprovalSent || illegal.To != state.StatusValidated {
			t.Fatalf("err = %v", err)
		}
		after, _ := db.Request(bg, "op-1")
		if after.Binding.Version != cur.Binding.Version || after.Operation.Version != cur.Operation.Version || after.Binding.Status != state.StatusApprovalSent {
			t.Fatalf("illegal transition wrote something: %+v", after)
		}
		if n := count(t, db, "SELECT COUNT(*) FROM operation_step WHERE operation_id = 'op-1'"); n != 2 {
			t.Fatalf("history has %d rows, want 2", n)
		}
		// Bulk transitions check the same table before any statement.
		if _, err := db.TransitionMany(bg, []string{"op-1"}, store.MemberChange{From: []state.BindingStatus{state.StatusApprovalSent}, To: state.StatusValidated}); !errors.As(err, &illegal) {
			t.Fatalf("bulk: %v", err)
		}
	})
}

func TestListsPageNewestFirstAndByStuckState(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		for _, id := range []string{"a1", "a2", "a3", "a4", "a5"} {
			mustApply(t, db, application(id, "alice", "target-"+id))
		}
		mustApply(t, db, application("b1", "bob", "target-b1"))
		mustMove(t, db, "a2", state.StatusApprovalSent, state.StatusMRCreating, state.StatusCreateFailed)

		var got []string
		cursor := ""
		for {
			page, next, err := db.OperationsBySubject(bg, "alice", store.Page{Cursor: cursor, Limit: 2})
			if err != nil {
				t.Fatal(err)
			}
			for _, o := range page {
				got = append(got, o.OperationID)
			}
			if next == "" {
				break
			}
			cursor = next
		}
		if want := "a5 a4 a3 a2 a1"; join(got) != want {
			t.Fatalf("my requests: %s, want %s", join(got), want)
		}
		if _, _, err := db.OperationsBySubject(bg, "alice", store.Page{Cursor: "!!not-a-cursor"}); !errors.Is(err, store.ErrBadCursor) {
			t.Fatalf("bad cursor: %v", err)
		}

		stuck, _, err := db.StuckOperations(bg, store.StuckFilter{Statuses: []state.BindingStatus{state.StatusCreateFailed}})
		if err != nil || len(stuck) != 1 || stuck[0].OperationID != "a2" {
			t.Fatalf("stuck by status: %+v %v", stuck, err)
		}
		all, next, err := db.StuckOperations(bg, store.StuckFilter{Page: store.Page{Limit: 4}})
		if err != nil || len(all) != 4 || next == "" {
			t.Fatalf("stuck page 1: %d %q %v", len(all), next, err)
		}
		rest, next, err := db.StuckOperations(bg, store.StuckFilter{Page: store.Page{Limit: 4, Cursor: next}})
		if err != nil || len(rest) != 2 || next != "" {
			t.Fatalf("stuck page 2: %d %q %v", len(rest), next, err)
		}
		bySteps, _, err := db.StuckOperations(bg, store.StuckFilter{Step: state.StepCreateFailed})
		if err != nil || len(bySteps) != 1 || bySteps[0].OperationID != "a2" {
			t.Fatalf("stuck by step: %+v %v", bySteps, err)
		}
	})
}

func join(xs []string) string {
	out := ""
	for i, x := range xs {
		if i > 0 {
			out += " "
		}
		out += x
	}
	return out
}

// Every step of a request begins by reading it: the operation and the binding it drives are one
// statement, and an operation a re-application replaced reads as no longer current.
func TestARequestIsReadInOneStatement(t *testing.T) {
	t.Parallel()
	eachCounting(t, func(t *testing.T, db *store.DB, st *statements) {
		mustApply(t, db, application("old", "alice", "t"))
		mustMove(t, db, "old", state.StatusRejected)
		mustApply(t, db, application("new", "alice", "t"))
		for _, c := range []struct {
			id      string
			current bool
		}{{"new", true}, {"old", false}} {
			var r store.Request
			var err error
			n, _, all := st.during(t, func() { r, err = db.Request(bg, c.id) })
			if err != nil || n != 1 {
				t.Fatalf("%s: %d statements %q, %v", c.id, n, all, err)
			}
			if r.Operation.OperationID != c.id || r.Current() != c.current || (c.current && (r.Binding.Status != state.StatusApprovalSending || r.Binding.Version != 3)) {
				t.Fatalf("%s: %+v", c.id, r)
			}
		}
		if _, err := db.Request(bg, "nobody"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("an unknown operation: %v", err)
		}
	})
}
