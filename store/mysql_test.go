package store_test

import (
	"database/sql"
	"fmt"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"bindery/batch"
	"bindery/internal/testkit"
	"bindery/internal/vocab/state"
	"bindery/store"
	"bindery/store/storetest"
	"bindery/workflow"
)

// lockWaits counts InnoDB transactions waiting for a row lock. MariaDB refreshes INNODB_TRX
// only when it was not read for 100 ms, so a poller must pause longer than that between reads
// or it keeps reading a stale snapshot.
func lockWaits(t testing.TB, monitor *store.DB) int {
	time.Sleep(150 * time.Millisecond) // MariaDB's refresh interval: a read sooner is stale, not a wait for the locks
	return count(t, monitor, "SELECT COUNT(*) FROM information_schema.INNODB_TRX WHERE trx_state = 'LOCK WAIT'")
}

// I3 on MySQL: while a claim transaction that read 1,000 waiting rows — and already claimed them
// and wrote their history — is held open, 100 enqueues into the same partition complete before
// it commits. The same claim reading FOR UPDATE blocks every one of them until it commits:
// its next-key locks cover the gap at the end of the waiting range, exactly where new requests
// insert. That contrast is the reason the claim reads without locks.
func TestEnqueuesAreNeverBlockedByAnOpenClaim(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name    string
		locking bool
	}{{"plain read", false}, {"FOR UPDATE read", true}} {
		t.Run(c.name, func(t *testing.T) {
			dsn := storetest.MigratedDSN(t, store.MySQL)
			db := storetest.Open(t, dsn, storetest.DefaultOptions())
			monitor := storetest.Open(t, dsn, store.Options{MaxOpenConns: 2, MaxIdleConns: 2})
			const partition = "infra/acl"
			queued(t, db, partition, 1000)
			store.SetLockingClaimRead(db, c.locking)

			held := make(chan struct{})
			release := make(chan struct{})
			var releaseOnce sync.Once
			let := func() { releaseOnce.Do(func() { close(release) }) }
			defer let() // a failing test must not leave the claim transaction open
			store.SetPause(db, func(point string) {
				if point == "claim.written" {
					close(held)
					<-release
				}
			})
			type claimed struct {
				c   store.BatchClaim
				err error
			}
			claimDone := make(chan claimed, 1)
			go func() {
				cl, err := batch.Claim(bg, db, claimInput(partition, 5000))
				claimDone <- claimed{cl, err}
			}()
			<-held // the claim has read, claimed and recorded 1,000 rows; its transaction is open

			var holding atomic.Bool
			holding.Store(true)
			var duringClaim atomic.Int32
			enqueued := make(chan error, 100)
			for i := range 100 {
				go func() {
					_, err := db.Admit(bg, store.Admission{OperationID: fmt.Sprintf("new-%03d", i), Action: state.ActionAdd, Partition: partition})
					if holding.Load() {
						duringClaim.Add(1)
					}
					enqueued <- err
				}()
			}
			received := 0
			if !c.locking {
				for ; received < 100; received++ { // every enqueue completes while the claim is held
					if err := <-enqueued; err != nil {
						t.Fatalf("enqueue: %v", err)
					}
				}
				select {
				case <-claimDone:
					t.Fatal("the claim committed before it was released")
				default:
				}
			} else {
				testkit.Eventually(t, "enqueues to wait for the claim's locks", func() bool { return lockWaits(t, monitor) > 0 })
			}
			holding.Store(false) // from here on, completions count as after the claim
			let()
			res := <-claimDone
			if res.err != nil || res.c.Outcome != state.RoundClaimed || len(res.c.Members) != 1000 {
				t.Fatalf("claim: %v %v, %d members", res.err, res.c.Outcome, len(res.c.Members))
			}
			for ; received < 100; received++ {
				if err := <-enqueued; err != nil {
					t.Fatalf("enqueue: %v", err)
				}
			}
			want := int32(100)
			if c.locking {
				want = 0
			}
			if got := duringClaim.Load(); got != want {
				t.Fatalf("%d enqueues completed while the claim was open, want %d", got, want)
			}
			if n := count(t, db, "SELECT COUNT(*) FROM merge_batch_request WHERE batch_id IS NULL"); n != 100 {
				t.Fatalf("%d requests waiting after the claim, want the 100 new ones", n)
			}
			checkBatchInvariants(t, db)
		})
	}
}

