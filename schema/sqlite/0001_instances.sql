-- Every running bindery process registers here and heartbeats. The rate limiter divides the
-- global quota by the live instances (docs/api.md, 'Rate limits'); leases name their owner by
-- instance id. Times are DATETIME text 'YYYY-MM-DD HH:MM:SS.SSS' written by the database clock.
CREATE TABLE IF NOT EXISTS instance (
  id           TEXT     NOT NULL PRIMARY KEY,
  version      TEXT     NOT NULL,
  started_at   DATETIME NOT NULL DEFAULT (strftime('%Y-%m-%d %H:%M:%f','now')),
  heartbeat_at DATETIME NOT NULL DEFAULT (strftime('%Y-%m-%d %H:%M:%f','now'))
);
CREATE INDEX IF NOT EXISTS idx_instance_heartbeat ON instance (heartbeat_at);
