// Package storetest gives every database test a fresh, migrated database: a SQLite file in the
// test's temp dir and a uniquely named MariaDB/MySQL database, dropped after the test, each a copy
// of a template the migrations built once. Use Each to run one test body against both.
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
		fn(t, Open(t, migratedMySQLDSN(t), opts), v)
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
	return Open(t, migratedMySQLDSN(t), DefaultOptions())
}

// DefaultOptions are the pool settings of test databases: enough connections for the
// concurrency tests' goroutines.
func DefaultOptions() store.Options {
	return store.Options{MaxOpenConns: 20, MaxIdleConns: 20}
}

// MigratedDSN is the DSN of a fresh, migrated database of dialect d (a copy of its template,
// as SQLite and MySQL give), for a test that opens it itself — a whole process booted on it.
func MigratedDSN(t testing.TB, d store.Dialect) string {
	t.Helper()
	if d == store.MySQL {
		return migratedMySQLDSN(t)
	}
	return migratedSQLiteDSN(t)
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
	dsn, _ := emptyMySQL(t)
	return dsn
}

// emptyMySQL is MySQLDSN, with the database's name.
func emptyMySQL(t testing.TB) (dsn, name string) {
	t.Helper()
	admin := requireMySQL(t)
	name = newName()
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
	return "mysql://" + cfg.FormatDSN(), name
}

