-- /readyz writes this one row (within its timeout) to show that a write can commit — a ping
-- answers even while writes are blocked by a lock, a full disk or a read-only server.
CREATE TABLE IF NOT EXISTS readiness (
  id         TINYINT     NOT NULL PRIMARY KEY,
  written_at DATETIME(6) NOT NULL
) ENGINE=InnoDB;
INSERT IGNORE INTO readiness (id, written_at) VALUES (1, CURRENT_TIMESTAMP(6));