// Every statement the hot paths run is EXPLAINed on MariaDB against a realistically shaped
// data set: each table access must use an index (no full scans). Statements are captured by the
// driver observer, so a query added later is checked without editing this test.
func TestEveryHotQueryUsesAnIndex(t *testing.T) {
	t.Parallel()
	var st *statements
	dsn := storetest.MigratedDSN(t, store.MySQL)
	st = &statements{counts: map[string]int{}}
	db := storetest.Open(t, dsn, store.Options{OnStatement: st.observe})
	fx := seedRealistic(t, db)

	_, _, captured := st.during(t, func() { exerciseHotPaths(t, db, fx) })
	shapes := map[string]store.Statement{}
	for _, s := range captured {
		verb, _, _ := strings.Cut(strings.TrimSpace(s.Query), " ")
		switch strings.ToUpper(verb) {
		case "SELECT", "UPDATE", "DELETE":
			if _, seen := shapes[s.Query]; !seen {
				shapes[s.Query] = s
			}
		}
	}
	if len(shapes) < 25 {
		t.Fatalf("captured only %d query shapes: the hot paths were not exercised", len(shapes))
	}
	queries := make([]string, 0, len(shapes))
	for q := range shapes {
		queries = append(queries, q)
	}
	sort.Strings(queries)
	for _, q := range queries {
		plan, bad := explain(t, db, shapes[q])
		if bad != "" {
			t.Errorf("%s\n  query: %s\n  plan:\n%s", bad, q, plan)
		}
	}
}

// explain runs EXPLAIN and reports the first table access without an index.
func explain(t *testing.T, db *store.DB, s store.Statement) (plan, bad string) {
	t.Helper()
	rows, err := db.Raw().QueryContext(bg, "EXPLAIN "+s.Query, s.Args...)
	if err != nil {
		t.Fatalf("EXPLAIN %s: %v", s.Query, err)
	}
	defer rows.Close()
	cols, _ := rows.Columns()
	var b strings.Builder
	for rows.Next() {
		vals := make([]sql.NullString, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			t.Fatal(err)
		}
		row := map[string]sql.NullString{}
		for i, c := range cols {
			row[c] = vals[i]
			fmt.Fprintf(&b, "%s=%s ", c, vals[i].String)
		}
		b.WriteString("\n")
		table, typ, key, extra := row["table"], row["type"].String, row["key"], row["Extra"].String
		if !table.Valid || strings.HasPrefix(table.String, "<") { // no table, or a derived/union result
			continue
		}
		// A full index scan ("index") is only fine for a read that stops at its LIMIT in index
		// order, or a loose scan for GROUP BY; for a write it locks every row like a table scan.
		limitedRead := strings.HasPrefix(s.Query, "SELECT") && strings.Contains(s.Query, " LIMIT ")
		fullScan := typ == "ALL" || (typ == "index" && !limitedRead && !strings.Contains(extra, "Using index for group-by"))
		// A const table is a point read on a primary or unique key done while planning; when
		// the key's value turns out NULL (a LEFT JOIN on a subquery that found nothing) the plan
		// names no key, with nothing to scan.
		pointRead := typ == "const" || typ == "system"
		if bad == "" && !pointRead && (fullScan || !key.Valid) {
			bad = fmt.Sprintf("table %s is scanned whole (type %s, key %s)", table.String, typ, key.String)
		}
	}
	return b.String(), bad
}

type fixture struct {
	validated, merged, stuck []string
}

