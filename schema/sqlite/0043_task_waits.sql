-- SQLite twin of mysql/0043_task_waits.sql (the comments there explain the column).
ALTER TABLE task ADD COLUMN waits_for TEXT NULL;
CREATE INDEX IF NOT EXISTS idx_task_waits ON task (waits_for, id);
