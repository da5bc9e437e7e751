// Package store is bindery's data layer: the SQL, next to the method that runs it, for MySQL
// (production) and SQLite (demo, single instance). The invariants (docs/invariants.md) are kept by
// the database itself — unique indexes, guarded writes, database-clock comparisons — so that they
// hold whatever the timing or the number of instances.
//
// Driver errors are translated once, here: no rows → ErrNotFound, duplicate key → ErrDuplicate,
// a guarded write that matched nothing → ErrPreempted, a deadlock or busy database → ErrRetry.
package store

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-sql-driver/mysql"
	"modernc.org/sqlite"

	"bindery/internal/work/service"
)

// Dialect names the SQL dialect of a DB.
type Dialect string

const (
	MySQL  Dialect = "mysql"
	SQLite Dialect = "sqlite"
)

// DB is a handle on bindery's database. It is safe for concurrent use.
type DB struct {
	executor // the shared reads and writes, each write a transaction of its own
	dialect  Dialect
	// rw runs every write and every read-then-write transaction. On SQLite it is one
	// connection with BEGIN IMMEDIATE, so writers queue in Go instead of failing with
	// SQLITE_BUSY mid-transaction. On MySQL it is the only pool.
	rw *sql.DB
	// ro runs plain reads. On SQLite (WAL) readers never block the writer; on MySQL ro == rw.
	ro *sql.DB
	// pause, when set (tests only, see export_test.go), is called at named points inside
	// multi-statement transactions so a test can hold one open and order events around it.
	pause func(point string)
	// lockingClaimRead makes the claim read its waiting rows FOR UPDATE. Never set in the product:
	// it exists so a test and a benchmark can show why the claim reads without locks (I3).
	lockingClaimRead bool
	// skipClaimPrecheck goes straight to the claim transaction (tests only: it is how a test
	// reaches the "read found nothing" rollback on SQLite, where nothing can interleave).
	skipClaimPrecheck bool
	// checkpoints copies SQLite's WAL into the database file in the background (nil on MySQL);
	// it runs from Open to Close.
	checkpoints *checkpointer
	// applies gathers concurrent applications into shared transactions (Submit).
	applies *groups[*submission]
	// shared gathers concurrent InSharedTx callers into shared transactions (SQLite only).
	shared *groups[*sharedCall]
	// routes decides which events get a routing task (SetEventRoutes; nil: all).
	routes atomic.Pointer[EventRoutes]
}

// Options are the static pool settings (database.maxOpenConns, database.maxIdleConns) and an
// optional statement observer.
type Options struct {
	MaxOpenConns int
	MaxIdleConns int
	// OnStatement, when set, is called with every statement before the driver runs it, on every
	// connection of both pools. Tests count statements with it and EXPLAIN what it captured;
	// leave it nil in production (it costs an allocation per statement).
	OnStatement func(Statement)
}

// Open connects to the database named by dsn: "mysql://user:pass@tcp(host:3306)/db?…" or
// "sqlite:/path/file.db" (also "sqlite://" and "file:" forms). It does not migrate.
func Open(ctx context.Context, dsn string, opts Options) (*DB, error) {
	if opts.MaxOpenConns < 1 {
		opts.MaxOpenConns = 20
	}
	if opts.MaxIdleConns < 0 {
		opts.MaxIdleConns = 10
	}
	var db *DB
	var err error
	switch {
	case strings.HasPrefix(dsn, "mysql://"):
		db, err = openMySQL(strings.TrimPrefix(dsn, "mysql://"), opts)
	case strings.HasPrefix(dsn, "sqlite:"), strings.HasPrefix(dsn, "file:"):
		db, err = openSQLite(dsn, opts)
	case dsn == "":
		return nil, errors.New("database.dsn is empty: want mysql://user:pass@tcp(host:3306)/db or sqlite:/path/bindery.db")
	default:
		return nil, fmt.Errorf("database.dsn: unknown scheme in %q: want mysql:// or sqlite:", RedactDSN(dsn))
	}
	if err != nil {
		return nil, err
	}
	db.executor = executor{db: db}
	db.applies.hook = func() { db.hook("submit.write") }
	if db.shared != nil {
		db.shared.hook = func() { db.hook("shared.write") }
	}
	if err := db.pingRetrying(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("connect to %s: %w", RedactDSN(dsn), err)
	}
	return db, nil
}

