-- A task waiting for a slot (one legacy merge per project) names it: the holder's end, or its
-- giving the slot up, makes the first waiter due at once. idx_task_waits finds that waiter.
ALTER TABLE task ADD COLUMN IF NOT EXISTS waits_for VARCHAR(255) NULL AFTER slot;
ALTER TABLE task ADD INDEX IF NOT EXISTS idx_task_waits (waits_for, id);
