package store_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"testing/fstest"

	"bindery/schema"
	"bindery/store"
)

// withFuture is this binary's migrations plus one a later release would add.
func withFuture(t *testing.T, d store.Dialect) (fstest.MapFS, int) {
	t.Helper()
	migs, err := store.Migrations(schema.FS, d)
	if err != nil {
		t.Fatal(err)
	}
	out := fstest.MapFS{}
	for _, m := range migs {
		out[string(d)+"/"+m.Name] = &fstest.MapFile{Data: []byte(m.SQL)}
	}
	next := migs[len(migs)-1].Version + 1
	out[fmt.Sprintf("%s/%04d_future.sql", d, next)] = &fstest.MapFile{Data: []byte("CREATE TABLE future_thing (id INTEGER NOT NULL PRIMARY KEY);\n")}
	return out, next
}

func TestABinaryRefusesASchemaNewerThanItKnows(t *testing.T) {
	eachUnmigrated(t, func(t *testing.T, db *store.DB) {
		st, err := db.Schema(bg, schema.FS)
		if err != nil {
			t.Fatal(err)
		}
		if st.Database != 0 || len(st.Pending) == 0 || st.Pending[0] != "0001_instances.sql" {
			t.Fatalf("a fresh database: %+v, want every migration pending", st)
		}
		future, next := withFuture(t, db.Dialect())
		if _, err := db.Migrate(bg, future); err != nil {
			t.Fatal(err)
		}
		st, err = db.Schema(bg, schema.FS)
		if err != nil {
			t.Fatal(err)
		}
		if st.Database != next || st.Binary != next-1 || len(st.Pending) != 0 {
			t.Fatalf("schema after a newer release migrated: %+v", st)
		}

		applied, err := db.Migrate(bg, schema.FS)
		var newer *store.NewerSchemaError
		if !errors.As(err, &newer) || len(applied) != 0 {
			t.Fatalf("migrate with the older binary: applied %v, err %v; want a refusal", applied, err)
		}
		msg := err.Error()
		for _, want := range []string{fmt.Sprintf("%04d", next), fmt.Sprintf("%04d", next-1), "newer release", "restoring the backup", "forward-only"} {
			if !strings.Contains(msg, want) {
				t.Errorf("the refusal lacks %q: %s", want, msg)
			}
		}
	})
}
