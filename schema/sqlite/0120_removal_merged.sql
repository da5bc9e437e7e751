-- SQLite twin of mysql/0120_removal_merged.sql (the comment there explains the table).
CREATE TABLE IF NOT EXISTS removal_merged (
  operation_id TEXT     NOT NULL PRIMARY KEY,
  project      TEXT     NOT NULL,
  mr_iid       INTEGER  NOT NULL,
  created_at   DATETIME NOT NULL DEFAULT (strftime('%Y-%m-%d %H:%M:%f','now'))
);
CREATE INDEX IF NOT EXISTS idx_removal_merged_mr ON removal_merged (project, mr_iid);
CREATE INDEX IF NOT EXISTS idx_removal_merged_created ON removal_merged (created_at);
