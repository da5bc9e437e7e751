package store_test

import (
	"errors"
	"fmt"
	"reflect"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"bindery/batch"
	"bindery/internal/testkit"
	"bindery/internal/vocab/state"
	"bindery/store"
	"bindery/store/storetest"
	"bindery/workflow"
)

// ids returns the operation ids of ops, sorted.
func opIDs(ops []store.Operation) []string {
	var out []string
	for _, o := range ops {
		out = append(out, o.OperationID)
	}
	sort.Strings(out)
	return out
}

// age moves rows' last change back by d (fixtures for the reconciliation window).
func age(t testing.TB, db *store.DB, d time.Duration, opIDs ...string) {
	t.Helper()
	ageRows(t, db, "binding", d, opIDs...)
}

// ageRows moves the last change (updated_at) of table's rows of opIDs back by d.
func ageRows(t testing.TB, db *store.DB, table string, d time.Duration, opIDs ...string) {
	t.Helper()
	shift := "TIMESTAMPADD(SECOND, ?, updated_at)"
	if db.Dialect() == store.SQLite {
		shift = "strftime('%Y-%m-%d %H:%M:%f', updated_at, (? || ' seconds'))"
	}
	for _, id := range opIDs {
		if _, err := db.Raw().ExecContext(bg, "UPDATE "+table+" SET updated_at = "+shift+" WHERE operation_id = ?", -int(d.Seconds()), id); err != nil {
			t.Fatal(err)
		}
	}
}

func recordDeploy(t testing.TB, db *store.DB, d store.Deploy) workflow.Deployed {
	t.Helper()
	out, err := workflow.RecordDeploy(bg, db, d)
	if err != nil {
		t.Fatalf("deploy %+v: %v", d, err)
	}
	return out
}

// Reconciliation validates, per project, the MERGED rows whose MR landed at or before the latest
// merge called back in that project (seedRequests lands MR n at minute n), inside the age window
// only.
func TestReconciliationValidatesWhatMergedUpToEachProjectsDeploy(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		seedRequests(t, db, "team/a", []string{"a5"}, state.StatusMerged, state.StepHandleMerged, 5)
		seedRequests(t, db, "team/a", []string{"a9"}, state.StatusMerged, state.StepHandleMerged, 9)
		seedRequests(t, db, "team/a", []string{"a11"}, state.StatusMerged, state.StepHandleMerged, 11)
		seedRequests(t, db, "team/b", []string{"b3"}, state.StatusMerged, state.StepHandleMerged, 3)
		seedRequests(t, db, "team/c", []string{"c1"}, state.StatusMerged, state.StepHandleMerged, 1)
		seedRequests(t, db, "team/a", []string{"old"}, state.StatusMerged, state.StepHandleMerged, 1)
		age(t, db, 3*time.Hour, "old")
		// MR 10 of team/a was called back (its member is validated already); "10" < "9" as strings.
		seedRequests(t, db, "team/a", []string{"a10"}, state.StatusValidated, state.StepCalledBack, 10)
		recordDeploy(t, db, store.Deploy{Project: "team/a", MRIID: 10})
		recordDeploy(t, db, store.Deploy{Project: "team/c", MRIID: 1})
		clockPast(t, db, "SELECT CAST(MAX(updated_at) AS CHAR) FROM binding")

		if r, err := workflow.ReconcileDeploys(bg, db, time.Hour, 2*time.Hour); err != nil || r.Scanned != 0 {
			t.Fatalf("rows younger than minAge were scanned: %+v %v", r, err)
		}
		r, err := workflow.ReconcileDeploys(bg, db, 0, 2*time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		// c1 was validated by its own callback already; old is outside the window.
		if got := opIDs(r.Validated); r.Scanned != 4 || len(got) != 2 || got[0] != "a5" || got[1] != "a9" {
			t.Fatalf("scanned %d, validated %v; want a5, a9 of 4 (a11 is above team/a's MR 10, b3 has no callback in team/b)", r.Scanned, got)
		}
		again, err := workflow.ReconcileDeploys(bg, db, 0, 2*time.Hour)
		if err != nil || len(again.Validated) != 0 || again.Scanned != 2 {
			t.Fatalf("second run: %+v %v", again, err)
		}
		for id, want := range map[string]state.BindingStatus{"a5": state.StatusValidated, "a11": state.StatusMerged, "b3": state.StatusMerged, "old": state.StatusMerged, "c1": state.StatusValidated, "a10": state.StatusValidated} {
			b, err := db.BindingByOperation(bg, id)
			if err != nil || b.Status != want {
				t.Errorf("%s: %s %v, want %s", id, b.Status, err, want)
			}
		}
	})
}

