-- SQLite twin of mysql/0057_stage_times.sql (the comment there explains the columns).
ALTER TABLE operation ADD COLUMN approval_us INTEGER NULL;
ALTER TABLE operation ADD COLUMN batch_us INTEGER NULL;
ALTER TABLE operation ADD COLUMN ci_us INTEGER NULL;
ALTER TABLE operation ADD COLUMN merge_us INTEGER NULL;
ALTER TABLE operation ADD COLUMN deploy_us INTEGER NULL;
