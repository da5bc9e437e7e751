package store_test

import (
	"io/fs"
	"testing"
	"testing/fstest"
	"time"

	"bindery/internal/vocab/state"
	"bindery/schema"
	"bindery/store"
	"bindery/store/storetest"
)

// upTo is the dialect's migrations before version `before`, as an older build shipped them.
func upTo(t *testing.T, d store.Dialect, before int) fs.FS {
	t.Helper()
	migs, err := store.Migrations(schema.FS, d)
	if err != nil {
		t.Fatal(err)
	}
	out := fstest.MapFS{}
	for _, m := range migs {
		if m.Version < before {
			out[string(d)+"/"+m.Name] = &fstest.MapFile{Data: []byte(m.SQL)}
		}
	}
	return out
}

// eachUnmigrated runs fn on a fresh, unmigrated database of each dialect (the test migrates it).
func eachUnmigrated(t *testing.T, fn func(t *testing.T, db *store.DB)) {
	for _, d := range []struct {
		name string
		dsn  func(*testing.T) string
	}{{"sqlite", func(t *testing.T) string { return storetest.SQLiteDSN(t) }}, {"mysql", func(t *testing.T) string { return storetest.MySQLDSN(t) }}} {
		t.Run(d.name, func(t *testing.T) {
			db, err := store.Open(bg, d.dsn(t), storetest.DefaultOptions())
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			fn(t, db)
		})
	}
}

// An upgrade while work is in flight under the old per-row leases: migration 0040 gives every
// piece of it a task — due when its old lease ends — so that the new engine resumes it, and drops
// the lease columns; 0041 gives a request waiting for its approval decision the task that reads its
// ticket. Finished rows get none.
func TestTheUpgradeGivesInFlightWorkItsTasks(t *testing.T) {
	eachUnmigrated(t, func(t *testing.T, db *store.DB) {
		if _, err := db.Migrate(bg, upTo(t, db.Dialect(), 40)); err != nil {
			t.Fatal(err)
		}
		raw := db.Raw()
		ops := []struct {
			id, flow, status string
			step             state.Step
			lease            bool
		}{
			{"sending", "approval-first", "APPROVAL_SENDING", state.StepApprovalSending, true},
			{"sent", "approval-first", "APPROVAL_SENT", state.StepApprovalSent, false},
			{"queued", "approval-first", "MR_CREATING", state.StepQueued, false},
			{"legacy-create", "legacy", "MR_CREATING", state.StepCreateStarted, true},
			{"legacy-pending", "legacy", "MR_CREATING", state.StepCreatePipelinePending, false},
			{"legacy-created", "legacy", "MR_CREATED", state.StepCreateSucceeded, false},
			{"legacy-merge", "legacy", "MERGING", state.StepHandleApproved, true},
			{"legacy-merge-pending", "legacy", "MERGING", state.StepHandlePipelinePending, false},
			{"done", "legacy", "VALIDATED", state.StepCalledBack, false},
		}
		for _, o := range ops {
			lease := "NULL"
			if o.lease {
				lease = "'2030-01-01 00:00:00'"
			}
			if _, err := raw.ExecContext(bg, "INSERT INTO operation (operation_id, subject_id, target_key, project, flow, reason, status, step, lease_owner, lease_until) "+
				"VALUES (?, ?, 't', 'p', ?, '', ?, ?, 'old-instance', "+lease+")", o.id, "s-"+o.id, o.flow, o.status, o.step); err != nil {
				t.Fatal(err)
			}
		}
		for _, b := range []struct{ partition, status, failing string }{{"p1", "RUNNING", ""}, {"p2", "BLOCKED", ""}, {"p3", "RUNNING", "10003 10104 pipeline failed"}, {"p4", "SUCCEEDED", ""}} {
			if _, err := raw.ExecContext(bg, "INSERT INTO merge_batch (partition_key, project, status, failing) VALUES (?, ?, ?, ?)", b.partition, b.partition, b.status, b.failing); err != nil {
				t.Fatal(err)
			}
		}

		if _, err := db.Migrate(bg, schema.FS); err != nil {
			t.Fatalf("upgrade: %v", err)
		}
		want := map[string]string{
			"request/sending": "first/ticket", "request/legacy-create": "first/create", "request/legacy-created": "first/ticket",
			"request/legacy-merge": "background/approve", "batch/1": "background/open", "batch/2": "background/blocked", "batch/3": "background/settle",
			"request/sent": "background/ticket_poll", // migration 0041: its ticket is read
		}
		rows, err := raw.QueryContext(bg, "SELECT kind, ref, lane, step FROM task")
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]string{}
		for rows.Next() {
			var kind, ref, lane, step string
			if err := rows.Scan(&kind, &ref, &lane, &step); err != nil {
				t.Fatal(err)
			}
			got[kind+"/"+ref] = lane + "/" + step
		}
		rows.Close()
		if len(got) != len(want) {
			t.Errorf("tasks %v, want %v", got, want)
		}
		for k, v := range want {
			if got[k] != v {
				t.Errorf("task %s: %q, want %q", k, got[k], v)
			}
		}
		if n := count(t, db, "SELECT COUNT(*) FROM task WHERE ref = 'sending' AND due_at > CURRENT_TIMESTAMP"); n != 1 {
			t.Errorf("the ticket's task is not due when its old lease ends")
		}
		if ops, bs, err := db.Orphans(bg, 10); err != nil || len(ops)+len(bs) != 0 {
			t.Errorf("orphans after the upgrade: %v %v %v", ops, bs, err)
		}
		if _, err := raw.ExecContext(bg, "SELECT lease_owner FROM operation"); err == nil {
			t.Error("operation.lease_owner survived the upgrade")
		}
		if _, err := db.Operation(bg, "sending"); err != nil {
			t.Errorf("read an operation after the upgrade: %v", err)
		}
	})
}

// A database that took migration 0040 as it first shipped (no waits_for) upgrades: 0043 adds the
// column, and a task can wait for a slot there.
func TestADatabaseMigratedTo0040UpgradesToSlotWaits(t *testing.T) {
	eachUnmigrated(t, func(t *testing.T, db *store.DB) {
		if _, err := db.Migrate(bg, upTo(t, db.Dialect(), 41)); err != nil {
			t.Fatal(err)
		}
		if _, err := db.Raw().ExecContext(bg, "SELECT waits_for FROM task"); err == nil {
			t.Fatal("0040 already has waits_for: the upgrade path is not tested")
		}
		if _, err := db.Migrate(bg, schema.FS); err != nil {
			t.Fatalf("upgrade: %v", err)
		}
		held := claimedMerges(t, db, "w")
		if err := db.InTx(bg, func(tx *store.Tx) error {
			return tx.AdvanceTask(bg, held[0], store.TaskNext{In: time.Hour, WaitsFor: "merge:p"})
		}); err != nil {
			t.Fatalf("a slot wait after the upgrade: %v", err)
		}
	})
}
