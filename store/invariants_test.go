package store_test

import (
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"bindery/batch"
	"bindery/internal/testkit"
	"bindery/internal/vocab/state"
	"bindery/store"
	"bindery/store/storetest"
)

func claimInput(partition string, max int) store.ClaimInput {
	return store.ClaimInput{Partition: partition, Project: partition, Max: max}
}

// activeBatches counts RUNNING/BLOCKED batches per partition, by SQL.
func activeBatches(t testing.TB, q interface {
	QueryRow(string, ...any) *sql.Row
}, partition string) int {
	var n int
	if err := q.QueryRow("SELECT COUNT(*) FROM merge_batch WHERE partition_key = ? AND status IN ('RUNNING', 'BLOCKED')", partition).Scan(&n); err != nil {
		t.Errorf("count active batches: %v", err)
	}
	return n
}

// checkBatchInvariants re-checks I1 and I2 with SQL after a concurrent run.
func checkBatchInvariants(t *testing.T, db *store.DB) {
	t.Helper()
	for _, c := range []struct{ what, query string }{
		{"partitions with two active batches (I1)", "SELECT COUNT(*) FROM (SELECT partition_key FROM merge_batch WHERE status IN ('RUNNING', 'BLOCKED') GROUP BY partition_key HAVING COUNT(*) > 1) x"},
		{"requests claimed twice in the history (I2)", "SELECT COUNT(*) FROM (SELECT request_id FROM merge_batch_member GROUP BY request_id HAVING COUNT(*) > 1) x"},
		{"history rows whose request row belongs to no or another batch", "SELECT COUNT(*) FROM merge_batch_member m JOIN merge_batch_request r ON r.id = m.request_id WHERE r.batch_id IS NULL OR r.batch_id <> m.batch_id"},
		{"history rows of live batches whose request row is gone", "SELECT COUNT(*) FROM merge_batch_member m JOIN merge_batch b ON b.id = m.batch_id WHERE b.status <> 'FAILED' AND NOT EXISTS (SELECT 1 FROM merge_batch_request r WHERE r.id = m.request_id)"},
		{"processing rows kept by failed batches", "SELECT COUNT(*) FROM merge_batch_request r JOIN merge_batch b ON b.id = r.batch_id WHERE b.status = 'FAILED'"},
		{"claimed rows missing from the history", "SELECT COUNT(*) FROM merge_batch_request r JOIN merge_batch b ON b.id = r.batch_id WHERE NOT EXISTS (SELECT 1 FROM merge_batch_member m WHERE m.request_id = r.id AND m.batch_id = r.batch_id)"},
		{"batches without members", "SELECT COUNT(*) FROM merge_batch b WHERE NOT EXISTS (SELECT 1 FROM merge_batch_member m WHERE m.batch_id = b.id)"},
	} {
		if n := count(t, db, c.query); n != 0 {
			t.Errorf("%s: %d", c.what, n)
		}
	}
}

