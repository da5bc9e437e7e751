package store

import (
	"context"
	"database/sql/driver"
)

// passthroughConn is the part of a driver.Conn wrapper that changes nothing: it forwards every
// optional interface both drivers implement. A wrapper that hid one would make database/sql
// fall back to prepare+execute (a different statement count and, on MySQL, a different
// protocol) and lose context cancellation of lock waits. The statement observer
// (observe.go) and the statement cache (stmtcache.go) embed it and override what they change.
type passthroughConn struct {
	driver.Conn
}

var (
	_ driver.ConnBeginTx        = passthroughConn{}
	_ driver.ConnPrepareContext = passthroughConn{}
	_ driver.ExecerContext      = passthroughConn{}
	_ driver.QueryerContext     = passthroughConn{}
	_ driver.Pinger             = passthroughConn{}
	_ driver.SessionResetter    = passthroughConn{}
	_ driver.Validator          = passthroughConn{}
	_ driver.NamedValueChecker  = passthroughConn{}
)

// Unwrap returns the driver's connection (modernc's sqlite.Limit looks through wrappers this way).
func (c passthroughConn) Unwrap() driver.Conn { return c.Conn }

func (c passthroughConn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	if b, ok := c.Conn.(driver.ConnBeginTx); ok {
		return b.BeginTx(ctx, opts)
	}
	return c.Conn.Begin() //nolint:staticcheck // fallback for drivers without BeginTx
}

func (c passthroughConn) PrepareContext(ctx context.Context, query string) (driver.Stmt, error) {
	if p, ok := c.Conn.(driver.ConnPrepareContext); ok {
		return p.PrepareContext(ctx, query)
	}
	return c.Conn.Prepare(query)
}

func (c passthroughConn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	e, ok := c.Conn.(driver.ExecerContext)
	if !ok {
		return nil, driver.ErrSkip
	}
	return e.ExecContext(ctx, query, args)
}

func (c passthroughConn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	q, ok := c.Conn.(driver.QueryerContext)
	if !ok {
		return nil, driver.ErrSkip
	}
	return q.QueryContext(ctx, query, args)
}

func (c passthroughConn) Ping(ctx context.Context) error {
	if p, ok := c.Conn.(driver.Pinger); ok {
		return p.Ping(ctx)
	}
	return nil
}

func (c passthroughConn) ResetSession(ctx context.Context) error {
	if r, ok := c.Conn.(driver.SessionResetter); ok {
		return r.ResetSession(ctx)
	}
	return nil
}

func (c passthroughConn) IsValid() bool {
	if v, ok := c.Conn.(driver.Validator); ok {
		return v.IsValid()
	}
	return true
}

func (c passthroughConn) CheckNamedValue(nv *driver.NamedValue) error {
	if ch, ok := c.Conn.(driver.NamedValueChecker); ok {
		return ch.CheckNamedValue(nv)
	}
	return driver.ErrSkip
}
