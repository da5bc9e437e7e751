-- SQLite twin of mysql/0181_renewal.sql (the comments there explain the table).
CREATE TABLE IF NOT EXISTS renewal (
  id             INTEGER  NOT NULL PRIMARY KEY AUTOINCREMENT,
  renewal_id     TEXT     NOT NULL,
  operation_id   TEXT     NOT NULL,
  pending_of     TEXT     NULL,
  mode           TEXT     NOT NULL,
  status         TEXT     NOT NULL,
  requested_by   TEXT     NOT NULL,
  decided_by     TEXT     NOT NULL DEFAULT '',
  ticket_id      TEXT     NOT NULL DEFAULT '',
  old_expires_at DATETIME NOT NULL,
  new_expires_at DATETIME NULL,
  created_at     DATETIME NOT NULL DEFAULT (strftime('%Y-%m-%d %H:%M:%f','now')),
  decided_at     DATETIME NULL
);
CREATE UNIQUE INDEX IF NOT EXISTS uk_renewal_id ON renewal (renewal_id);
CREATE UNIQUE INDEX IF NOT EXISTS uk_renewal_pending ON renewal (pending_of);
CREATE INDEX IF NOT EXISTS idx_renewal_operation ON renewal (operation_id, created_at);
