// Package storetest gives every database test a fresh, migrated database: a SQLite file in the
// test's temp dir and a uniquely named MariaDB/MySQL database, dropped after the test. Use Each
// to run one test body against both.
//
// MySQL is found at BINDERY_TEST_MYSQL (a go-sql-driver DSN without a database; default
// root@tcp(127.0.0.1:3306)/). When it is unreachable the MySQL half skips with a loud message,
// unless BINDERY_REQUIRE_MYSQL=1, which makes it a failure (CI sets it).
package storetest

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"bindery/schema"
	"bindery/store"
)

// Each runs fn twice, as subtests "sqlite" and "mysql", each with its own fresh database. The
// two run in parallel (each owns its database), so a caller's closure must not share mutable
// state between them, and the caller's test function must not go on after Each: the halves
// start once it returns.
func Each(t *testing.T, fn func(t *testing.T, db *store.DB)) {
	t.Helper()
	t.Run("sqlite", func(t *testing.T) { t.Parallel(); fn(t, SQLite(t)) })
	t.Run("mysql", func(t *testing.T) { t.Parallel(); fn(t, MySQL(t)) })
}

// EachInTurn is Each with the halves one after the other, for a test that must run alone: one
// that checks that no goroutine is left (go.uber.org/goleak sees every goroutine of the process,
// the other half's too). Such a test does not call t.Parallel either: the serial tests of a
// package run before its parallel ones start.
func EachInTurn(t *testing.T, fn func(t *testing.T, db *store.DB)) {
	t.Helper()
	t.Run("sqlite", func(t *testing.T) { fn(t, SQLite(t)) })
	t.Run("mysql", func(t *testing.T) { fn(t, MySQL(t)) })
}

// EachWith is Each with store options and a companion value of the test's own (e.g. a statement
// observer, see store.Options.OnStatement) made by mk for each database, before it opens: the
// two halves run in parallel, so what the options write to is each half's own.
func EachWith[T any](t *testing.T, mk func(t *testing.T) (store.Options, T), fn func(t *testing.T, db *store.DB, v T)) {
	t.Helper()
	t.Run("sqlite", func(t *testing.T) {
		t.Parallel()
		opts, v := mk(t)
		fn(t, Open(t, migratedSQLiteDSN(t), opts), v)
	})
	t.Run("mysql", func(t *testing.T) {
		t.Parallel()
		opts, v := mk(t)
		fn(t, Open(t, MySQLDSN(t), opts), v)
	})
}

// SQLite returns a migrated database in a fresh file.
func SQLite(t testing.TB) *store.DB {
	t.Helper()
	return Open(t, migratedSQLiteDSN(t), DefaultOptions())
}

// MySQL returns a migrated, freshly created database, dropped when the test ends.
func MySQL(t testing.TB) *store.DB {
	t.Helper()
	return Open(t, MySQLDSN(t), DefaultOptions())
}

// DefaultOptions are the pool settings of test databases: enough connections for the
// concurrency tests' goroutines.
func DefaultOptions() store.Options {
	return store.Options{MaxOpenConns: 20, MaxIdleConns: 20}
}

// SQLiteDSN names a fresh SQLite file, not yet created or migrated.
func SQLiteDSN(t testing.TB) string {
	return "sqlite:" + filepath.Join(t.TempDir(), "bindery.db")
}

// migratedSQLiteDSN is a fresh SQLite file that is already migrated: a copy of a template
// database that the first test of the process migrated. A migration costs tens of milliseconds
// (ten times more under the race detector) and the suites open hundreds of databases; a copy of
// the file costs a fraction of that. Open's own Migrate then finds every migration applied.
func migratedSQLiteDSN(t testing.TB) string {
	t.Helper()
	tmpl, err := sqliteTemplate()
	if err != nil {
		t.Fatalf("template database: %v", err)
	}
	data, err := os.ReadFile(tmpl)
	if err != nil {
		t.Fatalf("template database: %v", err)
	}
	path := filepath.Join(t.TempDir(), "bindery.db")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatalf("copy the template database: %v", err)
	}
	return "sqlite:" + path
}

var (
	templateOnce sync.Once
	templatePath string
	templateErr  error
)

// sqliteTemplate is the template database of the migrations as they are: a file under the
// system's temporary directory named by a hash of the migrations, migrated by the first test
// process that needs it (in a file of its own, renamed into place) and shared by every later
// one. A change of any migration names another file.
func sqliteTemplate() (string, error) {
	templateOnce.Do(func() {
		templatePath, templateErr = makeSQLiteTemplate()
	})
	return templatePath, templateErr
}

