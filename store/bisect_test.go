package store_test

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"bindery/batch"
	"bindery/internal/vocab/state"
	"bindery/store"
	"bindery/store/storetest"
)

// The store's part of bisection (docs/workflow.md, 'Bisection'): the half a bisected batch returns
// is one suspect group, which the claim takes alone — only its rows, before older and newer waiting
// rows — and the batch that takes it goes on counting the bisection's rounds.

// bisected returns the last n members batch b holds to the waiting set as a bisection does.
func bisected(t *testing.T, db *store.DB, b store.Batch, n int) (store.Batch, []string) {
	t.Helper()
	held, err := db.Holding(bg, b.ID)
	if err != nil {
		t.Fatal(err)
	}
	var back []string
	for _, m := range held[len(held)-n:] {
		back = append(back, m.OperationID)
	}
	b, _, err = db.AdvanceBatch(bg, store.BatchStep{Batch: b, Change: store.BatchChange{Note: "bisect"}, Requeue: back, Bisect: true})
	if err != nil {
		t.Fatalf("bisect batch %d: %v", b.ID, err)
	}
	return b, back
}

// settled ends batch b as SUCCEEDED (its kept half passed).
func settled(t *testing.T, db *store.DB, b store.Batch) {
	t.Helper()
	if _, err := db.Settle(bg, store.Settlement{BatchID: b.ID, Version: b.Version, Status: state.BatchSucceeded}); err != nil {
		t.Fatalf("settle batch %d: %v", b.ID, err)
	}
}

// checkBisectionInvariants re-checks I1 and I2 with SQL where bisection returned rows: unlike
// checkBatchInvariants, a request may be in the history of several batches — one after the
// other, each holding it until its bisection returned it — but of each batch once, and the batch
// holding its row now is the last that claimed it.
func checkBisectionInvariants(t *testing.T, db *store.DB) {
	t.Helper()
	for _, c := range []struct{ what, query string }{
		{"partitions with two active batches (I1)", "SELECT COUNT(*) FROM (SELECT partition_key FROM merge_batch WHERE status IN ('RUNNING', 'BLOCKED') GROUP BY partition_key HAVING COUNT(*) > 1) x"},
		{"requests claimed twice by one batch", "SELECT COUNT(*) FROM (SELECT request_id FROM merge_batch_member GROUP BY request_id, batch_id HAVING COUNT(*) > 1) x"},
		{"requests in two active batches (I2)", "SELECT COUNT(*) FROM (SELECT m.request_id FROM merge_batch_member m JOIN merge_batch b ON b.id = m.batch_id WHERE b.status IN ('RUNNING', 'BLOCKED') GROUP BY m.request_id HAVING COUNT(*) > 1) x"},
		{"claimed rows held by another batch than the last that claimed them", "SELECT COUNT(*) FROM merge_batch_request r WHERE r.batch_id IS NOT NULL AND r.batch_id <> 0 AND r.batch_id <> (SELECT MAX(m.batch_id) FROM merge_batch_member m WHERE m.request_id = r.id)"},
		{"processing rows kept by failed batches", "SELECT COUNT(*) FROM merge_batch_request r JOIN merge_batch b ON b.id = r.batch_id WHERE b.status = 'FAILED'"},
		{"batches without members", "SELECT COUNT(*) FROM merge_batch b WHERE NOT EXISTS (SELECT 1 FROM merge_batch_member m WHERE m.batch_id = b.id)"},
	} {
		if n := count(t, db, c.query); n != 0 {
			t.Errorf("%s: %d", c.what, n)
		}
	}
}

func claimedIDs(c store.BatchClaim) []string {
	var ids []string
	for _, m := range c.Members {
		ids = append(ids, m.OperationID)
	}
	return ids
}

