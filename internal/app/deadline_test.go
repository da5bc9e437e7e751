package app_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"bindery/internal/testkit"
	"bindery/store"
)

// Writes blocked (SQLite: another process holds the write lock; MariaDB: a global read lock):
// the API answers 503 with Retry-After within database.requestTimeout — never a 500, never a wait
// for the lock — and /readyz says the database takes no writes; once the lock goes, both recover.
func TestBlockedWritesAnswer503WithinTheRequestTimeout(t *testing.T) {
	t.Parallel()
	eachDSN(t, func(t *testing.T, dsn string) {
		_, configPath, fileDSN := demoDir(t)
		if strings.HasPrefix(dsn, "sqlite:") {
			dsn = fileDSN
		}
		f, err := os.OpenFile(configPath, os.O_APPEND|os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		// 2 s, not less: the application before the lock is the test's setup and must get
		// through on a machine busy with the other packages' tests.
		fmt.Fprint(f, "\ndatabase:\n  requestTimeout: 2s\n")
		f.Close()
		d := startDemo(t, configPath, dsn)
		apply(t, d, "alice", "payments-db-readonly")

		release := lockWrites(t, d.DB())
		call := func(method, path, body string) (int, string, time.Duration) {
			req, _ := http.NewRequest(method, d.URL()+path, strings.NewReader(body))
			req.Header.Set("X-Bindery-User", "bob")
			if body != "" {
				req.Header.Set("Content-Type", "application/json")
			}
			start := time.Now()
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			return resp.StatusCode, resp.Header.Get("Retry-After"), time.Since(start)
		}
		body := fmt.Sprintf(`{"operationId":"op-blocked-%d","targetKey":"payments-db-readonly","reason":"demo"}`, time.Now().UnixNano())
		for _, c := range []struct{ method, path, body string }{{"POST", "/api/apply", body}, {"GET", "/readyz", ""}} {
			code, retry, took := call(c.method, c.path, c.body)
			if code != 503 || retry == "" || took > 10*time.Second {
				t.Errorf("%s %s with writes blocked: %d, Retry-After %q, after %s", c.method, c.path, code, retry, took)
			}
		}
		release()
		// The statements the database queued behind the lock run out first; a client that
		// honours Retry-After gets through. (The blocked application's own id may stay "still
		// being processed" (409, Retry-After) until its claim's lease ends: the database may have
		// run its claim after the lock went.)
		again := fmt.Sprintf(`{"operationId":"op-after-%d","targetKey":"payments-db-readonly","reason":"demo"}`, time.Now().UnixNano())
		for _, c := range []struct{ method, path, body string }{{"POST", "/api/apply", again}, {"GET", "/api/my/requests", ""}, {"GET", "/readyz", ""}} {
			testkit.Eventually(t, c.path+" after the lock went", func() bool {
				code, _, _ := call(c.method, c.path, c.body)
				if code != 503 && code/100 != 2 {
					t.Fatalf("%s %s after the lock went: %d", c.method, c.path, code)
				}
				return code/100 == 2
			})
		}
	})
}

// lockWrites blocks every write to the database from another connection until release.
func lockWrites(t *testing.T, db *store.DB) (release func()) {
	t.Helper()
	ctx := context.Background()
	conn, err := db.Raw().Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	lock, unlock := "BEGIN IMMEDIATE", "ROLLBACK"
	if db.Dialect() == store.MySQL {
		// A read lock on each of this database's tables, not the server's global read lock: the
		// global one would also hold the writes of every other test's database on the server.
		var tables []string
		rows, err := conn.QueryContext(ctx, "SELECT table_name FROM information_schema.tables WHERE table_schema = DATABASE() AND table_type = 'BASE TABLE'")
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var name string
			if err := rows.Scan(&name); err != nil {
				t.Fatal(err)
			}
			tables = append(tables, "`"+name+"` READ")
		}
		if err := rows.Close(); err != nil {
			t.Fatal(err)
		}
		lock, unlock = "LOCK TABLES "+strings.Join(tables, ", "), "UNLOCK TABLES"
	}
	if _, err := conn.ExecContext(ctx, lock); err != nil {
		t.Fatal(err)
	}
	return func() {
		if _, err := conn.ExecContext(ctx, unlock); err != nil {
			t.Error(err)
		}
		conn.Close()
	}
}
