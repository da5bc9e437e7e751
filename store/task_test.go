package store_test

import (
	"errors"
	"sync"
	"testing"
	"time"

	"bindery/batch"
	"bindery/internal/testkit"
	"bindery/internal/vocab/state"
	"bindery/store"
	"bindery/store/storetest"
)

// putTask writes a task as an outside writer does, failing the test on an error.
func putTask(t *testing.T, db *store.DB, s store.TaskSpec, unlessClaimed bool) error {
	t.Helper()
	return db.InTx(bg, func(tx *store.Tx) error { return tx.PutTask(bg, s, unlessClaimed) })
}

// dueNow waits until the task of ref is due by the database clock and returns it as the
// dispatcher reads it.
func dueNow(t *testing.T, db *store.DB, lane, ref string) store.Task {
	t.Helper()
	var got store.Task
	testkit.Eventually(t, "task "+ref+" to be due", func() bool {
		due, err := db.DueTasks(bg, lane, 100)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range due {
			if d.Ref == ref {
				got = d
				return true
			}
		}
		return false
	})
	return got
}

// A claim is a compare-and-set on the epoch: of many claimers of one due task — goroutines of one
// instance under one owner name included — exactly one wins, and only the winner's epoch can
// renew, advance or finish it. A holder whose task was rescheduled from outside writes nothing.
func TestAClaimIsFencedByItsEpochNotByItsOwnersName(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		if err := putTask(t, db, store.TaskSpec{Kind: "request", Ref: "op-1", Lane: "first", Step: "ticket"}, false); err != nil {
			t.Fatal(err)
		}
		due := dueNow(t, db, "first", "op-1")

		var mu sync.Mutex
		var winners []store.Task
		var wg sync.WaitGroup
		for range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				c, err := db.ClaimTask(bg, due, "same-instance", time.Minute)
				switch {
				case err == nil:
					mu.Lock()
					winners = append(winners, c)
					mu.Unlock()
				case !errors.Is(err, store.ErrPreempted) && !errors.Is(err, store.ErrRetry):
					t.Error(err)
				}
			}()
		}
		wg.Wait()
		if len(winners) != 1 {
			t.Fatalf("%d claims won, want 1", len(winners))
		}
		held := winners[0]
		if held.Epoch != due.Epoch+1 {
			t.Fatalf("claimed epoch %d, read %d", held.Epoch, due.Epoch)
		}
		// A claimed task is not due (its due time is the claim's expiry), so no dispatcher sees it.
		if again, _ := db.DueTasks(bg, "first", 10); len(again) != 0 {
			t.Fatalf("a claimed task is listed as due: %+v", again)
		}
		stale := due
		stale.Epoch = held.Epoch - 1 // the name is the same; only the epoch tells them apart
		stale.Owner = held.Owner
		if err := db.RenewTask(bg, stale, time.Minute); !errors.Is(err, store.ErrPreempted) {
			t.Fatalf("renew with a stale epoch: %v", err)
		}
		if err := db.InTx(bg, func(tx *store.Tx) error { return tx.FinishTask(bg, stale) }); !errors.Is(err, store.ErrPreempted) {
			t.Fatalf("finish with a stale epoch: %v", err)
		}
		if err := db.RenewTask(bg, held, time.Minute); err != nil {
			t.Fatalf("the holder's renewal: %v", err)
		}

		// An operator's reschedule does not interrupt a live claim …
		err := putTask(t, db, store.TaskSpec{Kind: "request", Ref: "op-1", Lane: "first", Step: "ticket"}, true)
		if !errors.Is(err, store.ErrTaskBusy) {
			t.Fatalf("reschedule of a claimed task: %v", err)
		}
		// … but a decision that replaces the work fences the holder out: its outcome is refused.
		if err := putTask(t, db, store.TaskSpec{Kind: "request", Ref: "op-1", Lane: "background", Step: "merge"}, false); err != nil {
			t.Fatal(err)
		}
		err = db.InTx(bg, func(tx *store.Tx) error { return tx.AdvanceTask(bg, held, store.TaskNext{Step: "done", In: time.Hour}) })
		if !errors.Is(err, store.ErrPreempted) {
			t.Fatalf("the fenced-out holder's outcome: %v", err)
		}
		got, err := db.Task(bg, "request", "op-1")
		if err != nil || got.Step != "merge" || got.Owner != "" || got.Epoch != held.Epoch+1 {
			t.Fatalf("after the reschedule: %+v %v", got, err)
		}
	})
}