func TestASuspectGroupIsClaimedAloneBeforeEveryOtherWaitingRow(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		const partition = "infra/acl"
		queued(t, db, partition, 8)
		first, err := batch.Claim(bg, db, claimInput(partition, 50))
		if err != nil || len(first.Members) != 8 || first.Batch.Bisections != 0 || first.Batch.BisectOf != 0 {
			t.Fatalf("first claim: %+v %v", first, err)
		}
		// Newcomers, admitted while the first batch runs: none joins a suspect.
		seedQueued(t, db, partition, []string{"new-1", "new-2", "new-3"})

		// Two bisections of the first batch: 4 back (round 1), then 2 of the 4 kept (round 2).
		b, round1 := bisected(t, db, store.Batch{ID: first.Batch.ID, Version: first.Batch.Version, Status: state.BatchRunning}, 4)
		if b.Bisections != 1 {
			t.Fatalf("after one bisection: %+v", b)
		}
		b, round2 := bisected(t, db, b, 2)
		if b.Bisections != 2 || b.BisectOf != 0 || b.BisectionRoot() != b.ID {
			t.Fatalf("after two bisections: %+v", b)
		}
		if c, err := batch.Claim(bg, db, claimInput(partition, 50)); err != nil || c.Outcome != state.RoundSlotOccupied {
			t.Fatalf("claim beside the bisected batch: %+v %v (I1)", c, err)
		}
		settled(t, db, b)

		// A request's place in line is its place in the claims' order.
		for i, id := range slices.Concat(round2, round1, []string{"new-1", "new-2", "new-3"}) {
			w, err := db.Waiting(bg, id)
			if err != nil || w.Position() != i+1 {
				t.Errorf("%s: place %d (%v), want %d", id, w.Position(), err, i+1)
			}
		}

		// Depth first: round 2's group (where a single culprit must be, the half kept with it
		// having passed), then round 1's, each alone, each continuing the count; then the rest.
		for _, want := range []struct {
			ids   []string
			round int
		}{{round2, 2}, {round1, 1}} {
			due, err := db.PartitionDue(bg, partition, 50, time.Hour)
			if err != nil || !due {
				t.Fatalf("suspects waiting, not due: %v %v", due, err)
			}
			c, err := batch.Claim(bg, db, claimInput(partition, 50))
			if err != nil {
				t.Fatal(err)
			}
			if got := claimedIDs(c); !slices.Equal(got, want.ids) {
				t.Fatalf("claimed %v, want the suspect group %v alone", got, want.ids)
			}
			if c.Batch.BisectOf != first.Batch.ID || c.Batch.Bisections != want.round {
				t.Fatalf("claim of round %d's group: %+v", want.round, c.Batch)
			}
			stored, err := db.Batch(bg, c.Batch.ID)
			if err != nil || stored.BisectOf != first.Batch.ID || stored.Bisections != want.round {
				t.Fatalf("stored batch: %+v %v", stored, err)
			}
			settled(t, db, stored)
		}
		if due, err := db.PartitionDue(bg, partition, 50, time.Hour); err != nil || due {
			t.Fatalf("3 newcomers waiting for less than an hour: due %v %v", due, err)
		}
		c, err := batch.Claim(bg, db, claimInput(partition, 50))
		if got := claimedIDs(c); err != nil || !slices.Equal(got, []string{"new-1", "new-2", "new-3"}) || c.Batch.Bisections != 0 || c.Batch.BisectOf != 0 {
			t.Fatalf("after the suspects: %v %+v %v", got, c.Batch, err)
		}
		checkBisectionInvariants(t, db)
	})
}