// A deploy callback that names its operations validates exactly those of its own MR; the others
// are refused (reported, not recorded with it).
func TestADeployCallbackWithOperationIDsValidatesExactlyThose(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		seedRequests(t, db, "team/a", []string{"x", "y"}, state.StatusMerged, state.StepHandleMerged, 4)
		seedRequests(t, db, "team/b", []string{"z"}, state.StatusMerged, state.StepHandleMerged, 4)
		d := recordDeploy(t, db, store.Deploy{Project: "team/a", MRIID: 4, OperationIDs: []string{"x", "z", "unknown"}})
		if got := opIDs(d.Validated); !d.Fresh || len(got) != 1 || got[0] != "x" || strings.Join(d.Refused, ",") != "z,unknown" {
			t.Fatalf("validated %v, refused %v; want only x (y not named, z in another project, unknown not a request)", got, d.Refused)
		}
		var stored string
		if err := db.Raw().QueryRowContext(bg, "SELECT operation_ids FROM deploy_callback WHERE project = 'team/a' AND mr_iid = 4").Scan(&stored); err != nil || stored != `["x"]` {
			t.Fatalf("stored ids %q %v", stored, err)
		}
		// Without ids: the MR's MERGED members.
		d = recordDeploy(t, db, store.Deploy{Project: "team/b", MRIID: 4})
		if got := opIDs(d.Validated); len(got) != 1 || got[0] != "z" {
			t.Fatalf("by MR: %v", got)
		}
		if _, err := workflow.RecordDeploy(bg, db, store.Deploy{Project: "team/b"}); err == nil {
			t.Fatal("a callback without an MR number was accepted")
		}
	})
}

// The deploy callback, a repeated callback and reconciliation racing over the same rows: each
// row flips MERGED → VALIDATED exactly once, so the "validated" metric — emitted for returned
// rows only — counts each once.
func TestValidationRacesFlipEachRowExactlyOnce(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		var ids []string
		for i := range 60 {
			ids = append(ids, "m"+string(rune('a'+i/26))+string(rune('a'+i%26)))
		}
		seedRequests(t, db, "team/a", ids, state.StatusMerged, state.StepHandleMerged, 8)
		if _, err := db.Raw().ExecContext(bg, "INSERT INTO deploy_callback (project, mr_iid) VALUES ('team/a', 8)"); err != nil {
			t.Fatal(err)
		}
		// MR 9 (a settled batch's, no request of these) is called back while the others run.
		if _, err := db.Raw().ExecContext(bg, "INSERT INTO merge_batch (partition_key, project, status, mr_iid) VALUES ('team/a', 'team/a', 'SUCCEEDED', 9)"); err != nil {
			t.Fatal(err)
		}
		clockPast(t, db, "SELECT CAST(MAX(updated_at) AS CHAR) FROM binding")
		var mu sync.Mutex
		flips := map[string]int{}
		add := func(ops []store.Operation) {
			mu.Lock()
			defer mu.Unlock()
			for _, o := range ops {
				flips[o.OperationID]++
			}
		}
		var wg sync.WaitGroup
		for w := range 6 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				var ops []store.Operation
				var err error
				switch w % 3 {
				case 0:
					var d workflow.Deployed
					d, err = workflow.RecordDeploy(bg, db, store.Deploy{Project: "team/a", MRIID: 9})
					ops = d.Validated
				case 1:
					var r workflow.Reconciled
					r, err = workflow.ReconcileDeploys(bg, db, 0, time.Hour)
					ops = r.Validated
				case 2:
					ops, err = markValidated(db, "", ids[w*5:]...)
				}
				if err != nil && !errors.Is(err, store.ErrRetry) {
					t.Errorf("validate: %v", err)
				}
				add(ops)
			}()
		}
		wg.Wait()
		// Whatever a deadlock victim left (ErrRetry), one more reconciliation finishes.
		r, err := workflow.ReconcileDeploys(bg, db, 0, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		add(r.Validated)
		for _, id := range ids {
			if flips[id] != 1 {
				t.Errorf("%s flipped %d times", id, flips[id])
			}
		}
		if n := count(t, db, "SELECT COUNT(*) FROM operation_step WHERE step = ?", state.StepCalledBack); n != len(ids) {
			t.Fatalf("%d CALLED_BACK history rows, want %d", n, len(ids))
		}
	})
}

