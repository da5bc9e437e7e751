-- Bisection of a failing batch. The half a bisection returns to the waiting set is one suspect
-- group: suspect_of names the batch whose failure started the bisection, suspect_round which
-- bisection of it returned the rows (NULL for every row that is not a suspect). The claim takes
-- a suspect group alone, before any other waiting row of its partition, so a culprit among the
-- suspects never fails a batch of newcomers; idx_merge_batch_request_suspect finds the group
-- without walking the partition's whole waiting set.
--
-- On merge_batch, bisect_of is that first batch for a batch claimed from a suspect group (NULL
-- otherwise), bisections how many bisections of it ran up to this batch, and culprit the member
-- a single-member batch of a bisection failed alone with ('' : none): the ops view names it.
ALTER TABLE merge_batch_request ADD COLUMN IF NOT EXISTS suspect_of BIGINT NULL, ADD COLUMN IF NOT EXISTS suspect_round INT NULL;
ALTER TABLE merge_batch_request ADD INDEX IF NOT EXISTS idx_merge_batch_request_suspect (partition_key, batch_id, suspect_round);
ALTER TABLE merge_batch ADD COLUMN IF NOT EXISTS bisect_of BIGINT NULL, ADD COLUMN IF NOT EXISTS bisections INT NOT NULL DEFAULT 0,
  ADD COLUMN IF NOT EXISTS culprit VARCHAR(64) NOT NULL DEFAULT '';