func makeSQLiteTemplate() (string, error) {
	migs, err := store.Migrations(schema.FS, store.SQLite)
	if err != nil {
		return "", err
	}
	h := sha256.New()
	for _, m := range migs {
		fmt.Fprintf(h, "%d %s\n%s\n", m.Version, m.Name, m.SQL)
	}
	path := filepath.Join(os.TempDir(), fmt.Sprintf("bindery-storetest-%x.db", h.Sum(nil)[:8]))
	if _, err := os.Stat(path); err == nil {
		return path, nil
	}
	dir, err := os.MkdirTemp("", "bindery-storetest-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(dir)
	fresh := filepath.Join(dir, "template.db")
	ctx := context.Background()
	db, err := store.Open(ctx, "sqlite:"+fresh, DefaultOptions())
	if err != nil {
		return "", err
	}
	if _, err := db.Migrate(ctx, schema.FS); err != nil {
		db.Close()
		return "", err
	}
	// Closing checkpoints the WAL into the file and removes it: the file alone is the database.
	if err := db.Close(); err != nil {
		return "", err
	}
	if fi, err := os.Stat(fresh + "-wal"); err == nil && fi.Size() > 0 {
		return "", fmt.Errorf("the template's WAL outlived its close (%d bytes)", fi.Size())
	}
	return path, os.Rename(fresh, path)
}

// MySQLDSN creates an empty database with a unique name and returns its mysql:// DSN; the
// database is dropped when the test ends. It skips (or fails, see the package doc) without MySQL.
func MySQLDSN(t testing.TB) string {
	t.Helper()
	admin := requireMySQL(t)
	name := newName()
	ctx := context.Background()
	if _, err := admin.ExecContext(ctx, "CREATE DATABASE `"+name+"` CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"); err != nil {
		t.Fatalf("create test database: %v", err)
	}
	t.Cleanup(func() {
		if _, err := admin.ExecContext(context.Background(), "DROP DATABASE IF EXISTS `"+name+"`"); err != nil {
			t.Logf("drop test database %s: %v", name, err)
		}
	})
	cfg := adminConfig()
	cfg.DBName = name
	return "mysql://" + cfg.FormatDSN()
}

// Open opens dsn with opts (zero pool sizes take DefaultOptions'), migrates it and closes it
// when the test ends.
func Open(t testing.TB, dsn string, opts store.Options) *store.DB {
	t.Helper()
	ctx := context.Background()
	if opts.MaxOpenConns == 0 {
		opts.MaxOpenConns, opts.MaxIdleConns = DefaultOptions().MaxOpenConns, DefaultOptions().MaxIdleConns
	}
	db, err := store.Open(ctx, dsn, opts)
	if err != nil {
		t.Fatalf("open %s: %v", store.RedactDSN(dsn), err)
	}
	t.Cleanup(func() { db.Close() })
	if _, err := db.Migrate(ctx, schema.FS); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	return db
}

const namePrefix = "bindery_t_"

// newName is unique across parallel packages and processes: time, then randomness. The time
// lets a later run drop databases leaked by a killed run.
func newName() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return namePrefix + strconv.FormatInt(time.Now().Unix(), 10) + "_" + hex.EncodeToString(b[:])
}

func adminConfig() *mysql.Config {
	dsn := os.Getenv("BINDERY_TEST_MYSQL")
	if dsn == "" {
		dsn = "root@tcp(127.0.0.1:3306)/"
	}
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		panic(fmt.Sprintf("BINDERY_TEST_MYSQL=%q: %v", dsn, err))
	}
	cfg.Timeout = 3 * time.Second
	return cfg
}

var (
	adminOnce sync.Once
	adminDB   *sql.DB
	adminErr  error
)

// requireMySQL returns the admin connection, or skips/fails the test when MySQL is unreachable.
func requireMySQL(t testing.TB) *sql.DB {
	t.Helper()
	adminOnce.Do(func() {
		cfg := adminConfig()
		adminDB, adminErr = sql.Open("mysql", cfg.FormatDSN())
		if adminErr == nil {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			adminErr = adminDB.PingContext(ctx)
		}
		if adminErr != nil {
			fmt.Fprintf(os.Stderr, "\n"+
				"################################################################\n"+
				"## MySQL UNREACHABLE at %s: %v\n"+
				"## Every MySQL half of the store tests is SKIPPED.\n"+
				"## Set BINDERY_REQUIRE_MYSQL=1 to make this a failure.\n"+
				"################################################################\n\n", cfg.Addr, adminErr)
			return
		}
		dropLeaked(adminDB)
	})
	if adminErr != nil {
		if os.Getenv("BINDERY_REQUIRE_MYSQL") == "1" {
			t.Fatalf("MySQL required (BINDERY_REQUIRE_MYSQL=1) but unreachable: %v", adminErr)
		}
		t.Skipf("MySQL UNREACHABLE (%v): MySQL half skipped; set BINDERY_REQUIRE_MYSQL=1 to fail instead", adminErr)
	}
	return adminDB
}

// dropLeaked drops test databases older than two hours, left by runs that were killed.
func dropLeaked(admin *sql.DB) {
	rows, err := admin.Query("SELECT schema_name FROM information_schema.schemata WHERE schema_name LIKE 'bindery\\_t\\_%'")
	if err != nil {
		return
	}
	var old []string
	for rows.Next() {
		var name string
		if rows.Scan(&name) != nil {
			continue
		}
		stamp, _, _ := strings.Cut(strings.TrimPrefix(name, namePrefix), "_")
		if sec, err := strconv.ParseInt(stamp, 10, 64); err == nil && time.Since(time.Unix(sec, 0)) > 2*time.Hour {
			old = append(old, name)
		}
	}
	rows.Close()
	for _, name := range old {
		_, _ = admin.Exec("DROP DATABASE IF EXISTS `" + name + "`")
	}
}

// Backdate sets column of the rows of table where keyColumn = key to the database clock minus
// ago: a test of expiry makes a row old instead of waiting for it to age. The time is written
// as text in the layout both engines compare with their own clock.
func Backdate(t testing.TB, db *store.DB, table, column, keyColumn string, key any, ago time.Duration) {
	t.Helper()
	now, err := db.Now(context.Background())
	if err != nil {
		t.Fatalf("database clock: %v", err)
	}
	at := now.Add(-ago).UTC().Format("2006-01-02 15:04:05.000")
	res, err := db.Raw().ExecContext(context.Background(), "UPDATE "+table+" SET "+column+" = ? WHERE "+keyColumn+" = ?", at, key)
	if err != nil {
		t.Fatalf("backdate %s.%s: %v", table, column, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		t.Fatalf("backdate %s.%s: no row with %s = %v", table, column, keyColumn, key)
	}
}