// A settlement is guarded on the version the settler read: a second settler (an operator racing
// the running step) fails at once and changes nothing; a settled batch leaves every active list.
func TestASettlementIsGuardedOnTheVersionItRead(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		queued(t, db, "team/a", 2)
		c, err := batch.Claim(bg, db, store.ClaimInput{Partition: "team/a", Project: "team/a", Max: 5})
		if err != nil || c.Outcome != state.RoundClaimed {
			t.Fatalf("claim: %+v %v", c, err)
		}
		b, _ := db.Batch(bg, c.Batch.ID)
		moved, err := db.UpdateBatch(bg, b, store.BatchChange{Note: "the runner moved on"})
		if err != nil || moved.Version != b.Version+1 {
			t.Fatalf("update: %+v %v", moved, err)
		}
		if _, err := db.Settle(bg, store.Settlement{BatchID: b.ID, Version: b.Version, Status: state.BatchSucceeded}); !errors.Is(err, store.ErrPreempted) {
			t.Fatalf("a settler with a stale version: %v", err)
		}
		if _, err := db.Settle(bg, store.Settlement{BatchID: b.ID, Version: moved.Version, Status: state.BatchFailed}); err != nil {
			t.Fatal(err)
		}
		if _, err := db.Settle(bg, store.Settlement{BatchID: b.ID, Version: moved.Version + 1, Status: state.BatchFailed}); !errors.Is(err, store.ErrPreempted) {
			t.Fatalf("settling a settled batch: %v", err)
		}
		if _, bs, err := db.Orphans(bg, 10); err != nil || len(bs) != 0 {
			t.Fatalf("a settled batch is still active: %+v %v", bs, err)
		}
		if _, err := db.UpdateBatch(bg, moved, store.BatchChange{Status: state.BatchSucceeded}); err == nil {
			t.Fatal("UpdateBatch settled a batch (settling goes through Settle)")
		}
	})
}

// Expiry: a validated binding with a TTL shows up in the expiry sweep once its time has passed.
func TestValidatedBindingsExpireByTheDatabaseClock(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		mustApply(t, db, application("op-1", "alice", "t"))
		mustApply(t, db, application("op-2", "alice", "u"))
		for _, id := range []string{"op-1", "op-2"} {
			mustMove(t, db, id, state.StatusApprovalSent, state.StatusMRCreating, state.StatusMRCreated, state.StatusMerging, state.StatusMerged)
		}
		cur, _ := db.Request(bg, "op-1")
		if _, err := db.Transition(bg, cur, store.Change{To: state.StatusValidated, Step: state.StepCalledBack, ExpiresIn: 30 * time.Millisecond}); err != nil {
			t.Fatal(err)
		}
		cur, _ = db.Request(bg, "op-2")
		if _, err := db.Transition(bg, cur, store.Change{To: state.StatusValidated, Step: state.StepCalledBack, ExpiresIn: time.Hour}); err != nil {
			t.Fatal(err)
		}
		testkit.Eventually(t, "op-1 to expire", func() bool {
			bs, err := db.ExpiredBindings(bg, 10)
			return err == nil && len(bs) == 1 && bs[0].OperationID == "op-1"
		})
	})
}

