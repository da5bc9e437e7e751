package store_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"testing/fstest"
	"time"

	"bindery/batch"
	"bindery/internal/testkit"
	"bindery/schema"
	"bindery/store"
	"bindery/store/storetest"
)

func TestMigrationsAreIdempotentAndRecorded(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		ctx := context.Background()
		applied, err := db.Migrate(ctx, schema.FS) // storetest already migrated once
		if err != nil {
			t.Fatal(err)
		}
		if len(applied) != 0 {
			t.Fatalf("second migrate applied %v", applied)
		}
		migs, _ := store.Migrations(schema.FS, db.Dialect())
		v, err := db.SchemaVersion(ctx)
		if err != nil || v != migs[len(migs)-1].Version {
			t.Fatalf("schema version %d, %v; want %d", v, err, migs[len(migs)-1].Version)
		}
	})
}

func TestBothDialectsHaveTheSameMigrationVersions(t *testing.T) {
	t.Parallel()
	my, err := store.Migrations(schema.FS, store.MySQL)
	if err != nil {
		t.Fatal(err)
	}
	lite, err := store.Migrations(schema.FS, store.SQLite)
	if err != nil {
		t.Fatal(err)
	}
	if len(my) != len(lite) {
		t.Fatalf("mysql has %d migrations, sqlite %d", len(my), len(lite))
	}
	for i := range my {
		if my[i].Version != lite[i].Version || my[i].Name != lite[i].Name {
			t.Errorf("migration %d: mysql %s, sqlite %s", i, my[i].Name, lite[i].Name)
		}
	}
}

func TestConcurrentMigrateFromManyInstances(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		dsn  func(testing.TB) string
	}{{"sqlite", storetest.SQLiteDSN}, {"mysql", storetest.MySQLDSN}} {
		t.Run(tc.name, func(t *testing.T) {
			dsn := tc.dsn(t)
			var wg sync.WaitGroup
			total := make(chan int, 4)
			for range 4 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					db, err := store.Open(context.Background(), dsn, store.Options{})
					if err != nil {
						t.Error(err)
						return
					}
					defer db.Close()
					applied, err := db.Migrate(context.Background(), schema.FS)
					if err != nil {
						t.Error(err)
					}
					total <- len(applied)
				}()
			}
			wg.Wait()
			close(total)
			sum := 0
			for n := range total {
				sum += n
			}
			migs, _ := store.Migrations(schema.FS, store.SQLite)
			if sum != len(migs) {
				t.Fatalf("migrations applied %d times in total, want exactly %d", sum, len(migs))
			}
		})
	}
}

func TestBrokenMigrationFailsWithItsName(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		fsys := fstest.MapFS{
			string(db.Dialect()) + "/9001_broken.sql": {Data: []byte("CREATE TABLE ok_one (id INTEGER);\nTHIS IS NOT SQL;\n")},
		}
		_, err := db.Migrate(context.Background(), fsys)
		if err == nil || !strings.Contains(err.Error(), "9001_broken.sql") {
			t.Fatalf("err = %v", err)
		}
	})
}

func TestClockHasSubSecondPrecision(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		seen := map[int]bool{}
		for range 20 {
			now, err := db.Now(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			seen[now.Nanosecond()/int(time.Millisecond)] = true
			time.Sleep(3 * time.Millisecond) // the behaviour: reads 3 ms apart see different milliseconds
		}
		if len(seen) < 2 {
			t.Fatalf("database clock shows no sub-second part: %v", seen)
		}
	})
}

