-- Durable execution (docs/architecture.md): every unit of in-flight work — a request's current
-- step, a batch — is one row here, and waiting is this row, not a sleeping goroutine.
--   due_at: when the work runs next, by the database clock. While an instance runs it (owner
--     set), due_at is when that claim expires: a crashed holder's work falls due again by itself.
--   epoch: the fencing token. A claim is a compare-and-set on it (+1), and every write of the
--     holder (renew, outcome, release) is guarded on the epoch it took; an outside reschedule
--     (an operator's retry, a callback) bumps it too, so a holder that lost the work writes
--     nothing. Never the holder's name: one instance may run two attempts of the same work.
--   wakes: outside wakes (webhooks, callbacks, operators). A wake of unclaimed work makes it due
--     now; a wake during a claim makes the holder's next due time now (the claim read wakes).
--   checks / wait_since: the staged polling schedule as data (how many checks of the current
--     wait, since when). failures: consecutive transient failures (the backoff).
--   memo: the step's own small memory (JSON). note: why it is waiting (shown to people).
--   slot: mutual exclusion between tasks (one legacy merge per project), UNIQUE, NULLs repeat.
-- idx_task_due serves the dispatcher's scan (due work of a lane, oldest first) and the count of
-- the work queued ahead of a request.
CREATE TABLE IF NOT EXISTS task (
  id          BIGINT        NOT NULL AUTO_INCREMENT,
  kind        VARCHAR(16)   NOT NULL,
  ref         VARCHAR(64)   NOT NULL,
  lane        VARCHAR(16)   NOT NULL,
  step        VARCHAR(32)   NOT NULL,
  due_at      DATETIME(6)   NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
  epoch       BIGINT        NOT NULL DEFAULT 1,
  owner       VARCHAR(64)   NULL,
  wakes       BIGINT        NOT NULL DEFAULT 0,
  checks      INT           NOT NULL DEFAULT 0,
  failures    INT           NOT NULL DEFAULT 0,
  wait_since  DATETIME(6)   NULL,
  memo        VARCHAR(1024) NOT NULL DEFAULT '',
  note        VARCHAR(512)  NOT NULL DEFAULT '',
  slot        VARCHAR(255)  NULL,
  created_at  DATETIME(6)   NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
  updated_at  DATETIME(6)   NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
  PRIMARY KEY (id),
  UNIQUE KEY uk_task_ref (kind, ref),
  UNIQUE KEY uk_task_slot (slot),
  KEY idx_task_due (lane, due_at)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin /*T![auto_id_cache] AUTO_ID_CACHE=1 */;

-- The work in flight when this version starts, as tasks (it ran under the old per-row leases):
-- each resumes from the remote state, due when its old lease ends (now when it had none).
INSERT IGNORE INTO task (kind, ref, lane, step, due_at)
  SELECT 'request', operation_id, 'first', 'ticket', COALESCE(lease_until, CURRENT_TIMESTAMP(6)) FROM operation
  WHERE status = 'APPROVAL_SENDING' OR (flow = 'legacy' AND status = 'MR_CREATED');
INSERT IGNORE INTO task (kind, ref, lane, step, due_at)
  SELECT 'request', operation_id, 'first', 'create', COALESCE(lease_until, CURRENT_TIMESTAMP(6)) FROM operation
  WHERE flow = 'legacy' AND status = 'MR_CREATING' AND step = 10001;
INSERT IGNORE INTO task (kind, ref, lane, step, due_at)
  SELECT 'request', operation_id, 'background', 'approve', COALESCE(lease_until, CURRENT_TIMESTAMP(6)) FROM operation
  WHERE flow = 'legacy' AND status = 'MERGING' AND step NOT IN (10501, 10502, 10503);
INSERT IGNORE INTO task (kind, ref, lane, step, due_at)
  SELECT 'batch', CAST(id AS CHAR), 'background',
         CASE WHEN failing <> '' THEN 'settle' WHEN status = 'BLOCKED' THEN 'blocked' ELSE 'open' END,
         COALESCE(lease_until, CURRENT_TIMESTAMP(6)) FROM merge_batch
  WHERE status IN ('RUNNING', 'BLOCKED');

-- The old per-row leases are gone: the task row is the only lease. MySQL has no DROP COLUMN IF
-- EXISTS (MariaDB has): each drop runs only while its column is there, so a re-run completes it.
SET @bindery_ddl = IF((SELECT COUNT(*) FROM information_schema.COLUMNS
    WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 'operation' AND COLUMN_NAME = 'lease_owner') = 1,
  'ALTER TABLE operation DROP INDEX idx_operation_lease, DROP COLUMN lease_owner, DROP COLUMN lease_until',
  'DO 0');
PREPARE bindery_ddl_stmt FROM @bindery_ddl;
EXECUTE bindery_ddl_stmt;
DEALLOCATE PREPARE bindery_ddl_stmt;
SET @bindery_ddl = IF((SELECT COUNT(*) FROM information_schema.COLUMNS
    WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 'merge_batch' AND COLUMN_NAME = 'lease_owner') = 1,
  'ALTER TABLE merge_batch DROP INDEX idx_merge_batch_status_lease, DROP COLUMN lease_owner, DROP COLUMN lease_until, ADD KEY idx_merge_batch_status (status, id)',
  'DO 0');
PREPARE bindery_ddl_stmt FROM @bindery_ddl;
EXECUTE bindery_ddl_stmt;
DEALLOCATE PREPARE bindery_ddl_stmt;