// The request view says where a waiting request stands, and the ops list shows batches with
// their members.
func TestWaitingPositionAndBatchMembers(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		ids := queued(t, db, "team/a", 5)
		queued(t, db, "team/b", 2)
		d, err := db.RequestDetail(bg, ids[3])
		if err != nil || d.Waiting == nil || d.Waiting.Ahead != 3 || d.Waiting.Position() != 4 || d.Waiting.Partition != "team/a" {
			t.Fatalf("waiting: %+v %v", d.Waiting, err)
		}
		parts, err := db.PartitionsWaiting(bg)
		sort.Strings(parts)
		if err != nil || len(parts) != 2 || parts[0] != "team/a" {
			t.Fatalf("partitions: %v %v", parts, err)
		}
		c, err := batch.Claim(bg, db, claimInput("team/a", 2))
		if err != nil || len(c.Members) != 2 || c.Members[0].OperationID != ids[0] {
			t.Fatalf("claim takes the oldest first: %+v %v", c, err)
		}
		if d, _ = db.RequestDetail(bg, ids[3]); d.Waiting.Position() != 2 {
			t.Fatalf("after a claim of 2: position %d", d.Waiting.Position())
		}
		if d, _ = db.RequestDetail(bg, ids[0]); d.Waiting != nil || d.Batch == nil || d.Batch.ID != c.Batch.ID {
			t.Fatalf("claimed request: waiting %+v batch %+v", d.Waiting, d.Batch)
		}
		list, next, err := db.Batches(bg, store.BatchFilter{Page: store.Page{Limit: 10}})
		if err != nil || len(list) != 1 || next != "" || len(list[0].Members) != 2 || list[0].Members[1].OperationID != ids[1] {
			t.Fatalf("batches: %+v %q %v", list, next, err)
		}
		if _, err := db.RequestDetail(bg, "missing"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("unknown request: %v", err)
		}
	})
}

// ageOperation moves operations' last change back by d (the stuck list reads operation.updated_at).
func ageOperation(t testing.TB, db *store.DB, d time.Duration, opIDs ...string) {
	t.Helper()
	ageRows(t, db, "operation", d, opIDs...)
}

// A MERGED request whose deploy callback is overdue needs an operator (nothing else validates
// the last MR of a project): the stuck list shows it once it is older than DeployOverdue by the
// database clock, and not before.
func TestTheStuckListShowsMergedRequestsWhoseDeployIsOverdue(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		for _, id := range []string{"fresh", "overdue", "merging"} {
			mustApply(t, db, application(id, "alice", "t-"+id))
		}
		for _, id := range []string{"fresh", "overdue"} {
			mustMove(t, db, id, state.StatusApprovalSent, state.StatusMRCreating, state.StatusMRCreated, state.StatusMerging, state.StatusMerged)
		}
		mustMove(t, db, "merging", state.StatusApprovalSent, state.StatusMRCreating, state.StatusMRCreated, state.StatusMerging)
		ageOperation(t, db, 2*time.Hour, "overdue", "merging")
		stuck := func(overdue time.Duration) string {
			t.Helper()
			ops, _, err := db.StuckOperations(bg, store.StuckFilter{NeedsOperator: true, DeployOverdue: overdue})
			if err != nil {
				t.Fatal(err)
			}
			return join(opIDs(ops))
		}
		if got := stuck(time.Hour); got != "overdue" {
			t.Fatalf("stuck with a 1h deploy overdue: %q, want the merged request unchanged for 2h", got)
		}
		if got := stuck(3 * time.Hour); got != "" {
			t.Fatalf("stuck with a 3h deploy overdue: %q, want none", got)
		}
		if got := stuck(0); got != "" {
			t.Fatalf("stuck without a deploy overdue: %q, want none", got)
		}
	})
}

