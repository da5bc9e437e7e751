package store

import (
	"database/sql"
	"path/filepath"
	"testing"
	"time"

	"modernc.org/sqlite"

	"bindery/internal/work/service/servicetest"
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
	t.Run("stopped before it starts", func(t *testing.T) {
		servicetest.StoppedBeforeStart(t, &checkpointer{cp: open(t), every: time.Millisecond})
	})
	t.Run("started, checkpointing and stopped twice", func(t *testing.T) {
		cp := open(t)
		if _, err := cp.Exec("CREATE TABLE t (x INTEGER)"); err != nil {
			t.Fatal(err)
		}
		servicetest.StartedAndStoppedTwice(t, &checkpointer{cp: cp, every: time.Millisecond}, func() {
			for range 20 { // writes between ticks: the checkpoints run against a moving WAL
				if _, err := cp.Exec("INSERT INTO t VALUES (1)"); err != nil {
					t.Fatal(err)
				}
				time.Sleep(time.Millisecond)
			}
		})
		if err := cp.Ping(); err == nil {
			t.Fatal("the checkpoints' connection is still open after Stop")
		}
	})
}
