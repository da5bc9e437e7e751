-- The time a request spent in each stage of its way (approval, the batch wait, CI, merge,
-- deploy), in microseconds by the database clock, summed over every entry into the stage (a
-- retry, a re-admission). Every write that moves the operation to a new step adds the time since
-- its last step (updated_at) to the column of the stage the old step counts for (store.StepInfo),
-- so the stage metrics of a validated request come from the row the flip locks anyway, never
-- from the step history. NULL: the stage was never entered since this column exists (a request
-- in flight at the upgrade reports only the stages it spent time in after it).
ALTER TABLE operation ADD COLUMN IF NOT EXISTS approval_us BIGINT NULL, ADD COLUMN IF NOT EXISTS batch_us BIGINT NULL,
  ADD COLUMN IF NOT EXISTS ci_us BIGINT NULL, ADD COLUMN IF NOT EXISTS merge_us BIGINT NULL, ADD COLUMN IF NOT EXISTS deploy_us BIGINT NULL;
