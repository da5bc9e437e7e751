-- Access reviews (docs/workflow.md, 'Access reviews'): a target's owners or an operator look at
-- every binding of a target in effect and keep or remove each. One review row per review:
-- operation_id is the caller's operationId of the call that started it (or the review cron's own
-- key), unique so that a repeat is the same review; open_target is the target's key while the
-- review is OPEN and NULL once COMPLETED, its unique key allowing one open review per target
-- however many callers (or instances of the cron) start one at once. due_at is when its reviewers
-- should be done (past it, it is in the operators' attention count); reminded_at when its
-- reviewers were reminded that it is due soon (once). completed_op is the operationId of the call
-- that completed it: a repeat of it is the same completion, another one a conflict.
CREATE TABLE IF NOT EXISTS review (
  id           BIGINT       NOT NULL AUTO_INCREMENT,
  operation_id VARCHAR(64)  NOT NULL,
  target_key   VARCHAR(64)  NOT NULL,
  open_target  VARCHAR(64)  NULL,
  status       VARCHAR(16)  NOT NULL,
  started_by   VARCHAR(254) NOT NULL,
  due_at       DATETIME(6)  NOT NULL,
  reminded_at  DATETIME(6)  NULL,
  completed_op VARCHAR(64)  NULL,
  completed_by VARCHAR(254) NOT NULL DEFAULT '',
  completed_at DATETIME(6)  NULL,
  created_at   DATETIME(6)  NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
  PRIMARY KEY (id),
  UNIQUE KEY uk_review_operation (operation_id),
  UNIQUE KEY uk_review_open (open_target),
  KEY idx_review_status_due (status, due_at),
  KEY idx_review_target (target_key, created_at)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin /*T![auto_id_cache] AUTO_ID_CACHE=1 */;

-- One item per binding in effect when the review started: operation_id is the request that
-- drives it, subject_id its holder. decision is '' (not yet), keep or remove, with the comment,
-- who decided, when, and the operationId of the decide call (a repeat of it is the same decision).
-- removal is what completing the review did with a removal: STARTED (its revocation went to the
-- batch; when it took effect is the request's CLOSE_SUCCEEDED step) or SKIPPED (the binding had
-- left effect on its own meanwhile); removal_at when.
CREATE TABLE IF NOT EXISTS review_item (
  id           BIGINT        NOT NULL AUTO_INCREMENT,
  review_id    BIGINT        NOT NULL,
  operation_id VARCHAR(64)   NOT NULL,
  subject_id   VARCHAR(254)  NOT NULL,
  decision     VARCHAR(8)    NOT NULL DEFAULT '',
  comment      VARCHAR(1000) NOT NULL DEFAULT '',
  decided_by   VARCHAR(254)  NOT NULL DEFAULT '',
  decided_op   VARCHAR(64)   NULL,
  decided_at   DATETIME(6)   NULL,
  removal      VARCHAR(16)   NOT NULL DEFAULT '',
  removal_at   DATETIME(6)   NULL,
  created_at   DATETIME(6)   NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
  PRIMARY KEY (id),
  UNIQUE KEY uk_review_item (review_id, operation_id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin /*T![auto_id_cache] AUTO_ID_CACHE=1 */;

-- A review lists the bindings of one target in effect.
ALTER TABLE binding ADD INDEX IF NOT EXISTS idx_binding_target_status (target_key, status);
