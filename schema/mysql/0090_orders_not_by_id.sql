-- No read that means "in order" or "latest" follows AUTO_INCREMENT ids any more: a distributed
-- MySQL (TiDB) hands ids out in blocks per server, so a later row may carry a smaller id. The
-- reads follow a sequence bindery owns or the database clock with a tie-break, and these
-- indexes serve them (docs/architecture.md, "What bindery needs of its database").
--
-- operation_step.seq: the operation's version after the change the row records. Every change of
-- an operation raises its version by one and writes at most one history row, so seq orders an
-- operation's history exactly, whatever the clocks and ids; UNIQUE: one row per version. The
-- rows written before this migration are numbered in their (at, id) order so that the last one
-- holds the operation's current version: the rows written after it follow them.
ALTER TABLE operation_step ADD COLUMN IF NOT EXISTS seq BIGINT NOT NULL DEFAULT 0 AFTER operation_id;
UPDATE operation_step s
  JOIN (SELECT id, ROW_NUMBER() OVER (PARTITION BY operation_id ORDER BY at DESC, id DESC) - 1 AS later FROM operation_step) l ON l.id = s.id
  LEFT JOIN operation o ON o.operation_id = s.operation_id
  SET s.seq = COALESCE(o.version, 0) - l.later;
CREATE UNIQUE INDEX IF NOT EXISTS uk_operation_step_seq ON operation_step (operation_id, seq);
ALTER TABLE operation_step DROP INDEX IF EXISTS idx_operation_step_operation;

-- A request's latest batch is its latest claim, by the database clock (claims of one request are
-- a whole batch's run apart).
ALTER TABLE merge_batch_member ADD INDEX IF NOT EXISTS idx_merge_batch_member_claimed (operation_id, claimed_at, id),
  DROP INDEX IF EXISTS idx_merge_batch_member_operation;

-- The lists shown newest first: a subject's requests, the batches, the audit log, the deploy
-- callback received last.
ALTER TABLE operation ADD INDEX IF NOT EXISTS idx_operation_subject_created (subject_id, created_at, id),
  DROP INDEX IF EXISTS idx_operation_subject;
ALTER TABLE merge_batch ADD INDEX IF NOT EXISTS idx_merge_batch_created (created_at, id),
  ADD INDEX IF NOT EXISTS idx_merge_batch_partition_created (partition_key, created_at, id),
  ADD INDEX IF NOT EXISTS idx_merge_batch_status_created (status, created_at, id),
  DROP INDEX IF EXISTS idx_merge_batch_partition, DROP INDEX IF EXISTS idx_merge_batch_status;
ALTER TABLE audit_log ADD INDEX IF NOT EXISTS idx_audit_at (at, id);
ALTER TABLE deploy_callback ADD INDEX IF NOT EXISTS idx_deploy_callback_received (project, received_at, id);

-- The first task waiting for a slot is the oldest one.
ALTER TABLE task ADD INDEX IF NOT EXISTS idx_task_waits_created (waits_for, created_at, id), DROP INDEX IF EXISTS idx_task_waits;
