-- Renewals of bindings in effect (docs/workflow.md, 'Expiry, reminders and renewal'). One row per
-- renewal asked for: renewal_id is the caller's operationId of the renew call (unique: a repeat
-- is the same renewal); operation_id the request whose binding it renews. pending_of is that
-- request's id while the renewal waits for its decision and NULL once decided: its unique key
-- allows one renewal at a time per binding, however many callers ask at once. status is PENDING,
-- RENEWED, REJECTED (the approvers said no: the old expiry stays) or CANCELLED (the binding left
-- effect before the decision). new_expires_at is set when it is renewed.
CREATE TABLE IF NOT EXISTS renewal (
  id             BIGINT       NOT NULL AUTO_INCREMENT,
  renewal_id     VARCHAR(64)  NOT NULL,
  operation_id   VARCHAR(64)  NOT NULL,
  pending_of     VARCHAR(64)  NULL,
  mode           VARCHAR(16)  NOT NULL,
  status         VARCHAR(16)  NOT NULL,
  requested_by   VARCHAR(254) NOT NULL,
  decided_by     VARCHAR(254) NOT NULL DEFAULT '',
  ticket_id      VARCHAR(64)  NOT NULL DEFAULT '',
  old_expires_at DATETIME(6)  NOT NULL,
  new_expires_at DATETIME(6)  NULL,
  created_at     DATETIME(6)  NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
  decided_at     DATETIME(6)  NULL,
  PRIMARY KEY (id),
  UNIQUE KEY uk_renewal_id (renewal_id),
  UNIQUE KEY uk_renewal_pending (pending_of),
  KEY idx_renewal_operation (operation_id, created_at)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin /*T![auto_id_cache] AUTO_ID_CACHE=1 */;