// An operator's confirmation and the deploy callback and reconciliation racing it flip the
// request once; the confirmation's note is in the history when it won.
func TestAConfirmedDeployRacingTheCallbackValidatesOnce(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		var ids []string
		for i := range 20 {
			ids = append(ids, "c"+string(rune('a'+i)))
		}
		seedRequests(t, db, "team/a", ids, state.StatusMerged, state.StepHandleMerged, 8)
		clockPast(t, db, "SELECT CAST(MAX(updated_at) AS CHAR) FROM binding")
		if _, err := db.Raw().ExecContext(bg, "INSERT INTO deploy_callback (project, mr_iid) VALUES ('team/a', 8)"); err != nil {
			t.Fatal(err)
		}
		var mu sync.Mutex
		flips := map[string]int{}
		add := func(ops []store.Operation, err error) {
			if err != nil && !errors.Is(err, store.ErrRetry) {
				t.Errorf("validate: %v", err)
			}
			mu.Lock()
			defer mu.Unlock()
			for _, o := range ops {
				flips[o.OperationID]++
			}
		}
		var wg sync.WaitGroup
		for _, id := range ids {
			wg.Add(1)
			go func() { defer wg.Done(); add(markValidated(db, "Deploy confirmed by olga.", id)) }()
		}
		wg.Add(2)
		go func() {
			defer wg.Done()
			d, err := workflow.RecordDeploy(bg, db, store.Deploy{Project: "team/a", MRIID: 8})
			add(d.Validated, err)
		}()
		go func() {
			defer wg.Done()
			r, err := workflow.ReconcileDeploys(bg, db, 0, time.Hour)
			add(r.Validated, err)
		}()
		wg.Wait()
		r, err := workflow.ReconcileDeploys(bg, db, 0, time.Hour) // what a deadlock victim (ErrRetry) left
		add(r.Validated, err)
		for _, id := range ids {
			if flips[id] != 1 {
				t.Errorf("%s flipped %d times", id, flips[id])
			}
		}
		confirmed := count(t, db, "SELECT COUNT(*) FROM operation_step WHERE step = ? AND note = 'Deploy confirmed by olga.'", state.StepCalledBack)
		if all := count(t, db, "SELECT COUNT(*) FROM operation_step WHERE step = ?", state.StepCalledBack); all != len(ids) {
			t.Fatalf("%d CALLED_BACK history rows (%d confirmed by the operator), want %d", all, confirmed, len(ids))
		}
		if again, err := markValidated(db, "Deploy confirmed by olga.", ids[0]); err != nil || len(again) != 0 {
			t.Fatalf("a second confirmation flipped %v (%v)", again, err)
		}
	})
}

// A deploy callback is believed only for what bindery knows: an MR bindery never opened in that
// project is refused (nothing recorded, no watermark moved, nothing validated, then or by a later
// reconciliation); ids of other MRs are refused; a callback naming none of its MR's requests
// records nothing.
func TestADeployCallbackIsVerifiedAgainstWhatBinderyKnows(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		seedRequests(t, db, "team/a", []string{"m1"}, state.StatusMerged, state.StepHandleMerged, 1)
		seedRequests(t, db, "team/a", []string{"m2"}, state.StatusMerged, state.StepHandleMerged, 2)
		for _, d := range []store.Deploy{{Project: "team/a", MRIID: 999999}, {Project: "team/a", MRIID: 424242, OperationIDs: []string{"m1"}}, {Project: "elsewhere", MRIID: 1}} {
			if _, err := workflow.RecordDeploy(bg, db, d); !errors.Is(err, workflow.ErrUnknownMR) {
				t.Fatalf("%+v: %v, want ErrUnknownMR", d, err)
			}
		}
		if n := count(t, db, "SELECT COUNT(*) FROM deploy_callback"); n != 0 {
			t.Fatalf("%d unverified callbacks recorded", n)
		}
		d := recordDeploy(t, db, store.Deploy{Project: "team/a", MRIID: 2, OperationIDs: []string{"m1"}})
		if len(d.Validated) != 0 || d.Fresh || strings.Join(d.Refused, ",") != "m1" {
			t.Fatalf("a callback of MR 2 naming MR 1's request: %+v", d)
		}
		clockPast(t, db, "SELECT CAST(MAX(updated_at) AS CHAR) FROM binding")
		if r, err := workflow.ReconcileDeploys(bg, db, 0, 2*time.Hour); err != nil || len(r.Validated) != 0 {
			t.Fatalf("reconciliation inferred from unverified callbacks: %+v %v", r, err)
		}
	})
}

// LastDeploy is the project's newest recorded deploy callback, none before the first.
func TestLastDeployIsTheNewestCallbackOfItsProject(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		if _, _, ok, err := db.LastDeploy(bg, "team/a"); ok || err != nil {
			t.Fatalf("before any: %v %v", ok, err)
		}
		for _, iid := range []int64{7, 3} {
			seedRequests(t, db, "team/a", []string{fmt.Sprint("d", iid)}, state.StatusMerged, state.StepHandleMerged, iid)
			recordDeploy(t, db, store.Deploy{Project: "team/a", MRIID: iid})
		}
		if iid, at, ok, err := db.LastDeploy(bg, "team/a"); !ok || err != nil || iid != 3 || at.IsZero() {
			t.Fatalf("last: %d %v %v %v", iid, at, ok, err)
		}
	})
}

