package store_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"

	"bindery/batch"
	"bindery/internal/vocab/state"
	"bindery/store"
	"bindery/store/storetest"
)

// checkTrainShape re-checks the merge train's shape with SQL: at most k active cars per partition
// in its train and beside more beside it, every car's place in its train unique, and the active
// cars' slots unique.
func checkTrainShape(t *testing.T, db *store.DB, k, beside int) {
	t.Helper()
	for _, c := range []struct{ what, query string }{
		{fmt.Sprintf("partitions with more than %d active cars in the train", k), fmt.Sprintf("SELECT COUNT(*) FROM (SELECT partition_key FROM merge_batch WHERE status IN ('RUNNING', 'BLOCKED') AND slot_no >= 0 GROUP BY partition_key HAVING COUNT(*) > %d) x", k)},
		{fmt.Sprintf("partitions with more than %d active cars beside the train", beside), fmt.Sprintf("SELECT COUNT(*) FROM (SELECT partition_key FROM merge_batch WHERE status IN ('RUNNING', 'BLOCKED') AND slot_no < 0 GROUP BY partition_key HAVING COUNT(*) > %d) x", beside)},
		{"two cars at one place of a train", "SELECT COUNT(*) FROM (SELECT partition_key, train_seq FROM merge_batch WHERE train_seq IS NOT NULL GROUP BY partition_key, train_seq HAVING COUNT(*) > 1) x"},
		{"two active cars in one slot", "SELECT COUNT(*) FROM (SELECT partition_key, slot_no FROM merge_batch WHERE status IN ('RUNNING', 'BLOCKED') GROUP BY partition_key, slot_no HAVING COUNT(*) > 1) x"},
		{"active cars out of their train's slots", fmt.Sprintf("SELECT COUNT(*) FROM merge_batch WHERE status IN ('RUNNING', 'BLOCKED') AND (slot_no < %d OR slot_no >= %d)", -beside, k)},
		// A bisection returns requests to be claimed again: only the batches no bisection touched
		// must never share a request.
		{"requests claimed twice in the history (I2)", "SELECT COUNT(*) FROM (SELECT m.request_id FROM merge_batch_member m JOIN merge_batch b ON b.id = m.batch_id WHERE b.bisections = 0 AND b.bisect_of IS NULL GROUP BY m.request_id HAVING COUNT(*) > 1) x"},
		{"requests held by two cars", "SELECT COUNT(*) FROM (SELECT operation_id FROM merge_batch_request WHERE batch_id IS NOT NULL GROUP BY operation_id HAVING COUNT(*) > 1) x"},
		{"claimed rows missing from the history", "SELECT COUNT(*) FROM merge_batch_request r JOIN merge_batch b ON b.id = r.batch_id WHERE NOT EXISTS (SELECT 1 FROM merge_batch_member m WHERE m.request_id = r.id AND m.batch_id = r.batch_id)"},
		{"batches without members", "SELECT COUNT(*) FROM merge_batch b WHERE NOT EXISTS (SELECT 1 FROM merge_batch_member m WHERE m.batch_id = b.id)"},
	} {
		if n := count(t, db, c.query); n != 0 {
			t.Errorf("%s: %d", c.what, n)
		}
	}
}

