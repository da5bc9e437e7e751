package store

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"go.uber.org/goleak"
	"modernc.org/sqlite"

	"bindery/service"
)

// SQLite's background checkpointer keeps the start/stop contract of every background service:
// stopped before it starts it never runs; started, it checkpoints until Stop, which waits for
// its goroutine, closes its connection and leaves nothing behind; a second Stop is harmless.
func TestTheCheckpointerStopsBeforeItStartsTwiceAndLeavesNoGoroutine(t *testing.T) {
	open := func(t *testing.T) *sql.DB {
		conn, err := sqlite.NewConnector(sqliteURI(filepath.Join(t.TempDir(), "cp.db"), checkpointPatience))
		if err != nil {
			t.Fatal(err)
		}
		cp := sql.OpenDB(conn)
		cp.SetMaxOpenConns(1)
		return cp
	}
	ctx := context.Background()
	t.Run("stopped before it starts", func(t *testing.T) {
		cp := open(t)
		defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
		c := &checkpointer{cp: cp, every: time.Millisecond}
		if err := c.Stop(ctx); err != nil {
			t.Fatal(err)
		}
		if err := c.Start(ctx); !errors.Is(err, service.ErrStopped) {
			t.Fatalf("start after stop: %v", err)
		}
		if err := c.Stop(ctx); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("started, checkpointing and stopped twice", func(t *testing.T) {
		cp := open(t)
		if _, err := cp.Exec("CREATE TABLE t (x INTEGER)"); err != nil {
			t.Fatal(err)
		}
		defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
		c := &checkpointer{cp: cp, every: time.Millisecond}
		if err := c.Start(ctx); err != nil {
			t.Fatal(err)
		}
		for range 20 { // writes between ticks: the checkpoints run against a moving WAL
			if _, err := cp.Exec("INSERT INTO t VALUES (1)"); err != nil {
				t.Fatal(err)
			}
			time.Sleep(time.Millisecond)
		}
		if err := c.Stop(ctx); err != nil {
			t.Fatal(err)
		}
		if err := c.Stop(ctx); err != nil {
			t.Fatal(err)
		}
		if err := cp.Ping(); err == nil {
			t.Fatal("the checkpoints' connection is still open after Stop")
		}
	})
}
