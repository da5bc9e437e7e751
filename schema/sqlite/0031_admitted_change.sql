-- SQLite twin of mysql/0031_admitted_change.sql (the comment there explains the columns).
ALTER TABLE merge_batch_request ADD COLUMN change_branch TEXT NULL;
ALTER TABLE merge_batch_request ADD COLUMN change_path TEXT NULL;
ALTER TABLE merge_batch_request ADD COLUMN change_content TEXT NULL;
