package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"
)

// Migration is one numbered schema step, e.g. schema/mysql/0002_batches.sql.
type Migration struct {
	Version int
	Name    string
	SQL     string
}

// Migrations lists the dialect's migrations in fsys (laid out as <dialect>/<NNNN>_<name>.sql),
// ordered by version. Two files with one version are an error.
func Migrations(fsys fs.FS, d Dialect) ([]Migration, error) {
	dir := string(d)
	entries, err := fs.ReadDir(fsys, dir)
	if err != nil {
		return nil, fmt.Errorf("read migrations %s: %w", dir, err)
	}
	var out []Migration
	seen := map[int]string{}
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || !strings.HasSuffix(name, ".sql") {
			continue
		}
		num, _, ok := strings.Cut(name, "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil || v <= 0 {
			return nil, fmt.Errorf("migration %s/%s: want NNNN_name.sql", dir, name)
		}
		if prev, dup := seen[v]; dup {
			return nil, fmt.Errorf("migrations %s and %s share version %d", prev, name, v)
		}
		seen[v] = name
		body, err := fs.ReadFile(fsys, path.Join(dir, name))
		if err != nil {
			return nil, err
		}
		out = append(out, Migration{Version: v, Name: name, SQL: string(body)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Version < out[j].Version })
	return out, nil
}

// migrateLock names MySQL's migration lock after the database (a hash: lock names are at most 64
// characters, database names 64 alone).
const migrateLock = "CONCAT('bindery_migrate:', SHA1(DATABASE()))"