// Rounds of several instances at once, with cars ending, cars moved to the end of their train and
// cars bisected beside it meanwhile, never break the train's shape: at most batch.train cars active
// in the train and batch.isolationCars beside it (sampled by SQL while they run, and after), each at
// a place of its own, claimed behind the last one.
func TestConcurrentRoundsKeepTheTrainsShape(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		const partition, k, beside = "infra/acl", 3, 2
		queued(t, db, partition, 150)
		stop := make(chan struct{})
		var maxActive atomic.Int32
		monitorDone := make(chan struct{})
		go func() {
			defer close(monitorDone)
			for {
				select {
				case <-stop:
					return
				default:
				}
				if n := trainCars(t, db, partition); int32(n) > maxActive.Load() {
					maxActive.Store(int32(n))
				}
			}
		}()
		var mu sync.Mutex
		var active []store.Batch // claimed and not ended, as the claims returned them
		var claims, moved, bisected atomic.Int32
		var movedIDs sync.Map // cars sent to the end: their place is no longer their claim's
		var wg sync.WaitGroup
		for w := range 6 { // two instances, three dispatchers each
			wg.Add(1)
			go func() {
				defer wg.Done()
				rng := rand.New(rand.NewPCG(uint64(w), 7))
				for range 30 {
					c, err := batch.Claim(bg, db, store.ClaimInput{Partition: partition, Project: partition, Max: 3, Train: k, Beside: beside})
					switch {
					case errors.Is(err, store.ErrRetry):
						continue
					case err != nil:
						t.Errorf("claim: %v", err)
						return
					}
					if c.Outcome == state.RoundClaimed {
						claims.Add(1)
						mu.Lock()
						active = append(active, c.Batch)
						mu.Unlock()
					}
					// End one car now and then, or send one to the end of its train.
					mu.Lock()
					if len(active) == 0 {
						mu.Unlock()
						continue
					}
					i := rng.IntN(len(active))
					b := active[i]
					end := rng.IntN(3) > 0
					if end {
						active = append(active[:i], active[i+1:]...)
					}
					mu.Unlock()
					cur, err := db.Batch(bg, b.ID)
					if err != nil {
						t.Errorf("read car %d: %v", b.ID, err)
						continue
					}
					if end {
						// A move of the same car to the end may win the version first: read again.
						err = store.ErrRetry
						for try := 0; (errors.Is(err, store.ErrRetry) || errors.Is(err, store.ErrPreempted)) && try < 20; try++ {
							cur, _ = db.Batch(bg, b.ID)
							_, err = db.Settle(bg, store.Settlement{BatchID: cur.ID, Version: cur.Version, Status: state.BatchSucceeded})
						}
						if err != nil {
							t.Errorf("end car %d: %v", b.ID, err)
						}
						continue
					}
					step := store.BatchStep{Batch: cur, Change: store.BatchChange{Note: "to the end", ToEnd: true, Beside: beside}}
					held, err := db.Holding(bg, b.ID)
					if err != nil {
						t.Errorf("members of car %d: %v", b.ID, err)
						continue
					}
					if len(held) > 1 && rng.IntN(2) == 0 { // a bisection: half the car waits as a suspect group
						step.Bisect, step.Requeue = true, []string{held[len(held)-1].OperationID}
					}
					_, _, err = db.AdvanceBatch(bg, step)
					var settled *state.ErrIllegalBatchTransition
					switch {
					case err == nil:
						moved.Add(1)
						movedIDs.Store(b.ID, true)
						if step.Bisect {
							bisected.Add(1)
						}
					case errors.Is(err, store.ErrRetry), errors.Is(err, store.ErrPreempted), errors.As(err, &settled):
						// another car took the end first, or the car ended meanwhile
					default:
						t.Errorf("move car %d to the end: %v", b.ID, err)
					}
				}
			}()
		}
		wg.Wait()
		close(stop)
		<-monitorDone
		if got := maxActive.Load(); got > k {
			t.Fatalf("saw %d active cars in one partition with batch.train %d", got, k)
		}
		if maxActive.Load() < 2 {
			t.Fatalf("at most %d car active at once: the test did not exercise the train", maxActive.Load())
		}
		if claims.Load() < 5 || moved.Load() == 0 || bisected.Load() == 0 {
			t.Fatalf("%d claims, %d cars moved to the end, %d bisected: the test did not exercise the train", claims.Load(), moved.Load(), bisected.Load())
		}
		if n := count(t, db, "SELECT COUNT(*) FROM merge_batch WHERE slot_no < 0"); n == 0 {
			t.Fatal("no car was ever tested beside the train: the test did not exercise the places beside it")
		}
		checkTrainShape(t, db, k, beside)
		// A new car only ever joins behind the last one: the cars that kept the place their
		// claim gave them stand in the order the claims were written (the database clock of each
		// insert, which runs only once the claim before it committed).
		rows, err := db.Raw().Query("SELECT id, train_seq FROM merge_batch WHERE partition_key = ? ORDER BY created_at, train_seq", partition)
		if err != nil {
			t.Fatal(err)
		}
		var lastSeq int64
		for rows.Next() {
			var id, seq int64
			if err := rows.Scan(&id, &seq); err != nil {
				t.Fatal(err)
			}
			if _, wasMoved := movedIDs.Load(id); wasMoved {
				continue
			}
			if seq <= lastSeq {
				t.Errorf("car %d was claimed at place %d, ahead of a car claimed before it at place %d", id, seq, lastSeq)
			}
			lastSeq = seq
		}
		rows.Close()
		// The active cars, read in train order, are the ones still running, each at its place.
		train, err := db.Train(bg, partition)
		if err != nil {
			t.Fatal(err)
		}
		for i := 1; i < len(train); i++ {
			if train[i].TrainSeq <= train[i-1].TrainSeq {
				t.Fatalf("train out of order: %+v", train)
			}
		}
	})
}

