-- Every table with an AUTO_INCREMENT id (here and in 0003, 0004, 0011, 0040) asks TiDB for one
-- id sequence across its servers instead of a block per server: /*T![auto_id_cache]
-- AUTO_ID_CACHE=1 */, a comment to MySQL and MariaDB. TiDB takes it only when the table is
-- created, so a database created before it keeps the blocks; no read relies on id order anyway
-- (docs/architecture.md, "What bindery needs of its database").
--
-- One row per subject–target relation (I5): UNIQUE (subject_id, target_key). A re-application
-- resets the row in place from a REAPPLIABLE status and replaces operation_id, so a late event
-- for the old application no longer finds it. version is monotonic (I6): every write is guarded
-- on it, never on the status (no ABA).
CREATE TABLE IF NOT EXISTS binding (
  id           BIGINT       NOT NULL AUTO_INCREMENT,
  subject_id   VARCHAR(255) NOT NULL,
  target_key   VARCHAR(128) NOT NULL,
  status       VARCHAR(32)  NOT NULL,
  operation_id VARCHAR(64)  NOT NULL,
  version      BIGINT       NOT NULL DEFAULT 1,
  expires_at   DATETIME(6)  NULL,
  created_at   DATETIME(6)  NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
  updated_at   DATETIME(6)  NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
  PRIMARY KEY (id),
  UNIQUE KEY uk_binding_relation (subject_id, target_key),
  UNIQUE KEY uk_binding_operation (operation_id),
  KEY idx_binding_status_updated (status, updated_at),
  KEY idx_binding_status_expires (status, expires_at)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin /*T![auto_id_cache] AUTO_ID_CACHE=1 */;

-- One row per application (operationId): the fine-grained step, and a copy of the binding status
-- as of this operation's last transition (equal to binding.status while it is the relation's
-- current operation; the last status it reached once a re-application replaced it). Every
-- transition writes operation first, then binding, in one transaction (the one lock order).
-- lease_owner/lease_until: the instance running a single-request step and until when; a sweep
-- resumes operations whose lease expired. mr_iid is an integer (never sorted as a string).
CREATE TABLE IF NOT EXISTS operation (
  id           BIGINT       NOT NULL AUTO_INCREMENT,
  operation_id VARCHAR(64)  NOT NULL,
  subject_id   VARCHAR(255) NOT NULL,
  target_key   VARCHAR(128) NOT NULL,
  project      VARCHAR(255) NOT NULL,
  flow         VARCHAR(16)  NOT NULL,
  reason       TEXT         NOT NULL,
  status       VARCHAR(32)  NOT NULL,
  step         INT          NOT NULL,
  version      BIGINT       NOT NULL DEFAULT 1,
  mr_iid       BIGINT       NULL,
  pipeline_id  BIGINT       NULL,
  batch_id     BIGINT       NULL,
  lease_owner  VARCHAR(64)  NULL,
  lease_until  DATETIME(6)  NULL,
  created_at   DATETIME(6)  NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
  updated_at   DATETIME(6)  NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
  PRIMARY KEY (id),
  UNIQUE KEY uk_operation_operation (operation_id),
  KEY idx_operation_subject (subject_id, id),
  KEY idx_operation_status_updated (status, updated_at),
  KEY idx_operation_mr (project, mr_iid),
  KEY idx_operation_lease (lease_until)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin /*T![auto_id_cache] AUTO_ID_CACHE=1 */;

-- Append-only step history: one row per step change, written in the transaction of the
-- transition. The request view's timeline and per-stage durations read it.
CREATE TABLE IF NOT EXISTS operation_step (
  id           BIGINT       NOT NULL AUTO_INCREMENT,
  operation_id VARCHAR(64)  NOT NULL,
  step         INT          NOT NULL,
  status       VARCHAR(32)  NOT NULL,
  note         VARCHAR(512) NOT NULL DEFAULT '',
  at           DATETIME(6)  NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
  PRIMARY KEY (id),
  KEY idx_operation_step_operation (operation_id, id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin /*T![auto_id_cache] AUTO_ID_CACHE=1 */;