// A batch claimed from a suspect group that is bisected again returns its half as the next
// round of the same bisection; one member failing alone at the end is named on the batch.
func TestABisectedSuspectBatchCountsTheRoundsOnAndNamesItsCulprit(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		const partition = "infra/acl"
		queued(t, db, partition, 4)
		first, err := batch.Claim(bg, db, claimInput(partition, 50))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := bisected(t, db, store.Batch{ID: first.Batch.ID, Version: first.Batch.Version, Status: state.BatchRunning}, 2)
		settled(t, db, b) // the kept half passed: the culprit is among the two returned
		c, err := batch.Claim(bg, db, claimInput(partition, 50))
		if err != nil || len(c.Members) != 2 {
			t.Fatalf("suspect claim: %+v %v", c, err)
		}
		s, err := db.Batch(bg, c.Batch.ID)
		if err != nil {
			t.Fatal(err)
		}
		s, back := bisected(t, db, s, 1)
		if s.Bisections != 2 || s.BisectionRoot() != first.Batch.ID {
			t.Fatalf("suspect batch bisected: %+v", s)
		}
		culprit := c.Members[0].OperationID
		s, err = db.UpdateBatch(bg, s, store.BatchChange{Culprit: &culprit})
		if err != nil || s.Culprit != culprit {
			t.Fatalf("culprit: %+v %v", s, err)
		}
		if _, err := db.Settle(bg, store.Settlement{BatchID: s.ID, Version: s.Version, Status: state.BatchFailed}); err != nil {
			t.Fatal(err)
		}
		last, err := batch.Claim(bg, db, claimInput(partition, 50))
		if got := claimedIDs(last); err != nil || !slices.Equal(got, back) || last.Batch.Bisections != 2 || last.Batch.BisectOf != first.Batch.ID {
			t.Fatalf("round 2's group: %v %+v %v", got, last.Batch, err)
		}
		checkBisectionInvariants(t, db)
	})
}

// I2 with suspects: claims racing each other and a foreign writer that grabs suspect rows never
// claim a request twice, and no claim ever mixes a suspect with another row.
func TestConcurrentClaimsOfASuspectGroupKeepI2(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		const partition = "infra/acl"
		queued(t, db, partition, 40)
		first, err := batch.Claim(bg, db, claimInput(partition, 40))
		if err != nil {
			t.Fatal(err)
		}
		b, back := bisected(t, db, store.Batch{ID: first.Batch.ID, Version: first.Batch.Version, Status: state.BatchRunning}, 20)
		settled(t, db, b)
		var fresh []string
		for i := range 30 {
			fresh = append(fresh, fmt.Sprintf("new-%02d", i))
		}
		seedQueued(t, db, partition, fresh)
		suspect := map[string]bool{}
		for _, id := range back {
			suspect[id] = true
		}

		var wg sync.WaitGroup
		var mu sync.Mutex
		var claims [][]string
		for range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range 20 {
					c, err := batch.Claim(bg, db, claimInput(partition, 7))
					if errors.Is(err, store.ErrPreempted) || errors.Is(err, store.ErrRetry) {
						continue // rolled back whole
					}
					if err != nil {
						t.Errorf("claim: %v", err)
						return
					}
					if c.Outcome != state.RoundClaimed {
						continue
					}
					mu.Lock()
					claims = append(claims, claimedIDs(c))
					mu.Unlock()
					// A settlement that lost a deadlock to a claim was rolled back whole; the
					// engine tries the step again, and so does this.
					settle := store.Settlement{BatchID: c.Batch.ID, Version: c.Batch.Version, Status: state.BatchSucceeded}
					_, err = db.Settle(bg, settle)
					for tries := 1; errors.Is(err, store.ErrRetry) && tries < 10; tries++ {
						_, err = db.Settle(bg, settle)
					}
					if err != nil {
						t.Errorf("settle: %v", err)
					}
				}
			}()
		}
		wg.Add(1)
		go func() { // the foreign writer: takes suspect rows, one at a time
			defer wg.Done()
			for _, id := range back[:10] {
				_, err := db.Raw().ExecContext(bg, "UPDATE merge_batch_request SET batch_id = 0 WHERE operation_id = ? AND batch_id IS NULL", id)
				if err != nil && !errors.Is(store.Translate(err), store.ErrRetry) {
					t.Errorf("foreign write: %v", err)
					return
				}
			}
		}()
		wg.Wait()
		checkBisectionInvariants(t, db)
		if n := count(t, db, "SELECT COUNT(*) FROM merge_batch_member m JOIN merge_batch_request r ON r.id = m.request_id WHERE r.batch_id = 0 AND m.batch_id <> ?", first.Batch.ID); n != 0 {
			t.Fatalf("%d rows taken by the foreign writer are in a later batch's history", n)
		}
		for { // what the racing rounds left
			c, err := batch.Claim(bg, db, claimInput(partition, 7))
			if err != nil {
				t.Fatal(err)
			}
			if c.Outcome != state.RoundClaimed {
				break
			}
			claims = append(claims, claimedIDs(c))
			settled(t, db, c.Batch)
		}
		for _, c := range claims {
			n := 0
			for _, id := range c {
				if suspect[id] {
					n++
				}
			}
			if n != 0 && n != len(c) {
				t.Errorf("a claim mixed suspects with other rows: %v", c)
			}
		}
	})
}

