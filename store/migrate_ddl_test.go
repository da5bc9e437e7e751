package store_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"bindery/internal/testkit"
	"bindery/store"
	"bindery/store/storetest"
)

// A migration's DDL that waits for a table a running instance's transaction holds gives way
// (MySQL): the running release's statements on that table are not queued behind it for as long
// as that transaction lasts (a rolling upgrade's previous release answered 503 meanwhile), and
// the DDL goes through once the transaction ends.
func TestAMigrationsDDLGivesWayToTheRunningRelease(t *testing.T) {
	t.Parallel()
	db := storetest.MySQL(t)
	future, next := withFuture(t, store.MySQL)
	future[fmt.Sprintf("mysql/%04d_future.sql", next)].Data = []byte("ALTER TABLE instance ADD COLUMN IF NOT EXISTS future_note VARCHAR(40) NULL;\n")

	// The running release's transaction: it read the table and has not ended.
	holder, err := db.Raw().BeginTx(bg, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Rollback()
	var n int
	if err := holder.QueryRow("SELECT COUNT(*) FROM instance").Scan(&n); err != nil {
		t.Fatal(err)
	}
	migrated := make(chan error, 1)
	go func() { _, err := db.Migrate(bg, future); migrated <- err }()
	testkit.Eventually(t, "the ALTER to wait for the table's metadata lock", func() bool {
		var waiting int
		err := db.Raw().QueryRow("SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE STATE = 'Waiting for table metadata lock' AND INFO LIKE 'ALTER TABLE instance%'").Scan(&waiting)
		return err == nil && waiting > 0
	})

	// The running release reads the table meanwhile: it waits at most until the ALTER gives way,
	// not until the holder ends (it never does before this read returns).
	ctx, cancel := context.WithTimeout(bg, testkit.Timeout()/2)
	defer cancel()
	if err := db.Raw().QueryRowContext(ctx, "SELECT COUNT(*) FROM instance").Scan(&n); err != nil {
		t.Fatalf("a statement of the running release behind the migration's ALTER: %v", err)
	}
	select {
	case err := <-migrated:
		t.Fatalf("the migration ended while the table was held: %v", err)
	default:
	}

	if err := holder.Commit(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-migrated:
		if err != nil {
			t.Fatalf("the migration after the transaction ended: %v", err)
		}
	case <-time.After(testkit.Timeout()):
		t.Fatal("the migration did not end after the transaction did")
	}
	if err := db.Raw().QueryRow("SELECT COUNT(*) FROM instance WHERE future_note IS NULL").Scan(&n); err != nil {
		t.Fatalf("the new column: %v", err)
	}
}
