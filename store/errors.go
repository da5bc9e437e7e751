package store

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"

	"github.com/go-sql-driver/mysql"
	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

// The translated errors. Callers test with errors.Is; the driver error stays wrapped for logs.
var (
	// ErrNotFound: the row does not exist.
	ErrNotFound = errors.New("not found")
	// ErrDuplicate: a unique key already holds this value. Often an answer, not a failure
	// ("already queued", "already recorded", "slot occupied").
	ErrDuplicate = errors.New("duplicate key")
	// ErrPreempted: a guarded write matched no row — someone else changed it since it was read.
	ErrPreempted = errors.New("preempted: the row changed since it was read")
	// ErrRetry: a deadlock, lock wait timeout or busy database; the whole transaction may be
	// retried.
	ErrRetry = errors.New("transient database conflict")
)

// translate maps driver errors to the errors above, once, at the store boundary.
func translate(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, ErrNotFound) || errors.Is(err, ErrDuplicate) || errors.Is(err, ErrPreempted) || errors.Is(err, ErrRetry) {
		return err
	}
	if errors.Is(err, sql.ErrNoRows) {
		return ErrNotFound
	}
	var me *mysql.MySQLError
	if errors.As(err, &me) {
		switch me.Number {
		case 1062: // ER_DUP_ENTRY
			return fmt.Errorf("%w: %w", ErrDuplicate, err)
		case 1213, 1205: // ER_LOCK_DEADLOCK, ER_LOCK_WAIT_TIMEOUT
			return fmt.Errorf("%w: %w", ErrRetry, err)
		}
		return err
	}
	var se *sqlite.Error
	if errors.As(err, &se) {
		switch se.Code() {
		case sqlite3.SQLITE_CONSTRAINT_UNIQUE, sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY:
			return fmt.Errorf("%w: %w", ErrDuplicate, err)
		}
		switch se.Code() & 0xff { // primary result code
		case sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED:
			return fmt.Errorf("%w: %w", ErrRetry, err)
		}
	}
	return err
}

// Unavailable reports a database that did not answer: the deadline passed, the connection was
// lost or refused, the pool was closed — or a conflict that outlasted its retries. Trying again
// later may succeed; the caller answers "unavailable", never "internal error".
func Unavailable(err error) bool {
	if err == nil {
		return false
	}
	var ne net.Error
	var oe *net.OpError
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, driver.ErrBadConn) || errors.Is(err, mysql.ErrInvalidConn) ||
		errors.Is(err, sql.ErrConnDone) || errors.Is(err, ErrRetry) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.As(err, &oe) || (errors.As(err, &ne) && ne.Timeout()) ||
		strings.Contains(err.Error(), "sql: database is closed") // database/sql exports no sentinel for it
}

// IsDuplicate reports whether err is a duplicate-key error.
func IsDuplicate(err error) bool { return errors.Is(err, ErrDuplicate) }

// Translate is translate for code outside the package that runs raw SQL (tests, tools).
func Translate(err error) error { return translate(err) }
