package store_test

import (
	"testing"
	"time"

	"bindery/internal/vocab/state"
	"bindery/store"
	"bindery/store/storetest"
)

// A request's time per stage is summed on its row as it moves, and a bulk transition returns
// it: every step of a stage counts for it (approval: sending, then sent), a stage entered again
// adds up (the batch wait: queued, batched, queued again), and the current step's stage counts
// up to the flip.
func TestABulkTransitionReturnsTheTimeSpentInEachStage(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		mustApply(t, db, application("s1", "alice", "t1"))
		// Each hop: the request spent `spent` at its current step before moving on.
		for _, hop := range []struct {
			spent time.Duration
			to    state.BindingStatus
			step  state.Step
		}{
			{time.Hour, state.StatusApprovalSent, state.StepApprovalSent},       // approval 1h
			{2 * time.Hour, state.StatusMRCreating, state.StepQueued},           // approval 3h
			{10 * time.Minute, state.StatusMRCreating, state.StepBatched},       // batch 10m
			{20 * time.Minute, state.StatusMRCreating, state.StepQueued},        // ci 20m
			{5 * time.Minute, state.StatusMRCreating, state.StepBatched},        // batch 15m
			{7 * time.Minute, state.StatusMRCreated, state.StepCreateSucceeded}, // ci 27m
			{time.Minute, state.StatusMerging, state.StepHandleStarted},         // nothing: an instant
			{4 * time.Minute, state.StatusMerged, state.StepHandleMerged},       // merge 4m
		} {
			backdate(t, db, "s1", hop.spent)
			cur, err := db.Request(bg, "s1")
			if err != nil {
				t.Fatal(err)
			}
			if _, err := db.Transition(bg, cur, store.Change{To: hop.to, Step: hop.step}); err != nil {
				t.Fatalf("→ %s/%s: %v", hop.to, hop.step, err)
			}
		}
		backdate(t, db, "s1", 30*time.Minute) // deploy 30m, counted by the flip itself
		flipped, err := markValidated(db, "", "s1")
		if err != nil || len(flipped) != 1 {
			t.Fatalf("validate: %+v %v", flipped, err)
		}
		want := []store.StageTime{{Stage: "approval", Spent: 3 * time.Hour}, {Stage: "batch", Spent: 15 * time.Minute},
			{Stage: "ci", Spent: 27 * time.Minute}, {Stage: "merge", Spent: 4 * time.Minute}, {Stage: "deploy", Spent: 30 * time.Minute}}
		got := flipped[0].Stages
		if len(got) != len(want) {
			t.Fatalf("stages %+v, want %+v", got, want)
		}
		for i, w := range want {
			// Each hop's statements read the clock a little after the backdating; SQLite's
			// julianday arithmetic is exact to some microseconds.
			if got[i].Stage != w.Stage || got[i].Spent < w.Spent-time.Millisecond || got[i].Spent > w.Spent+2*time.Second {
				t.Errorf("stage %d: %+v, want %+v", i, got[i], w)
			}
		}
	})
}

// backdate puts the operation's last step `ago` before the database clock, as if it had waited
// there that long.
func backdate(t *testing.T, db *store.DB, opID string, ago time.Duration) {
	t.Helper()
	now, err := db.Now(bg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Raw().ExecContext(bg, "UPDATE operation SET updated_at = ? WHERE operation_id = ?",
		now.Add(-ago).UTC().Format("2006-01-02 15:04:05.000000"), opID); err != nil {
		t.Fatal(err)
	}
}

// How long approvals of a target took is read from the requests of that target that left the
// approval stage (approved or rejected), newest first and at most n of them: a request still
// waiting for its approval and another target's requests are not counted.
func TestApprovalDurationsAreTheTargetsDecidedApprovals(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		decide := func(opID, target string, took time.Duration, to state.BindingStatus, step state.Step) {
			t.Helper()
			mustApply(t, db, application(opID, "u-"+opID, target))
			backdate(t, db, opID, took)
			cur, err := db.Request(bg, opID)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := db.Transition(bg, cur, store.Change{To: to, Step: step}); err != nil {
				t.Fatalf("%s → %s: %v", opID, to, err)
			}
		}
		decide("a1", "t1", time.Hour, state.StatusMRCreating, state.StepQueued)
		decide("a2", "t1", 3*time.Hour, state.StatusRejected, state.StepApprovalRejected)
		decide("a3", "t1", 2*time.Hour, state.StatusMRCreating, state.StepQueued)
		decide("b1", "t2", 9*time.Hour, state.StatusMRCreating, state.StepQueued)
		mustApply(t, db, application("a4", "u-a4", "t1")) // still waiting for its approval
		backdate(t, db, "a4", 5*time.Hour)

		got, err := db.ApprovalDurations(bg, "t1", 10)
		if err != nil {
			t.Fatal(err)
		}
		// Newest request first: a3, a2, a1 (their created_at is their order of application).
		want := []time.Duration{2 * time.Hour, 3 * time.Hour, time.Hour}
		if len(got) != len(want) {
			t.Fatalf("durations %v, want about %v", got, want)
		}
		for i, w := range want {
			if got[i] < w-time.Millisecond || got[i] > w+2*time.Second {
				t.Errorf("duration %d: %v, want about %v", i, got[i], w)
			}
		}
		if got, err := db.ApprovalDurations(bg, "t1", 2); err != nil || len(got) != 2 {
			t.Errorf("limit 2: %v %v", got, err)
		}
		if got, err := db.ApprovalDurations(bg, "t9", 10); err != nil || len(got) != 0 {
			t.Errorf("a target without requests: %v %v", got, err)
		}
	})
}
