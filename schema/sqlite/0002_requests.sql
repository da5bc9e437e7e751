-- SQLite twin of mysql/0002_requests.sql (the comments there explain the columns). Times are
-- DATETIME text 'YYYY-MM-DD HH:MM:SS.SSS' from the database clock; ids never repeat
-- (AUTOINCREMENT), so cursors and history references stay unambiguous.
CREATE TABLE IF NOT EXISTS binding (
  id           INTEGER  NOT NULL PRIMARY KEY AUTOINCREMENT,
  subject_id   TEXT     NOT NULL,
  target_key   TEXT     NOT NULL,
  status       TEXT     NOT NULL,
  operation_id TEXT     NOT NULL,
  version      INTEGER  NOT NULL DEFAULT 1,
  expires_at   DATETIME NULL,
  created_at   DATETIME NOT NULL DEFAULT (strftime('%Y-%m-%d %H:%M:%f','now')),
  updated_at   DATETIME NOT NULL DEFAULT (strftime('%Y-%m-%d %H:%M:%f','now'))
);
CREATE UNIQUE INDEX IF NOT EXISTS uk_binding_relation ON binding (subject_id, target_key);
CREATE UNIQUE INDEX IF NOT EXISTS uk_binding_operation ON binding (operation_id);
CREATE INDEX IF NOT EXISTS idx_binding_status_updated ON binding (status, updated_at);
CREATE INDEX IF NOT EXISTS idx_binding_status_expires ON binding (status, expires_at);

CREATE TABLE IF NOT EXISTS operation (
  id           INTEGER  NOT NULL PRIMARY KEY AUTOINCREMENT,
  operation_id TEXT     NOT NULL,
  subject_id   TEXT     NOT NULL,
  target_key   TEXT     NOT NULL,
  project      TEXT     NOT NULL,
  flow         TEXT     NOT NULL,
  reason       TEXT     NOT NULL,
  status       TEXT     NOT NULL,
  step         INTEGER  NOT NULL,
  version      INTEGER  NOT NULL DEFAULT 1,
  mr_iid       INTEGER  NULL,
  pipeline_id  INTEGER  NULL,
  batch_id     INTEGER  NULL,
  lease_owner  TEXT     NULL,
  lease_until  DATETIME NULL,
  created_at   DATETIME NOT NULL DEFAULT (strftime('%Y-%m-%d %H:%M:%f','now')),
  updated_at   DATETIME NOT NULL DEFAULT (strftime('%Y-%m-%d %H:%M:%f','now'))
);
CREATE UNIQUE INDEX IF NOT EXISTS uk_operation_operation ON operation (operation_id);
CREATE INDEX IF NOT EXISTS idx_operation_subject ON operation (subject_id, id);
CREATE INDEX IF NOT EXISTS idx_operation_status_updated ON operation (status, updated_at);
CREATE INDEX IF NOT EXISTS idx_operation_mr ON operation (project, mr_iid);
CREATE INDEX IF NOT EXISTS idx_operation_lease ON operation (lease_until);

CREATE TABLE IF NOT EXISTS operation_step (
  id           INTEGER  NOT NULL PRIMARY KEY AUTOINCREMENT,
  operation_id TEXT     NOT NULL,
  step         INTEGER  NOT NULL,
  status       TEXT     NOT NULL,
  note         TEXT     NOT NULL DEFAULT '',
  at           DATETIME NOT NULL DEFAULT (strftime('%Y-%m-%d %H:%M:%f','now'))
);
CREATE INDEX IF NOT EXISTS idx_operation_step_operation ON operation_step (operation_id, id);
