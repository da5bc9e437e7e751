-- SQLite twin of mysql/0044_merge_order.sql (the comments there explain the tables).
CREATE TABLE IF NOT EXISTS mr_merge (
  project     TEXT     NOT NULL,
  mr_iid      INTEGER  NOT NULL,
  seq         INTEGER  NOT NULL,
  branch      TEXT     NOT NULL,
  sha         TEXT     NOT NULL DEFAULT '',
  merged_at   DATETIME NULL,
  recorded_at DATETIME NOT NULL DEFAULT (strftime('%Y-%m-%d %H:%M:%f','now')),
  PRIMARY KEY (project, mr_iid)
);
CREATE UNIQUE INDEX IF NOT EXISTS uk_mr_merge_seq ON mr_merge (project, seq);
CREATE INDEX IF NOT EXISTS idx_mr_merge_order ON mr_merge (project, branch, merged_at, seq);
CREATE INDEX IF NOT EXISTS idx_mr_merge_sha ON mr_merge (project, sha);

CREATE TABLE IF NOT EXISTS merge_counter (
  project TEXT    NOT NULL PRIMARY KEY,
  seq     INTEGER NOT NULL
);

ALTER TABLE deploy_callback ADD COLUMN sha TEXT NULL;
CREATE INDEX IF NOT EXISTS idx_deploy_callback_sha ON deploy_callback (project, sha);
