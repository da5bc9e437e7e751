package store_test

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"bindery/batch"
	"bindery/internal/vocab/state"
	"bindery/schema"
	"bindery/store"
	"bindery/store/storetest"
)

// What bindery needs of its database (docs/architecture.md), pinned where a test can.
//
// A distributed MySQL (TiDB) hands AUTO_INCREMENT ids out in blocks per server: a row written
// later may carry a smaller id. The tests of orders write rows whose ids run against the order
// they were written in — as such a database would — and check that every "in order" and "latest"
// read still follows an order the database guarantees. Each would fail if its read went back to
// id order.

// at is t as a parameter that a DATETIME column of db stores as it is (SQLite keeps text with
// milliseconds; MySQL a DATETIME(6)).
func at(db *store.DB, t time.Time) any {
	if db.Dialect() == store.SQLite {
		return t.UTC().Format("2006-01-02 15:04:05.000")
	}
	return t.UTC()
}

// exec runs a fixture statement.
func exec(t *testing.T, db *store.DB, query string, args ...any) {
	t.Helper()
	if _, err := db.Raw().ExecContext(bg, query, args...); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
}

// An operation's step history comes out in the order of its versions, which its changes took one
// after another: not by the rows' ids, nor by their times (the clocks of a distributed MySQL's
// servers may disagree by a little).
func TestTheStepHistoryFollowsTheOperationsVersions(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		r := mustApply(t, db, application("op-1", "zoe", "t"))
		var err error
		for i, to := range []state.BindingStatus{state.StatusApprovalSent, state.StatusMRCreating, state.StatusMRCreated} {
			if r, err = db.Transition(bg, r, store.Change{To: to, Step: stepFor(to), Note: fmt.Sprint("change ", i+1)}); err != nil {
				t.Fatal(err)
			}
		}
		// Later rows get smaller ids and earlier times.
		base := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
		for i, seq := range []int{1, 2, 3, 4} {
			exec(t, db, "UPDATE operation_step SET id = ?, at = ? WHERE operation_id = 'op-1' AND seq = ?", 1000-seq, at(db, base.Add(-time.Duration(i)*time.Second)), seq)
		}
		want := []string{"", "change 1", "change 2", "change 3"}
		notes := func(steps []store.StepRecord) []string {
			var out []string
			for _, s := range steps {
				out = append(out, s.Note)
			}
			return out
		}
		steps, err := db.Steps(bg, "op-1")
		if err != nil || !slices.Equal(notes(steps), want) {
			t.Fatalf("steps %q %v, want %q", notes(steps), err, want)
		}
		d, err := db.RequestDetail(bg, "op-1")
		if err != nil || !slices.Equal(notes(d.Steps), want) {
			t.Fatalf("the status read's steps %q %v, want %q", notes(d.Steps), err, want)
		}
		// The next change goes after them all.
		if _, err := db.Transition(bg, r, store.Change{To: state.StatusMerging, Step: stepFor(state.StatusMerging), Note: "change 4"}); err != nil {
			t.Fatal(err)
		}
		if steps, err = db.Steps(bg, "op-1"); err != nil || notes(steps)[len(steps)-1] != "change 4" {
			t.Fatalf("steps after one more change %q %v", notes(steps), err)
		}
	})
}

// A request's batch is the one that claimed it last by the database clock, and a batch's members
// come in the order they were admitted, whatever the member rows' ids.
func TestTheLatestClaimIsTheLatestInTime(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		ids := queued(t, db, "p", 3)
		a, err := batch.Claim(bg, db, claimInput("p", 3))
		if err != nil || a.Outcome != state.RoundClaimed {
			t.Fatalf("claim: %+v %v", a, err)
		}
		// A bisection hands the last member back, the batch ends, and the next claim takes it.
		kept, _, err := db.AdvanceBatch(bg, store.BatchStep{Batch: a.Batch, Change: store.BatchChange{Note: "bisect"}, Requeue: ids[2:], Bisect: true})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := db.Settle(bg, store.Settlement{BatchID: kept.ID, Version: kept.Version, Status: state.BatchSucceeded}); err != nil {
			t.Fatal(err)
		}
		clockPast(t, db, "SELECT CAST(MAX(claimed_at) AS CHAR) FROM merge_batch_member")
		b, err := batch.Claim(bg, db, claimInput("p", 3))
		if err != nil || b.Outcome != state.RoundClaimed || len(b.Members) != 1 {
			t.Fatalf("second claim: %+v %v", b, err)
		}
		// The first batch's member rows get the largest ids, in the reverse of the order admitted.
		exec(t, db, "UPDATE merge_batch_member SET id = 1000000 - id WHERE batch_id = ?", a.Batch.ID)

		d, err := db.RequestDetail(bg, ids[2])
		if err != nil || d.Batch == nil || d.Batch.ID != b.Batch.ID {
			t.Fatalf("%s's batch: %+v %v, want the second claim's %d", ids[2], d.Batch, err, b.Batch.ID)
		}
		ms, err := db.Members(bg, a.Batch.ID)
		if err != nil || len(ms) != 3 || ms[0].OperationID != ids[0] || ms[1].OperationID != ids[1] || ms[2].OperationID != ids[2] {
			t.Fatalf("members %+v %v, want %v in the order admitted", ms, err, ids)
		}
		page, _, err := db.Batches(bg, store.BatchFilter{Page: store.Page{Limit: 5}})
		if err != nil || len(page) != 2 || page[1].Batch.ID != a.Batch.ID {
			t.Fatalf("batches %+v %v", page, err)
		}
		var listed []string
		for _, o := range page[1].Members {
			listed = append(listed, o.OperationID)
		}
		if !slices.Equal(listed, ids) {
			t.Fatalf("the batch list's members %v, want %v in the order admitted", listed, ids)
		}
	})
}

