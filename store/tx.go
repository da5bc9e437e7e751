package store

import (
	"context"
	"database/sql"
	"strings"
	"time"

	"bindery/internal/vocab/state"
)

// Tx is a write transaction that composes several store steps atomically, e.g. recording an
// approval callback, moving the binding and admitting it to the waiting set. Get one from
// DB.InTx; it is valid only inside the function given there.
type Tx struct {
	executor // the shared reads and writes, run in this transaction
	db       *DB
	tx       *sql.Tx
}

// newTx wraps a database transaction of db.
func newTx(db *DB, tx *sql.Tx) *Tx {
	t := &Tx{db: db, tx: tx}
	t.executor = executor{db: db, tx: t}
	return t
}

// InTx runs fn in one write transaction: committed when fn returns nil, rolled back otherwise.
// Inside fn use only tx: on SQLite the write connection is single, so a call through db would
// wait for the transaction that is waiting for it.
func (db *DB) InTx(ctx context.Context, fn func(tx *Tx) error) error {
	return db.inTx(ctx, func(tx *sql.Tx) error { return fn(newTx(db, tx)) })
}

// queryer is what reads need from *sql.DB and *sql.Tx alike.
type queryer interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// scanner is *sql.Row or *sql.Rows.
type scanner interface {
	Scan(dest ...any) error
}

// maxInList bounds the placeholders of one IN list and the rows of one multi-row insert
// (docs/invariants.md, 'Bulk paths'): bulk paths issue one statement per chunk, never one per row,
// and never an unbounded statement.
const maxInList = 500

// chunks splits items into slices of at most n.
func chunks[T any](items []T, n int) [][]T {
	var out [][]T
	for len(items) > n {
		out = append(out, items[:n])
		items = items[n:]
	}
	if len(items) > 0 {
		out = append(out, items)
	}
	return out
}

// inList returns "(?, ?, …)" for n values.
func inList(n int) string {
	return "(" + strings.TrimSuffix(strings.Repeat("?, ", n), ", ") + ")"
}

// The IN lists of the vocabulary's selections (the active and the settled batch statuses, the
// ended binding statuses): statements select by what a status means, which state defines.
var (
	inActive  = inList(len(state.ActiveBatchStatuses()))
	inSettled = inList(len(state.SettledBatchStatuses()))
	inEnded   = inList(len(state.EndedStatuses()))
)

// rowsOf returns n copies of one VALUES tuple, for a multi-row insert.
func rowsOf(tuple string, n int) string {
	return strings.TrimSuffix(strings.Repeat(tuple+", ", n), ", ")
}

// anys converts a typed slice into query arguments.
func anys[T any](xs []T) []any {
	out := make([]any, len(xs))
	for i, x := range xs {
		out[i] = x
	}
	return out
}

// forUpdate locks the rows a read returns on MySQL. SQLite needs no row locks: its single write
// connection (BEGIN IMMEDIATE) already serialises every read-then-write transaction.
func (db *DB) forUpdate() string {
	if db.dialect == MySQL {
		return " FOR UPDATE"
	}
	return ""
}

// hinted names table with the index MySQL must use for a statement that locks rows. Why: on a
// small table (a demo, a fresh partition) the optimizer may prefer scanning the whole table for a
// long IN list, or a status index for "WHERE id = ? AND status = ?"; a locking scan in REPEATABLE
// READ locks every row or gap it passes — an open claim or settlement would block every enqueue
// (I3), and concurrent guarded updates deadlock on the status index's gaps. Through the primary
// or unique key, InnoDB locks only the rows named.
func (db *DB) hinted(table, index string) string {
	switch {
	case db.dialect == MySQL:
		return table + " FORCE INDEX (" + index + ")"
	case index != "PRIMARY":
		// SQLite's planner has the same weakness: for "operation_id IN (…) AND status IN (…)"
		// it may walk the status index — every MERGED row, once per chunk.
		return table + " INDEXED BY " + index
	}
	// The primary key is the rowid, which NOT INDEXED still looks up: without it SQLite took
	// "batch_id IS NULL AND id IN (…)" through the batch_id index, walking the whole waiting
	// set once per chunk of a claim (a claim of 100,000 rows: 200 walks).
	return table + " NOT INDEXED"
}

// deleteFrom starts a DELETE through index (see hinted); MySQL accepts the hint only in its
// multi-table form.
func (db *DB) deleteFrom(table, index string) string {
	if db.dialect == MySQL {
		return "DELETE " + table + " FROM " + table + " FORCE INDEX (" + index + ")"
	}
	return "DELETE FROM " + db.hinted(table, index)
}

// timeArg turns a time read from the database back into a parameter that compares equal to the
// stored value: SQLite stores DATETIME as text with milliseconds, MySQL as DATETIME(6).
func (db *DB) timeArg(t time.Time) any {
	if db.dialect == SQLite {
		return t.UTC().Format("2006-01-02 15:04:05.000")
	}
	return t.UTC()
}

// affected returns the rows a write changed.
func affected(res sql.Result) (int64, error) {
	return res.RowsAffected()
}

// nullInt turns 0 ("none") into NULL.
func nullInt(v int64) any {
	if v == 0 {
		return nil
	}
	return v
}

// timePtr returns the time of a nullable column.
func (d dbTime) ptr() *time.Time {
	if !d.Valid {
		return nil
	}
	t := d.T
	return &t
}

// prefixed qualifies a column list with a table alias: prefixed("o.", "id, step") = "o.id, o.step".
func prefixed(alias, columns string) string {
	return alias + strings.ReplaceAll(columns, ", ", ", "+alias)
}

// collect scans every row a query returned (err is the query's) and closes the rows.
func collect[T any](rows *sql.Rows, err error, scan func(scanner) (T, error)) ([]T, error) {
	if err != nil {
		return nil, translate(err)
	}
	defer rows.Close()
	var out []T
	for rows.Next() {
		x, err := scan(rows)
		if err != nil {
			return nil, translate(err)
		}
		out = append(out, x)
	}
	return out, translate(rows.Err())
}

// trimPage keeps the first limit items of a list read with LIMIT limit+1 and returns the cursor
// after the last one kept, "" when there is no further page.
func trimPage[T any](items []T, limit int, after func(T) cursor) ([]T, string) {
	if len(items) <= limit {
		return items, ""
	}
	items = items[:limit]
	return items, after(items[limit-1]).encode()
}

// assignments is an UPDATE's SET list and its arguments, built from parts that may be absent.
type assignments struct {
	list string
	args []any
}

// set appends one assignment ("note = ?") with its arguments.
func (a *assignments) set(assignment string, args ...any) {
	if a.list != "" {
		a.list += ", "
	}
	a.list += assignment
	a.args = append(a.args, args...)
}

// refs records the MR and pipeline numbers that are given (non-zero).
func (a *assignments) refs(mrIID, pipelineID int64) {
	if mrIID != 0 {
		a.set("mr_iid = ?", mrIID)
	}
	if pipelineID != 0 {
		a.set("pipeline_id = ?", pipelineID)
	}
}

// execer is what writes need from *sql.DB and *sql.Tx alike.
type execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}
