-- SQLite twin of mysql/0151_api_token.sql (the comments there explain the table).
CREATE TABLE IF NOT EXISTS api_token (
  id           INTEGER  NOT NULL PRIMARY KEY AUTOINCREMENT,
  owner        TEXT     NOT NULL,
  slot         INTEGER  NULL,
  name         TEXT     NOT NULL,
  scopes       TEXT     NOT NULL,
  lookup_key   TEXT     NOT NULL,
  secret_hash  TEXT     NOT NULL,
  created_at   DATETIME NOT NULL DEFAULT (strftime('%Y-%m-%d %H:%M:%f','now')),
  expires_at   DATETIME NOT NULL,
  last_used_at DATETIME NULL,
  revoked_at   DATETIME NULL
);
CREATE UNIQUE INDEX IF NOT EXISTS uk_api_token_lookup ON api_token (lookup_key);
CREATE UNIQUE INDEX IF NOT EXISTS uk_api_token_slot ON api_token (owner, slot);
CREATE INDEX IF NOT EXISTS idx_api_token_owner ON api_token (owner, created_at);
CREATE INDEX IF NOT EXISTS idx_api_token_expires ON api_token (expires_at);
CREATE INDEX IF NOT EXISTS idx_api_token_revoked ON api_token (revoked_at);
