-- SQLite twin of mysql/0100_train.sql (the comment there explains the train's columns).
ALTER TABLE merge_batch ADD COLUMN train_seq INTEGER NULL;
ALTER TABLE merge_batch ADD COLUMN train_k INTEGER NOT NULL DEFAULT 1;
ALTER TABLE merge_batch ADD COLUMN slot_no INTEGER NOT NULL DEFAULT 0;
ALTER TABLE merge_batch ADD COLUMN base_batch INTEGER NULL;
ALTER TABLE merge_batch ADD COLUMN base_sha TEXT NOT NULL DEFAULT '';
ALTER TABLE merge_batch ADD COLUMN head_sha TEXT NOT NULL DEFAULT '';
ALTER TABLE merge_batch ADD COLUMN tested_sha TEXT NOT NULL DEFAULT '';
ALTER TABLE merge_batch ADD COLUMN ci_started_at DATETIME NULL;
ALTER TABLE merge_batch ADD COLUMN ci_passed_at DATETIME NULL;
ALTER TABLE merge_batch ADD COLUMN train_slot TEXT GENERATED ALWAYS AS
  (CASE WHEN status IN ('RUNNING', 'BLOCKED') THEN partition_key || '#' || slot_no ELSE NULL END) VIRTUAL;
CREATE UNIQUE INDEX IF NOT EXISTS uk_merge_batch_train_slot ON merge_batch (train_slot);
CREATE UNIQUE INDEX IF NOT EXISTS uk_merge_batch_train_seq ON merge_batch (partition_key, train_seq);
CREATE INDEX IF NOT EXISTS idx_merge_batch_active ON merge_batch (active_slot, train_seq);
CREATE INDEX IF NOT EXISTS idx_merge_batch_ci ON merge_batch (partition_key, ci_passed_at) WHERE ci_passed_at IS NOT NULL;
DROP INDEX IF EXISTS uk_merge_batch_active_slot;

ALTER TABLE merge_batch_request ADD COLUMN next_by TEXT NULL;
CREATE INDEX IF NOT EXISTS idx_merge_batch_request_next ON merge_batch_request (partition_key, batch_id) WHERE batch_id IS NULL AND next_by IS NOT NULL;

CREATE TABLE IF NOT EXISTS train_pause (
  partition_key TEXT     NOT NULL PRIMARY KEY,
  paused_by     TEXT     NOT NULL,
  reason        TEXT     NOT NULL,
  paused_at     DATETIME NOT NULL DEFAULT (strftime('%Y-%m-%d %H:%M:%f','now'))
);

CREATE TABLE IF NOT EXISTS train_lock (
  partition_key TEXT NOT NULL PRIMARY KEY
);