// I1: claim rounds from many goroutines (cron on every instance, manual triggers) on one
// partition, with enqueues going on: at no moment two active batches, checked by SQL while
// running and after.
func TestConcurrentRoundsNeverOpenTwoActiveBatchesInAPartition(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		const partition = "infra/acl"
		queued(t, db, partition, 120)
		late := make([]string, 5)
		for i := range late {
			late[i] = fmt.Sprintf("late-%d", i)
		}
		seedRequests(t, db, partition, late, state.StatusMRCreating, state.StepQueued, 0) // admitted during the rounds
		stop := make(chan struct{})
		var maxActive atomic.Int32
		monitorDone := make(chan struct{})
		go func() { // the watcher: samples the invariant while the rounds run
			defer close(monitorDone)
			for {
				select {
				case <-stop:
					return
				default:
				}
				if n := activeBatches(t, db.Raw(), partition); int32(n) > maxActive.Load() {
					maxActive.Store(int32(n))
				}
			}
		}()
		var claimed atomic.Int32
		var outcomes sync.Map
		var wg sync.WaitGroup
		for w := range 6 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for round := range 25 {
					if w == 0 && round%5 == 0 { // enqueues keep arriving during the rounds
						id := late[round/5]
						if _, err := db.Admit(bg, store.Admission{OperationID: id, Action: state.ActionAdd, Partition: partition}); err != nil {
							t.Errorf("admit: %v", err)
						}
					}
					c, err := batch.Claim(bg, db, claimInput(partition, 7))
					if errors.Is(err, store.ErrRetry) {
						continue // a deadlock victim rolled back whole: the next round claims, as cron's does
					}
					if err != nil {
						t.Errorf("claim: %v", err)
						return
					}
					n, _ := outcomes.LoadOrStore(c.Outcome, new(atomic.Int32))
					n.(*atomic.Int32).Add(1)
					if c.Outcome != state.RoundClaimed {
						continue
					}
					claimed.Add(int32(len(c.Members)))
					// MariaDB may pick the settlement as a deadlock victim against a concurrent
					// claim's gap locks; it rolled back whole, and the batch keeps its slot until
					// settled again (the sweep's job in the product).
					err = store.ErrRetry
					for try := 0; errors.Is(err, store.ErrRetry) && try < 5; try++ {
						_, err = db.Settle(bg, store.Settlement{BatchID: c.Batch.ID, Version: c.Batch.Version, Status: state.BatchSucceeded})
					}
					if err != nil {
						t.Errorf("settle: %v", err)
					}
				}
			}()
		}
		wg.Wait()
		close(stop)
		<-monitorDone
		if maxActive.Load() > 1 {
			t.Fatalf("saw %d active batches in one partition", maxActive.Load())
		}
		checkBatchInvariants(t, db)
		if got := count(t, db, "SELECT COUNT(*) FROM merge_batch_member"); got != int(claimed.Load()) {
			t.Fatalf("history has %d members, claims returned %d", got, claimed.Load())
		}
		if n, ok := outcomes.Load(state.RoundClaimed); !ok || n.(*atomic.Int32).Load() < 2 {
			t.Fatalf("the rounds claimed fewer than 2 batches: the test did not exercise the slot")
		}
	})
}

// I1 is per partition: two projects batch in parallel, and a BLOCKED batch holds its own
// partition's slot only.
func TestPartitionsBatchInParallelAndABlockedBatchHoldsOnlyItsOwnSlot(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		queued(t, db, "team/a", 3)
		queued(t, db, "team/b", 3)
		a, err := batch.Claim(bg, db, claimInput("team/a", 2))
		if err != nil || a.Outcome != state.RoundClaimed {
			t.Fatalf("claim a: %+v %v", a, err)
		}
		b, err := batch.Claim(bg, db, claimInput("team/b", 2))
		if err != nil || b.Outcome != state.RoundClaimed {
			t.Fatalf("claim b while a is active: %+v %v", b, err)
		}
		if n := count(t, db, "SELECT COUNT(*) FROM merge_batch WHERE status = 'RUNNING'"); n != 2 {
			t.Fatalf("%d running batches, want one per partition", n)
		}
		ba, _ := db.Batch(bg, a.Batch.ID)
		blocked, err := db.UpdateBatch(bg, ba, store.BatchChange{Status: state.BatchBlocked, Note: "rebase conflict"})
		if err != nil || blocked.Status != state.BatchBlocked {
			t.Fatalf("block a: %+v %v", blocked, err)
		}
		bb, _ := db.Batch(bg, b.Batch.ID)
		if _, err := db.Settle(bg, store.Settlement{BatchID: bb.ID, Version: bb.Version, Status: state.BatchSucceeded}); err != nil {
			t.Fatal(err)
		}
		if c, err := batch.Claim(bg, db, claimInput("team/a", 2)); err != nil || c.Outcome != state.RoundSlotOccupied {
			t.Fatalf("claim a while a is BLOCKED: %+v %v", c, err)
		}
		if c, err := batch.Claim(bg, db, claimInput("team/b", 2)); err != nil || c.Outcome != state.RoundClaimed {
			t.Fatalf("claim b while a is BLOCKED: %+v %v", c, err)
		}
		if _, err := db.Settle(bg, store.Settlement{BatchID: blocked.ID, Version: blocked.Version, Status: state.BatchFailed}); err != nil {
			t.Fatal(err)
		}
		// The failed batch released the slot and removed its members' rows; the third request waits.
		if c, err := batch.Claim(bg, db, claimInput("team/a", 5)); err != nil || c.Outcome != state.RoundClaimed || len(c.Members) != 1 {
			t.Fatalf("claim a after its blocked batch failed: %+v %v", c, err)
		}
		checkBatchInvariants(t, db)
	})
}

