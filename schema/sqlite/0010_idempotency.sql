-- Idempotency records of write requests (docs/api.md, 'Idempotency'): one row per (scope, client
-- operationId). status 0 is "in progress" (the winner holds it until lease_until); otherwise the
-- row holds the answer to replay. expires_at is indexed for the cleanup cron (docs/invariants.md,
-- 'Idempotency records expire').
CREATE TABLE IF NOT EXISTS idempotency_record (
  scope        TEXT     NOT NULL,
  idem_key     TEXT     NOT NULL,
  payload_hash TEXT     NOT NULL,
  status       INTEGER  NOT NULL DEFAULT 0,
  answer       BLOB     NULL,
  created_at   DATETIME NOT NULL DEFAULT (strftime('%Y-%m-%d %H:%M:%f','now')),
  lease_until  DATETIME NOT NULL,
  expires_at   DATETIME NOT NULL,
  PRIMARY KEY (scope, idem_key)
);
CREATE INDEX IF NOT EXISTS idx_idempotency_expires ON idempotency_record (expires_at);
