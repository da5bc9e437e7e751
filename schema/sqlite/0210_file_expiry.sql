-- SQLite twin of mysql/0210_file_expiry.sql (the comment there explains the column).
ALTER TABLE operation ADD COLUMN file_expires_at DATETIME NULL;