// Migrate applies the migrations not yet recorded in schema_migrations, in order, each in its
// own transaction, and returns the names applied. It is idempotent and safe to run from several
// instances at once: MySQL serialises on a named lock of the database, SQLite on its single write connection.
//
// Migrations are forward-only: there is no down migration, and a binary never undoes one. A
// database migrated by a newer release is refused (*NewerSchemaError) before anything is applied:
// an older binary does not know what the newer columns and tables mean (docs/install.md,
// 'Upgrading and rolling back').
//
// MySQL commits DDL implicitly, so a migration interrupted halfway is not rolled back: write
// MySQL migrations with IF NOT EXISTS so that a re-run completes them.
func (db *DB) Migrate(ctx context.Context, fsys fs.FS) ([]string, error) {
	migs, err := Migrations(fsys, db.dialect)
	if err != nil {
		return nil, err
	}
	conn, err := db.rw.Conn(ctx)
	if err != nil {
		return nil, translate(err)
	}
	defer conn.Close()
	if db.dialect == MySQL {
		// The lock is the server's, so its name is the database's: instances migrating one
		// database queue on it, and other databases of the server (another deployment, every
		// test database) never wait for this one's DDL.
		var got sql.NullInt64
		if err := conn.QueryRowContext(ctx, "SELECT GET_LOCK("+migrateLock+", 60)").Scan(&got); err != nil {
			return nil, fmt.Errorf("migration lock: %w", err)
		}
		if !got.Valid || got.Int64 != 1 {
			return nil, fmt.Errorf("migration lock: another instance holds it for more than 60s")
		}
		defer conn.ExecContext(context.WithoutCancel(ctx), "SELECT RELEASE_LOCK("+migrateLock+")")
	}
	if _, err := conn.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
		version    INTEGER NOT NULL PRIMARY KEY,
		name       VARCHAR(255) NOT NULL,
		applied_at VARCHAR(64) NOT NULL
	)`); err != nil {
		return nil, fmt.Errorf("create schema_migrations: %w", err)
	}
	// The versions recorded before this start, in one read: an instance starting on a migrated
	// database (every start but an upgrade's) then opens no transaction per migration. Each
	// migration not among them is checked again in its own transaction (applyOne).
	recorded, newest, err := recordedVersions(ctx, conn)
	if err != nil {
		return nil, fmt.Errorf("read schema version: %w", err)
	}
	if known := latest(migs); newest > known {
		return nil, &NewerSchemaError{Database: newest, Binary: known}
	}
	var applied []string
	for _, m := range migs {
		if recorded[m.Version] {
			continue
		}
		done, err := db.applyOne(ctx, conn, m)
		if err != nil {
			return applied, fmt.Errorf("migration %s: %w", m.Name, err)
		}
		if done {
			applied = append(applied, m.Name)
		}
	}
	return applied, nil
}

// NewerSchemaError is a database whose schema a newer release migrated: this binary refuses to
// run against it.
type NewerSchemaError struct {
	Database int // the highest migration recorded in the database
	Binary   int // the highest migration this binary carries
}

func (e *NewerSchemaError) Error() string {
	return fmt.Sprintf("the database schema is at version %04d, newer than this binary knows (%04d): a newer release of bindery migrated it. "+
		"Run that release (or a newer one) instead; migrations are forward-only, so going back to this release means restoring the backup taken before the upgrade (docs/install.md, 'Upgrading and rolling back')",
		e.Database, e.Binary)
}

func latest(migs []Migration) int {
	if len(migs) == 0 {
		return 0
	}
	return migs[len(migs)-1].Version
}

// SchemaStatus is what a database holds against the migrations a binary carries, read without
// changing anything (bindery doctor).
type SchemaStatus struct {
	Database int      // the highest migration recorded (0: none, or no schema_migrations table)
	Binary   int      // the highest migration the binary carries
	Pending  []string // migrations the binary carries that the database lacks, in order
}

// Schema reads the database's migration state against fsys's migrations. It writes nothing: a
// database never migrated reports every migration pending.
func (db *DB) Schema(ctx context.Context, fsys fs.FS) (SchemaStatus, error) {
	migs, err := Migrations(fsys, db.dialect)
	if err != nil {
		return SchemaStatus{}, err
	}
	st := SchemaStatus{Binary: latest(migs)}
	done, newest, err := recordedVersions(ctx, db.ro)
	if err != nil && !missingTable(err) {
		return st, fmt.Errorf("read schema_migrations: %w", err)
	}
	st.Database = newest
	for _, m := range migs {
		if !done[m.Version] {
			st.Pending = append(st.Pending, m.Name)
		}
	}
	return st, nil
}

// recordedVersions reads the versions schema_migrations records, and the highest of them.
func recordedVersions(ctx context.Context, q queryer) (map[int]bool, int, error) {
	rows, err := q.QueryContext(ctx, "SELECT version FROM schema_migrations")
	if err != nil {
		return nil, 0, err
	}
	defer rows.Close()
	done, newest := map[int]bool{}, 0
	for rows.Next() {
		var v int
		if err := rows.Scan(&v); err != nil {
			return nil, 0, err
		}
		done[v], newest = true, max(newest, v)
	}
	return done, newest, rows.Err()
}

// missingTable is the error of a read from a table that does not exist (MySQL 1146, SQLite's
// "no such table").
func missingTable(err error) bool {
	var me *mysql.MySQLError
	if errors.As(err, &me) {
		return me.Number == 1146
	}
	return strings.Contains(err.Error(), "no such table")
}

func (db *DB) applyOne(ctx context.Context, conn *sql.Conn, m Migration) (bool, error) {
	waitSet := false
	defer func() {
		// After the transaction's end (deferred before it): the connection goes back to the
		// pool with the server's lock wait again.
		if waitSet {
			_, _ = conn.ExecContext(context.WithoutCancel(ctx), "SET SESSION lock_wait_timeout = DEFAULT")
		}
	}()
	tx, err := conn.BeginTx(ctx, nil)
	if err != nil {
		return false, err
	}
	defer tx.Rollback()
	var n int
	if err := tx.QueryRowContext(ctx, "SELECT COUNT(*) FROM schema_migrations WHERE version = ?", m.Version).Scan(&n); err != nil {
		return false, err
	}
	if n > 0 {
		return false, nil
	}
	if db.dialect == MySQL {
		if _, err := tx.ExecContext(ctx, "SET SESSION lock_wait_timeout = "+strconv.Itoa(ddlLockWait)); err != nil {
			return false, err
		}
		waitSet = true
	}
	for _, stmt := range SplitStatements(m.SQL) {
		if err := db.execGivingWay(ctx, tx, stmt); err != nil {
			return false, fmt.Errorf("%w\nstatement:\n%s", err, stmt)
		}
	}
	if _, err := tx.ExecContext(ctx, "INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, "+db.now()+")", m.Version, m.Name); err != nil {
		return false, err
	}
	return true, tx.Commit()
}

// ddlLockWait (seconds) bounds how long a statement of a migration waits for a table's metadata
// lock on MySQL, and ddlTries how often it is tried. A DDL statement waiting behind a running
// instance's open transaction queues every later statement on that table behind itself, so the
// running release would stall for as long as that transaction lasts (a rolling upgrade's
// previous release answered 503 for seconds). Bounded, the DDL gives way, the queued
// statements pass, and it is tried again: under two minutes in all before the migration fails.
const (
	ddlLockWait = 2
	ddlTries    = 30
)

// execGivingWay runs one statement of a migration; on MySQL one that could not get its lock in
// ddlLockWait (ER_LOCK_WAIT_TIMEOUT) is tried again after a pause, up to ddlTries times. The
// migrations are written to be run again (IF NOT EXISTS), and a statement that timed out changed
// nothing.
func (db *DB) execGivingWay(ctx context.Context, tx *sql.Tx, stmt string) error {
	for try := 1; ; try++ {
		_, err := tx.ExecContext(ctx, stmt)
		var me *mysql.MySQLError
		if err == nil || db.dialect != MySQL || !errors.As(err, &me) || me.Number != 1205 || try == ddlTries {
			return err
		}
		select { // the pause lets the statements queued behind it through
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Duration(try) * 100 * time.Millisecond):
		}
	}
}

// SplitStatements splits a migration into statements at semicolons that end a line, keeping
// trigger bodies (BEGIN … END;) whole. Lines starting with "--" are comments.
func SplitStatements(src string) []string {
	var out []string
	var cur strings.Builder
	depth := 0
	for _, line := range strings.Split(src, "\n") {
		trimmed := strings.TrimSpace(line)
		if trimmed == "" || strings.HasPrefix(trimmed, "--") {
			continue
		}
		upper := strings.ToUpper(trimmed)
		if strings.HasSuffix(upper, " BEGIN") || upper == "BEGIN" {
			depth++
		}
		cur.WriteString(line)
		cur.WriteString("\n")
		if strings.HasSuffix(trimmed, ";") {
			if depth > 0 && (upper == "END;" || strings.HasSuffix(upper, " END;")) {
				depth--
			}
			if depth == 0 {
				stmt := strings.TrimSpace(cur.String())
				stmt = strings.TrimSuffix(stmt, ";")
				if strings.TrimSpace(stmt) != "" {
					out = append(out, stmt)
				}
				cur.Reset()
			}
		}
	}
	if s := strings.TrimSpace(cur.String()); s != "" {
		out = append(out, s)
	}
	return out
}

// SchemaVersion returns the highest applied migration version (0 when none).
func (db *DB) SchemaVersion(ctx context.Context) (int, error) {
	var v sql.NullInt64
	if err := db.ro.QueryRowContext(ctx, "SELECT MAX(version) FROM schema_migrations").Scan(&v); err != nil {
		return 0, translate(err)
	}
	return int(v.Int64), nil
}
