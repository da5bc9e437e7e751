-- A drift finding's restore (docs/drift.md, 'Repairs'): who asked bindery to write the file again
-- and when. The restore itself is a row of the waiting set (merge_batch_request, action RESTORE or
-- REWRITE) and, once claimed, of the member history: its state is read from there, never copied.
-- Both are cleared when the finding opens again, so an old restore never speaks for a new finding.
ALTER TABLE drift_finding ADD COLUMN IF NOT EXISTS restore_by VARCHAR(254) NOT NULL DEFAULT '',
  ADD COLUMN IF NOT EXISTS restore_at DATETIME(6) NULL;
