-- SQLite twin of mysql/0150_signin.sql (the comments there explain the tables).
CREATE TABLE IF NOT EXISTS signin_attempt (
  state_hash   TEXT     NOT NULL PRIMARY KEY,
  nonce        TEXT     NOT NULL,
  verifier     TEXT     NOT NULL,
  next_path    TEXT     NOT NULL,
  redirect_url TEXT     NOT NULL,
  created_at   DATETIME NOT NULL DEFAULT (strftime('%Y-%m-%d %H:%M:%f','now')),
  expires_at   DATETIME NOT NULL
);
CREATE INDEX IF NOT EXISTS idx_signin_attempt_expires ON signin_attempt (expires_at);

CREATE TABLE IF NOT EXISTS signin_session (
  id_hash      TEXT     NOT NULL PRIMARY KEY,
  account      TEXT     NOT NULL,
  display_name TEXT     NOT NULL DEFAULT '',
  groups_json  TEXT     NOT NULL,
  created_at   DATETIME NOT NULL DEFAULT (strftime('%Y-%m-%d %H:%M:%f','now')),
  seen_at      DATETIME NOT NULL DEFAULT (strftime('%Y-%m-%d %H:%M:%f','now'))
);
CREATE INDEX IF NOT EXISTS idx_signin_session_seen ON signin_session (seen_at);
CREATE INDEX IF NOT EXISTS idx_signin_session_created ON signin_session (created_at);
