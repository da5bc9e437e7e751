-- SQLite twin of mysql/0030_batch_branch.sql (the comment there explains the column). SQLite runs
-- DDL inside the migration's transaction, so a plain ADD COLUMN cannot be left half done.
ALTER TABLE merge_batch ADD COLUMN branch_digest TEXT NOT NULL DEFAULT '';