func TestHeartbeatsCountLiveInstances(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		ctx := context.Background()
		if n, err := db.LiveInstances(ctx, time.Minute); err != nil || n != 1 {
			t.Fatalf("no instances yet: %d, %v (want 1: the caller itself)", n, err)
		}
		for _, id := range []string{"a", "b", "c", "a"} {
			if err := db.Heartbeat(ctx, id, "test"); err != nil {
				t.Fatal(err)
			}
		}
		if n, _ := db.LiveInstances(ctx, time.Minute); n != 3 {
			t.Fatalf("live = %d, want 3", n)
		}
		if err := db.RemoveInstance(ctx, "c"); err != nil {
			t.Fatal(err)
		}
		if n, _ := db.LiveInstances(ctx, time.Minute); n != 2 {
			t.Fatalf("live = %d, want 2", n)
		}
		// Heartbeats older than the window no longer count: a and b go stale 10 ms on, and only
		// the caller is left.
		testkit.Eventually(t, "the stale heartbeats to stop counting", func() bool {
			n, _ := db.LiveInstances(ctx, 10*time.Millisecond)
			return n == 1
		})
	})
}

func TestDriverErrorsAreTranslated(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		ctx := context.Background()
		if err := db.Heartbeat(ctx, "dup", "v"); err != nil {
			t.Fatal(err)
		}
		_, err := db.Raw().ExecContext(ctx, "INSERT INTO instance (id, version) VALUES ('dup', 'v')")
		if !errors.Is(store.Translate(err), store.ErrDuplicate) {
			t.Fatalf("duplicate insert: %v", err)
		}
		var id string
		err = db.Raw().QueryRowContext(ctx, "SELECT id FROM instance WHERE id = 'missing'").Scan(&id)
		if !errors.Is(store.Translate(err), store.ErrNotFound) {
			t.Fatalf("missing row: %v", err)
		}
	})
}

func TestRedactDSN(t *testing.T) {
	t.Parallel()
	got := store.RedactDSN("mysql://app:s3cret@tcp(db:3306)/bindery?parseTime=true")
	if strings.Contains(got, "s3cret") || !strings.Contains(got, "app:***@tcp(db:3306)") {
		t.Fatal(got)
	}
}

func TestOpenRejectsUnknownSchemes(t *testing.T) {
	t.Parallel()
	for _, dsn := range []string{"", "postgres://x", "mysql://bad dsn"} {
		if _, err := store.Open(context.Background(), dsn, store.Options{}); err == nil {
			t.Errorf("%q: want error", dsn)
		}
	}
}

func TestSplitStatementsKeepsTriggersWhole(t *testing.T) {
	t.Parallel()
	src := "-- c\nCREATE TABLE a (x INT);\nCREATE TRIGGER t AFTER INSERT ON a BEGIN\n  SELECT 1;\n  SELECT 2;\nEND;\nCREATE INDEX i ON a (x);\n"
	got := store.SplitStatements(src)
	if len(got) != 3 || !strings.Contains(got[1], "SELECT 2;\nEND") {
		t.Fatalf("%q", got)
	}
}

func TestSQLitePathsWithURISyntaxOpenTheRightFile(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "data #1 100%?x")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "bindery.db")
	db, err := store.Open(context.Background(), "sqlite:"+file, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Migrate(context.Background(), schema.FS); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(file); err != nil {
		t.Fatalf("the database is not where the DSN says: %v", err)
	}
}

// SQLite's writer keeps its statement journals in memory: a group of applications (multi-row
// inserts) and a shared transaction (a savepoint per caller) journal every page they change,
// and a journal spilled to a temporary file costs two system calls a page.
func TestSQLiteWriterKeepsItsJournalsInMemory(t *testing.T) {
	t.Parallel()
	db, _ := sqliteFile(t)
	var temp int
	if err := db.Raw().QueryRowContext(bg, "PRAGMA temp_store").Scan(&temp); err != nil || temp != 2 {
		t.Fatalf("the writer's temp_store: %d %v, want 2 (memory)", temp, err)
	}
}

