package store_test

import (
	"errors"
	"testing"
	"time"

	"bindery/store"
	"bindery/store/storetest"
)

// silence makes instance id's last heartbeat an hour old: it crashed, or a restored backup names it.
func silence(t *testing.T, db *store.DB, id string) {
	t.Helper()
	if err := db.Heartbeat(bg, id, "test"); err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-time.Hour).UTC().Format("2006-01-02 15:04:05.000")
	if _, err := db.Raw().ExecContext(bg, "UPDATE instance SET heartbeat_at = ? WHERE id = ?", old, id); err != nil {
		t.Fatal(err)
	}
}

// The claims of an instance whose heartbeat stopped are ended at once, not when their two-minute
// lease runs out: the task is due again, a live instance claims it, and the stopped holder —
// should it only have been slow — writes nothing more. The claims of a live instance, of an
// instance with no row (before its first beat) and the caller's own are left alone.
func TestTheClaimsOfAnInstanceWhoseHeartbeatStoppedAreTakenOverAtOnce(t *testing.T) {
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		claim := func(ref, owner string) store.Task {
			t.Helper()
			if err := putTask(t, db, store.TaskSpec{Kind: "request", Ref: ref, Lane: "first", Step: "ticket"}, false); err != nil {
				t.Fatal(err)
			}
			c, err := db.ClaimTask(bg, dueNow(t, db, "first", ref), owner, 2*time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			return c
		}
		silence(t, db, "crashed")
		silence(t, db, "self")
		if err := db.Heartbeat(bg, "alive", "test"); err != nil {
			t.Fatal(err)
		}
		held := claim("op-crashed", "crashed")
		claim("op-alive", "alive")
		claim("op-rowless", "not-yet-beating")
		claim("op-self", "self")

		n, err := db.TakeOverClaims(bg, "self", 15*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if n != 1 {
			t.Fatalf("took over %d claims, want 1 (the crashed instance's)", n)
		}
		due, err := db.DueTasks(bg, "first", 10)
		if err != nil {
			t.Fatal(err)
		}
		if len(due) != 1 || due[0].Ref != "op-crashed" {
			t.Fatalf("due after the take-over: %+v, want op-crashed alone", due)
		}
		if _, err := db.ClaimTask(bg, due[0], "alive", 2*time.Minute); err != nil {
			t.Fatalf("a live instance claims the task taken over: %v", err)
		}
		err = db.InTx(bg, func(tx *store.Tx) error { return tx.AdvanceTask(bg, held, store.TaskNext{In: time.Minute}) })
		if !errors.Is(err, store.ErrPreempted) {
			t.Fatalf("the stopped holder's outcome: %v, want ErrPreempted", err)
		}
		if n, err := db.TakeOverClaims(bg, "self", 15*time.Second); err != nil || n != 0 {
			t.Fatalf("a second take-over ended %d claims (%v), want 0: the new claim is a live instance's", n, err)
		}
	})
}