// seedRealistic fills every table the way a running system does: most bindings VALIDATED, a
// few in progress or stuck, MERGED rows waiting for callbacks in several projects, a long
// history of claimed batches and a waiting set, then refreshes the optimizer's statistics.
func seedRealistic(t *testing.T, db *store.DB) fixture {
	t.Helper()
	var fx fixture
	for i := range 3000 {
		fx.validated = append(fx.validated, fmt.Sprintf("v-%05d", i))
	}
	seedRequests(t, db, "team/a", fx.validated, state.StatusValidated, state.StepCalledBack, 1)
	for p, project := range []string{"team/a", "team/b", "team/c"} {
		var ids []string
		for i := range 100 {
			ids = append(ids, fmt.Sprintf("m-%d-%03d", p, i))
		}
		seedRequests(t, db, project, ids, state.StatusMerged, state.StepHandleMerged, int64(100+p))
		fx.merged = append(fx.merged, ids...)
	}
	for i := range 20 {
		fx.stuck = append(fx.stuck, fmt.Sprintf("s-%03d", i))
	}
	seedRequests(t, db, "team/a", fx.stuck, state.StatusHandleFailed, state.StepHandlePipelineFailed, 0)
	for _, project := range []string{"team/a", "team/b", "team/c"} {
		for iid := 1; iid <= 50; iid++ {
			if _, err := db.Raw().ExecContext(bg, "INSERT IGNORE INTO deploy_callback (project, mr_iid) VALUES (?, ?)", project, iid); err != nil {
				t.Fatal(err)
			}
		}
	}
	// History: 60 settled batches of 50 members each over the validated requests.
	for start := 0; start < 3000; start += 50 {
		var ids []any
		var vals []string
		for _, id := range fx.validated[start : start+50] {
			vals = append(vals, "(?, 'ADD', ?)")
			ids = append(ids, id, "team/a")
		}
		if _, err := db.Raw().ExecContext(bg, "INSERT INTO merge_batch_request (operation_id, action, partition_key) VALUES "+strings.Join(vals, ", "), ids...); err != nil {
			t.Fatal(err)
		}
		claimable(t, db)
		c, err := batch.Claim(bg, db, claimInput("team/a", 50))
		if err != nil || c.Outcome != state.RoundClaimed {
			t.Fatalf("seed batch: %+v %v", c, err)
		}
		if _, err := db.Settle(bg, store.Settlement{BatchID: c.Batch.ID, Version: c.Batch.Version, Status: state.BatchSucceeded}); err != nil {
			t.Fatal(err)
		}
	}
	// The waiting set: 200 requests across three partitions.
	for _, p := range []string{"team/a", "team/b", "team/c"} {
		var ids []string
		for i := range 70 {
			ids = append(ids, fmt.Sprintf("w-%s-%03d", strings.TrimPrefix(p, "team/"), i))
		}
		seedQueued(t, db, p, ids)
	}
	// Tasks: batches waiting on CI and requests' steps, most due later, some due now.
	var vals []string
	var args []any
	for i := range 1000 {
		lane, kind := "background", state.TaskBatch
		if i%4 == 0 {
			lane, kind = "first", state.TaskRequest
		}
		vals = append(vals, "(?, ?, ?, 'pipeline', TIMESTAMPADD(SECOND, ?, CURRENT_TIMESTAMP(6)))")
		args = append(args, kind, fmt.Sprintf("seed-%04d", i), lane, i%60-5)
	}
	if _, err := db.Raw().ExecContext(bg, "INSERT INTO task (kind, ref, lane, step, due_at) VALUES "+strings.Join(vals, ", "), args...); err != nil {
		t.Fatal(err)
	}
	for _, table := range []string{"binding", "operation", "operation_step", "merge_batch", "merge_batch_request", "merge_batch_member", "deploy_callback", "approval_callback", "task"} {
		if _, err := db.Raw().ExecContext(bg, "ANALYZE TABLE "+table); err != nil {
			t.Fatal(err)
		}
	}
	return fx
}

