-- SQLite twin of mysql/0110_notify.sql (the comments there explain the tables).
CREATE TABLE IF NOT EXISTS notify_event (
  id           INTEGER  NOT NULL PRIMARY KEY AUTOINCREMENT,
  event_id     TEXT     NOT NULL,
  type         TEXT     NOT NULL,
  operation_id TEXT     NULL,
  subject_id   TEXT     NULL,
  batch_id     INTEGER  NULL,
  dedupe_key   TEXT     NULL,
  data         TEXT     NOT NULL,
  created_at   DATETIME NOT NULL DEFAULT (strftime('%Y-%m-%d %H:%M:%f','now'))
);
CREATE UNIQUE INDEX IF NOT EXISTS uk_notify_event ON notify_event (event_id);
CREATE UNIQUE INDEX IF NOT EXISTS uk_notify_event_dedupe ON notify_event (dedupe_key) WHERE dedupe_key IS NOT NULL;
CREATE INDEX IF NOT EXISTS idx_notify_event_operation ON notify_event (operation_id, id) WHERE operation_id IS NOT NULL;
CREATE INDEX IF NOT EXISTS idx_notify_event_batch ON notify_event (batch_id, type) WHERE batch_id IS NOT NULL;

CREATE TABLE IF NOT EXISTS notify_delivery (
  id           INTEGER  NOT NULL PRIMARY KEY AUTOINCREMENT,
  event_id     TEXT     NOT NULL,
  channel      TEXT     NOT NULL,
  endpoint     TEXT     NOT NULL,
  target       TEXT     NOT NULL DEFAULT '',
  status       TEXT     NOT NULL,
  attempts     INTEGER  NOT NULL DEFAULT 0,
  last_code    INTEGER  NOT NULL DEFAULT 0,
  last_error   TEXT     NOT NULL DEFAULT '',
  next_at      DATETIME NULL,
  created_at   DATETIME NOT NULL DEFAULT (strftime('%Y-%m-%d %H:%M:%f','now')),
  updated_at   DATETIME NOT NULL DEFAULT (strftime('%Y-%m-%d %H:%M:%f','now')),
  done_at      DATETIME NULL
);
CREATE UNIQUE INDEX IF NOT EXISTS uk_notify_delivery ON notify_delivery (event_id, channel, endpoint, target);
CREATE INDEX IF NOT EXISTS idx_notify_delivery_endpoint ON notify_delivery (endpoint, id);

CREATE TABLE IF NOT EXISTS notify_attempt (
  id           INTEGER  NOT NULL PRIMARY KEY AUTOINCREMENT,
  delivery_id  INTEGER  NOT NULL,
  at           DATETIME NOT NULL DEFAULT (strftime('%Y-%m-%d %H:%M:%f','now')),
  code         INTEGER  NOT NULL DEFAULT 0,
  latency_ms   INTEGER  NOT NULL DEFAULT 0,
  class        TEXT     NOT NULL,
  error        TEXT     NOT NULL DEFAULT '',
  instance     TEXT     NOT NULL DEFAULT ''
);
CREATE INDEX IF NOT EXISTS idx_notify_attempt_delivery ON notify_attempt (delivery_id, id);
CREATE INDEX IF NOT EXISTS idx_notify_attempt_at ON notify_attempt (at);

CREATE TABLE IF NOT EXISTS notify_endpoint (
  endpoint        TEXT     NOT NULL PRIMARY KEY,
  failing_since   DATETIME NULL,
  last_success    DATETIME NULL,
  disabled_at     DATETIME NULL,
  disabled_reason TEXT     NOT NULL DEFAULT '',
  updated_at      DATETIME NOT NULL DEFAULT (strftime('%Y-%m-%d %H:%M:%f','now'))
);

CREATE TABLE IF NOT EXISTS notify_pref (
  subject_id  TEXT     NOT NULL PRIMARY KEY,
  events      TEXT     NOT NULL,
  updated_at  DATETIME NOT NULL DEFAULT (strftime('%Y-%m-%d %H:%M:%f','now'))
);

CREATE TABLE IF NOT EXISTS notify_mr_note (
  project     TEXT     NOT NULL,
  mr_iid      INTEGER  NOT NULL,
  note_id     INTEGER  NOT NULL,
  body        TEXT     NOT NULL,
  updated_at  DATETIME NOT NULL DEFAULT (strftime('%Y-%m-%d %H:%M:%f','now')),
  PRIMARY KEY (project, mr_iid)
);
