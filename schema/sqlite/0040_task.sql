-- SQLite twin of mysql/0040_task.sql (the comments there explain the table).
CREATE TABLE IF NOT EXISTS task (
  id          INTEGER  NOT NULL PRIMARY KEY AUTOINCREMENT,
  kind        TEXT     NOT NULL,
  ref         TEXT     NOT NULL,
  lane        TEXT     NOT NULL,
  step        TEXT     NOT NULL,
  due_at      DATETIME NOT NULL DEFAULT (strftime('%Y-%m-%d %H:%M:%f','now')),
  epoch       INTEGER  NOT NULL DEFAULT 1,
  owner       TEXT     NULL,
  wakes       INTEGER  NOT NULL DEFAULT 0,
  checks      INTEGER  NOT NULL DEFAULT 0,
  failures    INTEGER  NOT NULL DEFAULT 0,
  wait_since  DATETIME NULL,
  memo        TEXT     NOT NULL DEFAULT '',
  note        TEXT     NOT NULL DEFAULT '',
  slot        TEXT     NULL,
  created_at  DATETIME NOT NULL DEFAULT (strftime('%Y-%m-%d %H:%M:%f','now')),
  updated_at  DATETIME NOT NULL DEFAULT (strftime('%Y-%m-%d %H:%M:%f','now'))
);
CREATE UNIQUE INDEX IF NOT EXISTS uk_task_ref ON task (kind, ref);
CREATE UNIQUE INDEX IF NOT EXISTS uk_task_slot ON task (slot);
CREATE INDEX IF NOT EXISTS idx_task_due ON task (lane, due_at);

INSERT OR IGNORE INTO task (kind, ref, lane, step, due_at)
  SELECT 'request', operation_id, 'first', 'ticket', COALESCE(lease_until, strftime('%Y-%m-%d %H:%M:%f','now')) FROM operation
  WHERE status = 'APPROVAL_SENDING' OR (flow = 'legacy' AND status = 'MR_CREATED');
INSERT OR IGNORE INTO task (kind, ref, lane, step, due_at)
  SELECT 'request', operation_id, 'first', 'create', COALESCE(lease_until, strftime('%Y-%m-%d %H:%M:%f','now')) FROM operation
  WHERE flow = 'legacy' AND status = 'MR_CREATING' AND step = 10001;
INSERT OR IGNORE INTO task (kind, ref, lane, step, due_at)
  SELECT 'request', operation_id, 'background', 'approve', COALESCE(lease_until, strftime('%Y-%m-%d %H:%M:%f','now')) FROM operation
  WHERE flow = 'legacy' AND status = 'MERGING' AND step NOT IN (10501, 10502, 10503);
INSERT OR IGNORE INTO task (kind, ref, lane, step, due_at)
  SELECT 'batch', CAST(id AS TEXT), 'background',
         CASE WHEN failing <> '' THEN 'settle' WHEN status = 'BLOCKED' THEN 'blocked' ELSE 'open' END,
         COALESCE(lease_until, strftime('%Y-%m-%d %H:%M:%f','now')) FROM merge_batch
  WHERE status IN ('RUNNING', 'BLOCKED');

DROP INDEX IF EXISTS idx_operation_lease;
ALTER TABLE operation DROP COLUMN lease_owner;
ALTER TABLE operation DROP COLUMN lease_until;
DROP INDEX IF EXISTS idx_merge_batch_status_lease;
ALTER TABLE merge_batch DROP COLUMN lease_owner;
ALTER TABLE merge_batch DROP COLUMN lease_until;
CREATE INDEX IF NOT EXISTS idx_merge_batch_status ON merge_batch (status, id);