// exerciseHotPaths calls every store method on a hot path (and the ops reads) once or twice.
func exerciseHotPaths(t *testing.T, db *store.DB, fx fixture) {
	t.Helper()
	must := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	// apply, re-apply, transitions, tasks
	first := application("x-1", "zoe", "t")
	first.Task = &store.TaskSpec{Kind: state.TaskRequest, Lane: "first", Step: "ticket"}
	r, err := db.Apply(bg, first)
	must("apply", err)
	_, err = db.Apply(bg, application("x-2", "zoe", "t"))
	if err == nil {
		t.Fatal("apply over an active row succeeded")
	}
	due, err := db.DueTasks(bg, "first", 10)
	must("due tasks", err)
	_, _, err = db.NextDue(bg, "background")
	must("next due", err)
	_, err = db.QueuedAhead(bg, "background", time.Now())
	must("queued ahead", err)
	for _, d := range due {
		if d.Ref != "x-1" {
			continue
		}
		c, err := db.ClaimTask(bg, d, "i1", time.Minute)
		must("claim task", err)
		must("renew task", db.RenewTask(bg, c, time.Minute))
		_, err = db.TakeSlot(bg, c, "merge:team/a")
		must("take slot", err)
		c.Slot = "merge:team/a"
		must("finish with a slot", db.InTx(bg, func(tx *store.Tx) error { return tx.FinishTask(bg, c) }))
	}
	_, err = db.WakeTasks(bg, []store.TaskRef{{Kind: state.TaskRequest, Ref: "x-1"}, {Kind: state.TaskBatch, Ref: "1"}})
	must("wake tasks", err)
	_, err = db.TasksOf(bg, state.TaskRequest, []string{"x-1", "x-2"})
	must("tasks of", err)
	_, _, err = db.Orphans(bg, 100)
	must("orphans", err)
	must("delete task", db.InTx(bg, func(tx *store.Tx) error { return tx.DeleteTask(bg, state.TaskRequest, "x-1") }))
	r, err = db.Transition(bg, r, store.Change{To: state.StatusRejected, Step: state.StepApprovalRejected, ExpiresIn: time.Hour, MRIID: 3})
	must("transition", err)
	_, err = db.Apply(bg, application("x-3", "zoe", "t"))
	must("re-apply", err)
	_, err = db.ExpiredBindings(bg, 100)
	must("expired bindings", err)
	_, err = db.BindingFor(bg, "zoe", "t")
	must("binding for", err)

	// callbacks and admission
	_, err = db.RecordApprovalCallback(bg, "cb-1", "x-3", "APPROVED")
	must("callback", err)
	_, err = db.Admit(bg, store.Admission{OperationID: "x-3", Action: state.ActionAdd, Partition: "team/a"})
	must("admit", err)
	_, err = db.PartitionsWaiting(bg)
	must("partitions", err)

	// claim, hand-off, batch writes, settlement both ways
	c, err := batch.Claim(bg, db, claimInput("team/a", 50))
	must("claim", err)
	_, err = db.TransitionMembers(bg, c.Batch.ID, store.MemberChange{From: []state.BindingStatus{state.StatusMRCreating}, To: state.StatusMRCreated, Step: state.StepCreateSucceeded, MRIID: 200})
	must("hand-off", err)
	_, err = db.BatchRequests(bg, c.Batch.ID)
	must("batch requests", err)
	b, err := db.Batch(bg, c.Batch.ID)
	must("batch", err)
	b, err = db.UpdateBatch(bg, b, store.BatchChange{MRIID: 200})
	must("update batch", err)
	_, err = db.Holding(bg, b.ID)
	must("holding", err)
	_, err = db.PartitionDue(bg, "team/a", 50, time.Minute)
	must("partition due", err)
	last := c.Members[len(c.Members)-1].OperationID
	b, _, err = db.AdvanceBatch(bg, store.BatchStep{Batch: b, Change: store.BatchChange{Note: "bisect"}, Requeue: []string{last}, Bisect: true,
		Moves: []store.MemberMove{{OperationIDs: []string{last}, Change: store.MemberChange{From: []state.BindingStatus{state.StatusMRCreated}, To: state.StatusMRCreating, Step: state.StepQueued}}}})
	must("advance batch", err)
	_, err = db.Settle(bg, store.Settlement{BatchID: b.ID, Version: b.Version, Status: state.BatchSucceeded,
		Members: &store.MemberChange{From: []state.BindingStatus{state.StatusMRCreated}, To: state.StatusMerged, Step: state.StepHandleMerged}})
	must("settle", err)
	c, err = batch.Claim(bg, db, claimInput("team/b", 50))
	must("claim b", err)
	_, err = db.Settle(bg, store.Settlement{BatchID: c.Batch.ID, Version: c.Batch.Version, Status: state.BatchFailed,
		Members: &store.MemberChange{From: []state.BindingStatus{state.StatusMRCreating}, To: state.StatusCreateFailed, Step: state.StepCreateFailed}})
	must("settle failed", err)
	_, err = db.Members(bg, c.Batch.ID)
	must("members", err)

	// validation and reconciliation
	_, err = workflow.RecordDeploy(bg, db, store.Deploy{Project: "team/b", MRIID: 101})
	must("deploy by MR", err)
	_, err = workflow.RecordDeploy(bg, db, store.Deploy{Project: "team/c", MRIID: 102, OperationIDs: fx.merged[250:260]})
	must("deploy by ids", err)
	_, err = markValidated(db, "", fx.merged[:5]...)
	must("mark validated", err)
	_, err = workflow.ReconcileDeploys(bg, db, 0, time.Hour)
	must("reconcile", err)

	// the request view and the lists
	_, err = db.RequestDetail(bg, fx.validated[10])
	must("detail", err)
	_, err = db.RequestDetail(bg, "w-c-005")
	must("detail waiting", err)
	_, next, err := db.OperationsBySubject(bg, "subject-v-00001", store.Page{Limit: 1})
	must("my requests", err)
	_, _, err = db.OperationsBySubject(bg, "zoe", store.Page{Limit: 1, Cursor: next})
	must("my requests page 2", err)
	_, next, err = db.StuckOperations(bg, store.StuckFilter{Page: store.Page{Limit: 5}})
	must("stuck", err)
	_, _, err = db.StuckOperations(bg, store.StuckFilter{Statuses: []state.BindingStatus{state.StatusHandleFailed}, Step: state.StepHandlePipelineFailed, Page: store.Page{Limit: 5, Cursor: next}})
	must("stuck by step", err)
	_, next, err = db.StuckOperations(bg, store.StuckFilter{NeedsOperator: true, DeployOverdue: 30 * time.Minute, Page: store.Page{Limit: 5}})
	must("needs an operator", err)
	_, _, err = db.StuckOperations(bg, store.StuckFilter{NeedsOperator: true, DeployOverdue: 30 * time.Minute, Page: store.Page{Limit: 5, Cursor: next}})
	must("needs an operator page 2", err)
	_, next, err = db.Batches(bg, store.BatchFilter{Page: store.Page{Limit: 5}})
	must("batches", err)
	_, _, err = db.Batches(bg, store.BatchFilter{Partition: "team/a", Status: state.BatchSucceeded, Page: store.Page{Limit: 5, Cursor: next}})
	must("batches filtered", err)
	_, err = db.OperationsByMR(bg, "team/a", 1)
	must("by MR", err)
}

