-- SQLite twin of mysql/0032_batch_failing.sql (the comment there explains the columns).
ALTER TABLE merge_batch ADD COLUMN failing TEXT NOT NULL DEFAULT '';
ALTER TABLE merge_batch ADD COLUMN last_error TEXT NOT NULL DEFAULT '';
