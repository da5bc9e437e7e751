-- Indexes over columns an application leaves NULL index only the rows that have a value (the
-- lookups all compare the column, which tells SQLite it is not NULL). Every index an insert
-- touches is one more B-tree page in the commit's WAL frames: a new application touched
-- twenty; these four are then not among them (task slot and wait, operation MR, binding expiry).
DROP INDEX IF EXISTS uk_task_slot;
CREATE UNIQUE INDEX IF NOT EXISTS uk_task_slot ON task (slot) WHERE slot IS NOT NULL;
DROP INDEX IF EXISTS idx_task_waits;
CREATE INDEX IF NOT EXISTS idx_task_waits ON task (waits_for, id) WHERE waits_for IS NOT NULL;
DROP INDEX IF EXISTS idx_operation_mr;
CREATE INDEX IF NOT EXISTS idx_operation_mr ON operation (project, mr_iid) WHERE mr_iid IS NOT NULL;
DROP INDEX IF EXISTS idx_binding_status_expires;
CREATE INDEX IF NOT EXISTS idx_binding_status_expires ON binding (status, expires_at) WHERE expires_at IS NOT NULL;
