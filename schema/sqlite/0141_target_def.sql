-- SQLite twin of mysql/0141_target_def.sql (the comments there explain the column and the index).
ALTER TABLE operation ADD COLUMN target_def TEXT NULL;
CREATE INDEX IF NOT EXISTS idx_binding_target_status ON binding (target_key, status);
