package store

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"testing"

	"modernc.org/sqlite"
)

// cachedPool opens a one-connection SQLite pool whose connection keeps prepared statements.
func cachedPool(t *testing.T) (*sql.DB, *sql.Conn) {
	t.Helper()
	c, err := sqlite.NewConnector("file:" + filepath.Join(t.TempDir(), "c.db"))
	if err != nil {
		t.Fatal(err)
	}
	db := sql.OpenDB(cachingConnector{c})
	t.Cleanup(func() { db.Close() })
	conn, err := db.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	if _, err := conn.ExecContext(context.Background(), "CREATE TABLE kv (k INTEGER PRIMARY KEY, v TEXT)"); err != nil {
		t.Fatal(err)
	}
	return db, conn
}

// cached is the number of prepared statements the connection holds.
func cached(t *testing.T, conn *sql.Conn) int {
	t.Helper()
	n := -1
	if err := conn.Raw(func(dc any) error { n = len(dc.(*cachingConn).stmts); return nil }); err != nil {
		t.Fatal(err)
	}
	return n
}

func TestPreparedStatementsAreKeptAndReused(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, conn := cachedPool(t)
	if n := cached(t, conn); n != 0 {
		t.Fatalf("DDL was prepared and kept: %d statements", n)
	}
	for i := range 3 {
		if _, err := conn.ExecContext(ctx, "INSERT INTO kv (k, v) VALUES (?, ?)", i, fmt.Sprint("v", i)); err != nil {
			t.Fatal(err)
		}
	}
	if n := cached(t, conn); n != 1 {
		t.Fatalf("three runs of one insert kept %d statements, want 1", n)
	}
	// The same query while its rows are still open (a read inside a loop over the same read):
	// the second run must not reset the first one's statement.
	const q = "SELECT k, v FROM kv WHERE k >= ? ORDER BY k"
	outer, err := conn.QueryContext(ctx, q, 0)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for outer.Next() {
		var k int
		var v string
		if err := outer.Scan(&k, &v); err != nil {
			t.Fatal(err)
		}
		inner, err := conn.QueryContext(ctx, q, k)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for inner.Next() {
			n++
		}
		if err := inner.Close(); err != nil {
			t.Fatal(err)
		}
		got = append(got, fmt.Sprintf("%s:%d", v, n))
	}
	if err := outer.Close(); err != nil {
		t.Fatal(err)
	}
	if want := "[v0:3 v1:2 v2:1]"; fmt.Sprint(got) != want {
		t.Fatalf("nested runs of one query read %v, want %s", got, want)
	}
	if n := cached(t, conn); n != 2 {
		t.Fatalf("kept %d statements, want 2 (the insert and the read)", n)
	}
	// A statement the database refuses is the caller's error, as without the cache.
	if _, err := conn.QueryContext(ctx, "SELECT nope FROM kv"); err == nil {
		t.Fatal("a query of a missing column answered")
	}
}

func TestPreparedStatementsAreBounded(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, conn := cachedPool(t)
	for i := range stmtsPerConn + 10 {
		var n int
		if err := conn.QueryRowContext(ctx, fmt.Sprintf("SELECT COUNT(*) + %d FROM kv", i)).Scan(&n); err != nil || n != i {
			t.Fatalf("query %d: %d, %v", i, n, err)
		}
	}
	if n := cached(t, conn); n != stmtsPerConn {
		t.Fatalf("kept %d statements, want the bound %d", n, stmtsPerConn)
	}
}
