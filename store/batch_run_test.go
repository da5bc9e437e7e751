package store_test

import (
	"errors"
	"testing"
	"time"

	"bindery/batch"
	"bindery/internal/vocab/state"
	"bindery/schema"
	"bindery/store"
	"bindery/store/storetest"
)

var batched = &store.MemberChange{From: []state.BindingStatus{state.StatusMRCreating}, To: state.StatusMRCreating, Step: state.StepBatched}

// claimBatched claims partition with the runner's BATCHED step in the claim's transaction.
func claimBatched(t *testing.T, db *store.DB, partition string, max int) store.BatchClaim {
	t.Helper()
	in := claimInput(partition, max)
	in.Members = batched
	c, err := batch.Claim(bg, db, in)
	if err != nil || c.Outcome != state.RoundClaimed {
		t.Fatalf("claim %s: %+v %v", partition, c, err)
	}
	return c
}

func stepOf(t *testing.T, db *store.DB, opID string) (state.BindingStatus, state.Step) {
	t.Helper()
	r, err := db.Request(bg, opID)
	if err != nil {
		t.Fatal(err)
	}
	return r.Binding.Status, r.Operation.Step
}

// The claim moves its members to BATCHED in its own transaction: a claimed request is never
// seen still "queued", and the step history has the batch.
func TestAClaimMarksItsMembersBatchedAtOnce(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		ids := queued(t, db, "infra/acl", 3)
		c := claimBatched(t, db, "infra/acl", 10)
		for _, id := range ids {
			if st, step := stepOf(t, db, id); st != state.StatusMRCreating || step != state.StepBatched {
				t.Fatalf("%s after the claim: %s %s", id, st, step)
			}
			o, _ := db.Operation(bg, id)
			if o.BatchID != c.Batch.ID {
				t.Fatalf("%s: batch %d, want %d", id, o.BatchID, c.Batch.ID)
			}
		}
		// An illegal member change refuses the claim before anything is written.
		in := claimInput("infra/acl", 10)
		in.Members = &store.MemberChange{From: []state.BindingStatus{state.StatusMRCreating}, To: state.StatusValidated}
		var illegal *state.ErrIllegalTransition
		if _, err := batch.Claim(bg, db, in); !errors.As(err, &illegal) {
			t.Fatalf("illegal member change: %v", err)
		}
	})
}

// Bisection's write: the second half goes back to the waiting set keeping its place (the next
// round takes it before anything admitted later), its members' steps go back to QUEUED, and the
// batch keeps only the first half — for every later member write and for its settlement.
func TestRequeuedMembersLeaveTheBatchAndAreClaimedFirstNextRound(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		ids := queued(t, db, "infra/acl", 4)
		c := claimBatched(t, db, "infra/acl", 10)
		late := []string{"late-1"}
		seedQueued(t, db, "infra/acl", late) // admitted after the batch formed

		stale := ""
		b, moved, err := db.AdvanceBatch(bg, store.BatchStep{
			Batch:   c.Batch,
			Change:  store.BatchChange{Note: "bisect", BranchDigest: &stale},
			Requeue: ids[2:],
			Moves: []store.MemberMove{{OperationIDs: ids[2:], Change: store.MemberChange{
				From: []state.BindingStatus{state.StatusMRCreating, state.StatusMerging}, To: state.StatusMRCreating, Step: state.StepQueued, Note: "returned"}}},
		})
		if err != nil || len(moved) != 2 || b.Version != c.Batch.Version+1 || b.Note != "bisect" {
			t.Fatalf("requeue: %+v %d moved, %v", b, len(moved), err)
		}
		held, err := db.Holding(bg, b.ID)
		if err != nil || len(held) != 2 || held[0].OperationID != ids[0] || held[1].OperationID != ids[1] {
			t.Fatalf("held after requeue: %+v %v", held, err)
		}
		if hist, _ := db.Members(bg, b.ID); len(hist) != 4 {
			t.Fatalf("history keeps every claim: %d", len(hist))
		}
		if _, step := stepOf(t, db, ids[3]); step != state.StepQueued {
			t.Fatalf("returned member's step: %s", step)
		}
		w, err := db.Waiting(bg, ids[2])
		if err != nil || w.Position() != 1 {
			t.Fatalf("returned member's place: %+v %v", w, err)
		}

		// Settling the batch settles only what it holds.
		s, err := db.Settle(bg, store.Settlement{BatchID: b.ID, Version: b.Version, Status: state.BatchSucceeded, Moves: []store.MemberMove{
			{Action: state.ActionAdd, Change: store.MemberChange{From: []state.BindingStatus{state.StatusMRCreating}, To: state.StatusMerged, Step: state.StepHandleMerged, MRIID: 9}},
		}})
		if err != nil || len(s.Members) != 2 || len(s.Flipped) != 2 {
			t.Fatalf("settle: %+v %v", s, err)
		}
		if st, _ := stepOf(t, db, ids[2]); st != state.StatusMRCreating {
			t.Fatalf("a returned member was settled with the batch: %s", st)
		}
		next, err := batch.Claim(bg, db, claimInput("infra/acl", 2))
		if err != nil || len(next.Members) != 2 || next.Members[0].OperationID != ids[2] || next.Members[1].OperationID != ids[3] {
			t.Fatalf("next round: %+v %v", next.Members, err)
		}
	})
}

