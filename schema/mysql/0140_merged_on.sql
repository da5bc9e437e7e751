-- The target head a car's merge went onto, as bindery read it right before the merge call
-- ('' : not known — merged before this column, or found merged by another path). The car behind
-- it, built on its head, trusts the target after that merge only when the merge commit's first
-- parent is this head: the target then holds exactly the tree the car's pipeline tested. A commit
-- that landed inside the merge call (GitLab's merge method `merge` merges a branch whose base is
-- behind) makes the car behind rebase and test again instead of merging an untested tree on top
-- (docs/architecture.md, 'The merge train').
ALTER TABLE merge_batch ADD COLUMN IF NOT EXISTS merged_on VARCHAR(64) NOT NULL DEFAULT '';
