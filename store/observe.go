package store

import (
	"context"
	"database/sql/driver"
	"errors"
)

// Statement is one SQL statement as the driver receives it: the query text with its placeholders
// and the bound values. OnStatement sees it before the driver runs it.
type Statement struct {
	Query string
	Args  []any
}

// observedConnector wraps a driver.Connector so that every statement a connection runs is reported
// to fn before it runs. Tests count statements with it (claim, hand-off, settlement and
// reconciliation must not issue a statement per row) and EXPLAIN what was captured. Transaction
// boundaries are reported too, as the queries "BEGIN", "COMMIT" and "ROLLBACK" without arguments
// (a test pins one commit per application), whatever the driver sends for them.
type observedConnector struct {
	driver.Connector
	fn func(Statement)
}

func (c observedConnector) Connect(ctx context.Context) (driver.Conn, error) {
	conn, err := c.Connector.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return &observedConn{passthroughConn: passthroughConn{conn}, fn: c.fn}, nil
}

// observedConn reports what runs on a connection and forwards the rest (passthroughConn).
type observedConn struct {
	passthroughConn
	fn func(Statement)
}

var (
	_ driver.ConnBeginTx        = (*observedConn)(nil)
	_ driver.ConnPrepareContext = (*observedConn)(nil)
	_ driver.ExecerContext      = (*observedConn)(nil)
	_ driver.QueryerContext     = (*observedConn)(nil)
	_ driver.Pinger             = (*observedConn)(nil)
	_ driver.SessionResetter    = (*observedConn)(nil)
	_ driver.Validator          = (*observedConn)(nil)
	_ driver.NamedValueChecker  = (*observedConn)(nil)
)

func (c *observedConn) report(query string, args []driver.NamedValue) {
	vals := make([]any, len(args))
	for i, a := range args {
		vals[i] = a.Value
	}
	c.fn(Statement{Query: query, Args: vals})
}

func (c *observedConn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	c.fn(Statement{Query: "BEGIN"})
	tx, err := c.passthroughConn.BeginTx(ctx, opts)
	if err != nil {
		return nil, err
	}
	return observedTx{Tx: tx, fn: c.fn}, nil
}

// observedTx reports the end of a transaction.
type observedTx struct {
	driver.Tx
	fn func(Statement)
}

func (t observedTx) Commit() error {
	t.fn(Statement{Query: "COMMIT"})
	return t.Tx.Commit()
}

func (t observedTx) Rollback() error {
	t.fn(Statement{Query: "ROLLBACK"})
	return t.Tx.Rollback()
}

func (c *observedConn) PrepareContext(ctx context.Context, query string) (driver.Stmt, error) {
	st, err := c.passthroughConn.PrepareContext(ctx, query)
	if err != nil {
		return nil, err
	}
	return &observedStmt{Stmt: st, query: query, conn: c}, nil
}

// ExecContext and QueryContext report a statement only when the driver runs it directly: when it
// answers ErrSkip, database/sql prepares it, and observedStmt reports it then.
func (c *observedConn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	if _, ok := c.Conn.(driver.ExecerContext); !ok {
		return nil, driver.ErrSkip
	}
	c.report(query, args)
	return c.passthroughConn.ExecContext(ctx, query, args)
}

func (c *observedConn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	if _, ok := c.Conn.(driver.QueryerContext); !ok {
		return nil, driver.ErrSkip
	}
	c.report(query, args)
	return c.passthroughConn.QueryContext(ctx, query, args)
}

// observedStmt reports prepared statements when they run (database/sql prepares when the driver
// answers ErrSkip to a direct execution).
type observedStmt struct {
	driver.Stmt
	query string
	conn  *observedConn
}

func (s *observedStmt) ExecContext(ctx context.Context, args []driver.NamedValue) (driver.Result, error) {
	s.conn.report(s.query, args)
	if e, ok := s.Stmt.(driver.StmtExecContext); ok {
		return e.ExecContext(ctx, args)
	}
	vals, err := plainValues(args)
	if err != nil {
		return nil, err
	}
	return s.Stmt.Exec(vals) //nolint:staticcheck // fallback for drivers without ExecContext
}

func (s *observedStmt) QueryContext(ctx context.Context, args []driver.NamedValue) (driver.Rows, error) {
	s.conn.report(s.query, args)
	if q, ok := s.Stmt.(driver.StmtQueryContext); ok {
		return q.QueryContext(ctx, args)
	}
	vals, err := plainValues(args)
	if err != nil {
		return nil, err
	}
	return s.Stmt.Query(vals) //nolint:staticcheck // fallback for drivers without QueryContext
}

func (s *observedStmt) CheckNamedValue(nv *driver.NamedValue) error {
	if ch, ok := s.Stmt.(driver.NamedValueChecker); ok {
		return ch.CheckNamedValue(nv)
	}
	return s.conn.CheckNamedValue(nv)
}

func plainValues(args []driver.NamedValue) ([]driver.Value, error) {
	out := make([]driver.Value, len(args))
	for i, a := range args {
		if a.Name != "" {
			return nil, errors.New("named parameters are not supported")
		}
		out[i] = a.Value
	}
	return out, nil
}
