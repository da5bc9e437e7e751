package store_test

import (
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"bindery/batch"
	"bindery/internal/vocab/state"
	"bindery/store"
	"bindery/store/storetest"
)

// What the operators' train actions and views read and write: a request sent into the next car
// is first in line wherever its place is read, the queue lists it first, and a pause keeps its
// whole reason.

func sendNext(t *testing.T, db *store.DB, op, by string) bool {
	t.Helper()
	var sent bool
	if err := db.InTx(bg, func(tx *store.Tx) error {
		var err error
		sent, err = tx.SendNext(bg, op, by)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return sent
}

// A request an operator sent into the next car has nobody ahead of it (but the ones sent before
// it), and everyone else has it ahead: the status read and the waiting reader agree, the queue
// lists it first and the next claim takes it first.
func TestARequestSentNextIsFirstInLineEverywhere(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		ids := queued(t, db, "team/a", 5)
		queued(t, db, "team/b", 1)
		if !sendNext(t, db, ids[3], "ops@example.com") {
			t.Fatal("a waiting request was not sent next")
		}
		for i, want := range map[int]int{3: 0, 0: 1, 1: 2, 4: 4} {
			d, err := db.RequestDetail(bg, ids[i])
			if err != nil || d.Waiting == nil || d.Waiting.Ahead != want {
				t.Fatalf("%s: waiting %+v %v; want %d ahead", ids[i], d.Waiting, err, want)
			}
			w, err := db.Waiting(bg, ids[i])
			if err != nil || w.Ahead != want || w.NextBy != d.Waiting.NextBy {
				t.Fatalf("%s: the waiting reader says %+v %v; the status read %+v", ids[i], w, err, d.Waiting)
			}
			if (i == 3) != (d.Waiting.NextBy == "ops@example.com") {
				t.Fatalf("%s: sent next by %q", ids[i], d.Waiting.NextBy)
			}
		}
		q, err := db.WaitingQueue(bg, "team/a", 3)
		if err != nil || len(q) != 3 || q[0].Operation.OperationID != ids[3] || q[0].NextBy != "ops@example.com" || q[1].Operation.OperationID != ids[0] || q[2].NextBy != "" {
			t.Fatalf("queue: %+v %v", q, err)
		}
		counts, err := db.WaitingCounts(bg)
		if err != nil || counts["team/a"] != (store.WaitingCount{Waiting: 5, Next: 1}) || counts["team/b"] != (store.WaitingCount{Waiting: 1}) {
			t.Fatalf("counts: %+v %v", counts, err)
		}
		c, err := batch.Claim(bg, db, claimInput("team/a", 2))
		if err != nil || len(c.Members) != 2 || c.Members[0].OperationID != ids[3] || c.Members[1].OperationID != ids[0] {
			t.Fatalf("claim: %+v %v", c, err)
		}
		members, err := db.CarMembers(bg, []int64{c.Batch.ID, c.Batch.ID + 1000})
		if err != nil || len(members) != 1 || len(members[c.Batch.ID]) != 2 || members[c.Batch.ID][0].Status != state.StatusMRCreating {
			t.Fatalf("members: %+v %v", members, err)
		}
		if sendNext(t, db, ids[3], "ops@example.com") {
			t.Fatal("a claimed request was sent next")
		}
		if n := count(t, db, "SELECT COUNT(*) FROM merge_batch_request WHERE next_by IS NOT NULL"); n != 0 {
			t.Fatalf("%d rows still marked next after the claim", n)
		}
	})
}

// A pause's reason is kept whole up to 512 characters, in any script (the column counts
// characters; a cut by bytes would halve a reason written in Chinese).
func TestAPauseKeepsItsWholeReason(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		reason := strings.Repeat("审", 512)
		if err := db.InTx(bg, func(tx *store.Tx) error {
			_, err := tx.PauseTrain(bg, "team/a", "ops@example.com", reason+"extra")
			return err
		}); err != nil {
			t.Fatal(err)
		}
		p, ok, err := db.Paused(bg, "team/a")
		if err != nil || !ok || p.Reason != reason || utf8.RuneCountInString(p.Reason) != 512 {
			t.Fatalf("pause: %d characters, %v %v", utf8.RuneCountInString(p.Reason), ok, err)
		}
	})
}

// A project is known once bindery queued, batched or paused anything of it.
func TestAPartitionIsKnownByWhatBinderyDidWithIt(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		known := func(p string) bool {
			t.Helper()
			ok, err := db.PartitionKnown(bg, p)
			if err != nil {
				t.Fatal(err)
			}
			return ok
		}
		if known("team/a") {
			t.Fatal("an unknown project is known")
		}
		queued(t, db, "team/a", 1)
		if err := db.InTx(bg, func(tx *store.Tx) error {
			_, err := tx.PauseTrain(bg, "team/p", "ops@example.com", "freeze")
			return err
		}); err != nil {
			t.Fatal(err)
		}
		if !known("team/a") || !known("team/p") || known("team/b") {
			t.Fatalf("known: a %v, p %v, b %v", known("team/a"), known("team/p"), known("team/b"))
		}
	})
}

// Sent next, a newcomer goes before the suspect groups of a bisection too; both readers of a
// place agree with the claims' order.
func TestARequestSentNextGoesBeforeTheSuspectsOfABisection(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		const partition = "infra/acl"
		queued(t, db, partition, 8)
		first, err := batch.Claim(bg, db, claimInput(partition, 50))
		if err != nil || len(first.Members) != 8 {
			t.Fatalf("first claim: %+v %v", first, err)
		}
		seedQueued(t, db, partition, []string{"new-1", "new-2", "new-3"})
		b, round1 := bisected(t, db, store.Batch{ID: first.Batch.ID, Version: first.Batch.Version, Status: state.BatchRunning}, 4)
		b, round2 := bisected(t, db, b, 2)
		settled(t, db, b)
		if !sendNext(t, db, "new-3", "ops@example.com") {
			t.Fatal("new-3 was not sent next")
		}
		for i, id := range slices.Concat([]string{"new-3"}, round2, round1, []string{"new-1", "new-2"}) {
			w, err := db.Waiting(bg, id)
			d, derr := db.RequestDetail(bg, id)
			if err != nil || derr != nil || d.Waiting == nil || w.Position() != i+1 || d.Waiting.Position() != i+1 {
				t.Errorf("%s: place %d (%v), status read %+v (%v), want %d", id, w.Position(), err, d.Waiting, derr, i+1)
			}
		}
		c, err := batch.Claim(bg, db, claimInput(partition, 50))
		if err != nil || len(c.Members) == 0 || c.Members[0].OperationID != "new-3" {
			t.Fatalf("the next claim: %+v %v", c, err)
		}
	})
}
