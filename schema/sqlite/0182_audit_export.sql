-- SQLite twin of mysql/0182_audit_export.sql (the comment there explains the indexes).
CREATE INDEX IF NOT EXISTS idx_audit_at ON audit_log (at, id);
CREATE INDEX IF NOT EXISTS idx_operation_created ON operation (created_at, id);
