-- A car of a bisection whose pipeline passed while cars of the train were in CI behind it takes
-- its place at the end of the train again (rejoined = 1): built on the last car and tested there,
-- it merges in order, instead of merging beside the train and making every car behind it rebase
-- and test again (docs/architecture.md, 'The merge train').
ALTER TABLE merge_batch ADD COLUMN IF NOT EXISTS rejoined TINYINT NOT NULL DEFAULT 0;
