-- The target a request was accepted for, as the catalog defined it then (JSON: key, title,
-- project, branch, path, ruleCodes, ttl in nanoseconds). A request in flight goes on with it —
-- its approval's admission, its legacy MR, its binding's expiry and removal — whatever a later
-- reload does to the catalog: a target that leaves it refuses new applications and harms nothing
-- already accepted (docs/workflow.md, 'Targets and the file change'). NULL: accepted before this
-- column; such a request reads the catalog as before.
ALTER TABLE operation ADD COLUMN IF NOT EXISTS target_def TEXT NULL;
-- The bindings of a target by status: what a reload that removes targets tells operators, and the
-- ops console's list of targets in use that left the catalog (store.TargetsInUse).
ALTER TABLE binding ADD INDEX IF NOT EXISTS idx_binding_target_status (target_key, status);