// A request's place in the waiting set is its latest admission by the database clock.
func TestTheLatestWaitingRowIsTheLatestInTime(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		mustApply(t, db, application("op-1", "zoe", "t"))
		for i, action := range []state.Action{state.ActionAdd, state.ActionDelete} {
			if i > 0 {
				clockPast(t, db, "SELECT CAST(MAX(created_at) AS CHAR) FROM merge_batch_request")
			}
			if ok, err := db.Admit(bg, store.Admission{OperationID: "op-1", Action: action, Partition: "p"}); !ok || err != nil {
				t.Fatalf("admit %s: %t %v", action, ok, err)
			}
		}
		exec(t, db, "UPDATE merge_batch_request SET id = id + 1000000 WHERE action = ?", state.ActionAdd)
		w, err := db.Waiting(bg, "op-1")
		if err != nil || w.Action != state.ActionDelete {
			t.Fatalf("waiting %+v %v, want the later admission (DELETE)", w, err)
		}
		d, err := db.RequestDetail(bg, "op-1")
		if err != nil || d.Waiting == nil || d.Waiting.Action != state.ActionDelete {
			t.Fatalf("the status read's waiting place %+v %v, want the later admission (DELETE)", d.Waiting, err)
		}
	})
}

// The lists shown newest first are newest first by the database clock, page after page, and the
// id only orders rows of one time.
func TestListsAreNewestFirstByTheClock(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		base := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
		minute := func(n int) any { return at(db, base.Add(time.Duration(n)*time.Minute)) }

		// Batches: ids 30, 20, 10 written one after another; 41 and 40 at one time, before them.
		for _, b := range []struct {
			id     int
			status string
			at     int
		}{{41, "SUCCEEDED", 0}, {40, "FAILED", 0}, {30, "SUCCEEDED", 1}, {20, "FAILED", 2}, {10, "SUCCEEDED", 3}} {
			exec(t, db, "INSERT INTO merge_batch (id, partition_key, project, status, created_at) VALUES (?, 'p', 'p', ?, ?)", b.id, b.status, minute(b.at))
		}
		pages := func(f store.BatchFilter) []int64 {
			var got []int64
			f.Limit = 1
			for {
				page, next, err := db.Batches(bg, f)
				if err != nil {
					t.Fatal(err)
				}
				for _, b := range page {
					got = append(got, b.Batch.ID)
				}
				if next == "" {
					return got
				}
				f.Cursor = next
			}
		}
		if got := pages(store.BatchFilter{}); !slices.Equal(got, []int64{10, 20, 30, 41, 40}) {
			t.Errorf("batches %v, want newest first", got)
		}
		if got := pages(store.BatchFilter{Partition: "p"}); !slices.Equal(got, []int64{10, 20, 30, 41, 40}) {
			t.Errorf("the partition's batches %v, want newest first", got)
		}
		if got := pages(store.BatchFilter{Status: state.BatchSucceeded}); !slices.Equal(got, []int64{10, 30, 41}) {
			t.Errorf("succeeded batches %v, want newest first", got)
		}

		// A subject's requests: applied one after another, the first with the largest id.
		for i, op := range []string{"first", "second", "third"} {
			mustApply(t, db, application(op, "zoe", fmt.Sprint("t", i)))
			exec(t, db, "UPDATE operation SET id = ?, created_at = ? WHERE operation_id = ?", 900-100*i, minute(i), op)
		}
		var mine []string
		for cursor := ""; ; {
			ops, next, err := db.OperationsBySubject(bg, "zoe", store.Page{Limit: 2, Cursor: cursor})
			if err != nil {
				t.Fatal(err)
			}
			for _, o := range ops {
				mine = append(mine, o.OperationID)
			}
			if cursor = next; cursor == "" {
				break
			}
		}
		if !slices.Equal(mine, []string{"third", "second", "first"}) {
			t.Errorf("my requests %v, want newest first", mine)
		}

		// The audit log, paged by the id of each page's last entry as the API does.
		for i, id := range []int{3, 2, 1} {
			exec(t, db, "INSERT INTO audit_log (id, event_key, at, actor, action, params, request_id) VALUES (?, ?, ?, 'olga', 'ops.retry', '{}', '')",
				id, fmt.Sprint("event-", id), minute(i))
		}
		var entries []int64
		for before := int64(0); ; {
			page, err := db.ListAudit(bg, before, 1)
			if err != nil {
				t.Fatal(err)
			}
			if len(page) == 0 {
				break
			}
			entries = append(entries, page[0].ID)
			before = page[0].ID
		}
		if !slices.Equal(entries, []int64{1, 2, 3}) {
			t.Errorf("audit entries %v, want newest first", entries)
		}

		// The deploy callback received last; the newest of two legacy requests and of two active
		// batches that name one MR.
		exec(t, db, "INSERT INTO deploy_callback (id, project, mr_iid, received_at) VALUES (9, 'q', 1, ?), (8, 'q', 2, ?)", minute(0), minute(1))
		if iid, _, ok, err := db.LastDeploy(bg, "q"); err != nil || !ok || iid != 2 {
			t.Errorf("last deploy: MR %d %t %v, want the one received last (2)", iid, ok, err)
		}
		for i, op := range []string{"legacy-1", "legacy-2"} {
			exec(t, db, "INSERT INTO operation (id, operation_id, subject_id, target_key, project, flow, reason, status, step, mr_iid, created_at) "+
				"VALUES (?, ?, ?, 't', 'q', ?, '', ?, ?, 7, ?)", 600-i, op, "s-"+op, state.FlowLegacy, state.StatusMerging, state.StepHandleStarted, minute(i))
		}
		if op, err := db.LegacyByMR(bg, "q", 7); err != nil || op != "legacy-2" {
			t.Errorf("legacy request of q!7: %q %v, want the newest (legacy-2)", op, err)
		}
		exec(t, db, "INSERT INTO merge_batch (id, partition_key, project, status, mr_iid, created_at) VALUES (60, 'q1', 'q', 'RUNNING', 5, ?), (50, 'q2', 'q', 'RUNNING', 5, ?)",
			minute(0), minute(1))
		if id, err := db.ActiveBatchByMR(bg, "q", 5); err != nil || id != 50 {
			t.Errorf("active batch of q!5: %d %v, want the newest (50)", id, err)
		}
	})
}

