-- Every running bindery process registers here and heartbeats. The rate limiter divides the
-- global quota by the live instances (docs/api.md, 'Rate limits'); leases name their owner by
-- instance id.
CREATE TABLE IF NOT EXISTS instance (
  id           VARCHAR(64)  NOT NULL,
  version      VARCHAR(64)  NOT NULL,
  started_at   DATETIME(6)  NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
  heartbeat_at DATETIME(6)  NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
  PRIMARY KEY (id),
  KEY idx_instance_heartbeat (heartbeat_at)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
