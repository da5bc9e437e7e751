-- SQLite twin of mysql/0053_bisection.sql (the comment there explains the columns).
ALTER TABLE merge_batch_request ADD COLUMN suspect_of INTEGER NULL;
ALTER TABLE merge_batch_request ADD COLUMN suspect_round INTEGER NULL;
CREATE INDEX IF NOT EXISTS idx_merge_batch_request_suspect ON merge_batch_request (partition_key, batch_id, suspect_round);
ALTER TABLE merge_batch ADD COLUMN bisect_of INTEGER NULL;
ALTER TABLE merge_batch ADD COLUMN bisections INTEGER NOT NULL DEFAULT 0;
ALTER TABLE merge_batch ADD COLUMN culprit TEXT NOT NULL DEFAULT '';
