-- Approval callbacks are deduplicated by their own request id: a duplicate key means "already
-- recorded", never an overwrite.
CREATE TABLE IF NOT EXISTS approval_callback (
  callback_id  VARCHAR(128) NOT NULL,
  operation_id VARCHAR(64)  NOT NULL,
  result       VARCHAR(16)  NOT NULL,
  received_at  DATETIME(6)  NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
  PRIMARY KEY (callback_id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- Deploy callbacks, one per (project, MR). mr_iid is an integer so that the per-project
-- watermark MAX(mr_iid) is read from the index (GROUP BY project). operation_ids keeps the exact
-- ids when the deploy pipeline sent them (JSON array), so reconciliation need not infer.
CREATE TABLE IF NOT EXISTS deploy_callback (
  id            BIGINT       NOT NULL AUTO_INCREMENT,
  project       VARCHAR(255) NOT NULL,
  mr_iid        BIGINT       NOT NULL,
  operation_ids TEXT         NULL,
  received_at   DATETIME(6)  NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
  PRIMARY KEY (id),
  UNIQUE KEY uk_deploy_callback_mr (project, mr_iid)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin /*T![auto_id_cache] AUTO_ID_CACHE=1 */;