// I2: claims racing each other and a foreign writer that grabs waiting rows: every request ends
// in at most one batch, and the member history is exactly the claimed rows.
func TestConcurrentClaimsAndForeignWritesNeverClaimARequestTwice(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		const partition = "infra/acl"
		queued(t, db, partition, 300)
		var wg sync.WaitGroup
		var preempted atomic.Int32
		for range 5 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range 30 {
					c, err := batch.Claim(bg, db, claimInput(partition, 9))
					if errors.Is(err, store.ErrPreempted) || errors.Is(err, store.ErrRetry) {
						// Rolled back whole: the guarded update saw the foreign write, or InnoDB
						// chose this claim as a deadlock victim. Either way nothing was claimed.
						preempted.Add(1)
						continue
					}
					if err != nil {
						t.Errorf("claim: %v", err)
						return
					}
					if c.Outcome == state.RoundClaimed {
						if _, err := db.Settle(bg, store.Settlement{BatchID: c.Batch.ID, Version: c.Batch.Version, Status: state.BatchSucceeded}); err != nil {
							t.Errorf("settle: %v", err)
						}
					}
				}
			}()
		}
		wg.Add(1)
		go func() { // the foreign writer: marks the oldest waiting row as taken elsewhere (batch 0)
			defer wg.Done()
			for range 40 {
				var id int64
				err := db.Raw().QueryRowContext(bg, "SELECT id FROM merge_batch_request WHERE batch_id IS NULL ORDER BY created_at, id LIMIT 1").Scan(&id)
				if errors.Is(err, sql.ErrNoRows) {
					return
				}
				if err == nil {
					_, err = db.Raw().ExecContext(bg, "UPDATE merge_batch_request SET batch_id = 0 WHERE id = ? AND batch_id IS NULL", id)
				}
				if err != nil && !errors.Is(store.Translate(err), store.ErrRetry) {
					t.Errorf("foreign write: %v", err)
					return
				}
			}
		}()
		wg.Wait()
		checkBatchInvariants(t, db)
		if n := count(t, db, "SELECT COUNT(*) FROM merge_batch_member m JOIN merge_batch_request r ON r.id = m.request_id WHERE r.batch_id = 0"); n != 0 {
			t.Fatalf("%d rows taken by the foreign writer are in a batch's history", n)
		}
		t.Logf("claims preempted by the foreign writer: %d", preempted.Load())
	})
}

// I2, the interleaving pinned (MySQL: SQLite's single writer cannot interleave): a row the
// claim read is taken before its guarded update → the round rolls back whole, the slot is free.
func TestAClaimWhoseRowWasTakenAfterItsReadRollsBack(t *testing.T) {
	t.Parallel()
	db := storetest.MySQL(t)
	const partition = "infra/acl"
	queued(t, db, partition, 5)
	store.SetPause(db, func(point string) {
		if point == "claim.read" {
			if _, err := db.Raw().ExecContext(bg, "UPDATE merge_batch_request SET batch_id = 0 WHERE operation_id = 'infra-acl-op-0002'"); err != nil {
				t.Errorf("foreign write: %v", err)
			}
		}
	})
	_, err := batch.Claim(bg, db, claimInput(partition, 10))
	if !errors.Is(err, store.ErrPreempted) {
		t.Fatalf("claim after a foreign write: %v, want ErrPreempted", err)
	}
	store.SetPause(db, nil)
	if n := count(t, db, "SELECT COUNT(*) FROM merge_batch"); n != 0 {
		t.Fatalf("%d batches left by a rolled-back claim", n)
	}
	c, err := batch.Claim(bg, db, claimInput(partition, 10))
	if err != nil || c.Outcome != state.RoundClaimed || len(c.Members) != 4 {
		t.Fatalf("next round: %+v %v", c, err)
	}
	checkBatchInvariants(t, db)
}

