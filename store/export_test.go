package store

import (
	"context"
	"database/sql"
)

// Hooks into unexported paths for the external test package: the transaction pause points, the
// locking claim read that the product never uses (it exists to show, in a test and a benchmark,
// why the claim reads plainly), and the idempotency winner re-read.

// IdempotencyWinner is the re-read after a lost insert, for the "winner gone" branch.
var IdempotencyWinner = (*DB).idempotencyWinner

// SetPause installs fn, called at named points inside transactions ("claim.slot", "claim.read",
// "claim.written", "settle.batch", "apply.read": a re-application has read the row it locked,
// "submit.write": a writer of application groups is about to take its group, "shared.write":
// the same for shared transactions).
func SetPause(db *DB, fn func(point string)) { db.pause = fn }

// SetLockingClaimRead makes Claim read its waiting rows FOR UPDATE.
func SetLockingClaimRead(db *DB, on bool) { db.lockingClaimRead = on }

// SetSkipClaimPrecheck makes Claim start its transaction without the lock-free pre-check.
func SetSkipClaimPrecheck(db *DB, on bool) { db.skipClaimPrecheck = on }

// MaxInList is the chunk size of IN lists and multi-row inserts.
const MaxInList = maxInList

// GroupWriters is how many application groups db writes at once.
func GroupWriters(db *DB) int { return db.applies.max }

// WaitingSubmissions is how many applications wait for a group.
func WaitingSubmissions(db *DB) int { return db.applies.size() }

// ClipNote is how a note is cut before it is stored.
var ClipNote = clipNote

// WaitingShared is how many InSharedTx callers wait for a shared transaction (0 on MySQL).
func WaitingShared(db *DB) int {
	if db.shared == nil {
		return 0
	}
	return db.shared.size()
}

// ErrSharedLost is what a caller of a shared transaction that SQLite rolled back is told.
var ErrSharedLost = errSharedLost

// TxExec runs a statement in tx (tests of transactions as such).
func TxExec(tx *Tx, query string, args ...any) error {
	return TxExecContext(context.Background(), tx, query, args...)
}

// TxExecContext is TxExec with a context.
func TxExecContext(ctx context.Context, tx *Tx, query string, args ...any) error {
	_, err := tx.tx.ExecContext(ctx, query, args...)
	return translate(err)
}

// ReadPool is the pool reads go through (SQLite: its own connections beside the one writer).
func ReadPool(db *DB) *sql.DB { return db.ro }

// CheckpointsCaughtUp is how many background checkpoints left SQLite's WAL short or started it
// over (0 on MySQL).
func CheckpointsCaughtUp(db *DB) int64 {
	if db.checkpoints == nil {
		return 0
	}
	return db.checkpoints.caughtUp.Load()
}
