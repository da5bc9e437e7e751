-- SQLite twin of mysql/0131_rejoined.sql (the comment there explains the column).
ALTER TABLE merge_batch ADD COLUMN rejoined INTEGER NOT NULL DEFAULT 0;
