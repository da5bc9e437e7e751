-- How long approvals of a target usually take (the request view's estimate while a request waits
-- for its approval) reads the latest requests of the target that left the approval stage, newest
-- first, with their approval_us (0057_stage_times): this index finds them without a scan.
ALTER TABLE operation ADD INDEX IF NOT EXISTS idx_operation_target_created (target_key, created_at);
