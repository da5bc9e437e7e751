-- SQLite twin of mysql/0090_orders_not_by_id.sql (the comments there explain it). Indexes over
-- columns an application leaves NULL stay partial (sqlite/0080).
ALTER TABLE operation_step ADD COLUMN seq INTEGER NOT NULL DEFAULT 0;
UPDATE operation_step SET seq = COALESCE((SELECT o.version FROM operation o WHERE o.operation_id = operation_step.operation_id), 0) -
  (SELECT COUNT(*) FROM operation_step l WHERE l.operation_id = operation_step.operation_id
     AND (l.at > operation_step.at OR (l.at = operation_step.at AND l.id > operation_step.id)));
DROP INDEX IF EXISTS idx_operation_step_operation;
CREATE UNIQUE INDEX IF NOT EXISTS uk_operation_step_seq ON operation_step (operation_id, seq);

DROP INDEX IF EXISTS idx_merge_batch_member_operation;
CREATE INDEX IF NOT EXISTS idx_merge_batch_member_claimed ON merge_batch_member (operation_id, claimed_at, id);

DROP INDEX IF EXISTS idx_operation_subject;
CREATE INDEX IF NOT EXISTS idx_operation_subject_created ON operation (subject_id, created_at, id);
DROP INDEX IF EXISTS idx_merge_batch_partition;
DROP INDEX IF EXISTS idx_merge_batch_status;
CREATE INDEX IF NOT EXISTS idx_merge_batch_created ON merge_batch (created_at, id);
CREATE INDEX IF NOT EXISTS idx_merge_batch_partition_created ON merge_batch (partition_key, created_at, id);
CREATE INDEX IF NOT EXISTS idx_merge_batch_status_created ON merge_batch (status, created_at, id);
CREATE INDEX IF NOT EXISTS idx_audit_at ON audit_log (at, id);
CREATE INDEX IF NOT EXISTS idx_deploy_callback_received ON deploy_callback (project, received_at, id);

DROP INDEX IF EXISTS idx_task_waits;
CREATE INDEX IF NOT EXISTS idx_task_waits_created ON task (waits_for, created_at, id) WHERE waits_for IS NOT NULL;
