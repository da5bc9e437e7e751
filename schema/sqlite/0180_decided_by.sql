-- SQLite twin of mysql/0180_decided_by.sql (the comment there explains the column).
ALTER TABLE operation ADD COLUMN decided_by TEXT NOT NULL DEFAULT '';
