-- SQLite twin of mysql/0200_review.sql (the comments there explain the tables).
CREATE TABLE IF NOT EXISTS review (
  id           INTEGER  NOT NULL PRIMARY KEY AUTOINCREMENT,
  operation_id TEXT     NOT NULL,
  target_key   TEXT     NOT NULL,
  open_target  TEXT     NULL,
  status       TEXT     NOT NULL,
  started_by   TEXT     NOT NULL,
  due_at       DATETIME NOT NULL,
  reminded_at  DATETIME NULL,
  completed_op TEXT     NULL,
  completed_by TEXT     NOT NULL DEFAULT '',
  completed_at DATETIME NULL,
  created_at   DATETIME NOT NULL DEFAULT (strftime('%Y-%m-%d %H:%M:%f','now'))
);
CREATE UNIQUE INDEX IF NOT EXISTS uk_review_operation ON review (operation_id);
CREATE UNIQUE INDEX IF NOT EXISTS uk_review_open ON review (open_target);
CREATE INDEX IF NOT EXISTS idx_review_status_due ON review (status, due_at);
CREATE INDEX IF NOT EXISTS idx_review_target ON review (target_key, created_at);

CREATE TABLE IF NOT EXISTS review_item (
  id           INTEGER  NOT NULL PRIMARY KEY AUTOINCREMENT,
  review_id    INTEGER  NOT NULL,
  operation_id TEXT     NOT NULL,
  subject_id   TEXT     NOT NULL,
  decision     TEXT     NOT NULL DEFAULT '',
  comment      TEXT     NOT NULL DEFAULT '',
  decided_by   TEXT     NOT NULL DEFAULT '',
  decided_op   TEXT     NULL,
  decided_at   DATETIME NULL,
  removal      TEXT     NOT NULL DEFAULT '',
  removal_at   DATETIME NULL,
  created_at   DATETIME NOT NULL DEFAULT (strftime('%Y-%m-%d %H:%M:%f','now'))
);
CREATE UNIQUE INDEX IF NOT EXISTS uk_review_item ON review_item (review_id, operation_id);

CREATE INDEX IF NOT EXISTS idx_binding_target_status ON binding (target_key, status);
