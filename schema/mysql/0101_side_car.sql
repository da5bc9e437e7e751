-- A car tested beside the merge train rather than in it (side = 1): a car retrying at the end of
-- the train a failure that failed the cars behind it too. Like a bisection's cars (bisections > 0
-- or bisect_of set), it is likely to fail again, so no car is built on it and none waits for it
-- to merge (docs/architecture.md, 'The merge train').
ALTER TABLE merge_batch ADD COLUMN IF NOT EXISTS side TINYINT NOT NULL DEFAULT 0;