// Lowering batch.train lets the cars already running finish and starts no new one until fewer
// than the new length are active; a car keeps its slot.
func TestALowerTrainLengthLetsTheExtraCarsFinish(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		const partition = "infra/acl"
		queued(t, db, partition, 10)
		var cars []store.Batch
		for range 3 {
			c, err := batch.Claim(bg, db, store.ClaimInput{Partition: partition, Project: partition, Max: 1, Train: 3})
			if err != nil || c.Outcome != state.RoundClaimed {
				t.Fatalf("claim with batch.train 3: %+v %v", c, err)
			}
			cars = append(cars, c.Batch)
		}
		if c, err := batch.Claim(bg, db, store.ClaimInput{Partition: partition, Project: partition, Max: 1, Train: 1}); err != nil || c.Outcome != state.RoundSlotOccupied {
			t.Fatalf("claim with batch.train lowered to 1: %+v %v", c, err)
		}
		for _, c := range cars[:2] {
			if _, err := db.Settle(bg, store.Settlement{BatchID: c.ID, Version: c.Version, Status: state.BatchSucceeded}); err != nil {
				t.Fatal(err)
			}
		}
		if c, err := batch.Claim(bg, db, store.ClaimInput{Partition: partition, Project: partition, Max: 1, Train: 1}); err != nil || c.Outcome != state.RoundSlotOccupied {
			t.Fatalf("one car still runs, batch.train 1: %+v %v", c, err)
		}
		if _, err := db.Settle(bg, store.Settlement{BatchID: cars[2].ID, Version: cars[2].Version, Status: state.BatchSucceeded}); err != nil {
			t.Fatal(err)
		}
		c, err := batch.Claim(bg, db, store.ClaimInput{Partition: partition, Project: partition, Max: 1, Train: 1})
		if err != nil || c.Outcome != state.RoundClaimed || c.Batch.TrainSeq != cars[2].TrainSeq+1 {
			t.Fatalf("after the train emptied: %+v %v", c, err)
		}
		checkTrainShape(t, db, 3, 0)
	})
}

// trainCars counts partition's active cars in the train's places (not the cars beside it).
func trainCars(t testing.TB, db *store.DB, partition string) int {
	var n int
	if err := db.Raw().QueryRow("SELECT COUNT(*) FROM merge_batch WHERE partition_key = ? AND status IN ('RUNNING', 'BLOCKED') AND slot_no >= 0", partition).Scan(&n); err != nil {
		t.Errorf("count the train's cars: %v", err)
	}
	return n
}