// MySQLConfig parses a go-sql-driver DSN (without the mysql:// prefix) and applies the settings
// bindery relies on: parsed DATETIMEs, UTC on both sides (every comparison uses the database's
// clock, so the session zone must not vary by host), utf8mb4, changed-row counts.
func MySQLConfig(dsn string) (*mysql.Config, error) {
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		return nil, fmt.Errorf("database.dsn: %w", err)
	}
	cfg.ParseTime = true
	cfg.Loc = time.UTC
	if cfg.Params == nil {
		cfg.Params = map[string]string{}
	}
	cfg.Params["time_zone"] = "'+00:00'"
	// Affected rows are the rows a statement changed, not the rows it found: an application's
	// binding insert reads 0 for a relation that has its row (ON DUPLICATE KEY UPDATE id = id) and
	// then refuses an active one (I5). A DSN's clientFoundRows would make it read 1.
	cfg.ClientFoundRows = false
	if cfg.Collation == "" {
		cfg.Collation = "utf8mb4_bin"
	}
	// One round trip per statement instead of prepare+execute+close for what runs unprepared
	// (the plain reads and writes run prepared, see stmtcache.go); values are escaped by the
	// driver for the utf8mb4 connection, which is safe.
	cfg.InterpolateParams = true
	if cfg.Timeout == 0 {
		cfg.Timeout = 5 * time.Second
	}
	return cfg, nil
}

func openMySQL(dsn string, opts Options) (*DB, error) {
	cfg, err := MySQLConfig(dsn)
	if err != nil {
		return nil, err
	}
	conn, err := mysql.NewConnector(cfg)
	if err != nil {
		return nil, fmt.Errorf("database.dsn: %w", err)
	}
	pool := sql.OpenDB(observe(cachingConnector{conn}, opts))
	pool.SetMaxOpenConns(opts.MaxOpenConns)
	pool.SetMaxIdleConns(opts.MaxIdleConns)
	pool.SetConnMaxLifetime(30 * time.Minute)
	return &DB{dialect: MySQL, rw: pool, ro: pool, applies: newApplyGroups(groupWritersMySQL)}, nil
}

// sqlitePath extracts the file path from the accepted SQLite DSN forms.
// In the sqlite: forms everything after the scheme is the path (bindery sets the pragmas
// itself), so a directory may contain '?'. The file: form is a URI: its query is dropped.
func sqlitePath(dsn string) string {
	if p, ok := strings.CutPrefix(dsn, "file:"); ok {
		p, _, _ = strings.Cut(p, "?")
		return p
	}
	if p, ok := strings.CutPrefix(dsn, "sqlite://"); ok {
		return p
	}
	return strings.TrimPrefix(dsn, "sqlite:")
}

