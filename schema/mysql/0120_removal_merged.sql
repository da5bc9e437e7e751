-- A removal (revoke, expiry) whose MR merged waits, like a grant, for the deploy that includes
-- the merge before its request is CLOSED: its binding stays VALIDATED (the file is still
-- deployed) at step CLOSE_MERGED. One row per such removal, written in the transaction of that
-- step and removed in the one that closes it, so that deploy callbacks (by MR), reconciliation
-- and the overdue list (by age) find them without reading every binding in effect.
CREATE TABLE IF NOT EXISTS removal_merged (
  operation_id VARCHAR(64)  NOT NULL,
  project      VARCHAR(255) NOT NULL,
  mr_iid       BIGINT       NOT NULL,
  created_at   DATETIME(6)  NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
  PRIMARY KEY (operation_id),
  KEY idx_removal_merged_mr (project, mr_iid),
  KEY idx_removal_merged_created (created_at)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