// A claim that reads nothing rolls back: no empty batch keeps the slot.
func TestAnEmptyClaimReleasesTheSlot(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		const partition = "infra/acl"
		store.SetSkipClaimPrecheck(db, true) // reach the in-transaction read with nothing waiting
		c, err := batch.Claim(bg, db, claimInput(partition, 10))
		if err != nil || c.Outcome != state.RoundNothingWaiting {
			t.Fatalf("empty claim: %+v %v", c, err)
		}
		if n := count(t, db, "SELECT COUNT(*) FROM merge_batch"); n != 0 {
			t.Fatalf("an empty claim left %d batches", n)
		}
		queued(t, db, partition, 1)
		if c, err := batch.Claim(bg, db, claimInput(partition, 10)); err != nil || c.Outcome != state.RoundClaimed {
			t.Fatalf("claim after the empty one: %+v %v", c, err)
		}
	})
}

// The lock-free pre-check ends an idle round without a transaction: one statement, no slot.
func TestAnIdleRoundIsOneReadAndNoSlot(t *testing.T) {
	t.Parallel()
	eachCounting(t, func(t *testing.T, db *store.DB, st *statements) {
		total, verbs, _ := st.during(t, func() {
			if c, err := batch.Claim(bg, db, claimInput("infra/acl", 10)); err != nil || c.Outcome != state.RoundNothingWaiting {
				t.Fatalf("idle claim: %+v %v", c, err)
			}
		})
		if total != 1 || verbs["SELECT"] != 1 {
			t.Fatalf("idle round ran %d statements %v, want the one pre-check", total, verbs)
		}
	})
}

// What the driver does after a duplicate-key error inside a transaction (docs/invariants.md,
// 'Duplicate key is an answer'). The answer, on both databases with our drivers: the failed
// statement alone is undone (MySQL rolls back the statement; SQLite's default ABORT resolution
// undoes the statement), the transaction stays usable — later statements run and COMMIT succeeds —
// and nothing marks it rollback-only. The claim still rolls back after a duplicate slot (it has
// nothing to keep); admission and callback recording rely on the transaction going on.
func TestDuplicateKeyInsideATransactionLeavesItUsable(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		if _, err := db.Raw().ExecContext(bg, "INSERT INTO merge_batch (partition_key, project, status) VALUES ('p', 'p', 'RUNNING')"); err != nil {
			t.Fatal(err)
		}
		tx, err := db.Raw().BeginTx(bg, nil)
		if err != nil {
			t.Fatal(err)
		}
		_, err = tx.ExecContext(bg, "INSERT INTO merge_batch (partition_key, project, status) VALUES ('p', 'p', 'RUNNING')")
		if !errors.Is(store.Translate(err), store.ErrDuplicate) {
			t.Fatalf("second active batch of p: %v, want a duplicate key", err)
		}
		if _, err := tx.ExecContext(bg, "INSERT INTO merge_batch (partition_key, project, status) VALUES ('q', 'q', 'RUNNING')"); err != nil {
			t.Fatalf("statement after the duplicate: %v", err)
		}
		if err := tx.Commit(); err != nil {
			t.Fatalf("commit after a duplicate: %v", err)
		}
		if n := count(t, db, "SELECT COUNT(*) FROM merge_batch"); n != 2 {
			t.Fatalf("%d batches, want p and q", n)
		}

		// The same through the store: admission answers "already queued" and the transaction goes on.
		err = db.InTx(bg, func(tx *store.Tx) error {
			for _, c := range []struct {
				id   string
				want bool
			}{{"x", true}, {"x", false}, {"y", true}} {
				added, err := tx.Admit(bg, store.Admission{OperationID: c.id, Action: state.ActionAdd, Partition: "p"})
				if err != nil || added != c.want {
					return fmt.Errorf("admit %s: %v %v, want %v", c.id, added, err, c.want)
				}
			}
			fresh, err := tx.RecordApprovalCallback(bg, "cb-1", "x", "APPROVED")
			if err != nil || !fresh {
				return fmt.Errorf("record callback: %v %v", fresh, err)
			}
			fresh, err = tx.RecordApprovalCallback(bg, "cb-1", "x", "REJECTED")
			if err != nil || fresh {
				return fmt.Errorf("record duplicate callback: %v %v", fresh, err)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if n := count(t, db, "SELECT COUNT(*) FROM merge_batch_request"); n != 2 {
			t.Fatalf("%d waiting rows, want x and y", n)
		}
		var result string
		if err := db.Raw().QueryRowContext(bg, "SELECT result FROM approval_callback WHERE callback_id = 'cb-1'").Scan(&result); err != nil || result != "APPROVED" {
			t.Fatalf("recorded callback %q %v: a duplicate must never overwrite", result, err)
		}
	})
}

// I4: a hundred admissions of one operation at once → exactly one "added".
func TestConcurrentAdmissionsOfOneRequestQueueItOnce(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		var added atomic.Int32
		var wg sync.WaitGroup
		start := make(chan struct{})
		for range 100 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				ok, err := db.Admit(bg, store.Admission{OperationID: "op-1", Action: state.ActionAdd, Partition: "infra/acl"})
				if err != nil {
					t.Errorf("admit: %v", err)
				}
				if ok {
					added.Add(1)
				}
			}()
		}
		close(start)
		wg.Wait()
		if added.Load() != 1 {
			t.Fatalf("%d admissions said added, want exactly 1", added.Load())
		}
		if n := count(t, db, "SELECT COUNT(*) FROM merge_batch_request WHERE operation_id = 'op-1'"); n != 1 {
			t.Fatalf("%d waiting rows", n)
		}
		// The close phase of the same operation is a different change: it queues once more.
		if ok, err := db.Admit(bg, store.Admission{OperationID: "op-1", Action: state.ActionDelete, Partition: "infra/acl"}); err != nil || !ok {
			t.Fatalf("admit the delete: %v %v", ok, err)
		}
	})
}

