-- A batch's MR branch is written from its members' files. branch_digest names the member set the
-- branch was last written with ('' : not written yet, or the members changed since — bisection
-- returned some to the waiting set). A runner resuming after a crash compares it with the members
-- it holds and regenerates the branch when they differ, before it trusts the MR's pipeline.
--
-- MySQL has no ADD COLUMN IF NOT EXISTS (MariaDB has): the ALTER runs only while the column is
-- missing, so a re-run after an interrupted migration completes it on both.
SET @bindery_ddl = IF((SELECT COUNT(*) FROM information_schema.COLUMNS
    WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 'merge_batch' AND COLUMN_NAME = 'branch_digest') = 0,
  'ALTER TABLE merge_batch ADD COLUMN branch_digest VARCHAR(64) NOT NULL DEFAULT ''''',
  'DO 0');
PREPARE bindery_ddl_stmt FROM @bindery_ddl;
EXECUTE bindery_ddl_stmt;
DEALLOCATE PREPARE bindery_ddl_stmt;