// The readiness probe writes its row, and writes it again when someone deleted it.
func TestTheWriteProbeWritesItsRow(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		for range 2 {
			if err := db.WriteProbe(bg); err != nil {
				t.Fatal(err)
			}
			if n := count(t, db, "SELECT COUNT(*) FROM readiness"); n != 1 {
				t.Fatalf("%d readiness rows", n)
			}
			if _, err := db.Raw().ExecContext(bg, "DELETE FROM readiness"); err != nil {
				t.Fatal(err)
			}
		}
	})
}

// A status read is at most two queries, whatever the request's state, and no transaction: the
// request with its binding, own task and steps in one; in the other only what the first says is
// there: its batch and place in the waiting set once it was admitted, the tasks queued ahead of
// its own. What it reads agrees with the single-purpose readers
// (Steps, Waiting, Batch, Task, QueuedAhead). Counted by the driver wrapper, on both databases.
func TestAStatusReadIsAtMostTwoQueries(t *testing.T) {
	t.Parallel()
	eachCounting(t, func(t *testing.T, db *store.DB, st *statements) {
		ids := queued(t, db, "team/a", 5)
		claimable(t, db)
		in := claimInput("team/a", 2)
		in.Task = &store.TaskSpec{Kind: state.TaskBatch, Lane: "background", Step: "create"}
		c, err := batch.Claim(bg, db, in)
		if err != nil || len(c.Members) != 2 {
			t.Fatalf("claim: %+v %v", c, err)
		}
		first := answered("op-own", "alice", "t", "h")
		first.Task.In = -time.Second // due before the second one, whatever the clock's precision
		mustApply(t, db, first)
		mustApply(t, db, answered("op-own2", "bob", "t", "h"))
		later := answered("op-own3", "carol", "t", "h")
		later.Task.In = time.Hour // not queued: nothing ahead of it to count
		mustApply(t, db, later)
		for _, id := range []string{ids[3], ids[0], "op-own2", "op-own", "op-own3"} {
			var d store.RequestDetail
			total, verbs, _ := st.during(t, func() {
				var err error
				if d, err = db.RequestDetail(bg, id); err != nil {
					t.Fatalf("%s: %v", id, err)
				}
			})
			// A request never admitted and without a queued task is one query.
			queries := 2
			if id == "op-own3" {
				queries = 1
			}
			if txs, _ := st.boundaries(); total != queries || verbs["SELECT"] != queries || len(txs) != 0 {
				t.Fatalf("status read of %s: %d statements %v, transactions %v, want %d reads", id, total, verbs, txs, queries)
			}
			// The seeded requests have no history; the applications have their first step.
			if d.Now.IsZero() || (strings.HasPrefix(id, "op-") && len(d.Steps) != 1) || d.Binding == nil || d.Binding.OperationID != id {
				t.Fatalf("%s: now %v, %d steps, binding %+v", id, d.Now, len(d.Steps), d.Binding)
			}
			if steps, err := db.Steps(bg, id); err != nil || !reflect.DeepEqual(steps, d.Steps) && len(steps)+len(d.Steps) > 0 {
				t.Fatalf("%s: steps %+v, the steps reader says %+v %v", id, d.Steps, steps, err)
			}
			w, err := db.Waiting(bg, id)
			if (err == nil) != (d.Waiting != nil) || (d.Waiting != nil && (d.Waiting.Ahead != w.Ahead || d.Waiting.Partition != w.Partition || !d.Waiting.Since.Equal(w.Since))) {
				t.Fatalf("%s: waiting %+v, the waiting reader says %+v %v", id, d.Waiting, w, err)
			}
			want := store.TaskRef{Kind: state.TaskRequest, Ref: id}
			if d.Batch != nil {
				if b, err := db.Batch(bg, d.Batch.ID); err != nil || b.Status != d.Batch.Status || b.Version != d.Batch.Version {
					t.Fatalf("%s: batch %+v, the batch reader says %+v %v", id, d.Batch, b, err)
				}
				want = store.TaskRef{Kind: state.TaskBatch, Ref: fmt.Sprint(d.Batch.ID)}
			}
			task, err := db.Task(bg, want.Kind, want.Ref)
			if err != nil || d.Task == nil || d.Task.ID != task.ID || d.Task.Lane != task.Lane || !d.Task.DueAt.Equal(task.DueAt) {
				if !(errors.Is(err, store.ErrNotFound) && d.Task == nil) {
					t.Fatalf("%s: task %+v, the task reader says %+v %v", id, d.Task, task, err)
				}
			}
			if d.Task != nil && d.Task.Queued() {
				if n, err := db.QueuedAhead(bg, d.Task.Lane, d.Task.DueAt); err != nil || n != d.Ahead {
					t.Fatalf("%s: %d tasks ahead, the reader says %d %v", id, d.Ahead, n, err)
				}
			}
		}
		if d, err := db.RequestDetail(bg, "op-own2"); err != nil || d.Task == nil || !d.Task.Queued() || d.Ahead != 1 {
			t.Fatalf("the second application's task: %+v ahead %d, %v; want queued behind the first", d.Task, d.Ahead, err)
		}
		// A failed batch takes its members' rows out of the waiting set; the page still shows the
		// batch that failed them.
		if _, err := db.Settle(bg, store.Settlement{BatchID: c.Batch.ID, Version: c.Batch.Version, Status: state.BatchFailed}); err != nil {
			t.Fatal(err)
		}
		if n := count(t, db, "SELECT COUNT(*) FROM merge_batch_request WHERE operation_id = ?", ids[0]); n != 0 {
			t.Fatalf("%d waiting rows left of a failed batch's member", n)
		}
		if d, err := db.RequestDetail(bg, ids[0]); err != nil || d.Batch == nil || d.Batch.ID != c.Batch.ID || d.Batch.Status != state.BatchFailed {
			t.Fatalf("a failed batch's member reads batch %+v, %v; want batch %d, FAILED", d.Batch, err, c.Batch.ID)
		}
	})
}