// I5: concurrent re-applications of a REJECTED relation → exactly one wins; the others queue
// on the relation's row and then find it active (refused); the replaced operationId no longer
// finds the row.
func TestConcurrentReapplicationsHaveExactlyOneWinner(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		mustApply(t, db, application("old", "alice", "t"))
		mustMove(t, db, "old", state.StatusRejected)

		const n = 12
		var done atomic.Int32
		if db.Dialect() == store.MySQL {
			// The first to read the row holds it a while: every other application must be waiting
			// on the row's lock by then, none past it (SQLite's single writer queues them anyway).
			var first sync.Once
			store.SetPause(db, func(point string) {
				if point == "apply.read" {
					first.Do(func() {
						time.Sleep(300 * time.Millisecond) // the behaviour: the first holds the row a while
						if d := done.Load(); d != 0 {
							t.Errorf("%d applications finished while the first held the relation's row", d)
						}
					})
				}
			})
			defer store.SetPause(db, nil)
		}
		var wg sync.WaitGroup
		var winners, preempted, refused atomic.Int32
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer done.Add(1)
				_, err := db.Apply(bg, application(fmt.Sprintf("new-%d", i), "alice", "t"))
				var inProgress *store.ErrApplyInProgress
				switch {
				case err == nil:
					winners.Add(1)
				case errors.Is(err, store.ErrPreempted):
					preempted.Add(1)
				case errors.As(err, &inProgress):
					refused.Add(1)
				default:
					t.Errorf("apply: %v", err)
				}
			}()
		}
		wg.Wait()
		if winners.Load() != 1 || refused.Load() != n-1 {
			t.Fatalf("%d winners, %d refused (preempted %d), want 1 and %d", winners.Load(), refused.Load(), preempted.Load(), n-1)
		}
		if c := count(t, db, "SELECT COUNT(*) FROM binding WHERE subject_id = 'alice' AND target_key = 't'"); c != 1 {
			t.Fatalf("%d rows for the relation", c)
		}
		if c := count(t, db, "SELECT COUNT(*) FROM operation WHERE operation_id LIKE 'new-%'"); c != 1 {
			t.Fatalf("%d losing operations were kept", c)
		}
		if _, err := db.BindingByOperation(bg, "old"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("the replaced operationId still finds the row: %v", err)
		}
		old, err := db.Request(bg, "old")
		if err != nil || old.Current() || old.Operation.Status != state.StatusRejected {
			t.Fatalf("old application: %+v %v", old, err)
		}
		if _, err := db.Transition(bg, old, store.Change{To: state.StatusApprovalSending, Step: state.StepApprovalSending}); !errors.Is(err, store.ErrPreempted) {
			t.Fatalf("a transition of the replaced application: %v", err)
		}
	})
}

