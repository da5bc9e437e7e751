-- SQLite twin of mysql/0073_failed_job_ticket.sql (the comment there explains the table and column).
CREATE TABLE IF NOT EXISTS failed_job (
  project      TEXT    NOT NULL,
  pipeline_id  INTEGER NOT NULL,
  job_id       INTEGER NOT NULL,
  name         TEXT    NOT NULL,
  web_url      TEXT    NOT NULL,
  created_at   DATETIME NOT NULL DEFAULT (strftime('%Y-%m-%d %H:%M:%f','now')),
  PRIMARY KEY (project, pipeline_id)
);
ALTER TABLE operation ADD COLUMN ticket_id TEXT NOT NULL DEFAULT '';
