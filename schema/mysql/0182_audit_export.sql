-- The audit export (GET /api/ops/audit/export) walks a time range in pages, in time order: the
-- audited actions by (at, id) and the applications by (created_at, id), each page a range read
-- of these indexes, however many rows the range holds.
ALTER TABLE audit_log ADD INDEX IF NOT EXISTS idx_audit_at (at, id);
ALTER TABLE operation ADD INDEX IF NOT EXISTS idx_operation_created (created_at, id);