func TestApplicationOverAnActiveOrFailedRowIsRefused(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		mustApply(t, db, application("first", "alice", "t"))
		for _, path := range [][]state.BindingStatus{
			nil, // APPROVAL_SENDING
			{state.StatusApprovalSent, state.StatusMRCreating, state.StatusCreateFailed},
		} {
			mustMove(t, db, "first", path...)
			_, err := db.Apply(bg, application("second", "alice", "t"))
			var inProgress *store.ErrApplyInProgress
			if !errors.As(err, &inProgress) || inProgress.Binding.OperationID != "first" {
				t.Fatalf("apply over %v: %v", path, err)
			}
		}
		if _, err := db.Apply(bg, application("first", "bob", "t")); !errors.Is(err, store.ErrDuplicate) {
			t.Fatalf("a taken operationId: %v", err)
		}
		if _, err := db.BindingByOperation(bg, "first"); err != nil {
			t.Fatalf("the refused applications touched the row: %v", err)
		}
	})
}

// I6 / ABA: a row that leaves a status and comes back to it between a read and a write still
// fails the stale write — the guard is the version, not the status.
func TestAStaleWriteFailsEvenWhenTheStatusCameBack(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		mustApply(t, db, application("op-1", "alice", "t"))
		stale := mustMove(t, db, "op-1", state.StatusApprovalSent)
		// A round trip back to APPROVAL_SENT (legal: the legacy flow's MR-first order).
		mustMove(t, db, "op-1", state.StatusMRCreating, state.StatusApprovalSending, state.StatusApprovalSent)
		now, _ := db.Request(bg, "op-1")
		if now.Binding.Status != stale.Binding.Status {
			t.Fatalf("setup: status %s, want it back at %s", now.Binding.Status, stale.Binding.Status)
		}
		if _, err := db.Transition(bg, stale, store.Change{To: state.StatusRejected, Step: state.StepApprovalRejected}); !errors.Is(err, store.ErrPreempted) {
			t.Fatalf("stale write: %v, want ErrPreempted", err)
		}
		after, _ := db.Request(bg, "op-1")
		if after.Binding.Status != state.StatusApprovalSent || after.Binding.Version != now.Binding.Version {
			t.Fatalf("the stale write changed the row: %+v", after.Binding)
		}

		// Batches too: RUNNING → BLOCKED → RUNNING, then a settlement with the old version fails.
		queued(t, db, "infra/acl", 1)
		c, err := batch.Claim(bg, db, claimInput("infra/acl", 5))
		if err != nil || c.Outcome != state.RoundClaimed {
			t.Fatalf("claim: %+v %v", c, err)
		}
		b, _ := db.Batch(bg, c.Batch.ID)
		b2, err := db.UpdateBatch(bg, b, store.BatchChange{Status: state.BatchBlocked})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := db.UpdateBatch(bg, b2, store.BatchChange{Status: state.BatchRunning}); err != nil {
			t.Fatal(err)
		}
		if _, err := db.Settle(bg, store.Settlement{BatchID: b.ID, Version: b.Version, Status: state.BatchFailed}); !errors.Is(err, store.ErrPreempted) {
			t.Fatalf("stale settlement: %v", err)
		}
		if _, err := db.UpdateBatch(bg, b, store.BatchChange{MRIID: 9}); !errors.Is(err, store.ErrPreempted) {
			t.Fatalf("stale batch write: %v", err)
		}
	})
}