func openSQLite(dsn string, opts Options) (*DB, error) {
	path := sqlitePath(dsn)
	if path == "" {
		return nil, fmt.Errorf("database.dsn %q: no file path", dsn)
	}
	base := sqliteURI(path, 10000)

	// The writer does not checkpoint: SQLite's automatic checkpoint runs inside the commit that
	// crosses 1,000 WAL pages, copying them into the database file while every other writer
	// waits (7.5 % of serve's CPU under the apply load, in a profile). checkpoints
	// copies them in the background instead; readers and the writer go on meanwhile.
	// Its statement journals stay in memory (temp_store): a multi-row insert or a savepoint of a
	// shared transaction journals every page it changes, and past 64 KiB SQLite spills that to a
	// temporary file, two system calls a page (11 % of serve's CPU under the apply load, in a
	// profile). What it holds is bounded by the pages one transaction changes.
	rwConn, err := sqlite.NewConnector(base + "&_pragma=temp_store(MEMORY)&_pragma=wal_autocheckpoint(0)&_txlock=immediate")
	if err != nil {
		return nil, err
	}
	roConn, err := sqlite.NewConnector(base)
	if err != nil {
		return nil, err
	}
	rw := sql.OpenDB(observe(cachingConnector{rwConn}, opts))
	rw.SetMaxOpenConns(1)
	rw.SetMaxIdleConns(1)
	rw.SetConnMaxLifetime(0)
	ro := sql.OpenDB(observe(cachingConnector{roConn}, opts))
	ro.SetMaxOpenConns(max(2, min(opts.MaxOpenConns, 8)))
	ro.SetMaxIdleConns(max(2, min(opts.MaxIdleConns, 8)))
	// Checkpoints go through a connection of their own: not a reader's (a statement every tick
	// in the pool the tests count statements of) nor the writer's (it would wait for writes).
	// Its busy timeout is short: a restart holds the writer out while it waits for the readers
	// still on the old WAL, and a long reader must make it give up, not stall every write.
	cpConn, err := sqlite.NewConnector(sqliteURI(path, checkpointPatience))
	if err != nil {
		return nil, err
	}
	cp := sql.OpenDB(cpConn)
	cp.SetMaxOpenConns(1)
	checkpoints := &checkpointer{cp: cp, every: checkpointEvery}
	// The checkpointer belongs to the handle, not to a process's services: every user of the
	// database (a tool, a test, a serving process) needs its WAL kept short.
	_ = checkpoints.Start(context.Background())
	return &DB{dialect: SQLite, rw: rw, ro: ro, checkpoints: checkpoints, applies: newApplyGroups(groupWritersSQLite),
		shared: &groups[*sharedCall]{max: 1, take: func(n int) int { return min(n, maxShared) },
			left: func(c *sharedCall, err error) { c.err = err }}}, nil
}

// sqliteURI is the connection URI of the database file at path with the pragmas bindery relies
// on, waiting up to busyMS milliseconds for a lock. busy_timeout comes first: it must be in
// force before journal_mode, which itself needs a lock (the driver runs it first; there must be
// only one, as the driver orders the pragmas by name).
func sqliteURI(path string, busyMS int) string {
	q := url.Values{}
	q.Add("_pragma", "busy_timeout("+strconv.Itoa(busyMS)+")")
	q.Add("_pragma", "journal_mode(WAL)")
	q.Add("_pragma", "foreign_keys(1)")
	q.Add("_pragma", "synchronous(NORMAL)")
	return "file:" + uriPath.Replace(path) + "?" + q.Encode()
}

// checkpointEvery is how often the background checkpoint runs: at a thousand applications a
// second the WAL grows by a few thousand pages in that time, about what SQLite lets it reach
// before its own checkpoint.
const checkpointEvery = 200 * time.Millisecond

// checkpointPatience is how long (ms) a restart of the WAL waits for readers before it gives up
// until the next tick; writers wait that long at most.
const checkpointPatience = 100

// walRestartFrames is the WAL's length (in 4 KB pages) past which the background checkpoint
// makes the next writer start the WAL over.
const walRestartFrames = 4000

// checkpointer copies the WAL into the database file every interval (PASSIVE: it takes no lock
// a reader or the writer waits for, and copies what no reader still needs), as a service: Stop
// interrupts a checkpoint in progress (SQLite takes up an interrupted one where it stopped, at
// the next), waits for it to end, then closes cp.
type checkpointer struct {
	cp    *sql.DB
	every time.Duration
	bg    service.Base
	close sync.Once
	// caughtUp counts the ticks that copied the whole WAL into the database (or started it
	// over): a writer after one of them writes at the start of the file again.
	caughtUp atomic.Int64
}

