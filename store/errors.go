package store

import (
	"database/sql"
	"errors"
	"fmt"

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

// IsDuplicate reports whether err is a duplicate-key error.
func IsDuplicate(err error) bool { return errors.Is(err, ErrDuplicate) }

// Translate is translate for code outside the package that runs raw SQL (tests, tools).
func Translate(err error) error { return translate(err) }
