package store

import (
	"context"
	"database/sql/driver"
	"errors"
	"strings"
)

// Prepared statements, kept per connection. Profiles of the HTTP loads (BENCHMARKS.md, "Profiled
// and fixed") showed SQLite spending half of a status read's CPU in sqlite3_prepare of the same
// query text every time, and the MySQL driver copying and escaping the status read's 3 KB text
// into every request (interpolateParams), which the server then parsed again. A connection here
// prepares each query text the first time it runs it and executes the prepared statement from
// then on: SQLite skips the parser and planner, MySQL sends only the arguments (binary protocol,
// one round trip, as the interpolated text was). The statements are the same, so the statement
// observer and the tests that count statements see no difference.

const (
	// stmtsPerConn bounds a connection's prepared statements (the oldest idle one is closed to
	// make room): the hot queries are a few dozen texts, and queries with IN lists of varying
	// length must not pile up. On MySQL the server holds them (max_prepared_stmt_count).
	stmtsPerConn = 64
	// maxCachedQuery: longer texts (bulk statements with long IN or VALUES lists) run unprepared;
	// they rarely repeat.
	maxCachedQuery = 16 << 10
)

// cachingConnector wraps a driver.Connector so that its connections keep prepared statements.
type cachingConnector struct{ driver.Connector }

func (c cachingConnector) Connect(ctx context.Context) (driver.Conn, error) {
	conn, err := c.Connector.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return &cachingConn{passthroughConn: passthroughConn{conn}, stmts: map[string]*cachedStmt{}, refused: map[string]bool{}}, nil
}

// cachingConn is one connection and its prepared statements. database/sql uses a connection from
// one goroutine at a time, so it needs no lock. What it does not cache it forwards
// (passthroughConn).
type cachingConn struct {
	passthroughConn
	stmts   map[string]*cachedStmt
	order   []string        // query texts of stmts, oldest first (eviction order)
	refused map[string]bool // texts the database would not prepare: run directly
}

// cachedStmt is a prepared statement; busy while rows it returned are open (SQLite resets the
// statement on reuse, which would end those rows).
type cachedStmt struct {
	st   driver.Stmt
	busy bool
}

var (
	_ driver.ConnBeginTx        = (*cachingConn)(nil)
	_ driver.ConnPrepareContext = (*cachingConn)(nil)
	_ driver.ExecerContext      = (*cachingConn)(nil)
	_ driver.QueryerContext     = (*cachingConn)(nil)
	_ driver.Pinger             = (*cachingConn)(nil)
	_ driver.SessionResetter    = (*cachingConn)(nil)
	_ driver.Validator          = (*cachingConn)(nil)
	_ driver.NamedValueChecker  = (*cachingConn)(nil)
)

// stmt returns the idle prepared statement of query, preparing it on first use; nil: run the
// query directly (not a plain read or write, too long, refused by the database, or its
// statement is busy). Only SELECTs are queried and only INSERT, UPDATE and DELETE executed
// prepared: the MySQL driver's prepared Exec of a statement that answers with rows (ANALYZE
// TABLE) waits forever, and DDL, SET or EXPLAIN gain nothing from it.
func (c *cachingConn) stmt(ctx context.Context, query string, read bool) *cachedStmt {
	if len(query) > maxCachedQuery || c.refused[query] || !plainStatement(query, read) {
		return nil
	}
	if s, ok := c.stmts[query]; ok {
		if s.busy {
			return nil
		}
		return s
	}
	p, ok := c.Conn.(driver.ConnPrepareContext)
	if !ok {
		return nil
	}
	st, err := p.PrepareContext(ctx, query)
	if err != nil {
		// The direct run reports the error if it is the query's; a statement the database only
		// refuses to prepare (or a full server-side statement table) runs as before.
		if ctx.Err() == nil && !errors.Is(err, driver.ErrBadConn) && len(c.refused) < stmtsPerConn {
			c.refused[query] = true
		}
		return nil
	}
	c.evict()
	s := &cachedStmt{st: st}
	c.stmts[query] = s
	c.order = append(c.order, query)
	return s
}

// plainStatement: query starts with SELECT (read) or with INSERT, UPDATE or DELETE (a write).
func plainStatement(query string, read bool) bool {
	verb, _, _ := strings.Cut(strings.TrimLeft(query, " \t\r\n("), " ")
	if read {
		return strings.EqualFold(verb, "SELECT")
	}
	return strings.EqualFold(verb, "INSERT") || strings.EqualFold(verb, "UPDATE") || strings.EqualFold(verb, "DELETE")
}

// evict closes the oldest idle statement when the connection holds stmtsPerConn.
func (c *cachingConn) evict() {
	if len(c.stmts) < stmtsPerConn {
		return
	}
	for i, q := range c.order {
		if s := c.stmts[q]; !s.busy {
			_ = s.st.Close()
			delete(c.stmts, q)
			c.order = append(c.order[:i], c.order[i+1:]...)
			return
		}
	}
}

func (c *cachingConn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	if s := c.stmt(ctx, query, false); s != nil {
		if e, ok := s.st.(driver.StmtExecContext); ok {
			return e.ExecContext(ctx, args)
		}
	}
	return c.passthroughConn.ExecContext(ctx, query, args)
}

func (c *cachingConn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	if s := c.stmt(ctx, query, true); s != nil {
		if q, ok := s.st.(driver.StmtQueryContext); ok {
			rows, err := q.QueryContext(ctx, args)
			if err != nil {
				return nil, err
			}
			s.busy = true
			return &cachedRows{Rows: rows, s: s}, nil
		}
	}
	return c.passthroughConn.QueryContext(ctx, query, args)
}

// cachedRows frees its statement for the next run when closed.
type cachedRows struct {
	driver.Rows
	s *cachedStmt
}

func (r *cachedRows) Close() error {
	err := r.Rows.Close()
	r.s.busy = false
	return err
}

// Close closes the prepared statements, then the connection.
func (c *cachingConn) Close() error {
	var errs []error
	for _, s := range c.stmts {
		errs = append(errs, s.st.Close())
	}
	c.stmts, c.order = nil, nil
	return errors.Join(append(errs, c.Conn.Close())...)
}