// With batch.isolationCars, a failure's isolation runs beside the train: the bisected car leaves
// its place in the train for one beside it, the suspect group it returned is claimed into the
// other place beside it (before any newcomer), and the train's places go on taking newcomers.
// With no place beside left free, a suspect group takes a place in the train, as without them.
func TestAFailuresIsolationIsTestedBesideTheTrain(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		const partition, k, beside = "infra/beside", 2, 2
		queued(t, db, partition, 20)
		claim := func(max int) store.BatchClaim {
			t.Helper()
			c, err := batch.Claim(bg, db, store.ClaimInput{Partition: partition, Project: partition, Max: max, Train: k, Beside: beside})
			if err != nil {
				t.Fatal(err)
			}
			return c
		}
		a, b := claim(4), claim(2)
		if a.Outcome != state.RoundClaimed || b.Outcome != state.RoundClaimed {
			t.Fatalf("the first two cars: %s, %s", a.Outcome, b.Outcome)
		}
		if c := claim(2); c.Outcome != state.RoundSlotOccupied {
			t.Fatalf("a third car with batch.train 2 and nothing to isolate: %s, want SLOT_OCCUPIED", c.Outcome)
		}
		// Car a fails and is bisected: it keeps two members and returns two as a suspect group.
		cur, err := db.Batch(bg, a.Batch.ID)
		if err != nil {
			t.Fatal(err)
		}
		back := []string{a.Members[2].OperationID, a.Members[3].OperationID}
		if _, _, err := db.AdvanceBatch(bg, store.BatchStep{Batch: cur, Change: store.BatchChange{Note: "bisect", Beside: beside}, Bisect: true, Requeue: back}); err != nil {
			t.Fatal(err)
		}
		if cur, _ = db.Batch(bg, a.Batch.ID); cur.SlotNo >= 0 {
			t.Fatalf("the bisected car holds place %d of the train, want one beside it (below 0)", cur.SlotNo)
		}
		group := claim(5)
		if group.Outcome != state.RoundClaimed || group.Batch.SlotNo >= 0 || len(group.Members) != 2 ||
			group.Members[0].OperationID != back[0] || group.Members[1].OperationID != back[1] {
			t.Fatalf("the suspect group's claim: %s at place %d with %d members, want the 2 returned beside the train", group.Outcome, group.Batch.SlotNo, len(group.Members))
		}
		next := claim(3)
		if next.Outcome != state.RoundClaimed || next.Batch.SlotNo < 0 || len(next.Members) != 3 {
			t.Fatalf("the place a's bisection left in the train: %s at place %d with %d members, want newcomers in the train", next.Outcome, next.Batch.SlotNo, len(next.Members))
		}
		if c := claim(3); c.Outcome != state.RoundSlotOccupied {
			t.Fatalf("a car with the train and the places beside it full: %s, want SLOT_OCCUPIED", c.Outcome)
		}
		// The suspect group fails too and is bisected in its place beside the train; its own
		// returned member waits, and with both places beside taken it goes into the train when a
		// place there frees (car b merges).
		g, err := db.Batch(bg, group.Batch.ID)
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := db.AdvanceBatch(bg, store.BatchStep{Batch: g, Change: store.BatchChange{Note: "bisect", Beside: beside}, Bisect: true, Requeue: back[1:]}); err != nil {
			t.Fatal(err)
		}
		if g, _ = db.Batch(bg, group.Batch.ID); g.SlotNo != group.Batch.SlotNo {
			t.Fatalf("a car beside the train moved from place %d to %d when bisected again", group.Batch.SlotNo, g.SlotNo)
		}
		if c := claim(3); c.Outcome != state.RoundSlotOccupied {
			t.Fatalf("a suspect with every place taken: %s, want SLOT_OCCUPIED", c.Outcome)
		}
		// A car of the train bisected with no place beside it free keeps its place in the train.
		nb, err := db.Batch(bg, next.Batch.ID)
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := db.AdvanceBatch(bg, store.BatchStep{Batch: nb, Change: store.BatchChange{Note: "bisect", Beside: beside}, Bisect: true, Requeue: []string{next.Members[2].OperationID}}); err != nil {
			t.Fatal(err)
		}
		if nb, _ = db.Batch(bg, next.Batch.ID); nb.SlotNo != next.Batch.SlotNo {
			t.Fatalf("a car bisected with both places beside the train taken moved from place %d to %d", next.Batch.SlotNo, nb.SlotNo)
		}
		cb, err := db.Batch(bg, b.Batch.ID)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := db.Settle(bg, store.Settlement{BatchID: cb.ID, Version: cb.Version, Status: state.BatchSucceeded}); err != nil {
			t.Fatal(err)
		}
		last := claim(3)
		if last.Outcome != state.RoundClaimed || last.Batch.SlotNo < 0 || len(last.Members) != 1 || last.Members[0].OperationID != back[1] {
			t.Fatalf("the suspect once a place in the train freed: %s at place %d with %d members, want it alone in the train", last.Outcome, last.Batch.SlotNo, len(last.Members))
		}
		checkTrainShape(t, db, k, beside)
	})
}