// SQLite's commits do not checkpoint (their automatic checkpoint would copy the WAL into the
// database file while every other writer waits); the background checkpoint does, so the file
// takes the writes and the WAL stops growing without anyone asking.
func TestSQLiteCheckpointsInTheBackground(t *testing.T) {
	t.Parallel()
	db, dir := sqliteFile(t)
	var auto int
	if err := db.Raw().QueryRowContext(bg, "PRAGMA wal_autocheckpoint").Scan(&auto); err != nil || auto != 0 {
		t.Fatalf("the writer's automatic checkpoint: %d pages %v, want 0 (off)", auto, err)
	}
	size := func(name string) int64 {
		fi, err := os.Stat(filepath.Join(dir, name))
		if err != nil {
			return 0
		}
		return fi.Size()
	}
	before := size("b.db")
	apply := func(from, to int) {
		for i := from; i < to; i++ {
			mustApply(t, db, answered(fmt.Sprint("op-", i), fmt.Sprint("u", i), "t", strings.Repeat("h", 500)))
		}
	}
	apply(0, 200)
	testkit.Eventually(t, "the database file to take the applications", func() bool { return size("b.db") > before+(256<<10) })
	time.Sleep(3 * time.Millisecond) // the measurement: the WAL a moment after the file took the writes, the mark the rounds below are held to
	high := size("b.db-wal")
	for round := 1; round < 8; round++ {
		apply(round*200, round*200+200)
		// A loaded machine may starve the checkpointer for a while, and the WAL rightly grows
		// meanwhile; what must hold is that once a checkpoint catches up, the next writer
		// starts the file over (it would wait forever here if none ever did).
		// Two ticks: the first may have checkpointed before the round's last commit and only
		// counted after it; the second started once the first was counted.
		done := store.CheckpointsCaughtUp(db)
		testkit.Eventually(t, "a checkpoint to catch up with the round", func() bool { return store.CheckpointsCaughtUp(db) > done+1 })
	}
	// A checkpointer starved through a whole round lets that round write all of it to the WAL,
	// about twice what a round leaves while the checkpointer runs (high); a WAL never started
	// over would hold eight rounds.
	if wal := size("b.db-wal"); wal > 3*high {
		t.Fatalf("the WAL grew from %d bytes after 200 applications to %d after 1,600: it is never started over", high, wal)
	}
}

// The indexes SQLite keeps partial (rows with NULL left out, sqlite/0080) still serve the
// lookups that compare their column: the planner must see that the comparison implies NOT NULL.
func TestSQLiteLooksUpThroughItsPartialIndexes(t *testing.T) {
	t.Parallel()
	db := storetest.SQLite(t)
	for query, index := range map[string]string{
		"SELECT id FROM task WHERE slot = 'x'":                                                                                                                                                           "uk_task_slot",
		"SELECT id FROM task WHERE waits_for = 'x' ORDER BY created_at, id LIMIT 1":                                                                                                                      "idx_task_waits_created",
		"SELECT operation_id FROM operation WHERE project = 'p' AND mr_iid = 3":                                                                                                                          "idx_operation_mr",
		"SELECT id FROM binding WHERE status = 'VALIDATED' AND expires_at < '2026-01-01' ORDER BY expires_at LIMIT 5":                                                                                    "idx_binding_status_expires",
		"SELECT id FROM merge_batch_request WHERE partition_key = 'p' AND batch_id IS NULL AND created_at < '2027-01-01' ORDER BY created_at, id LIMIT 5":                                                "idx_merge_batch_request_claim",
		"SELECT id FROM merge_batch_request INDEXED BY idx_merge_batch_request_suspect WHERE partition_key = 'p' AND batch_id IS NULL AND suspect_round IS NOT NULL ORDER BY suspect_round DESC LIMIT 5": "idx_merge_batch_request_suspect",
	} {
		if plan := sqlitePlan(t, db, query); !strings.Contains(plan, "INDEX "+index) {
			t.Errorf("%s: plan %q, want it through %s", query, plan, index)
		}
	}
}

