-- The order in which MRs landed on their target branch, per project: a deploy of one merge
-- proves deployed only what landed at or before it on the same branch (an MR's number is not
-- its merge order). mr_merge is written in the transaction that records the MR's requests
-- MERGED; seq is the project's sequence taken there (merge_counter), merged_at GitLab's own
-- time of the merge (its clock, the same for every merge of a project). The order is
-- (merged_at, seq); a merge GitLab gave no time for is never placed.
CREATE TABLE IF NOT EXISTS mr_merge (
  project     VARCHAR(255) NOT NULL,
  mr_iid      BIGINT       NOT NULL,
  seq         BIGINT       NOT NULL,
  branch      VARCHAR(255) NOT NULL,
  sha         VARCHAR(64)  NOT NULL DEFAULT '',
  merged_at   DATETIME(6)  NULL,
  recorded_at DATETIME(6)  NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
  PRIMARY KEY (project, mr_iid),
  UNIQUE KEY uk_mr_merge_seq (project, seq),
  KEY idx_mr_merge_order (project, branch, merged_at, seq),
  KEY idx_mr_merge_sha (project, sha)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

CREATE TABLE IF NOT EXISTS merge_counter (
  project VARCHAR(255) NOT NULL,
  seq     BIGINT       NOT NULL,
  PRIMARY KEY (project)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- The commit a deploy callback says it deployed (optional).
ALTER TABLE deploy_callback ADD COLUMN IF NOT EXISTS sha VARCHAR(64) NULL AFTER operation_ids;
ALTER TABLE deploy_callback ADD INDEX IF NOT EXISTS idx_deploy_callback_sha (project, sha);