// A claim's due time is its expiry: when the holder dies the task falls due again by itself and
// another instance claims it; the dead holder's late outcome is refused.
func TestAnExpiredClaimFallsDueAndTheOldHolderIsFencedOut(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		if err := putTask(t, db, store.TaskSpec{Kind: "batch", Ref: "7", Lane: "background", Step: "pipeline", Wait: true}, false); err != nil {
			t.Fatal(err)
		}
		first, err := db.ClaimTask(bg, dueNow(t, db, "background", "7"), "instance-a", 20*time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		second, err := db.ClaimTask(bg, dueNow(t, db, "background", "7"), "instance-b", time.Minute)
		if err != nil {
			t.Fatalf("claim of an expired claim: %v", err)
		}
		if second.Owner != "instance-b" || second.Epoch != first.Epoch+1 {
			t.Fatalf("second claim: %+v", second)
		}
		err = db.InTx(bg, func(tx *store.Tx) error { return tx.AdvanceTask(bg, first, store.TaskNext{In: time.Hour}) })
		if !errors.Is(err, store.ErrPreempted) {
			t.Fatalf("the dead holder's outcome: %v", err)
		}
		if err := db.InTx(bg, func(tx *store.Tx) error { return tx.FinishTask(bg, second) }); err != nil {
			t.Fatal(err)
		}
		if _, err := db.Task(bg, "batch", "7"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("finished task: %v", err)
		}
	})
}

// The staged polling schedule is data: the wait's start and its checks are kept across outcomes,
// and the elapsed wait is measured on the database clock.
func TestAWaitIsKeptAcrossChecksOnTheDatabaseClock(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		if err := putTask(t, db, store.TaskSpec{Kind: "batch", Ref: "1", Lane: "background", Step: "pipeline", Wait: true}, false); err != nil {
			t.Fatal(err)
		}
		for check := 1; check <= 3; check++ {
			c, err := db.ClaimTask(bg, dueNow(t, db, "background", "1"), "i", time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			if c.Checks != check-1 || c.WaitSince == nil {
				t.Fatalf("check %d: %+v", check, c)
			}
			err = db.InTx(bg, func(tx *store.Tx) error {
				return tx.AdvanceTask(bg, c, store.TaskNext{In: time.Millisecond, Wait: store.WaitKeep, Checks: c.Checks + 1})
			})
			if err != nil {
				t.Fatal(err)
			}
		}
		got := dueNow(t, db, "background", "1")
		if got.Checks != 3 || got.Waited < 2*time.Millisecond || got.Waited > time.Minute {
			t.Fatalf("after three checks: checks %d, waited %s", got.Checks, got.Waited)
		}
		// A new step without a wait clears it.
		c, err := db.ClaimTask(bg, got, "i", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if err := db.InTx(bg, func(tx *store.Tx) error { return tx.AdvanceTask(bg, c, store.TaskNext{Step: "approve"}) }); err != nil {
			t.Fatal(err)
		}
		if got := dueNow(t, db, "background", "1"); got.Checks != 0 || got.WaitSince != nil || got.Waited != 0 || got.Step != "approve" {
			t.Fatalf("after the wait: %+v", got)
		}
	})
}

// A wake narrowed to some steps (news only they wait for) leaves the task alone at any other
// step: not due sooner, and no wake its holder's outcome would turn into a look now.
func TestAWakeForOtherStepsLeavesATaskAlone(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		if err := putTask(t, db, store.TaskSpec{Kind: "request", Ref: "op-1", Lane: "background", Step: "ticket_poll", In: time.Hour, Wait: true}, false); err != nil {
			t.Fatal(err)
		}
		before, err := db.Task(bg, "request", "op-1")
		if err != nil {
			t.Fatal(err)
		}
		if n, err := db.WakeTasks(bg, []store.TaskRef{{Kind: "request", Ref: "op-1", Steps: []string{"create_pipeline", "merge_pipeline"}}}); err != nil || n != 0 {
			t.Fatalf("wake for other steps: %d %v", n, err)
		}
		after, err := db.Task(bg, "request", "op-1")
		if err != nil || !after.DueAt.Equal(before.DueAt) || after.Wakes != before.Wakes {
			t.Fatalf("after a wake for other steps: %+v %v (before %+v)", after, err, before)
		}
		if n, err := db.WakeTasks(bg, []store.TaskRef{{Kind: "request", Ref: "op-1", Steps: []string{"create_pipeline", "ticket_poll"}}}); err != nil || n != 1 {
			t.Fatalf("wake for its step: %d %v", n, err)
		}
		dueNow(t, db, "background", "op-1")
	})
}