// migratedMySQLDSN is a fresh MariaDB/MySQL database that is already migrated: its tables are
// copied from a template database (CREATE TABLE ... LIKE, then the rows the migrations seed).
// A migration is some seventy DDL statements, each a few file creations and syncs of the
// server's; the copy is one statement per table, and the suites create hundreds of databases.
// Open's own Migrate then finds every migration applied.
func migratedMySQLDSN(t testing.TB) string {
	t.Helper()
	admin := requireMySQL(t)
	tmpl, err := mysqlTemplate(admin)
	if err != nil {
		t.Fatalf("template database: %v", err)
	}
	dsn, name := emptyMySQL(t)
	ctx := context.Background()
	// The tables at once, on the admin pool's connections: the server's file creations and
	// syncs overlap (one after the other, the copy takes three times as long).
	errs := make(chan error, len(tmpl.tables))
	for _, tb := range tmpl.tables {
		go func() {
			_, err := admin.ExecContext(ctx, "CREATE TABLE `"+name+"`.`"+tb+"` LIKE `"+tmpl.name+"`.`"+tb+"`")
			if err == nil && tmpl.columns[tb] != "" {
				cols := tmpl.columns[tb]
				_, err = admin.ExecContext(ctx, "INSERT INTO `"+name+"`.`"+tb+"` ("+cols+") SELECT "+cols+" FROM `"+tmpl.name+"`.`"+tb+"`")
			}
			if err != nil {
				err = fmt.Errorf("copy the template's table %s: %w", tb, err)
			}
			errs <- err
		}()
	}
	for range tmpl.tables {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	return dsn
}

// myTemplate is a migrated MySQL database to copy: its tables, and the columns of those holding
// rows the migrations wrote (the generated ones left out: the copy computes them).
type myTemplate struct {
	name    string
	tables  []string
	columns map[string]string
}

var (
	myTemplateOnce sync.Once
	myTemplateVal  myTemplate
	myTemplateErr  error
)

// templateReady is the template's last table, created once its migrations all ran: a template
// without it is the leftover of a process killed while building it, built again.
const templateReady = "template_ready"

// mysqlTemplate is the template database of the migrations as they are, on the server: named by
// a hash of the migrations (a change of any of them names another one), built by the first test
// process that needs it under a lock of the server's, and shared by every later one. It is not
// dropped: the next run uses it (dropLeaked leaves bindery_tmpl_ databases alone).
func mysqlTemplate(admin *sql.DB) (myTemplate, error) {
	myTemplateOnce.Do(func() {
		myTemplateVal, myTemplateErr = makeMySQLTemplate(admin)
	})
	return myTemplateVal, myTemplateErr
}

func makeMySQLTemplate(admin *sql.DB) (myTemplate, error) {
	migs, err := store.Migrations(schema.FS, store.MySQL)
	if err != nil {
		return myTemplate{}, err
	}
	h := sha256.New()
	for _, m := range migs {
		fmt.Fprintf(h, "%d %s\n%s\n", m.Version, m.Name, m.SQL)
	}
	tmpl := myTemplate{name: fmt.Sprintf("bindery_tmpl_%x", h.Sum(nil)[:8]), columns: map[string]string{}}
	ctx := context.Background()
	conn, err := admin.Conn(ctx) // GET_LOCK belongs to one connection
	if err != nil {
		return tmpl, err
	}
	defer conn.Close()
	var got sql.NullInt64
	if err := conn.QueryRowContext(ctx, "SELECT GET_LOCK(?, 600)", tmpl.name).Scan(&got); err != nil || got.Int64 != 1 {
		return tmpl, fmt.Errorf("lock %s: %v (another process builds it for more than 10 minutes?)", tmpl.name, err)
	}
	defer conn.ExecContext(ctx, "DO RELEASE_LOCK(?)", tmpl.name) //nolint:errcheck // the connection's end releases it too
	var ready int
	if err := conn.QueryRowContext(ctx, "SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = ? AND table_name = ?", tmpl.name, templateReady).Scan(&ready); err != nil {
		return tmpl, err
	}
	if ready == 0 {
		for _, q := range []string{"DROP DATABASE IF EXISTS `" + tmpl.name + "`", "CREATE DATABASE `" + tmpl.name + "` CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"} {
			if _, err := conn.ExecContext(ctx, q); err != nil {
				return tmpl, err
			}
		}
		cfg := adminConfig()
		cfg.DBName = tmpl.name
		db, err := store.Open(ctx, "mysql://"+cfg.FormatDSN(), DefaultOptions())
		if err != nil {
			return tmpl, err
		}
		_, err = db.Migrate(ctx, schema.FS)
		db.Close()
		if err != nil {
			return tmpl, err
		}
		if _, err := conn.ExecContext(ctx, "CREATE TABLE `"+tmpl.name+"`.`"+templateReady+"` (id INT PRIMARY KEY)"); err != nil {
			return tmpl, err
		}
	}
	rows, err := conn.QueryContext(ctx, "SELECT table_name FROM information_schema.tables WHERE table_schema = ? AND table_type = 'BASE TABLE' AND table_name <> ? ORDER BY table_name", tmpl.name, templateReady)
	if err != nil {
		return tmpl, err
	}
	for rows.Next() {
		var tb string
		if err := rows.Scan(&tb); err != nil {
			rows.Close()
			return tmpl, err
		}
		tmpl.tables = append(tmpl.tables, tb)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return tmpl, err
	}
	for _, tb := range tmpl.tables {
		var n int
		if err := conn.QueryRowContext(ctx, "SELECT COUNT(*) FROM `"+tmpl.name+"`.`"+tb+"`").Scan(&n); err != nil {
			return tmpl, err
		}
		if n == 0 {
			continue
		}
		var cols string
		if err := conn.QueryRowContext(ctx, "SELECT GROUP_CONCAT(CONCAT('`', column_name, '`') ORDER BY ordinal_position) FROM information_schema.columns "+
			"WHERE table_schema = ? AND table_name = ? AND extra NOT LIKE '%GENERATED%'", tmpl.name, tb).Scan(&cols); err != nil {
			return tmpl, err
		}
		tmpl.columns[tb] = cols
	}
	return tmpl, nil
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
			// A template's copy runs its tables at once: a bound keeps the suite's packages,
			// in parallel, under the server's max_connections (151 by default).
			adminDB.SetMaxOpenConns(8)
			adminDB.SetMaxIdleConns(8)
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
