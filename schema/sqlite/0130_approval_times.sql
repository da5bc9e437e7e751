-- SQLite twin of mysql/0130_approval_times.sql (the comment there explains the index).
CREATE INDEX IF NOT EXISTS idx_operation_target_created ON operation (target_key, created_at);
