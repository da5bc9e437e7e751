-- A batch whose failure was decided but whose settlement did not go through (GitLab or the
-- database failed while closing the MR or writing the settlement) stays active and says so:
-- failing holds the decided failure ('' : none) that the sweep settles it with, last_error why the
-- last settlement attempt failed. Both are shown in the ops console; a settlement clears them.
--
-- Guarded like 0030 (MySQL has no ADD COLUMN IF NOT EXISTS).
SET @bindery_ddl = IF((SELECT COUNT(*) FROM information_schema.COLUMNS
    WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 'merge_batch' AND COLUMN_NAME = 'failing') = 0,
  'ALTER TABLE merge_batch ADD COLUMN failing VARCHAR(1024) NOT NULL DEFAULT '''', ADD COLUMN last_error VARCHAR(1024) NOT NULL DEFAULT ''''',
  'DO 0');
PREPARE bindery_ddl_stmt FROM @bindery_ddl;
EXECUTE bindery_ddl_stmt;
DEALLOCATE PREPARE bindery_ddl_stmt;
