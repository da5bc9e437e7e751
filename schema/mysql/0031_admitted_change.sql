-- The change a request makes, rendered and validated when it was admitted (docs/workflow.md,
-- 'Admission'): the target branch, the file path and, for a create, the file's content. The batch
-- runner commits these as they were validated, so a request whose target left the catalog (or
-- whose path template changed) after admission still finishes as it was approved
-- (docs/workflow.md, 'Targets and the file change'). NULL: not recorded at admission; the runner
-- renders from the catalog.
--
-- Guarded like 0030 (MySQL has no ADD COLUMN IF NOT EXISTS).
SET @bindery_ddl = IF((SELECT COUNT(*) FROM information_schema.COLUMNS
    WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 'merge_batch_request' AND COLUMN_NAME = 'change_path') = 0,
  'ALTER TABLE merge_batch_request ADD COLUMN change_branch VARCHAR(255) NULL, ADD COLUMN change_path VARCHAR(1024) NULL, ADD COLUMN change_content TEXT NULL',
  'DO 0');
PREPARE bindery_ddl_stmt FROM @bindery_ddl;
EXECUTE bindery_ddl_stmt;
DEALLOCATE PREPARE bindery_ddl_stmt;
