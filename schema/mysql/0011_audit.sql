-- Audit log of operator and owner actions (docs/api.md, 'Who may call'): who, what, redacted and
-- truncated parameters, when. event_key is unique: recording the same event twice is "already
-- recorded", never an overwrite.
CREATE TABLE IF NOT EXISTS audit_log (
  id         BIGINT       NOT NULL AUTO_INCREMENT,
  event_key  VARCHAR(191) NOT NULL,
  at         DATETIME(6)  NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
  actor      VARCHAR(254) NOT NULL,
  action     VARCHAR(64)  NOT NULL,
  params     TEXT         NOT NULL,
  request_id VARCHAR(64)  NOT NULL,
  PRIMARY KEY (id),
  UNIQUE KEY uq_audit_event (event_key)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin /*T![auto_id_cache] AUTO_ID_CACHE=1 */;
