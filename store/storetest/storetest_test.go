package storetest

import (
	"context"
	"database/sql"
	"strings"
	"testing"

	"bindery/schema"
	"bindery/store"
)

// A copy of the MySQL template is the database the migrations build: the same tables, each
// created by the same statement (columns, generated columns, indexes and their names, options),
// holding the same rows.
func TestACopyOfTheTemplateIsTheMigratedDatabase(t *testing.T) {
	t.Parallel()
	copied := MySQL(t)
	migrated := Open(t, MySQLDSN(t), DefaultOptions())
	if _, err := migrated.Migrate(context.Background(), schema.FS); err != nil {
		t.Fatal(err)
	}
	want, got := describe(t, migrated), describe(t, copied)
	if len(want) == 0 {
		t.Fatal("the migrated database has no tables")
	}
	for tb, w := range want {
		if g, ok := got[tb]; !ok || g != w {
			t.Errorf("table %s:\nmigrated: %s\ncopied:   %s", tb, w, g)
		}
	}
	for tb := range got {
		if _, ok := want[tb]; !ok {
			t.Errorf("the copy has a table the migrations do not make: %s", tb)
		}
	}
}

// describe is each table's CREATE statement and its rows, as text.
func describe(t *testing.T, db *store.DB) map[string]string {
	t.Helper()
	raw := db.Raw()
	rows, err := raw.Query("SELECT table_name FROM information_schema.tables WHERE table_schema = DATABASE()")
	if err != nil {
		t.Fatal(err)
	}
	var tables []string
	for rows.Next() {
		var tb string
		if err := rows.Scan(&tb); err != nil {
			t.Fatal(err)
		}
		tables = append(tables, tb)
	}
	rows.Close()
	out := map[string]string{}
	for _, tb := range tables {
		var name, create string
		if err := raw.QueryRow("SHOW CREATE TABLE `"+tb+"`").Scan(&name, &create); err != nil {
			t.Fatal(err)
		}
		out[tb] = create + "\n" + contents(t, raw, tb)
	}
	return out
}

func contents(t *testing.T, raw *sql.DB, tb string) string {
	t.Helper()
	rows, err := raw.Query("SELECT * FROM `" + tb + "` ORDER BY 1")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	cols, err := rows.ColumnTypes()
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for rows.Next() {
		vals := make([]sql.RawBytes, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			t.Fatal(err)
		}
		for i, v := range vals {
			if strings.HasSuffix(cols[i].Name(), "_at") {
				continue // a time: when the database was built
			}
			b.WriteString(string(v) + "|")
		}
		b.WriteString("\n")
	}
	return b.String()
}