// The status read's steps are the history as the steps reader has it — ordered, with every
// character of a note, at the database's precision — whether the read is one query or two, and a
// history of thousands of long steps is read whole.
func TestAStatusReadHasTheWholeHistory(t *testing.T) {
	t.Parallel()
	eachCounting(t, func(t *testing.T, db *store.DB, st *statements) {
		mustApply(t, db, application("op-1", "alice", "t"))
		notes := []string{`a "quoted" note, with \ and ', tabs\tand	real tabs`, "unicode: 审批通过 ✓", strings.Repeat("é", 256), ""}
		for i, note := range notes {
			to := []state.BindingStatus{state.StatusApprovalSent, state.StatusMRCreating, state.StatusMRCreated, state.StatusMerging}[i]
			cur, err := db.Request(bg, "op-1")
			if err != nil {
				t.Fatal(err)
			}
			if _, err := db.Transition(bg, cur, store.Change{To: to, Step: stepFor(to), Note: note}); err != nil {
				t.Fatal(err)
			}
		}
		read := func(want int) []store.StepRecord {
			t.Helper()
			var d store.RequestDetail
			total, _, _ := st.during(t, func() {
				var err error
				if d, err = db.RequestDetail(bg, "op-1"); err != nil {
					t.Fatal(err)
				}
			})
			if total != want {
				t.Fatalf("%d statements, want %d", total, want)
			}
			steps, err := db.Steps(bg, "op-1")
			if err != nil || !reflect.DeepEqual(steps, d.Steps) {
				t.Fatalf("steps %+v,\nthe steps reader says %+v %v", d.Steps, steps, err)
			}
			return d.Steps
		}
		// Never admitted, no task: one query.
		if got := read(1); len(got) != 5 || got[1].Note != store.ClipNote(notes[0]) || got[3].Note != store.ClipNote(notes[2]) || !got[0].At.Before(got[4].At) && !got[0].At.Equal(got[4].At) {
			t.Fatalf("steps %+v", got)
		}
		// 2,500 more steps of 512 bytes each (1.3 MB of notes).
		var rows []string
		for i := range 2500 {
			rows = append(rows, fmt.Sprintf("('op-1', %d, %d, 'MERGING', '%s')", 100+i, int(state.StepHandleStarted), strings.Repeat(string(rune('a'+i%26)), 512)))
		}
		if _, err := db.Raw().Exec("INSERT INTO operation_step (operation_id, seq, step, status, note) VALUES " + strings.Join(rows, ", ")); err != nil {
			t.Fatal(err)
		}
		// Admitted: its place in batching is a second query.
		if _, err := db.Admit(bg, store.Admission{OperationID: "op-1", Action: state.ActionAdd, Partition: "infra/acl"}); err != nil {
			t.Fatal(err)
		}
		if got := read(2); len(got) != 2505 {
			t.Fatalf("%d steps, want 2505", len(got))
		}
	})
}

