package store

import (
	"context"
	"database/sql"
	"fmt"
)

// Shared transactions on SQLite (docs/architecture.md, "SQLite's write path").
//
// SQLite has one writer, and what a commit costs it is the pages it writes to the WAL — two
// system calls each — more than the statements before it. The engine's workers each end a step
// with a short transaction (the fenced task write and the request's or the batch's writes), and
// under load those commits queue for the writer one after another, each writing the same hot
// pages again (the task table's and the status indexes' newest leaves). InSharedTx lets the
// callers that queue together share one transaction: each runs inside a savepoint of its own,
// so one that fails is rolled back alone, and one commit writes the group's pages once.
//
// MySQL gains nothing from it — InnoDB already shares the log flush of concurrent commits — and
// a savepoint would cost it two round trips; there InSharedTx is InTx.

// maxShared bounds the callers of one shared transaction.
const maxShared = 32

// sharedCall is one caller of InSharedTx waiting for its outcome.
type sharedCall struct {
	ctx      context.Context // the caller's: its statements run in it
	fn       func(tx *Tx) error
	err      error
	panicked any
}

// errSharedLost: the shared transaction was rolled back as a whole after the caller's function
// had run in it (SQLite rolls a transaction back by itself when a write in it is interrupted or
// the disk fails), so nothing of it was written. The caller sees it as a failed commit.
var errSharedLost = fmt.Errorf("the shared transaction was rolled back: %w", ErrRetry)

// InSharedTx runs fn in a write transaction, like InTx: committed when fn returns nil, rolled
// back when it returns an error or panics (the panic goes on in the caller). On SQLite the
// transaction may be shared with concurrent callers (above); fn must then not assume that the
// writes it sees are committed — they are, for every caller, only when InSharedTx returns nil.
func (db *DB) InSharedTx(ctx context.Context, fn func(tx *Tx) error) error {
	if db.shared == nil {
		return db.InTx(ctx, fn)
	}
	c := &sharedCall{ctx: ctx, fn: fn}
	db.shared.join(ctx, c, db.writeShared)
	if c.panicked != nil {
		panic(c.panicked)
	}
	return c.err
}

// writeShared runs the calls in one transaction in ctx, each in a savepoint, and commits once. A
// group of one is InTx itself.
func (db *DB) writeShared(ctx context.Context, live []*sharedCall) {
	if len(live) == 1 {
		c := live[0]
		c.err, c.panicked = guarded(func() error { return db.InTx(ctx, c.fn) })
		return
	}
	tx, err := db.rw.BeginTx(ctx, nil)
	if err != nil {
		for _, c := range live {
			c.err = translate(err)
		}
		return
	}
	shared := newTx(db, tx)
	var written []*sharedCall
	// lost ends the transaction that SQLite rolled back by itself: what ran in it is gone, and
	// the calls not run yet run alone.
	lost := func(rest []*sharedCall) {
		_ = tx.Rollback()
		for _, c := range written {
			c.err = errSharedLost
		}
		for _, c := range rest {
			c.err, c.panicked = guarded(func() error { return db.InTx(c.ctx, c.fn) })
		}
	}
	for i, c := range live {
		if _, err := tx.ExecContext(ctx, "SAVEPOINT shared"); err != nil {
			lost(live[i:])
			return
		}
		err, p := guarded(func() error { return c.fn(shared) })
		ok := err == nil && p == nil
		if ok {
			written = append(written, c)
		} else {
			c.err, c.panicked = translate(err), p
		}
		if err := endSavepoint(ctx, tx, ok); err != nil {
			lost(live[i+1:])
			return
		}
	}
	if err := tx.Commit(); err != nil {
		for _, c := range written {
			c.err = translate(txEnded(ctx, err))
		}
	}
}

// endSavepoint keeps the savepoint's writes (ok) or rolls them back, and ends it. An error: the
// transaction is gone (SQLite rolled it back by itself).
func endSavepoint(ctx context.Context, tx *sql.Tx, ok bool) error {
	if !ok {
		if _, err := tx.ExecContext(ctx, "ROLLBACK TO shared"); err != nil {
			return err
		}
	}
	_, err := tx.ExecContext(ctx, "RELEASE shared")
	return err
}

// guarded runs fn and catches its panic.
func guarded(fn func() error) (err error, panicked any) {
	defer func() {
		if p := recover(); p != nil {
			panicked = p
		}
	}()
	return fn(), nil
}
