-- SQLite twin of mysql/0004_callbacks.sql.
CREATE TABLE IF NOT EXISTS approval_callback (
  callback_id  TEXT     NOT NULL PRIMARY KEY,
  operation_id TEXT     NOT NULL,
  result       TEXT     NOT NULL,
  received_at  DATETIME NOT NULL DEFAULT (strftime('%Y-%m-%d %H:%M:%f','now'))
);

CREATE TABLE IF NOT EXISTS deploy_callback (
  id            INTEGER  NOT NULL PRIMARY KEY AUTOINCREMENT,
  project       TEXT     NOT NULL,
  mr_iid        INTEGER  NOT NULL,
  operation_ids TEXT     NULL,
  received_at   DATETIME NOT NULL DEFAULT (strftime('%Y-%m-%d %H:%M:%f','now'))
);
CREATE UNIQUE INDEX IF NOT EXISTS uk_deploy_callback_mr ON deploy_callback (project, mr_iid);