// The first task waiting for a slot — the one its holder's end makes due — is the oldest.
func TestTheOldestSlotWaiterIsWokenFirst(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		held := claimedMerges(t, db, "a", "b", "c")
		if ok, err := db.TakeSlot(bg, held[0], "merge:p"); !ok || err != nil {
			t.Fatalf("take: %t %v", ok, err)
		}
		for _, w := range held[1:] {
			if err := db.InTx(bg, func(tx *store.Tx) error {
				return tx.AdvanceTask(bg, w, store.TaskNext{In: time.Hour, WaitsFor: "merge:p"})
			}); err != nil {
				t.Fatal(err)
			}
		}
		// c is the older task, with the larger id.
		base := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
		exec(t, db, "UPDATE task SET id = 5000, created_at = ? WHERE ref = 'b'", at(db, base.Add(time.Minute)))
		exec(t, db, "UPDATE task SET id = 6000, created_at = ? WHERE ref = 'c'", at(db, base))
		held[0].Slot = "merge:p"
		if err := db.InTx(bg, func(tx *store.Tx) error { return tx.FinishTask(bg, held[0]) }); err != nil {
			t.Fatal(err)
		}
		dueNow(t, db, "background", "c")
		due, err := db.DueTasks(bg, "background", 10)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range due {
			if d.Ref == "b" {
				t.Fatal("the younger waiter was woken")
			}
		}
	})
}