// A member that failed alone is dropped from the waiting set in the runner's step; a step
// naming a request the batch does not hold changes nothing; a stale version changes nothing.
func TestAdvanceBatchIsAllOrNothingAndGuarded(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		ids := queued(t, db, "infra/acl", 3)
		c := claimBatched(t, db, "infra/acl", 10)
		fail := store.MemberMove{OperationIDs: ids[:1], Change: store.MemberChange{
			From: []state.BindingStatus{state.StatusMRCreating}, To: state.StatusCreateFailed, Step: state.StepCreateInvalid}}

		_, _, err := db.AdvanceBatch(bg, store.BatchStep{Batch: c.Batch, Drop: []string{ids[0], "not-a-member"}, Moves: []store.MemberMove{fail}})
		if !errors.Is(err, store.ErrPreempted) {
			t.Fatalf("unknown member: %v", err)
		}
		if st, _ := stepOf(t, db, ids[0]); st != state.StatusMRCreating {
			t.Fatalf("rolled-back step moved the member: %s", st)
		}
		if b, _ := db.Batch(bg, c.Batch.ID); b.Version != c.Batch.Version {
			t.Fatalf("rolled-back step changed the batch: version %d", b.Version)
		}

		b, moved, err := db.AdvanceBatch(bg, store.BatchStep{Batch: c.Batch, Change: store.BatchChange{MRIID: 5}, Drop: ids[:1], Moves: []store.MemberMove{fail}})
		if err != nil || len(moved) != 1 || b.MRIID != 5 {
			t.Fatalf("drop: %+v %+v %v", b, moved, err)
		}
		if n := count(t, db, "SELECT COUNT(*) FROM merge_batch_request WHERE operation_id = ?", ids[0]); n != 0 {
			t.Fatalf("dropped member still in the waiting set: %d rows", n)
		}
		if st, step := stepOf(t, db, ids[0]); st != state.StatusCreateFailed || step != state.StepCreateInvalid {
			t.Fatalf("dropped member: %s %s", st, step)
		}
		if _, _, err := db.AdvanceBatch(bg, store.BatchStep{Batch: c.Batch, Change: store.BatchChange{Note: "late"}}); !errors.Is(err, store.ErrPreempted) {
			t.Fatalf("stale version: %v", err)
		}
		var illegal *state.ErrIllegalBatchTransition
		if _, _, err := db.AdvanceBatch(bg, store.BatchStep{Batch: b, Change: store.BatchChange{Status: state.BatchSucceeded}}); !errors.As(err, &illegal) {
			t.Fatalf("settling through a step: %v", err)
		}
	})
}

// An operator's resume of a BLOCKED batch fences a writer that read the batch before it; the
// branch digest round-trips.
func TestAdvanceBatchFencesAStaleWriterAndRecordsTheBranch(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		queued(t, db, "infra/acl", 1)
		c := claimBatched(t, db, "infra/acl", 10)
		digest := "abc123"
		b, _, err := db.AdvanceBatch(bg, store.BatchStep{Batch: c.Batch, Change: store.BatchChange{Status: state.BatchBlocked, BranchDigest: &digest}})
		if err != nil || b.Status != state.BatchBlocked || b.BranchDigest != digest {
			t.Fatalf("block: %+v %v", b, err)
		}
		r, _, err := db.AdvanceBatch(bg, store.BatchStep{Batch: b, Change: store.BatchChange{Status: state.BatchRunning}})
		if err != nil || r.Status != state.BatchRunning || r.BranchDigest != digest {
			t.Fatalf("resume: %+v %v", r, err)
		}
		if _, err := db.UpdateBatch(bg, b, store.BatchChange{Note: "old holder"}); !errors.Is(err, store.ErrPreempted) {
			t.Fatalf("the previous holder wrote: %v", err)
		}
	})
}

// A batch closes by size or by age: with batch.maxWait set, a partition is due once max
// requests wait or the oldest has waited maxWait (database clock).
func TestAPartitionIsDueBySizeOrByAge(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		queued(t, db, "infra/acl", 2)
		due := func(max int, wait time.Duration) bool {
			t.Helper()
			ok, err := db.PartitionDue(bg, "infra/acl", max, wait)
			if err != nil {
				t.Fatal(err)
			}
			return ok
		}
		if !due(5, 0) {
			t.Fatal("no maxWait: whatever waits is due")
		}
		if due(5, time.Hour) {
			t.Fatal("2 of 5 waiting for less than an hour: not due")
		}
		if !due(2, time.Hour) {
			t.Fatal("2 of 2: due by size")
		}
		if _, err := db.Raw().ExecContext(bg, "UPDATE merge_batch_request SET created_at = ?", time.Now().UTC().Add(-2*time.Hour).Format("2006-01-02 15:04:05.000")); err != nil {
			t.Fatal(err)
		}
		if !due(5, time.Hour) {
			t.Fatal("the oldest waited two hours: due by age")
		}
		if ok, err := db.PartitionDue(bg, "other/project", 5, time.Hour); err != nil || ok {
			t.Fatalf("empty partition: %v %v", ok, err)
		}
	})
}

// MySQL commits DDL at once, so an instance that dies between a column migration's ALTER and
// its record leaves the column without the record; the next migrate must complete, not fail on
// a duplicate column (0030 and 0031 guard their ALTER on information_schema).
func TestAnInterruptedColumnMigrationCompletesOnMySQL(t *testing.T) {
	t.Parallel()
	db := storetest.MySQL(t)
	if _, err := db.Raw().ExecContext(bg, "DELETE FROM schema_migrations WHERE version IN (30, 31)"); err != nil {
		t.Fatal(err)
	}
	applied, err := db.Migrate(bg, schema.FS)
	if err != nil || len(applied) != 2 {
		t.Fatalf("re-run: %v %v", applied, err)
	}
	if n := count(t, db, "SELECT COUNT(*) FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = DATABASE() AND COLUMN_NAME IN ('branch_digest', 'change_branch', 'change_path', 'change_content')"); n != 4 {
		t.Fatalf("%d of the 4 columns", n)
	}
}
