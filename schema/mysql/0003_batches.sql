-- A merge batch: one MR carrying the changes of the requests it claimed from one partition.
-- I1: active_slot is the partition key while the batch is RUNNING or BLOCKED, NULL otherwise;
-- its UNIQUE index (NULLs may repeat) lets at most one active batch exist per partition. The
-- update that settles a batch clears the slot in the same write: no separate release step, and a
-- crashed holder leaves a visible RUNNING row whose lease expires, never a hidden lock.
CREATE TABLE IF NOT EXISTS merge_batch (
  id            BIGINT       NOT NULL AUTO_INCREMENT,
  partition_key VARCHAR(255) NOT NULL,
  project       VARCHAR(255) NOT NULL,
  status        VARCHAR(16)  NOT NULL,
  active_slot   VARCHAR(255) GENERATED ALWAYS AS
                  (CASE WHEN status IN ('RUNNING', 'BLOCKED') THEN partition_key ELSE NULL END) STORED,
  version       BIGINT       NOT NULL DEFAULT 1,
  mr_iid        BIGINT       NULL,
  pipeline_id   BIGINT       NULL,
  note          VARCHAR(512) NOT NULL DEFAULT '',
  lease_owner   VARCHAR(64)  NULL,
  lease_until   DATETIME(6)  NULL,
  created_at    DATETIME(6)  NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
  updated_at    DATETIME(6)  NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
  settled_at    DATETIME(6)  NULL,
  PRIMARY KEY (id),
  UNIQUE KEY uk_merge_batch_active_slot (active_slot),
  KEY idx_merge_batch_status_lease (status, lease_until),
  KEY idx_merge_batch_partition (partition_key, id),
  KEY idx_merge_batch_mr (project, mr_iid)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin /*T![auto_id_cache] AUTO_ID_CACHE=1 */;

-- The waiting set and the in-flight members: batch_id NULL while waiting. I4: UNIQUE
-- (operation_id, action) makes admission idempotent (a duplicate key means "already queued").
-- The claim reads (partition_key, batch_id IS NULL, created_at < now) in (created_at, id) order
-- from idx_merge_batch_request_claim, with a plain read (I3), and claims by primary key (I2).
-- idx_merge_batch_request_waiting lists the partitions with waiting rows without scanning the
-- claimed ones. A failed batch removes its members' rows (the history below keeps them).
CREATE TABLE IF NOT EXISTS merge_batch_request (
  id            BIGINT       NOT NULL AUTO_INCREMENT,
  operation_id  VARCHAR(64)  NOT NULL,
  action        VARCHAR(8)   NOT NULL,
  partition_key VARCHAR(255) NOT NULL,
  batch_id      BIGINT       NULL,
  created_at    DATETIME(6)  NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
  PRIMARY KEY (id),
  UNIQUE KEY uk_merge_batch_request_operation (operation_id, action),
  KEY idx_merge_batch_request_claim (partition_key, batch_id, created_at, id),
  KEY idx_merge_batch_request_waiting (batch_id, partition_key)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin /*T![auto_id_cache] AUTO_ID_CACHE=1 */;

-- Append-only member history: one row per claimed request, written by the claim with a multi-row
-- insert. Never updated or deleted; settlement reads a batch's members from here.
CREATE TABLE IF NOT EXISTS merge_batch_member (
  id           BIGINT      NOT NULL AUTO_INCREMENT,
  batch_id     BIGINT      NOT NULL,
  request_id   BIGINT      NOT NULL,
  operation_id VARCHAR(64) NOT NULL,
  action       VARCHAR(8)  NOT NULL,
  queued_at    DATETIME(6) NOT NULL,
  claimed_at   DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
  PRIMARY KEY (id),
  KEY idx_merge_batch_member_batch (batch_id, id),
  KEY idx_merge_batch_member_operation (operation_id, id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin /*T![auto_id_cache] AUTO_ID_CACHE=1 */;