// Two cars beside the train whose pipelines passed at once take places at the end of the train in
// the order the database gives them: each move is guarded on the car it expects to follow, so the
// second, which read the train before the first moved, is preempted (nothing written) instead of
// going behind a car it was not built on; read again, it goes behind the first.
func TestACarBesideTheTrainJoinsItsEndOnlyBehindTheCarItExpects(t *testing.T) {
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		const partition, k, beside = "infra/rejoin", 1, 2
		queued(t, db, partition, 4)
		c, err := batch.Claim(bg, db, store.ClaimInput{Partition: partition, Project: partition, Max: 4, Train: k, Beside: beside})
		if err != nil || c.Outcome != state.RoundClaimed {
			t.Fatalf("claim: %+v %v", c, err)
		}
		cur, err := db.Batch(bg, c.Batch.ID)
		if err != nil {
			t.Fatal(err)
		}
		back := []string{c.Members[2].OperationID, c.Members[3].OperationID}
		if _, _, err := db.AdvanceBatch(bg, store.BatchStep{Batch: cur, Change: store.BatchChange{Note: "bisect", Beside: beside}, Bisect: true, Requeue: back}); err != nil {
			t.Fatal(err)
		}
		g, err := batch.Claim(bg, db, store.ClaimInput{Partition: partition, Project: partition, Max: 4, Train: k, Beside: beside})
		if err != nil || g.Outcome != state.RoundClaimed || g.Batch.SlotNo >= 0 {
			t.Fatalf("the suspect group's claim beside the train: %+v %v", g, err)
		}
		first, _ := db.Batch(bg, c.Batch.ID)
		second, _ := db.Batch(bg, g.Batch.ID)
		if !first.Beside() || !second.Beside() {
			t.Fatalf("both halves should be beside the train: %+v %+v", first, second)
		}
		none := int64(0) // both read an empty train
		join := func(b store.Batch, behind *int64) (store.Batch, error) {
			out, _, err := db.AdvanceBatch(bg, store.BatchStep{Batch: b, Change: store.BatchChange{Note: "joins the train", ToEnd: true, Rejoin: true, Behind: behind}})
			return out, err
		}
		joined, err := join(first, &none)
		if err != nil || !joined.Rejoined || joined.Beside() {
			t.Fatalf("the first half into the empty train: %+v %v", joined, err)
		}
		if _, err := join(second, &none); !errors.Is(err, store.ErrPreempted) {
			t.Fatalf("the second half behind an empty train that is not empty any more: %v, want ErrPreempted", err)
		}
		if again, _ := db.Batch(bg, second.ID); again.Version != second.Version || again.Rejoined || again.TrainSeq != second.TrainSeq {
			t.Fatalf("a preempted move wrote something: %+v", again)
		}
		after := joined.ID
		if z, err := join(second, &after); err != nil || !z.Rejoined || z.TrainSeq <= joined.TrainSeq {
			t.Fatalf("the second half behind the first: %+v %v", z, err)
		}
		train, err := db.Train(bg, partition)
		if err != nil || len(train) != 2 || train[0].ID != joined.ID || train[1].ID != second.ID {
			t.Fatalf("the train: %+v %v", train, err)
		}
	})
}
