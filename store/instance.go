package store

import (
	"context"
	"database/sql"
	"fmt"
	"time"
)

// Heartbeat records that instance id is alive (inserting it on first call).
func (db *DB) Heartbeat(ctx context.Context, id, version string) error {
	return db.inTx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, "UPDATE instance SET heartbeat_at = "+db.now()+", version = ? WHERE id = ?", version, id)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n > 0 {
			return nil
		}
		_, err = tx.ExecContext(ctx, "INSERT INTO instance (id, version) VALUES (?, ?)", id, version)
		return err
	})
}

// LiveInstances counts instances whose heartbeat is younger than within (by the database clock).
// It never returns less than 1: the caller is alive even before its first heartbeat lands.
func (db *DB) LiveInstances(ctx context.Context, within time.Duration) (int, error) {
	var n int
	err := db.ro.QueryRowContext(ctx, "SELECT COUNT(*) FROM instance WHERE heartbeat_at > "+db.nowPlus(), -micros(within)).Scan(&n)
	if err != nil {
		return 1, translate(err)
	}
	return max(n, 1), nil
}

// RemoveInstance deletes an instance's row on clean shutdown, so the others' share grows at once.
func (db *DB) RemoveInstance(ctx context.Context, id string) error {
	_, err := db.rw.ExecContext(ctx, "DELETE FROM instance WHERE id = ?", id)
	return translate(err)
}

// TakeOverClaims ends at once the claims of instances whose heartbeat stopped — older than
// within, by the database clock — instead of when their lease runs out: it makes each such task
// due now, and the next claim (which bumps the epoch) takes it. Such an instance crashed, or it
// is one that a restored backup still names (docs/install.md, 'Backup and restore'). self is never
// taken over, nor an owner without a row: an instance before its first beat, or one that stopped
// cleanly (it released its claims before it removed its row). An instance that was only slow
// writes nothing more: every write of a holder is fenced on the epoch it claimed. It returns how
// many claims it ended.
func (db *DB) TakeOverClaims(ctx context.Context, self string, within time.Duration) (int, error) {
	// A plain read finds them (few: only claimed tasks have an owner); each is ended by its
	// primary key, guarded on the epoch and owner read, so that a claim renewed or moved on
	// meanwhile is left alone.
	rows, err := db.ro.QueryContext(ctx, "SELECT t.id, t.epoch, t.owner FROM task t JOIN instance i ON i.id = t.owner "+
		"WHERE t.owner <> ? AND t.due_at > "+db.now()+" AND i.heartbeat_at <= "+db.nowPlus(), self, -micros(within))
	type claim struct {
		id, epoch int64
		owner     string
	}
	stale, err := collect(rows, err, func(s scanner) (claim, error) {
		var c claim
		return c, translate(s.Scan(&c.id, &c.epoch, &c.owner))
	})
	if err != nil {
		return 0, fmt.Errorf("claims of stopped instances: %w", err)
	}
	n := 0
	for _, c := range stale {
		res, err := db.rw.ExecContext(ctx, "UPDATE "+db.hinted("task", "PRIMARY")+" SET due_at = "+db.now()+", updated_at = "+db.now()+
			" WHERE id = ? AND epoch = ? AND owner = ? AND due_at > "+db.now(), c.id, c.epoch, c.owner)
		if err != nil {
			return n, fmt.Errorf("take over task %d of %s: %w", c.id, c.owner, translate(err))
		}
		if k, err := affected(res); err == nil {
			n += int(k)
		}
	}
	return n, nil
}