func (c *checkpointer) Start(ctx context.Context) error {
	if _, ok, err := c.bg.StartInit(ctx); !ok {
		return err
	}
	c.bg.Go(func(ctx context.Context) { service.Every(ctx, c.every, c.runOnce) })
	return nil
}

// runOnce is one checkpoint. A failure (the file is busy or gone) is tried again at the next
// tick; the WAL only grows meanwhile, nothing is lost.
func (c *checkpointer) runOnce(ctx context.Context) {
	var busy, frames, copied int
	if err := c.cp.QueryRowContext(ctx, "PRAGMA wal_checkpoint(PASSIVE)").Scan(&busy, &frames, &copied); err != nil {
		return
	}
	if frames < walRestartFrames {
		if busy == 0 && copied == frames { // all copied: the next writer starts the WAL over
			c.caughtUp.Add(1)
		}
		return
	}
	// Under steady writes a passive checkpoint never catches up with the last frame, and only a
	// checkpoint that did lets the next writer start the WAL over: past walRestartFrames one
	// waits for the writer (what is left to copy is a tick's worth), so the file stops growing.
	// A restart that found a reader or the writer busy past its patience is tried at the next tick.
	if err := c.cp.QueryRowContext(ctx, "PRAGMA wal_checkpoint(RESTART)").Scan(&busy, &frames, &copied); err == nil && busy == 0 {
		c.caughtUp.Add(1)
	}
}

// Stop ends the checkpoints and closes their connection once the last one ended.
func (c *checkpointer) Stop(ctx context.Context) error {
	err := c.bg.Stop(ctx)
	if err == nil {
		c.close.Do(func() { _ = c.cp.Close() })
	}
	return err
}

// uriPath escapes what a SQLite URI filename would read as syntax: '%' starts an escape, '?'
// the query and '#' the fragment. A data directory may contain any of them.
var uriPath = strings.NewReplacer("%", "%25", "?", "%3F", "#", "%23")

// observe wraps the connector with the statement observer when one is configured.
func observe(c driver.Connector, opts Options) driver.Connector {
	if opts.OnStatement == nil {
		return c
	}
	return observedConnector{Connector: c, fn: opts.OnStatement}
}

// hook calls the test pause function at a named point of a transaction (no-op in production).
func (db *DB) hook(point string) {
	if db.pause != nil {
		db.pause(point)
	}
}

// RedactDSN hides the password of a DSN for logs and errors.
func RedactDSN(dsn string) string {
	scheme, rest, ok := strings.Cut(dsn, "://")
	if !ok || scheme != "mysql" {
		return dsn
	}
	at := strings.LastIndex(rest, "@")
	if at < 0 {
		return dsn
	}
	user, _, _ := strings.Cut(rest[:at], ":")
	return scheme + "://" + user + ":***" + rest[at:]
}

// pingRetrying pings, retrying a busy database for a few seconds. Several processes opening one
// new SQLite file race to switch it to WAL, and SQLite answers that switch SQLITE_BUSY at once,
// without its busy handler; the loser succeeds a moment later.
func (db *DB) pingRetrying(ctx context.Context) error {
	delay := 5 * time.Millisecond
	for attempt := 0; ; attempt++ {
		err := db.Ping(ctx)
		if err == nil || !errors.Is(translate(err), ErrRetry) || attempt == 10 {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(delay):
		}
		delay = min(2*delay, 500*time.Millisecond)
	}
}

// Dialect is the database's SQL dialect.
func (db *DB) Dialect() Dialect { return db.dialect }

// WriteProbe commits one small write (the readiness row) and reports whether it went through
// within ctx: a ping answers even while writes are blocked by a lock, a full disk or a
// read-only server. A readiness row someone deleted is written again.
func (db *DB) WriteProbe(ctx context.Context) error {
	res, err := db.rw.ExecContext(ctx, "UPDATE readiness SET written_at = "+db.now()+" WHERE id = 1")
	if err != nil {
		return translate(err)
	}
	if n, err := res.RowsAffected(); err != nil || n == 1 {
		return translate(err)
	}
	_, err = db.rw.ExecContext(ctx, "INSERT INTO readiness (id, written_at) VALUES (1, "+db.now()+")")
	if errors.Is(translate(err), ErrDuplicate) {
		return nil // written meanwhile by another probe
	}
	return translate(err)
}

