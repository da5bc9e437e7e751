-- SQLite twin of mysql/0140_merged_on.sql (the comment there explains the column).
ALTER TABLE merge_batch ADD COLUMN merged_on TEXT NOT NULL DEFAULT '';