// The tasks queued ahead of a request's are counted up to store.QueueCounted and no further: an
// apply burst leaves thousands of first steps due, and each requester's page must cost the same
// read. Below the bound the count is exact; at it, exact too; past it, "more than".
func TestAStatusReadCountsTheQueueOnlySoFar(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		own := answered("op-own", "alice", "t", "h")
		mustApply(t, db, own)
		queue := func(n int) {
			t.Helper()
			if _, err := db.Raw().ExecContext(bg, "DELETE FROM task WHERE kind = ?", state.TaskBatch); err != nil {
				t.Fatal(err)
			}
			err := db.InTx(bg, func(tx *store.Tx) error {
				for i := range n {
					// Due before the request's own task (due now), oldest first.
					spec := store.TaskSpec{Kind: state.TaskBatch, Ref: fmt.Sprint(i + 1), Lane: own.Task.Lane, Step: "open", In: -time.Duration(3*n-i) * time.Second}
					if err := tx.InsertTask(bg, spec); err != nil {
						return err
					}
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
		}
		for _, c := range []struct {
			queued, ahead int
			more          bool
		}{{3, 3, false}, {store.QueueCounted, store.QueueCounted, false}, {store.QueueCounted + 1, store.QueueCounted, true}, {2000, store.QueueCounted, true}} {
			queue(c.queued)
			d, err := db.RequestDetail(bg, "op-own")
			if err != nil || d.Task == nil || !d.Task.Queued() {
				t.Fatalf("%d queued: task %+v, %v", c.queued, d.Task, err)
			}
			if d.Ahead != c.ahead || d.AheadMore != c.more {
				t.Errorf("%d tasks queued ahead: the status read says %d (more: %t), want %d (more: %t)", c.queued, d.Ahead, d.AheadMore, c.ahead, c.more)
			}
		}
	})
}

// A status read whose second query fails is an error, never a view missing its second half: an
// admitted request must not read as one that was never batched. The failure here is the batch
// table gone (renamed away), which only the second query reads.
func TestAStatusReadWhoseSecondQueryFailsIsAnError(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		ids := queued(t, db, "team/a", 2)
		c, err := batch.Claim(bg, db, claimInput("team/a", 1))
		if err != nil || len(c.Members) != 1 {
			t.Fatalf("claim: %+v %v", c, err)
		}
		mustApply(t, db, application("op-own", "alice", "t"))
		if d, err := db.RequestDetail(bg, ids[0]); err != nil || d.Batch == nil {
			t.Fatalf("before: batch %+v, %v", d.Batch, err)
		}
		rename := func(from, to string) {
			t.Helper()
			if _, err := db.Raw().ExecContext(bg, "ALTER TABLE "+from+" RENAME TO "+to); err != nil {
				t.Fatal(err)
			}
		}
		rename("merge_batch", "merge_batch_gone")
		for _, id := range ids {
			if d, err := db.RequestDetail(bg, id); err == nil {
				t.Errorf("%s read without its batch table: %+v, want an error", id, d)
			}
		}
		// A request never admitted needs no second query: it still reads.
		if d, err := db.RequestDetail(bg, "op-own"); err != nil || d.Operation.OperationID != "op-own" {
			t.Errorf("a request never admitted: %+v, %v", d.Operation, err)
		}
		rename("merge_batch_gone", "merge_batch")
		if d, err := db.RequestDetail(bg, ids[0]); err != nil || d.Batch == nil || d.Batch.ID != c.Batch.ID {
			t.Fatalf("after: batch %+v, %v", d.Batch, err)
		}
	})
}
