-- SQLite twin of mysql/0170_drift.sql (the comments there explain the tables).
CREATE TABLE IF NOT EXISTS drift_finding (
  id            INTEGER  NOT NULL PRIMARY KEY AUTOINCREMENT,
  target_key    TEXT     NOT NULL,
  subject       TEXT     NOT NULL,
  project       TEXT     NOT NULL,
  path          TEXT     NOT NULL,
  kind          TEXT     NOT NULL,
  state         TEXT     NOT NULL,
  operation_id  TEXT     NULL,
  blob_id       TEXT     NOT NULL DEFAULT '',
  commit_sha    TEXT     NOT NULL DEFAULT '',
  author        TEXT     NOT NULL DEFAULT '',
  committed_at  DATETIME NULL,
  settled_op    TEXT     NULL,
  settled_blob  TEXT     NULL,
  ignore_reason TEXT     NOT NULL DEFAULT '',
  version       INTEGER  NOT NULL DEFAULT 1,
  first_seen    DATETIME NOT NULL DEFAULT (strftime('%Y-%m-%d %H:%M:%f','now')),
  last_seen     DATETIME NOT NULL DEFAULT (strftime('%Y-%m-%d %H:%M:%f','now')),
  closed_at     DATETIME NULL
);
CREATE UNIQUE INDEX IF NOT EXISTS uk_drift_relation ON drift_finding (target_key, subject);
CREATE INDEX IF NOT EXISTS idx_drift_state_seen ON drift_finding (state, first_seen);

CREATE TABLE IF NOT EXISTS drift_head (
  project  TEXT     NOT NULL,
  branch   TEXT     NOT NULL,
  head_sha TEXT     NOT NULL,
  read_at  DATETIME NOT NULL DEFAULT (strftime('%Y-%m-%d %H:%M:%f','now')),
  PRIMARY KEY (project, branch)
);