// Ping checks that both pools answer; /readyz calls it.
func (db *DB) Ping(ctx context.Context) error {
	if err := db.rw.PingContext(ctx); err != nil {
		return err
	}
	if db.ro != db.rw {
		return db.ro.PingContext(ctx)
	}
	return nil
}

// Close closes the pools.
func (db *DB) Close() error {
	if db.checkpoints != nil {
		// No deadline: a checkpoint waits for readers 100 ms at most (checkpointPatience).
		_ = db.checkpoints.Stop(context.Background())
	}
	err := db.rw.Close()
	if db.ro != db.rw {
		err = errors.Join(err, db.ro.Close())
	}
	return err
}

// Raw exposes the write pool for tests and tools that must run their own SQL (invariant checks,
// benchmarks). Product code goes through store methods.
func (db *DB) Raw() *sql.DB { return db.rw }

// inTx runs fn in a write transaction: committed when fn returns nil, rolled back on an error or
// a panic (which is re-raised). The returned error is translated.
func (db *DB) inTx(ctx context.Context, fn func(tx *sql.Tx) error) (err error) {
	tx, err := db.rw.BeginTx(ctx, nil)
	if err != nil {
		return translate(err)
	}
	defer func() {
		if p := recover(); p != nil {
			_ = tx.Rollback()
			panic(p)
		}
		if err != nil {
			_ = tx.Rollback()
		}
	}()
	if err = fn(tx); err != nil {
		return translate(txEnded(ctx, err))
	}
	return translate(txEnded(ctx, tx.Commit()))
}

// txEnded names the deadline behind "transaction has already been committed or rolled back":
// database/sql rolls a transaction back by itself when its context ends, and the next statement
// or the commit then reports only that — a database too slow to answer in time, not a bug.
func txEnded(ctx context.Context, err error) error {
	if errors.Is(err, sql.ErrTxDone) && ctx.Err() != nil {
		return fmt.Errorf("%w: %w", ctx.Err(), err)
	}
	return err
}

// now is the database clock with sub-second precision. Every time comparison uses it, never the
// application's clock, so hosts with skewed clocks agree. MySQL keeps microseconds; SQLite's
// strftime keeps milliseconds — the remaining boundary: two rows admitted within the same
// millisecond on SQLite compare equal, which only matters to "created before now" (a row
// written in the very millisecond of a claim waits one round).
func (db *DB) now() string {
	if db.dialect == MySQL {
		return "CURRENT_TIMESTAMP(6)"
	}
	return "strftime('%Y-%m-%d %H:%M:%f','now')"
}

// nowPlus is the database clock shifted by one bound parameter in microseconds (negative: past).
func (db *DB) nowPlus() string {
	if db.dialect == MySQL {
		return "TIMESTAMPADD(MICROSECOND, ?, CURRENT_TIMESTAMP(6))"
	}
	return "strftime('%Y-%m-%d %H:%M:%f','now', (CAST(? AS REAL) / 1000000.0) || ' seconds')"
}

// timePlus is a DATETIME column shifted by one bound parameter in microseconds, in the format the
// column stores.
func (db *DB) timePlus(column string) string {
	if db.dialect == MySQL {
		return "TIMESTAMPADD(MICROSECOND, ?, " + column + ")"
	}
	return "strftime('%Y-%m-%d %H:%M:%f', " + column + ", (CAST(? AS REAL) / 1000000.0) || ' seconds')"
}

// micros converts a duration into nowPlus's parameter.
func micros(d time.Duration) int64 { return d.Microseconds() }
