-- SQLite twin of mysql/0003_batches.sql (the comments there explain the design). SQLite unique
-- indexes also let NULLs repeat, so the stored generated active_slot keeps I1 the same way.
CREATE TABLE IF NOT EXISTS merge_batch (
  id            INTEGER  NOT NULL PRIMARY KEY AUTOINCREMENT,
  partition_key TEXT     NOT NULL,
  project       TEXT     NOT NULL,
  status        TEXT     NOT NULL,
  active_slot   TEXT GENERATED ALWAYS AS
                  (CASE WHEN status IN ('RUNNING', 'BLOCKED') THEN partition_key ELSE NULL END) STORED,
  version       INTEGER  NOT NULL DEFAULT 1,
  mr_iid        INTEGER  NULL,
  pipeline_id   INTEGER  NULL,
  note          TEXT     NOT NULL DEFAULT '',
  lease_owner   TEXT     NULL,
  lease_until   DATETIME NULL,
  created_at    DATETIME NOT NULL DEFAULT (strftime('%Y-%m-%d %H:%M:%f','now')),
  updated_at    DATETIME NOT NULL DEFAULT (strftime('%Y-%m-%d %H:%M:%f','now')),
  settled_at    DATETIME NULL
);
CREATE UNIQUE INDEX IF NOT EXISTS uk_merge_batch_active_slot ON merge_batch (active_slot);
CREATE INDEX IF NOT EXISTS idx_merge_batch_status_lease ON merge_batch (status, lease_until);
CREATE INDEX IF NOT EXISTS idx_merge_batch_partition ON merge_batch (partition_key, id);
CREATE INDEX IF NOT EXISTS idx_merge_batch_mr ON merge_batch (project, mr_iid);

CREATE TABLE IF NOT EXISTS merge_batch_request (
  id            INTEGER  NOT NULL PRIMARY KEY AUTOINCREMENT,
  operation_id  TEXT     NOT NULL,
  action        TEXT     NOT NULL,
  partition_key TEXT     NOT NULL,
  batch_id      INTEGER  NULL,
  created_at    DATETIME NOT NULL DEFAULT (strftime('%Y-%m-%d %H:%M:%f','now'))
);
CREATE UNIQUE INDEX IF NOT EXISTS uk_merge_batch_request_operation ON merge_batch_request (operation_id, action);
CREATE INDEX IF NOT EXISTS idx_merge_batch_request_claim ON merge_batch_request (partition_key, batch_id, created_at, id);
CREATE INDEX IF NOT EXISTS idx_merge_batch_request_waiting ON merge_batch_request (batch_id, partition_key);

CREATE TABLE IF NOT EXISTS merge_batch_member (
  id           INTEGER  NOT NULL PRIMARY KEY AUTOINCREMENT,
  batch_id     INTEGER  NOT NULL,
  request_id   INTEGER  NOT NULL,
  operation_id TEXT     NOT NULL,
  action       TEXT     NOT NULL,
  queued_at    DATETIME NOT NULL,
  claimed_at   DATETIME NOT NULL DEFAULT (strftime('%Y-%m-%d %H:%M:%f','now'))
);
CREATE INDEX IF NOT EXISTS idx_merge_batch_member_batch ON merge_batch_member (batch_id, id);
CREATE INDEX IF NOT EXISTS idx_merge_batch_member_operation ON merge_batch_member (operation_id, id);