// Statements must not be issued per row: the hot bulk paths run the same statements for 10 and
// for 500 rows, and one more per chunked statement for each further 500 (docs/invariants.md, 'Bulk
// paths': IN lists and multi-row inserts of at most 500). Counted by the driver wrapper, on both
// databases.
func TestBulkPathsRunOneStatementPerChunkNotPerRow(t *testing.T) {
	t.Parallel()
	eachCounting(t, func(t *testing.T, db *store.DB, st *statements) {
		db.SetEventRoutes(store.RouteAll)
		type counts struct{ claim, handoff, settle, reconcile int }
		run := func(n int) counts {
			t.Helper()
			partition := fmt.Sprintf("p/%d", n)
			ids := queued(t, db, partition, n)
			var c counts
			var cl store.BatchClaim
			c.claim, _, _ = st.during(t, func() {
				var err error
				if cl, err = batch.Claim(bg, db, claimInput(partition, n)); err != nil || len(cl.Members) != n {
					t.Fatalf("claim %d: %d members, %v", n, len(cl.Members), err)
				}
			})
			c.handoff, _, _ = st.during(t, func() {
				reqs, err := db.BatchRequests(bg, cl.Batch.ID)
				if err != nil || len(reqs) != n || reqs[0].Action != state.ActionAdd || reqs[0].Operation.OperationID != ids[0] {
					t.Fatalf("hand-off read %d: %d, %v", n, len(reqs), err)
				}
				moved, err := db.TransitionMembers(bg, cl.Batch.ID, store.MemberChange{From: []state.BindingStatus{state.StatusMRCreating},
					To: state.StatusMRCreated, Step: state.StepCreateSucceeded, MRIID: int64(n)})
				if err != nil || len(moved) != n {
					t.Fatalf("hand-off %d: %d moved, %v", n, len(moved), err)
				}
			})
			c.settle, _, _ = st.during(t, func() {
				s, err := db.Settle(bg, store.Settlement{BatchID: cl.Batch.ID, Version: cl.Batch.Version, Status: state.BatchSucceeded,
					Members: &store.MemberChange{From: []state.BindingStatus{state.StatusMRCreated}, To: state.StatusMerged, Step: state.StepHandleMerged}})
				if err != nil || len(s.Flipped) != n {
					t.Fatalf("settle %d: %+v %v", n, s.Flipped, err)
				}
			})
			// MR n landed, then MR n+1, whose deploy was called back.
			seedMerge(t, db, partition, int64(n), "main", mergedAtBase)
			seedMerge(t, db, partition, int64(n+1), "main", mergedAtBase.Add(time.Minute))
			if _, err := db.Raw().ExecContext(bg, "INSERT INTO deploy_callback (project, mr_iid) VALUES (?, ?)", partition, n+1); err != nil {
				t.Fatal(err)
			}
			clockPast(t, db, "SELECT CAST(MAX(updated_at) AS CHAR) FROM binding")
			c.reconcile, _, _ = st.during(t, func() {
				r, err := workflow.ReconcileDeploys(bg, db, 0, time.Hour)
				if err != nil || len(r.Validated) != len(ids) {
					t.Fatalf("reconcile %d: %d validated, %v", n, len(r.Validated), err)
				}
			})
			return c
		}
		small, full, large := run(10), run(500), run(1000)
		if small != full {
			t.Fatalf("statements grew with rows inside one chunk: 10 rows %+v, 500 rows %+v", small, full)
		}
		// One chunk more: the claim's guarded update and history insert; the hand-off's locking
		// read, two updates and history insert; the settlement's and reconciliation's the same and
		// the news of their flips (request.merged, request.in_effect: the events and their routing
		// tasks), reconciliation in a per-chunk transaction (its two reads stay two).
		want := counts{claim: small.claim + 2, handoff: small.handoff + 4, settle: small.settle + 6, reconcile: small.reconcile + 6}
		if large != want {
			t.Fatalf("1,000 rows: %+v, want %+v (10 rows: %+v)", large, want, small)
		}
		t.Logf("statements for 10 / 500 / 1,000 rows: %+v / %+v / %+v", small, full, large)
	})
}