// Many writers holding the same read: exactly one transition lands.
func TestConcurrentTransitionsFromOneReadHaveOneWinner(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		mustApply(t, db, application("op-1", "alice", "t"))
		cur, _ := db.Request(bg, "op-1")
		var ok, preempted atomic.Int32
		var wg sync.WaitGroup
		for range 20 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, err := db.Transition(bg, cur, store.Change{To: state.StatusApprovalSent, Step: state.StepApprovalSent})
				switch {
				case err == nil:
					ok.Add(1)
				case errors.Is(err, store.ErrPreempted):
					preempted.Add(1)
				default:
					t.Errorf("transition: %v", err)
				}
			}()
		}
		wg.Wait()
		if ok.Load() != 1 || preempted.Load() != 19 {
			t.Fatalf("%d won, %d preempted", ok.Load(), preempted.Load())
		}
		if n := count(t, db, "SELECT COUNT(*) FROM operation_step WHERE operation_id = 'op-1'"); n != 2 {
			t.Fatalf("%d history rows, want 2", n)
		}
	})
}

// Two settlers at once (two runs of the batch's task that both read it active): the first
// statement of the second one fails, so the member resets run once.
func TestTwoSettlersAtOnceResetTheMembersOnce(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		ids := queued(t, db, "infra/acl", 30)
		c, err := batch.Claim(bg, db, claimInput("infra/acl", 50))
		if err != nil || len(c.Members) != 30 {
			t.Fatalf("claim: %+v %v", c, err)
		}
		failed := store.Settlement{BatchID: c.Batch.ID, Version: c.Batch.Version, Status: state.BatchFailed, Note: "pipeline failed",
			Members: &store.MemberChange{From: []state.BindingStatus{state.StatusMRCreating}, To: state.StatusCreateFailed, Step: state.StepCreatePipelineFailed}}

		firstHolds := make(chan struct{})
		release := make(chan struct{})
		var once sync.Once
		store.SetPause(db, func(point string) {
			if point == "settle.batch" {
				once.Do(func() { close(firstHolds); <-release })
			}
		})
		results := make(chan error, 2)
		go func() { _, err := db.Settle(bg, failed); results <- err }()
		<-firstHolds // the first settler has written the batch and holds its transaction
		waitsBefore := db.Raw().Stats().WaitCount
		go func() { _, err := db.Settle(bg, failed); results <- err }()
		testkit.Eventually(t, "the second settler to wait for the first", func() bool {
			if db.Dialect() == store.SQLite {
				return db.Raw().Stats().WaitCount > waitsBefore // queued for the single write connection
			}
			return lockWaits(t, db) > 0
		})
		close(release)
		var ok, preempted int
		for range 2 {
			switch err := <-results; {
			case err == nil:
				ok++
			case errors.Is(err, store.ErrPreempted):
				preempted++
			default:
				t.Fatalf("settle: %v", err)
			}
		}
		store.SetPause(db, nil)
		if ok != 1 || preempted != 1 {
			t.Fatalf("%d settled, %d preempted; want 1 and 1", ok, preempted)
		}
		if n := count(t, db, "SELECT COUNT(*) FROM operation_step WHERE step = ?", state.StepCreatePipelineFailed); n != 30 {
			t.Fatalf("%d member resets, want 30 (once each)", n)
		}
		if n := count(t, db, "SELECT COUNT(*) FROM merge_batch_request"); n != 0 {
			t.Fatalf("%d processing rows left by a failed batch", n)
		}
		if n := count(t, db, "SELECT COUNT(*) FROM merge_batch_member WHERE batch_id = ?", c.Batch.ID); n != 30 {
			t.Fatalf("member history lost rows: %d", n)
		}
		b, _ := db.Batch(bg, c.Batch.ID)
		if b.Status != state.BatchFailed || b.Version != c.Batch.Version+1 || b.SettledAt == nil {
			t.Fatalf("batch after settlement: %+v", b)
		}
		// The members may be admitted again (retry, bisection).
		if ok, err := db.Admit(bg, store.Admission{OperationID: ids[0], Action: state.ActionAdd, Partition: "infra/acl"}); err != nil || !ok {
			t.Fatalf("re-admit a member of the failed batch: %v %v", ok, err)
		}
	})
}
