-- The merge train (batch.train): up to K batches ("cars") of a partition in CI at once, each
-- built on the car ahead of it. The database keeps the train's shape:
--   * train_seq orders the cars of a partition: UNIQUE (partition_key, train_seq), and a claim
--     takes the partition's highest sequence plus one, so a new car only ever joins behind the
--     last one, and two claimers racing for the same place find the duplicate key (the answer
--     "slot occupied", as before). A car that is bisected behind others moves to the end the
--     same way.
--   * train_slot is the car's place among the active cars, slot_no in [0, K) chosen free by the
--     claim; its UNIQUE index (NULLs repeat: settled cars hold none) lets at most K cars be active
--     for a K in force. With K = 1 every car takes slot 0: one active batch per partition, the
--     original I1. It is VIRTUAL so that engines that cannot add a stored generated column to an
--     existing table (TiDB) can apply it; MariaDB and MySQL index virtual columns alike.
--   * active_slot keeps naming the partition of every active car, now through a plain index:
--     the active cars of a partition in train order.
-- base_batch / base_sha: the car (NULL: the target branch) and the commit the car's branch was
-- built on; head_sha: the commit its branch carries; tested_sha: the head whose pipeline passed;
-- ci_started_at / ci_passed_at: the current pipeline wait on the database clock (the time-to-merge
-- estimate reads the project's recent pipelines from them).
ALTER TABLE merge_batch
  ADD COLUMN IF NOT EXISTS train_seq BIGINT NULL,
  ADD COLUMN IF NOT EXISTS train_k INT NOT NULL DEFAULT 1,
  ADD COLUMN IF NOT EXISTS slot_no INT NOT NULL DEFAULT 0,
  ADD COLUMN IF NOT EXISTS base_batch BIGINT NULL,
  ADD COLUMN IF NOT EXISTS base_sha VARCHAR(64) NOT NULL DEFAULT '',
  ADD COLUMN IF NOT EXISTS head_sha VARCHAR(64) NOT NULL DEFAULT '',
  ADD COLUMN IF NOT EXISTS tested_sha VARCHAR(64) NOT NULL DEFAULT '',
  ADD COLUMN IF NOT EXISTS ci_started_at DATETIME(6) NULL,
  ADD COLUMN IF NOT EXISTS ci_passed_at DATETIME(6) NULL;
ALTER TABLE merge_batch ADD COLUMN IF NOT EXISTS train_slot VARCHAR(300) GENERATED ALWAYS AS
  (CASE WHEN status IN ('RUNNING', 'BLOCKED') THEN CONCAT(partition_key, '#', slot_no) ELSE NULL END) VIRTUAL;
CREATE UNIQUE INDEX IF NOT EXISTS uk_merge_batch_train_slot ON merge_batch (train_slot);
CREATE UNIQUE INDEX IF NOT EXISTS uk_merge_batch_train_seq ON merge_batch (partition_key, train_seq);
CREATE INDEX IF NOT EXISTS idx_merge_batch_active ON merge_batch (active_slot, train_seq);
CREATE INDEX IF NOT EXISTS idx_merge_batch_ci ON merge_batch (partition_key, ci_passed_at);
DROP INDEX IF EXISTS uk_merge_batch_active_slot ON merge_batch;

-- "Merge next": an operator sends a waiting request into the next car of its partition, ahead of
-- the waiting set (next_by: who; NULL for every other row).
ALTER TABLE merge_batch_request ADD COLUMN IF NOT EXISTS next_by VARCHAR(255) NULL;
CREATE INDEX IF NOT EXISTS idx_merge_batch_request_next ON merge_batch_request (partition_key, batch_id, next_by);

-- A paused partition: no new car is claimed and no car merges until an operator resumes it; the
-- cars in CI finish their pipelines. One row per paused partition.
CREATE TABLE IF NOT EXISTS train_pause (
  partition_key VARCHAR(255) NOT NULL,
  paused_by     VARCHAR(255) NOT NULL,
  reason        VARCHAR(512) NOT NULL,
  paused_at     DATETIME(6)  NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
  PRIMARY KEY (partition_key)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- The end of a partition's train is taken one claim (or one move to the end) at a time: each
-- locks its partition's row here first, then reads the highest place. An exclusive lock on a
-- row, unlike a lock on the index's last entry and the gap after it, cannot deadlock two
-- claimers that both insert behind the last car.
CREATE TABLE IF NOT EXISTS train_lock (
  partition_key VARCHAR(255) NOT NULL,
  PRIMARY KEY (partition_key)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
