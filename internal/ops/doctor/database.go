package doctor

import (
	"context"
	"database/sql"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"bindery/store"
)

// Privileges are what the migrations and the running bindery need on its own database
// (docs/install.md, 'The database'): the migrations create and alter tables and indexes; the
// product reads and writes rows.
var Privileges = []string{"SELECT", "INSERT", "UPDATE", "DELETE", "CREATE", "ALTER", "INDEX"}

func (d *doctor) checkDatabase(ctx context.Context) {
	dsn := d.snap.DSN()
	if dsn == "" {
		d.fail("database", "database.dsn is not set", "set database.dsn to mysql://USER:PASSWORD@tcp(HOST:3306)/bindery")
		return
	}
	cctx, cancel := d.call(ctx)
	defer cancel()
	db, err := store.Open(cctx, dsn, store.Options{MaxOpenConns: 2, MaxIdleConns: 1})
	if err != nil {
		d.fail("database: connection", hint(err), "check database.dsn (host, port, user, password, database name) and that the server accepts this host")
		return
	}
	defer db.Close()
	d.ok("database: connection", "connected to "+store.RedactDSN(dsn))
	d.checkSchema(cctx, db)
	if db.Dialect() == store.MySQL {
		d.checkEngine(cctx, db.Raw())
		d.checkGrants(cctx, db.Raw())
		d.checkClock(cctx, db.Raw())
	} else {
		d.warn("database: engine", "SQLite: one instance only", "run several instances on MariaDB or MySQL (docs/install.md, 'Several instances')")
	}
}

func (d *doctor) checkSchema(ctx context.Context, db *store.DB) {
	st, err := db.Schema(ctx, d.opts.Schema)
	switch {
	case err != nil:
		d.fail("database: migrations", hint(err), "check that the user may read the database")
	case st.Database > st.Binary:
		d.fail("database: migrations", fmt.Sprintf("the schema is at %04d, newer than this binary knows (%04d)", st.Database, st.Binary),
			"run the release that migrated it, or a newer one (migrations are forward-only)")
	case len(st.Pending) > 0:
		d.warn("database: migrations", fmt.Sprintf("%d pending (from %s to %04d)", len(st.Pending), st.Pending[0], st.Binary),
			"run bindery migrate -config FILE (bindery serve also applies them at start)")
	default:
		d.ok("database: migrations", fmt.Sprintf("all applied (schema %04d)", st.Database))
	}
}

var versionRE = regexp.MustCompile(`^(\d+)\.(\d+)`)

// checkEngine checks the server is one whose generated columns may carry a UNIQUE index under
// which NULLs repeat (docs/architecture.md, 'What bindery needs of its database'): MariaDB from
// 10.2, MySQL from 5.7 (TiDB answers a MySQL-style version with its own after it).
func (d *doctor) checkEngine(ctx context.Context, db *sql.DB) {
	var version string
	if err := db.QueryRowContext(ctx, "SELECT VERSION()").Scan(&version); err != nil {
		d.fail("database: engine", hint(err), "check that the user may run SELECT VERSION()")
		return
	}
	m := versionRE.FindStringSubmatch(version)
	if m == nil {
		d.warn("database: engine", "unrecognised version "+version, "bindery needs UNIQUE indexes over generated columns: MariaDB ≥ 10.2 or MySQL ≥ 5.7")
		return
	}
	major, _ := strconv.Atoi(m[1])
	minor, _ := strconv.Atoi(m[2])
	isMaria := strings.Contains(strings.ToLower(version), "mariadb")
	ok := major > 5 || (major == 5 && minor >= 7)
	if isMaria {
		ok = major > 10 || (major == 10 && minor >= 2)
	}
	if !ok {
		d.fail("database: engine", version+" has no UNIQUE indexes over generated columns", "upgrade to MariaDB ≥ 10.2 or MySQL ≥ 5.7")
		return
	}
	d.ok("database: engine", version+": generated columns and UNIQUE indexes over them supported")
}

var grantRE = regexp.MustCompile("^GRANT (.+?) ON (\\S+) TO ")

// checkGrants reads the user's grants and checks that those on bindery's database (or on every
// database) hold Privileges.
func (d *doctor) checkGrants(ctx context.Context, db *sql.DB) {
	var name sql.NullString
	if err := db.QueryRowContext(ctx, "SELECT DATABASE()").Scan(&name); err != nil || !name.Valid {
		d.fail("database: privileges", "no database selected", "name the database in database.dsn (…/bindery)")
		return
	}
	rows, err := db.QueryContext(ctx, "SHOW GRANTS FOR CURRENT_USER()")
	if err != nil {
		d.fail("database: privileges", hint(err), "check that the user may read its own grants")
		return
	}
	defer rows.Close()
	have := map[string]bool{}
	for rows.Next() {
		var g string
		if err := rows.Scan(&g); err != nil {
			d.fail("database: privileges", hint(err), "")
			return
		}
		m := grantRE.FindStringSubmatch(g)
		if m == nil || !grantCovers(m[2], name.String) {
			continue
		}
		for _, p := range strings.Split(m[1], ",") {
			p = strings.ToUpper(strings.TrimSpace(p))
			if p == "ALL PRIVILEGES" || p == "ALL" {
				for _, q := range Privileges {
					have[q] = true
				}
			}
			have[p] = true
		}
	}
	var missing []string
	for _, p := range Privileges {
		if !have[p] {
			missing = append(missing, p)
		}
	}
	if len(missing) > 0 {
		d.fail("database: privileges", fmt.Sprintf("the user lacks %s on %s", strings.Join(missing, ", "), name.String),
			fmt.Sprintf("as an administrator: GRANT %s ON `%s`.* TO <bindery user>", strings.Join(Privileges, ", "), name.String))
		return
	}
	d.ok("database: privileges", fmt.Sprintf("%s on %s", strings.Join(Privileges, ", "), name.String))
}

// grantCovers reports whether a grant's object (*.* or `db`.*) covers database name.
func grantCovers(object, name string) bool {
	if object == "*.*" {
		return true
	}
	db, rest, ok := strings.Cut(object, ".")
	if !ok || (rest != "*" && rest != "`*`") {
		return false
	}
	db = strings.Trim(db, "`")
	return db == name || strings.ReplaceAll(db, `\_`, "_") == name
}

// checkClock compares the database clock, which every comparison bindery makes uses, with this
// machine's, which signs and checks the approval system's callbacks (hooks.approvalSkew).
func (d *doctor) checkClock(ctx context.Context, db *sql.DB) {
	before := time.Now()
	var dbNow time.Time
	if err := db.QueryRowContext(ctx, "SELECT UTC_TIMESTAMP(6)").Scan(&dbNow); err != nil {
		d.fail("database: clock", hint(err), "")
		return
	}
	mid := before.Add(time.Since(before) / 2)
	skew := dbNow.Sub(mid.UTC()).Round(time.Millisecond)
	abs := max(skew, -skew)
	detail := fmt.Sprintf("the database clock is %s off this machine's", skew)
	switch {
	case abs > 30*time.Second:
		d.fail("database: clock", detail, "synchronise both clocks (NTP): leases, deadlines and callback signatures compare times across them")
	case abs > 2*time.Second:
		d.warn("database: clock", detail, "synchronise both clocks (NTP)")
	default:
		d.ok("database: clock", detail)
	}
}