// A wake makes waiting work due now; a wake during a claim makes the holder's next look now,
// whatever the holder asked for, so a webhook that arrives mid-check is never lost. Work that is
// not waiting for news (a BLOCKED window) is not brought forward.
func TestAWakeDuringAClaimIsNotLost(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		for _, ref := range []string{"1", "2"} {
			if err := putTask(t, db, store.TaskSpec{Kind: "batch", Ref: ref, Lane: "background", Step: "pipeline", In: time.Hour, Wait: true}, false); err != nil {
				t.Fatal(err)
			}
		}
		if err := putTask(t, db, store.TaskSpec{Kind: "batch", Ref: "3", Lane: "background", Step: "blocked", In: time.Hour}, false); err != nil {
			t.Fatal(err)
		}
		if n, err := db.WakeTasks(bg, []store.TaskRef{{Kind: "batch", Ref: "1"}, {Kind: "batch", Ref: "3"}}); err != nil || n != 2 {
			t.Fatalf("wake: %d %v", n, err)
		}
		c, err := db.ClaimTask(bg, dueNow(t, db, "background", "1"), "i", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if n, err := db.WakeTasks(bg, []store.TaskRef{{Kind: "batch", Ref: "1"}, {Kind: "batch", Ref: "9"}}); err != nil || n != 1 {
			t.Fatalf("wake during the claim: %d %v", n, err)
		}
		if due, _ := db.DueTasks(bg, "background", 10); len(due) != 0 {
			t.Fatalf("the wake broke the claim: %+v", due)
		}
		if err := db.InTx(bg, func(tx *store.Tx) error {
			return tx.AdvanceTask(bg, c, store.TaskNext{In: time.Hour, Wait: store.WaitKeep, Checks: c.Checks + 1})
		}); err != nil {
			t.Fatal(err)
		}
		dueNow(t, db, "background", "1") // due now, not in an hour
		if due, _ := db.DueTasks(bg, "background", 10); len(due) != 1 {
			t.Fatalf("tasks 2 and 3 are not due (never woken; not waiting): %+v", due)
		}
		if n, err := db.QueuedAhead(bg, "background", time.Now().Add(time.Hour)); err != nil || n != 1 {
			t.Fatalf("queued: %d %v", n, err)
		}
	})
}

// claimedMerges puts a merge task per ref and claims each.
func claimedMerges(t *testing.T, db *store.DB, refs ...string) []store.Task {
	t.Helper()
	var held []store.Task
	for _, ref := range refs {
		if err := putTask(t, db, store.TaskSpec{Kind: "request", Ref: ref, Lane: "background", Step: "merge"}, false); err != nil {
			t.Fatal(err)
		}
		c, err := db.ClaimTask(bg, dueNow(t, db, "background", ref), "i", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, c)
	}
	return held
}

// A slot is held by one task at a time (one legacy merge per project): a second task is refused
// until the first is finished, and then — waiting for the slot — it is due at once.
func TestASlotIsHeldByOneTaskAtATime(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		held := claimedMerges(t, db, "a", "b")
		if ok, err := db.TakeSlot(bg, held[0], "merge:p"); !ok || err != nil {
			t.Fatalf("first: %t %v", ok, err)
		}
		if ok, err := db.TakeSlot(bg, held[1], "merge:p"); ok || err != nil {
			t.Fatalf("second while the first holds it: %t %v", ok, err)
		}
		// The second waits for the slot (an hour at most); the first's end hands it on at once.
		if err := db.InTx(bg, func(tx *store.Tx) error {
			return tx.AdvanceTask(bg, held[1], store.TaskNext{In: time.Hour, WaitsFor: "merge:p"})
		}); err != nil {
			t.Fatal(err)
		}
		held[0].Slot = "merge:p"
		if err := db.InTx(bg, func(tx *store.Tx) error { return tx.FinishTask(bg, held[0]) }); err != nil {
			t.Fatal(err)
		}
		next, err := db.ClaimTask(bg, dueNow(t, db, "background", "b"), "i", time.Minute)
		if err != nil {
			t.Fatalf("the waiter was not made due: %v", err)
		}
		if ok, err := db.TakeSlot(bg, next, "merge:p"); !ok || err != nil {
			t.Fatalf("second after the first finished: %t %v", ok, err)
		}
	})
}

