package store

import (
	"context"
	"database/sql"
	"fmt"
	"reflect"
	"strings"
	"time"
)

// dbTime scans a DATETIME from either driver. MySQL (parseTime) gives time.Time; SQLite gives
// time.Time for columns declared DATETIME and a string for expressions such as MAX(col) or the
// clock itself. A NULL leaves Valid false.
type dbTime struct {
	T     time.Time
	Valid bool
}

var sqliteLayouts = []string{
	"2006-01-02 15:04:05.999999999",
	"2006-01-02T15:04:05.999999999Z07:00",
	"2006-01-02 15:04:05.999999999-07:00",
	"2006-01-02",
}

func (d *dbTime) Scan(v any) error {
	switch x := v.(type) {
	case nil:
		d.T, d.Valid = time.Time{}, false
		return nil
	case time.Time:
		d.T, d.Valid = x.UTC(), true
		return nil
	case []byte:
		return d.parse(string(x))
	case string:
		return d.parse(x)
	}
	return fmt.Errorf("scan time: unsupported %T", v)
}

func (d *dbTime) parse(s string) error {
	s = strings.TrimSpace(s)
	for _, layout := range sqliteLayouts {
		if t, err := time.ParseInLocation(layout, s, time.UTC); err == nil {
			d.T, d.Valid = t.UTC(), true
			return nil
		}
	}
	return fmt.Errorf("scan time: unparsable %q", s)
}

// Now reads the database clock, for decisions made outside SQL that must agree with it (a live
// lease, an overdue deploy) and for tests that reason in the database's time.
func (db *DB) Now(ctx context.Context) (time.Time, error) {
	var t dbTime
	if err := db.ro.QueryRowContext(ctx, "SELECT "+db.now()).Scan(&t); err != nil {
		return time.Time{}, translate(err)
	}
	return t.T, nil
}

// nullInt64 scans a nullable integer column, NULL → 0 ("none").
type nullInt64 int64

func (n *nullInt64) Scan(v any) error {
	var x sql.NullInt64
	if err := x.Scan(v); err != nil {
		return err
	}
	*n = nullInt64(x.Int64)
	return nil
}

// nullString scans a nullable text column, NULL → "".
type nullString string

func (n *nullString) Scan(v any) error {
	var x sql.NullString
	if err := x.Scan(v); err != nil {
		return err
	}
	*n = nullString(x.String)
	return nil
}

// values replays the columns of a row already read (into *any) to a scan function of one of the
// tables it joined: each value is converted as database/sql would, and NULL — a LEFT JOIN that
// found nothing, or a nullable column — leaves the zero value.
type values []any

func (v values) Scan(dest ...any) error {
	if len(dest) != len(v) {
		return fmt.Errorf("scan: %d values into %d destinations", len(v), len(dest))
	}
	for i, d := range dest {
		if err := assign(d, v[i]); err != nil {
			return fmt.Errorf("scan column %d: %w", i, err)
		}
	}
	return nil
}

// assign stores src, a driver value, in the pointer dest.
func assign(dest, src any) error {
	if s, ok := dest.(sql.Scanner); ok {
		return s.Scan(src)
	}
	out := reflect.ValueOf(dest).Elem()
	if src == nil {
		out.SetZero()
		return nil
	}
	switch out.Kind() {
	case reflect.String:
		var x sql.NullString
		if err := x.Scan(src); err != nil {
			return err
		}
		out.SetString(x.String)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		var x sql.NullInt64
		if err := x.Scan(src); err != nil {
			return err
		}
		out.SetInt(x.Int64)
	case reflect.Bool:
		var x sql.NullBool
		if err := x.Scan(src); err != nil {
			return err
		}
		out.SetBool(x.Bool)
	default:
		return fmt.Errorf("unsupported destination %T", dest)
	}
	return nil
}
