package store

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"bindery/internal/testkit"
)

// A transaction whose context ends is rolled back by database/sql on its own; the commit then
// reports only "transaction has already been committed or rolled back". That is a database too
// slow to answer in time — the caller answers "unavailable" — never an internal error.
func TestATransactionRolledBackByItsDeadlineIsUnavailable(t *testing.T) {
	t.Parallel()
	db, err := Open(context.Background(), "sqlite:"+filepath.Join(t.TempDir(), "tx.db"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	err = db.inTx(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, "SELECT 1"); err != nil {
			return err
		}
		<-ctx.Done()
		// database/sql's own rollback runs on a goroutine of its own: wait until it has.
		testkit.Eventually(t, "the rollback of the ended transaction", func() bool {
			_, err := tx.ExecContext(context.Background(), "SELECT 1")
			return errors.Is(err, sql.ErrTxDone)
		})
		return nil
	})
	if !errors.Is(err, sql.ErrTxDone) || !Unavailable(err) {
		t.Fatalf("commit after the deadline: %v (unavailable %v); want the deadline named", err, Unavailable(err))
	}
}