// A database upgraded to the ordered history numbers the steps it has in their (at, id) order,
// up to each operation's version, so the steps written after the upgrade follow them.
func TestTheUpgradeNumbersTheStepHistory(t *testing.T) {
	t.Parallel()
	eachUnmigrated(t, func(t *testing.T, db *store.DB) {
		if _, err := db.Migrate(bg, upTo(t, db.Dialect(), 90)); err != nil {
			t.Fatal(err)
		}
		seedRequests(t, db, "p", []string{"op-1"}, state.StatusApprovalSent, state.StepApprovalSent, 0)
		exec(t, db, "UPDATE operation SET version = 4")
		base := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
		// Written in the order first, second, third (ids against it). The steps of "lost" (it has
		// no operation) share a time: the id breaks the tie, as it did before.
		for _, s := range []struct {
			id   int
			op   string
			note string
			at   time.Duration
		}{{30, "op-1", "first", 0}, {20, "op-1", "second", time.Second}, {10, "op-1", "third", 2 * time.Second}, {11, "lost", "x", 0}, {12, "lost", "y", 0}} {
			exec(t, db, "INSERT INTO operation_step (id, operation_id, step, status, note, at) VALUES (?, ?, ?, ?, ?, ?)",
				s.id, s.op, state.StepApprovalSent, state.StatusApprovalSent, s.note, at(db, base.Add(s.at)))
		}
		if _, err := db.Migrate(bg, schema.FS); err != nil {
			t.Fatalf("upgrade: %v", err)
		}
		got := map[int]int{}
		rows, err := db.Raw().QueryContext(bg, "SELECT id, seq FROM operation_step")
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var id, seq int
			if err := rows.Scan(&id, &seq); err != nil {
				t.Fatal(err)
			}
			got[id] = seq
		}
		rows.Close()
		want := map[int]int{30: 2, 20: 3, 10: 4, 11: -1, 12: 0}
		for id, seq := range want {
			if got[id] != seq {
				t.Errorf("step %d: seq %d, want %d (all: %v)", id, got[id], seq, got)
			}
		}
		mustMove(t, db, "op-1", state.StatusMRCreating)
		steps, err := db.Steps(bg, "op-1")
		if err != nil || len(steps) != 4 || steps[0].Note != "first" || steps[3].Status != state.StatusMRCreating {
			t.Fatalf("steps after the upgrade %+v %v", steps, err)
		}
	})
}

// Every table with an AUTO_INCREMENT id asks TiDB for one id sequence across its servers, in the
// comment form MySQL and MariaDB ignore — and they do: the migrations apply on MariaDB and
// create each of those tables with its options.
func TestAutoIncrementTablesAskTiDBForOneSequence(t *testing.T) {
	t.Parallel()
	const option = "/*T![auto_id_cache] AUTO_ID_CACHE=1 */"
	migs, err := store.Migrations(schema.FS, store.MySQL)
	if err != nil {
		t.Fatal(err)
	}
	var tables []string
	for _, m := range migs {
		for _, stmt := range store.SplitStatements(m.SQL) {
			name, ok := strings.CutPrefix(stmt, "CREATE TABLE IF NOT EXISTS ")
			if !ok || !strings.Contains(stmt, "AUTO_INCREMENT") {
				continue
			}
			name, _, _ = strings.Cut(name, " ")
			tables = append(tables, name)
			if !strings.HasSuffix(stmt, option) {
				t.Errorf("%s: table %s has an AUTO_INCREMENT id but not %s", m.Name, name, option)
			}
		}
	}
	if len(tables) < 9 {
		t.Fatalf("found %d tables with AUTO_INCREMENT ids (%v): the migrations were not read", len(tables), tables)
	}
	db := storetest.MySQL(t)
	for _, table := range tables {
		var engine, collation string
		if err := db.Raw().QueryRowContext(bg, "SELECT ENGINE, TABLE_COLLATION FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ?",
			table).Scan(&engine, &collation); err != nil {
			t.Fatalf("table %s: %v", table, err)
		}
		if engine != "InnoDB" || collation != "utf8mb4_bin" {
			t.Errorf("table %s: %s, %s — the options before the comment were not applied", table, engine, collation)
		}
		if n := count(t, db, "SELECT COUNT(*) FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ? AND EXTRA LIKE '%auto_increment%'", table); n != 1 {
			t.Errorf("table %s: %d AUTO_INCREMENT columns", table, n)
		}
	}
}

// Affected rows are the rows a statement changed: an application's binding insert reads 0 for a
// relation that has its row, and must then refuse an active one (I5). A DSN asking the driver for
// found rows (clientFoundRows) would make that insert read 1 and accept the application silently;
// bindery overrides it.
func TestAFoundRowsDSNStillCountsChangedRows(t *testing.T) {
	t.Parallel()
	dsn := storetest.MigratedDSN(t, store.MySQL)
	if strings.Contains(dsn, "?") {
		dsn += "&clientFoundRows=true"
	} else {
		dsn += "?clientFoundRows=true"
	}
	db := storetest.Open(t, dsn, storetest.DefaultOptions())
	mustApply(t, db, application("op-1", "zoe", "t"))
	_, err := db.Apply(bg, application("op-2", "zoe", "t"))
	var busy *store.ErrApplyInProgress
	if !errors.As(err, &busy) {
		t.Fatalf("an application over an active relation: %v, want it refused", err)
	}
	if n := count(t, db, "SELECT COUNT(*) FROM binding WHERE operation_id = 'op-1'"); n != 1 {
		t.Fatalf("the relation's row moved off op-1")
	}
}