// Reconciliation reads twice (the window, then what was deployed on its one branch), whatever
// the number of rows.
func TestReconciliationReadsTwice(t *testing.T) {
	t.Parallel()
	eachCounting(t, func(t *testing.T, db *store.DB, st *statements) {
		db.SetEventRoutes(store.RouteAll)
		var ids []string
		for i := range 1200 {
			ids = append(ids, fmt.Sprintf("m-%04d", i))
		}
		seedRequests(t, db, "team/a", ids, state.StatusMerged, state.StepHandleMerged, 5)
		seedMerge(t, db, "team/a", 9, "main", mergedAtBase.Add(9*time.Minute))
		if _, err := db.Raw().ExecContext(bg, "INSERT INTO deploy_callback (project, mr_iid) VALUES ('team/a', 9)"); err != nil {
			t.Fatal(err)
		}
		clockPast(t, db, "SELECT CAST(MAX(updated_at) AS CHAR) FROM binding")
		_, verbs, all := st.during(t, func() {
			r, err := workflow.ReconcileDeploys(bg, db, 0, time.Hour)
			if err != nil || r.Scanned != 1200 || len(r.Validated) != 1200 {
				t.Fatalf("reconcile: %d scanned, %d validated, %v", r.Scanned, len(r.Validated), err)
			}
		})
		reads := 0
		for _, s := range all {
			if strings.HasPrefix(s.Query, "SELECT") && !strings.Contains(s.Query, "FOR UPDATE") && !strings.Contains(s.Query, "WHERE operation_id IN") {
				reads++
			}
		}
		// Per chunk: two updates; the step history, the events and their routing tasks.
		if reads != 2 || verbs["UPDATE"] != 2*3 || verbs["INSERT"] != 3*3 {
			t.Fatalf("reconciling 1,200 rows: %d reads, %v", reads, verbs)
		}
	})
}