// I2, the interleaving pinned on MySQL: a suspect row the claim read is taken before its guarded
// update → the round rolls back whole; the next round takes the rest of the group, still alone.
func TestASuspectClaimWhoseRowWasTakenAfterItsReadRollsBack(t *testing.T) {
	t.Parallel()
	db := storetest.MySQL(t)
	const partition = "infra/acl"
	queued(t, db, partition, 6)
	first, err := batch.Claim(bg, db, claimInput(partition, 50))
	if err != nil {
		t.Fatal(err)
	}
	b, back := bisected(t, db, store.Batch{ID: first.Batch.ID, Version: first.Batch.Version, Status: state.BatchRunning}, 3)
	settled(t, db, b)
	seedQueued(t, db, partition, []string{"new-1"})
	store.SetPause(db, func(point string) {
		if point == "claim.read" {
			if _, err := db.Raw().ExecContext(bg, "UPDATE merge_batch_request SET batch_id = 0 WHERE operation_id = ?", back[1]); err != nil {
				t.Errorf("foreign write: %v", err)
			}
		}
	})
	if _, err := batch.Claim(bg, db, claimInput(partition, 50)); !errors.Is(err, store.ErrPreempted) {
		t.Fatalf("claim after a foreign write: %v, want ErrPreempted", err)
	}
	store.SetPause(db, nil)
	if n := count(t, db, "SELECT COUNT(*) FROM merge_batch WHERE bisect_of IS NOT NULL"); n != 0 {
		t.Fatalf("%d batches left by a rolled-back claim", n)
	}
	c, err := batch.Claim(bg, db, claimInput(partition, 50))
	if got := claimedIDs(c); err != nil || !slices.Equal(got, []string{back[0], back[2]}) || c.Batch.BisectOf != first.Batch.ID {
		t.Fatalf("next round: %v %+v %v", got, c.Batch, err)
	}
	checkBisectionInvariants(t, db)
}

// The batch list tells the members a bisection sent away from the members that ended with the
// batch: back in the waiting set (0) until a later batch claims them, then that batch.
func TestTheBatchListNamesWhereABisectedBatchsMembersWent(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		const partition = "infra/acl"
		queued(t, db, partition, 4)
		first, err := batch.Claim(bg, db, claimInput(partition, 50))
		if err != nil {
			t.Fatal(err)
		}
		b, back := bisected(t, db, store.Batch{ID: first.Batch.ID, Version: first.Batch.Version, Status: state.BatchRunning}, 2)
		moved := func() map[string]int64 {
			t.Helper()
			page, _, err := db.Batches(bg, store.BatchFilter{Partition: partition})
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range page {
				if p.Batch.ID == first.Batch.ID {
					if len(p.Members) != 4 {
						t.Fatalf("batch %d lists %d members, want its 4", p.Batch.ID, len(p.Members))
					}
					return p.Moved
				}
			}
			t.Fatalf("batch %d not listed", first.Batch.ID)
			return nil
		}
		if got, want := moved(), map[string]int64{back[0]: 0, back[1]: 0}; !maps.Equal(got, want) {
			t.Errorf("after the bisection: moved %v, want %v (back in the waiting set)", got, want)
		}
		settled(t, db, b)
		c, err := batch.Claim(bg, db, claimInput(partition, 50))
		if err != nil || len(c.Members) != 2 {
			t.Fatalf("suspect claim: %+v %v", c, err)
		}
		if got, want := moved(), map[string]int64{back[0]: c.Batch.ID, back[1]: c.Batch.ID}; !maps.Equal(got, want) {
			t.Errorf("after the suspects' claim: moved %v, want %v", got, want)
		}
	})
}