// Orphans finds in-flight work without a task: an approval ticket to send or to read while its
// decision is awaited, a legacy merge, an active batch. A request in the waiting set or a batch
// is none.
func TestOrphansAreInFlightWorkWithoutATask(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		mustApply(t, db, application("sending", "s1", "t"))
		withTask := application("tasked", "s2", "t")
		withTask.Task = &store.TaskSpec{Kind: state.TaskRequest, Lane: "first", Step: "ticket"}
		mustApply(t, db, withTask)
		mustApply(t, db, application("sent", "s3", "t"))
		mustMove(t, db, "sent", state.StatusApprovalSent)
		legacy := application("legacy", "s4", "t")
		legacy.Flow, legacy.Status, legacy.Step = state.FlowLegacy, state.StatusMRCreating, state.StepCreateStarted
		mustApply(t, db, legacy)
		seedRequests(t, db, "p", []string{"merging"}, state.StatusMerging, state.StepHandleStarted, 3) // approval-first: the batch's
		c, err := batch.Claim(bg, db, store.ClaimInput{Partition: "p", Project: "p", Max: 5})
		if err != nil || c.Outcome != state.RoundNothingWaiting {
			t.Fatalf("claim: %+v %v", c, err)
		}
		queued(t, db, "p", 1)
		c, err = batch.Claim(bg, db, store.ClaimInput{Partition: "p", Project: "p", Max: 5})
		if err != nil || c.Outcome != state.RoundClaimed {
			t.Fatalf("claim: %+v %v", c, err)
		}

		ops, batches, err := db.Orphans(bg, 10)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, o := range ops {
			got = append(got, o.OperationID)
		}
		if len(got) != 3 || got[0] != "sending" || got[1] != "sent" || got[2] != "legacy" || len(batches) != 1 || batches[0].ID != c.Batch.ID {
			t.Fatalf("orphans: %v, batches %+v", got, batches)
		}
	})
}

// A slot given up without the task ending (a legacy merge that waits for a person) passes on like
// an end: the waiter is due at once. And a task that begins to wait for a slot its holder gave up
// a moment before (between the failed take and the wait) is due at once too, not at its safety net.
func TestASlotGivenUpPassesOnAndALateWaiterIsNotStranded(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		held := claimedMerges(t, db, "a", "b", "c")
		if ok, err := db.TakeSlot(bg, held[0], "merge:p"); !ok || err != nil {
			t.Fatalf("first: %t %v", ok, err)
		}
		held[0].Slot = "merge:p"
		advance := func(task store.Task, n store.TaskNext) {
			t.Helper()
			if err := db.InTx(bg, func(tx *store.Tx) error { return tx.AdvanceTask(bg, task, n) }); err != nil {
				t.Fatal(err)
			}
		}
		advance(held[1], store.TaskNext{In: time.Hour, WaitsFor: "merge:p"}) // b waits
		// c's take fails now; a gives the slot up (and goes on waiting for a person) before c's wait.
		if ok, err := db.TakeSlot(bg, held[2], "merge:p"); ok || err != nil {
			t.Fatalf("third while the first holds it: %t %v", ok, err)
		}
		none := ""
		advance(held[0], store.TaskNext{In: time.Hour, Slot: &none})
		advance(held[2], store.TaskNext{In: time.Hour, WaitsFor: "merge:p"})
		for _, ref := range []string{"b", "c"} {
			if _, err := db.ClaimTask(bg, dueNow(t, db, "background", ref), "i", time.Minute); err != nil {
				t.Fatalf("%s is not due at once: %v", ref, err)
			}
		}
	})
}
