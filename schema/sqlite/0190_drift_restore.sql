-- SQLite twin of mysql/0190_drift_restore.sql (the comment there explains the columns).
ALTER TABLE drift_finding ADD COLUMN restore_by TEXT NOT NULL DEFAULT '';
ALTER TABLE drift_finding ADD COLUMN restore_at DATETIME NULL;
