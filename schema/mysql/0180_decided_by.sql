-- operation.decided_by: who decided the request's approval, as the approval system names them in
-- its decision ('' : not named, or not decided yet). A rejection's step note already says it in
-- words; this column keeps it for an approval too, and the audit export reads it.
ALTER TABLE operation ADD COLUMN IF NOT EXISTS decided_by VARCHAR(254) NOT NULL DEFAULT '';