// The status read's plan on MariaDB, for a waiting request, a batched one and one driven by its
// own task: every table is reached by a point lookup on a unique or leading-column index (const,
// eq_ref, ref), never scanned; the counts ahead are ranges of the waiting set's claim index
// and of the task lane's index, which covers its count (no row is fetched to count it).
func TestTheStatusReadIsPointLookupsOnItsIndexes(t *testing.T) {
	t.Parallel()
	var st *statements
	st = &statements{counts: map[string]int{}}
	db := storetest.Open(t, storetest.MigratedDSN(t, store.MySQL), store.Options{OnStatement: st.observe})
	ids := queued(t, db, "team/a", 50)
	claimable(t, db)
	in := claimInput("team/a", 10)
	in.Task = &store.TaskSpec{Kind: state.TaskBatch, Lane: "background", Step: "create"}
	if _, err := batch.Claim(bg, db, in); err != nil {
		t.Fatal(err)
	}
	mustApply(t, db, answered("op-own", "alice", "t", "h"))
	for _, table := range []string{"operation", "binding", "merge_batch", "merge_batch_request", "merge_batch_member", "task", "operation_step"} {
		if _, err := db.Raw().ExecContext(bg, "ANALYZE TABLE "+table); err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range []string{ids[30], ids[0], "op-own"} {
		_, _, all := st.during(t, func() {
			if _, err := db.RequestDetail(bg, id); err != nil {
				t.Fatal(err)
			}
		})
		for _, s := range all {
			rows, err := db.Raw().QueryContext(bg, "EXPLAIN "+s.Query, s.Args...)
			if err != nil {
				t.Fatal(err)
			}
			var plan strings.Builder
			var bad []string
			cols, _ := rows.Columns()
			for rows.Next() {
				vals := make([]sql.NullString, len(cols))
				ptrs := make([]any, len(cols))
				for i := range vals {
					ptrs[i] = &vals[i]
				}
				if err := rows.Scan(ptrs...); err != nil {
					t.Fatal(err)
				}
				row := map[string]string{}
				for i, c := range cols {
					row[c] = vals[i].String
					fmt.Fprintf(&plan, "%s=%s ", c, vals[i].String)
				}
				plan.WriteString("\n")
				table, typ, extra := row["table"], row["type"], row["Extra"]
				switch {
				case table == "":
				case typ != "const" && typ != "eq_ref" && typ != "ref" && typ != "range" && typ != "system":
					bad = append(bad, fmt.Sprintf("table %s is read by %q", table, typ))
				case table == "q" && !strings.Contains(extra, "Using index"):
					bad = append(bad, fmt.Sprintf("count over %s fetches rows (%s)", table, extra))
				}
			}
			rows.Close()
			if len(bad) > 0 {
				t.Errorf("status read of %s: %v\n  query: %.200s…\n  plan:\n%s", id, bad, s.Query, plan.String())
			}
		}
	}
}
