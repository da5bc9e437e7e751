-- SQLite twin of mysql/0042_readiness.sql (the comments there explain the table).
CREATE TABLE IF NOT EXISTS readiness (
  id         INTEGER  NOT NULL PRIMARY KEY,
  written_at DATETIME NOT NULL
);
INSERT OR IGNORE INTO readiness (id, written_at) VALUES (1, strftime('%Y-%m-%d %H:%M:%f','now'));
