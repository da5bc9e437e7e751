package storetest

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
)

// The raw baselines: the least database work each of bindery's figures stands on, written once
// for the store's benchmarks and `go run ./cmd/bench`, so that both divide by the same operation.
//
//   - an application: a transaction of two inserts with unique keys (a key that refuses a
//     duplicate, and the row it guards);
//   - a status read: a point read of three indexed rows (a request, its binding, its latest step).

// RawTables creates the baselines' tables.
var RawTables = []string{
	"CREATE TABLE raw_a (id BIGINT NOT NULL PRIMARY KEY, k VARCHAR(64) NOT NULL, UNIQUE (k))",
	"CREATE TABLE raw_b (id BIGINT NOT NULL PRIMARY KEY, k VARCHAR(64) NOT NULL, v VARCHAR(255) NOT NULL, UNIQUE (k))",
	"CREATE TABLE raw_p (id BIGINT NOT NULL PRIMARY KEY, k VARCHAR(64) NOT NULL, v VARCHAR(255) NOT NULL, UNIQUE (k))",
}

// RawTwoInserts is the application's baseline: row id under the unique key in both tables, in
// one transaction.
func RawTwoInserts(ctx context.Context, db *sql.DB, id int64, key string) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, "INSERT INTO raw_a (id, k) VALUES (?, ?)", id, key); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, "INSERT INTO raw_b (id, k, v) VALUES (?, ?, ?)", id, key, "reason for the request"); err != nil {
		return err
	}
	return tx.Commit()
}

// rawPoints is how many rows the point reads go through.
const rawPoints = 3000

// SeedRawPoints fills raw_p with the rows the point reads find, those not there yet.
func SeedRawPoints(ctx context.Context, db *sql.DB) error {
	var n int
	if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM raw_p").Scan(&n); err != nil {
		return err
	}
	for i := n; i < rawPoints; i += 500 {
		var vals []string
		var args []any
		for j := i; j < min(i+500, rawPoints); j++ {
			vals = append(vals, "(?, ?, ?)")
			args = append(args, j, fmt.Sprint("p-", j), "a stored value of a realistic width for a row")
		}
		if _, err := db.ExecContext(ctx, "INSERT INTO raw_p (id, k, v) VALUES "+strings.Join(vals, ", "), args...); err != nil {
			return err
		}
	}
	return nil
}

// RawPointRead is the status read's baseline: the n-th triple of raw_p's rows, by their unique key.
func RawPointRead(ctx context.Context, db *sql.DB, n int64) error {
	base := (n % (rawPoints / 3)) * 3
	rows, err := db.QueryContext(ctx, "SELECT id, k, v FROM raw_p WHERE k IN (?, ?, ?)",
		fmt.Sprint("p-", base), fmt.Sprint("p-", base+1), fmt.Sprint("p-", base+2))
	if err != nil {
		return err
	}
	defer rows.Close()
	got := 0
	for rows.Next() {
		var id int64
		var k, v string
		if err := rows.Scan(&id, &k, &v); err != nil {
			return err
		}
		got++
	}
	if got != 3 {
		return fmt.Errorf("point read: %d rows, want 3", got)
	}
	return rows.Err()
}
