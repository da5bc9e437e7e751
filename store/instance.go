package store

import (
	"context"
	"database/sql"
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
