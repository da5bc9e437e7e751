package store_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"bindery/store"
	"bindery/store/storetest"
)

// sharedCallers runs fns through InSharedTx, each from its own goroutine, lined up behind a
// held writer on SQLite (on MySQL they simply run, one after another), and returns their errors
// and panics.
func sharedCallers(t *testing.T, db *store.DB, fns []func(tx *store.Tx) error) ([]error, []any) {
	t.Helper()
	errs, panics := make([]error, len(fns)), make([]any, len(fns))
	var wg sync.WaitGroup
	call := func(i int) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { panics[i] = recover() }()
			errs[i] = db.InSharedTx(bg, fns[i])
		}()
	}
	if db.Dialect() != store.SQLite {
		for i := range fns {
			call(i)
			wg.Wait() // one transaction each: in the order given
		}
		return errs, panics
	}
	g := heldWriters(t, db, "shared.write")
	g.lineUp(t, len(fns), 1, func() int { return store.WaitingShared(db) }, call)
	g.release()
	wg.Wait()
	return errs, panics
}

func scratchTable(t *testing.T, db *store.DB) {
	t.Helper()
	if _, err := db.Raw().Exec("CREATE TABLE shared_t (k VARCHAR(64) NOT NULL PRIMARY KEY)"); err != nil {
		t.Fatal(err)
	}
}

func insertK(k string) func(tx *store.Tx) error {
	return func(tx *store.Tx) error { return store.TxExec(tx, "INSERT INTO shared_t (k) VALUES (?)", k) }
}

// On SQLite the steps' outcomes that queue for the one writer share a transaction and its commit
// — each in a savepoint of its own, so that one that fails or panics is rolled back alone and
// its caller gets its own error or panic, while the others are written. (On MySQL each caller
// has its own transaction.)
func TestSharedTransactionsRollBackAFailingCallerAlone(t *testing.T) {
	t.Parallel()
	eachCounting(t, func(t *testing.T, db *store.DB, st *statements) {
		scratchTable(t, db)
		refused := errors.New("refused by the caller")
		var errs []error
		var panics []any
		st.during(t, func() {
			errs, panics = sharedCallers(t, db, []func(tx *store.Tx) error{
				insertK("a"),
				func(tx *store.Tx) error {
					if err := insertK("b")(tx); err != nil {
						return err
					}
					return refused
				},
				insertK("c"),
				func(tx *store.Tx) error {
					if err := insertK("d")(tx); err != nil {
						return err
					}
					panic("a step's bug")
				},
				insertK("a"), // a duplicate of the first caller's row: ErrDuplicate
				insertK("e"),
			})
		})
		if errs[0] != nil || !errors.Is(errs[1], refused) || errs[2] != nil || panics[3] != "a step's bug" || !errors.Is(errs[4], store.ErrDuplicate) || errs[5] != nil {
			t.Fatalf("errors %v, panics %v", errs, panics)
		}
		var got []string
		rows, err := db.Raw().Query("SELECT k FROM shared_t ORDER BY k")
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var k string
			rows.Scan(&k)
			got = append(got, k)
		}
		rows.Close()
		if fmt.Sprint(got) != "[a c e]" {
			t.Fatalf("rows %v, want those of the callers that succeeded", got)
		}
		txs, seq := st.boundaries()
		if want := 1; db.Dialect() == store.SQLite && (txs["BEGIN"] != want || txs["COMMIT"] != want) {
			t.Fatalf("transactions %v, want the six callers in one: %q", txs, seq)
		}
	})
}

// A caller's write interrupted mid-statement (its context ended) takes nothing of the others
// with it unseen: whether SQLite rolled back the statement or, as it may, the whole
// transaction, every caller told it succeeded is written and every caller told it failed has
// nothing written.
func TestAnInterruptedWriteNeverHalfWritesTheOthers(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		scratchTable(t, db)
		interrupted := func(tx *store.Tx) error {
			ctx, cancel := context.WithTimeout(bg, 50*time.Millisecond)
			defer cancel()
			// A write that runs until its context ends.
			return store.TxExecContext(ctx, tx, "INSERT INTO shared_t (k) WITH RECURSIVE n(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM n) SELECT CONCAT('z', x) FROM n LIMIT 100000000")
		}
		for round := range 5 {
			a, c := fmt.Sprintf("a%d", round), fmt.Sprintf("c%d", round)
			errs, _ := sharedCallers(t, db, []func(tx *store.Tx) error{insertK(a), interrupted, insertK(c)})
			if errs[1] == nil {
				t.Fatal("the interrupted write succeeded")
			}
			for i, k := range map[int]string{0: a, 2: c} {
				written := count(t, db, "SELECT COUNT(*) FROM shared_t WHERE k = '"+k+"'") == 1
				if written != (errs[i] == nil) || (errs[i] != nil && !errors.Is(errs[i], store.ErrRetry)) {
					t.Fatalf("caller %d: told %v, written %t", i, errs[i], written)
				}
			}
			if c := count(t, db, "SELECT COUNT(*) FROM shared_t WHERE k LIKE 'z%'"); c != 0 {
				t.Fatalf("%d rows of the interrupted write", c)
			}
		}
	})
}

// SQLite ends a transaction by itself after some failures (a full disk, an I/O error). A shared
// transaction ended under its callers is never half-written: the callers that ran in it are
// told their commit failed (ErrRetry: nothing of theirs was written), the ones after run alone,
// and nothing runs outside a transaction.
func TestASharedTransactionEndedUnderItsCallersIsReported(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, db *store.DB) {
		if db.Dialect() != store.SQLite {
			return // MySQL does not share transactions
		}
		scratchTable(t, db)
		ended := func(tx *store.Tx) error {
			if err := insertK("b")(tx); err != nil {
				return err
			}
			return store.TxExec(tx, "ROLLBACK") // what SQLite does by itself after such a failure
		}
		errs, _ := sharedCallers(t, db, []func(tx *store.Tx) error{insertK("a"), ended, insertK("c")})
		if !errors.Is(errs[0], store.ErrSharedLost) || !errors.Is(errs[0], store.ErrRetry) || !errors.Is(errs[1], store.ErrSharedLost) || errs[2] != nil {
			t.Fatalf("errors %v", errs)
		}
		if c := count(t, db, "SELECT COUNT(*) FROM shared_t"); c != 1 {
			t.Fatalf("%d rows, want only the caller that ran alone after the loss", c)
		}
		if c := count(t, db, "SELECT COUNT(*) FROM shared_t WHERE k = 'c'"); c != 1 {
			t.Fatal("the caller after the lost transaction was not written")
		}
	})
}
