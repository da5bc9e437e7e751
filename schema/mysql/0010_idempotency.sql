-- Idempotency records of write requests (docs/api.md, 'Idempotency'): one row per (scope, client
-- operationId). status 0 is "in progress" (the winner holds it until lease_until); otherwise the
-- row holds the answer to replay. expires_at is indexed for the cleanup cron (docs/invariants.md,
-- 'Idempotency records expire').
CREATE TABLE IF NOT EXISTS idempotency_record (
  scope        VARCHAR(64)  NOT NULL,
  idem_key     VARCHAR(128) NOT NULL,
  payload_hash CHAR(64)     NOT NULL,
  status       INT          NOT NULL DEFAULT 0,
  answer       MEDIUMBLOB   NULL,
  created_at   DATETIME(6)  NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
  lease_until  DATETIME(6)  NOT NULL,
  expires_at   DATETIME(6)  NOT NULL,
  PRIMARY KEY (scope, idem_key),
  KEY idx_idempotency_expires (expires_at)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