// Every statement of a claim that names rows by primary key goes by the rowid on SQLite: its
// planner otherwise took "batch_id IS NULL AND id IN (…)" through the batch_id index and walked
// the whole waiting set once per chunk of 500 rows.
func TestSQLiteClaimsRowsByTheirRowid(t *testing.T) {
	t.Parallel()
	st := &statements{counts: map[string]int{}}
	db := storetest.Open(t, storetest.SQLiteDSN(t), store.Options{OnStatement: st.observe})
	queued(t, db, "team/a", 20)
	claimable(t, db)
	_, _, all := st.during(t, func() {
		if c, err := batch.Claim(bg, db, claimInput("team/a", 20)); err != nil || len(c.Members) != 20 {
			t.Fatalf("claim: %+v %v", c, err)
		}
	})
	byKey := 0
	for _, s := range all {
		if !strings.Contains(s.Query, " id IN ") && !strings.Contains(s.Query, " id = ?") {
			continue
		}
		byKey++
		if p := sqlitePlan(t, db, s.Query, s.Args...); !strings.Contains(p, "INTEGER PRIMARY KEY") {
			t.Errorf("%.90s…: plan %q, want the rowid", s.Query, p)
		}
	}
	if byKey == 0 {
		t.Fatal("the claim named no row by its key")
	}
}

// sqlitePlan is SQLite's EXPLAIN QUERY PLAN of query, its lines joined with "; ".
func sqlitePlan(t *testing.T, db *store.DB, query string, args ...any) string {
	t.Helper()
	rows, err := db.Raw().QueryContext(bg, "EXPLAIN QUERY PLAN "+query, args...)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var plan []string
	for rows.Next() {
		var id, parent, unused int
		var detail string
		if err := rows.Scan(&id, &parent, &unused, &detail); err != nil {
			t.Fatal(err)
		}
		plan = append(plan, detail)
	}
	return strings.Join(plan, "; ")
}

// A reader that keeps a snapshot open (a long export) holds back the background checkpoint's
// restart of the WAL; the restart must give up soon rather than hold the writer out while it
// waits for that reader.
//
// Not parallel: it measures how long an application waits, and sharing the two cores with the
// package's other tests made one wait 2 s for the CPU alone.
func TestSQLiteCheckpointDoesNotHoldTheWriterBehindALongReader(t *testing.T) {
	db, dir := sqliteFile(t)
	mustApply(t, db, answered("op-first", "u-first", "t", "h"))
	reader, err := sql.Open("sqlite", "file:"+filepath.Join(dir, "b.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Close()
	snapshot, err := reader.BeginTx(bg, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	var n int
	if err := snapshot.QueryRow("SELECT COUNT(*) FROM operation").Scan(&n); err != nil {
		t.Fatal(err)
	}
	released := time.AfterFunc(3*time.Second, func() { snapshot.Rollback() })
	defer released.Stop()
	// Applications past the restart threshold, over several checkpoint ticks, while the
	// snapshot is open.
	var slowest time.Duration
	for i, until := 0, time.Now().Add(2500*time.Millisecond); time.Now().Before(until); i++ {
		start := time.Now()
		mustApply(t, db, answered(fmt.Sprint("op-", i), fmt.Sprint("u", i), "t", strings.Repeat("h", 500)))
		slowest = max(slowest, time.Since(start))
		if i > 400 {
			time.Sleep(5 * time.Millisecond) // the load under test: applications paced over several ticks
		}
	}
	if slowest >= 2*time.Second {
		t.Fatalf("an application waited %v behind the checkpoint, which waited for the reader", slowest)
	}
}

// sqliteFile is a migrated SQLite database in its own directory, b.db there (its WAL beside it).
func sqliteFile(t *testing.T) (*store.DB, string) {
	t.Helper()
	dir := t.TempDir()
	db, err := store.Open(bg, "sqlite:"+filepath.Join(dir, "b.db"), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	if _, err := db.Migrate(bg, schema.FS); err != nil {
		t.Fatal(err)
	}
	return db, dir
}
